"""Words the QA walkthrough found wrong: a dry run's price of several nodes, a state's typo, a negative deadline,
and a deadline's "(in X)" shown short of what was given."""

from __future__ import annotations

import time

import pytest

from broker import cli as broker_cli
from broker.service import Invalid, typed_states
from broker.spec import SpecError, parse
from broker.views import duration, far_duration


@pytest.mark.parametrize("placement, said", [
    ({"price_per_hour": 424_600, "num_nodes": 1}, ", at $0.4246/h"),
    ({"price_per_hour": 849_200, "num_nodes": 2}, ", $0.4246/h a node"),
    ({"price_per_hour": 1_273_800, "num_nodes": 3}, ", $0.4246/h a node"),
    ({"price_per_hour": 849_200}, ", at $0.8492/h"),
], ids=["one node: its price", "two nodes: each one's, the reason having said $0.8492/h for both",
        "three nodes: each one's", "a placement that names no count: its price as before"])
def test_a_dry_runs_placement_line_says_a_price_that_is_not_the_reasons_total_again(placement, said):
    """"2 nodes, $0.8492/h for both, at $0.8492/h" read as a node's price after the total of both."""
    assert broker_cli._price_said(placement) == said


@pytest.mark.parametrize("given, meant", [("succeded", "succeeded"), ("queued,runing", "running"),
                                           ("Failed", "failed"), ("PD", None)],
                         ids=["succeded is likely succeeded", "a typo among several states", "a state in capitals",
                              "Slurm's PD is like no state: the list alone"])
def test_a_state_that_is_none_names_the_one_likely_meant(given, meant):
    with pytest.raises(Invalid) as refused:
        typed_states(given)
    text = str(refused.value)
    assert (f"(did you mean {meant!r}?)" in text if meant else "did you mean" not in text), text
    assert "each must be one of queued, placed" in text, text


def test_a_negative_deadline_on_the_command_line_is_refused_as_the_other_bad_deadlines_are(tmp_path, capsys):
    """`--deadline -1h` exited 2, a usage error, where `--deadline 3q` (the broker's refusal) exits 1."""
    task = tmp_path / "t.yaml"
    task.write_text("run: echo hi\n")
    assert broker_cli.main(["--url", "http://127.0.0.1:9", "submit", str(task), "--deadline", "-1h"]) == 1
    assert capsys.readouterr().err.strip() == ("error: --deadline: -1h is negative: a deadline is a duration from "
                                               "now (6h, 1d12h) or a time to come with its timezone "
                                               "(2026-12-01T18:00Z)")
    assert broker_cli.main(["--url", "http://127.0.0.1:9", "--json", "submit", str(task), "--deadline=-2h"]) == 1
    assert '"field": "--deadline"' in capsys.readouterr().out


@pytest.mark.parametrize("deadline", ["-2h", "-1d12h", "-PT6H"])
def test_a_negative_deadline_in_a_task_is_refused_saying_it_is_negative(deadline):
    """"-2h" in a task got "must be an ISO time ... or a duration", as if it were neither."""
    with pytest.raises(SpecError) as refused:
        parse({"run": "x", "broker": {"deadline": deadline}}, now=1_800_000_000.0)
    assert refused.value.field == "broker.deadline"
    assert str(refused.value) == (f"broker.deadline: {deadline} is negative: a deadline is a duration from now "
                                  "(6h, 1d12h) or a time to come with its timezone (2026-12-01T18:00Z)")


@pytest.mark.parametrize("seconds, floored, nearest", [
    (7199.9, "1.9 h", "2.0 h"), (3599.9, "59 min", "1.0 h"), (599.9, "9 min", "10 min"), (59.6, "59 s", "1 min"),
    (5399, "1.4 h", "1.5 h"), (172_799, "47.9 h", "48.0 h"), (9.96 * 86400, "9.9 days", "10 days"),
    (10.6 * 86400, "10 days", "11 days"), (2.04 * 86400, "2 days", "2 days"),
], ids=["2h just after its submit", "1h just after", "10m just after", "a minute just after", "1.5 h less a second",
        "48 h less a second", "ten days less a little", "10.6 days in whole days", "2 days and an hour"])
def test_a_span_rounded_to_the_nearest_is_what_was_given_where_rounding_down_fell_short(seconds, floored, nearest):
    assert (far_duration(seconds), far_duration(seconds, nearest=True)) == (floored, nearest)
    assert duration(600) == duration(600, nearest=True) == "10 min"  # the default is unchanged: it rounds down


@pytest.mark.parametrize("offset, said", [(7200, "(in 2.0 h)"), (3600, "(in 1.0 h)"), (600, "(in 10 min)"),
                                           (-5399, "(1.5 h ago)")],
                         ids=["--deadline 2h", "--deadline 1h", "--deadline 10m", "an hour and a half past"])
def test_a_deadline_moment_from_now_is_rounded_to_the_nearest_either_side(offset, said):
    given = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(time.time()) + offset))
    assert broker_cli._deadline_moment(given).endswith(said), broker_cli._deadline_moment(given)
