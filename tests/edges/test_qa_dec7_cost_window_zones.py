"""QA walkthrough, 7 Dec: a cost window's bound is written "as a deadline is" (README), and a deadline takes a time
zone's name, but `since=2026-12-07 01:00 Europe/Berlin` was a 422 "must be an ISO date or time". The bound is now read
by the deadline's own parser (``spec.moment_of``); a date alone is still that UTC day, and a refusal names the bound."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from broker import costs

from . import world
from .conftest import auth

NOW = datetime(2026, 12, 8, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize("field", ["since", "until"])
def test_a_bound_takes_a_time_zones_name_as_a_deadline_does(client, field):
    berlin = "2026-12-07 01:00 Europe/Berlin"
    params = {"since": berlin, "until": "2026-12-07T12:00Z"} if field == "since" else \
        {"since": "2026-12-06T00:00Z", "until": berlin}
    r = client.get("/v1/costs", params=params, headers=auth(world.ADMIN))
    assert r.status_code == 200, r.text
    assert r.json()["window"][field] == "2026-12-07T00:00:00Z"  # 01:00 in Berlin's winter is midnight UTC
    w = costs.window(now=NOW, **{**params, field: "2026-12-07T01:00+01:00"})
    assert w == costs.window(now=NOW, **params)


def test_a_bound_reads_summer_time_a_one_digit_hour_and_utc_by_name():
    assert costs.window(now=NOW, since="2026-07-01 9:00 Europe/Berlin").since == \
        datetime(2026, 7, 1, 7, tzinfo=timezone.utc).timestamp()
    assert costs.window(now=NOW, since="2026-12-01 00:00 UTC").since == costs.window(now=NOW, since="2026-12-01").since


@pytest.mark.parametrize(("text", "says"), [
    ("2026-12-07 01:00 Mars/Base", "names the time zone 'Mars/Base', which the broker does not know"),
    ("2026-12-07T01:00+01:00 Europe/Berlin", "gives both an offset and a time zone"),
    ("2026-12-07T01:00", "has no timezone: write 2026-12-07T01:00Z for UTC, or its offset such as "
                         "2026-12-07T01:00+01:00, or its time zone's name such as '2026-12-07T01:00 Europe/Berlin'"),
    ("6h", "6h is a duration, and a bound is a moment"),
    ("yesterday", "must be an ISO date or time"),
])
@pytest.mark.parametrize("field", ["since", "until"])
def test_a_bound_the_deadlines_parser_refuses_is_a_422_naming_the_bound(client, field, text, says):
    params = {"since": "2026-12-01", field: text}
    r = client.get("/v1/costs", params=params, headers=auth(world.ADMIN))
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert r.json()["detail"].startswith(f"{field}: ") and says in r.json()["detail"], r.text


@pytest.mark.parametrize("text", ["2026-11-30", "2026-11-30T10:00Z", "2026-11-30T10:00+01:00", "2026-W48-1"])
def test_what_a_bound_took_before_it_takes_as_before(client, text):
    assert client.get("/v1/costs", params={"since": text}, headers=auth(world.ADMIN)).status_code == 200
