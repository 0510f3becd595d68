"""Walkthrough, Dec 6: one queued job, two start times.

``broker queue`` showed ``starts ~ 06:05Z`` beside the reason "estimated to start at 2026-12-06 06:06Z, too late for
its deadline at 2026-12-06 06:06Z", and ``broker status`` said 06:05:28Z: the column rounds the start to the nearest
minute, the reason rounded it up (and the deadline down, into the same minute). The reason now names the start as the
column does, and both times to the second, as ``status`` does, where minutes would not tell them apart."""

from __future__ import annotations

import calendar

import pytest

from broker.cli import _short_time
from broker.lifecycle import JobState
from broker.models import Job
from broker.views import deadline_words, iso


def _at(hms: str) -> float:
    """2026-12-06 at ``hh:mm:ss[.f]`` UTC, as epoch seconds."""
    whole, _, frac = hms.partition(".")
    h, m, s = (int(x) for x in whole.split(":"))
    return calendar.timegm((2026, 12, 6, h, m, s, 0, 0, 0)) + (float(f"0.{frac}") if frac else 0.0)


def _queued(deadline: float, expected_hours: str | None = None) -> Job:
    return Job(id="j", name="j", team="t", spec={}, budget=1, priority=0, state=JobState.QUEUED,
               submitted_at=_at("05:00:00"), updated_at=_at("05:00:00"), deadline=deadline,
               expected_hours=expected_hours, reason="waiting: the pool dgx is full right now")


@pytest.mark.parametrize("start, deadline, hours, said", [
    pytest.param("06:05:28", "06:06:00", "1",
                 "estimated to start at 2026-12-06 06:05Z, too late for its deadline at 2026-12-06 06:06Z with "
                 "its expected 1.0 h",
                 id="the walkthrough's start at 06:05:28 reads 06:05Z as the queue's column showed it, not 06:06Z"),
    pytest.param("06:05:28", "06:05:50", "1",
                 "estimated to start at 2026-12-06 06:05:28Z, too late for its deadline at 2026-12-06 06:05:50Z with "
                 "its expected 1.0 h",
                 id="a start and a deadline in the same minute read to the second, as broker status shows the start"),
    pytest.param("06:06:40", "06:06:10", None,
                 "estimated to start at 2026-12-06 06:06:40Z, after its deadline at 2026-12-06 06:06:10Z",
                 id="a start seconds after a deadline in its minute never reads as the same minute"),
    pytest.param("06:05:45", "06:05:50", "1",
                 "estimated to start at 2026-12-06 06:05:45Z, too late for its deadline at 2026-12-06 06:05:50Z with "
                 "its expected 1.0 h",
                 id="a start rounded up past a deadline it comes before reads to the second, never after it"),
    pytest.param("06:05:20", "07:00:00", "2",
                 "estimated to start at 2026-12-06 06:05Z, too late for its deadline at 2026-12-06 07:00Z with its "
                 "expected 2.0 h",
                 id="a start far from its deadline reads to the minute, rounded to the nearest as the column does"),
    pytest.param("06:05:40", "06:00:00", None,
                 "estimated to start at 2026-12-06 06:06Z, after its deadline at 2026-12-06 06:00Z",
                 id="a start in the second half of its minute reads as the next minute, as the column does"),
])
def test_the_reason_names_the_start_as_the_queue_and_status_do(start, deadline, hours, said):
    assert deadline_words(_queued(_at(deadline), hours), _at(start)) == said


@pytest.mark.parametrize("start", ["06:05:28", "06:05:29.7", "06:05:30", "06:05:59.9", "06:06:00", "23:59:31"],
                         ids=lambda s: f"a start at {s} reads in the reason as the queue's column shows it")
def test_a_reason_to_the_minute_names_the_columns_minute(start):
    """Where the reason names the start to the minute, it is the minute ``broker queue``'s ``starts ~`` column shows
    for the same estimate (the API's ``estimated_start``, to the second, rounded to the nearest minute)."""
    t = _at(start)
    said = deadline_words(_queued(t - 3600), t)
    column = _short_time(iso(t), today="2000-01-01")  # another day: the column names the date too
    assert said.startswith(f"estimated to start at 2026-{column.replace('Z', '')}Z, after"), (said, column)


@pytest.mark.parametrize("start", ["06:05:28", "06:05:59.5"],
                         ids=lambda s: f"a start at {s} named to the second reads as broker status shows it")
def test_a_reason_to_the_second_names_the_status_second(start):
    t = _at(start)
    said = deadline_words(_queued(t + 0.05, "1"), t)  # a deadline in the same minute
    assert said.startswith(f"estimated to start at {iso(t).replace('T', ' ')}, "), said
