"""A cost report's period spelled another way is the same period: ``broker costs --period 1d`` was refused ("period:
must be one of 24h, 7d, 30d, 90d") while a deadline takes ``1d``; the refusal lists every spelling taken."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker import costs
from broker.api.app import create_app
from broker.store import open_store
from broker_testing import ADMIN

NOW = 1_800_000_000.0


@pytest.mark.parametrize("spelled, period", [
    ("1d", "24h"), ("24h", "24h"), ("1w", "7d"), ("168h", "7d"), ("7d", "7d"), ("720h", "30d"), ("2160h", "90d"),
], ids=["1d is 24h", "24h is itself", "1w is 7d", "168h is 7d", "7d is itself", "720h is 30d", "2160h is 90d"])
def test_a_period_spelled_otherwise_is_that_period_and_is_named_as_it(spelled, period):
    win = costs.window(now=NOW, period=spelled)
    assert (win.label, win.until - win.since, win.until) == (period, costs.PERIODS[period], NOW)


@pytest.mark.parametrize("spelled", ["3d", "2w", "1D", "1y", "48h"])
def test_a_period_that_is_none_of_them_is_refused_listing_every_spelling_taken(spelled):
    with pytest.raises(costs.CostQueryError) as refused:
        costs.window(now=NOW, period=spelled)
    assert (refused.value.field, refused.value.reason) == (
        "period", "must be one of 24h (or 1d), 7d (or 1w, 168h), 30d (or 720h), 90d (or 2160h)")


def test_the_api_reports_costs_for_1d_as_for_24h(make_settings, tmp_path):
    app = create_app(make_settings(), store=open_store(f"sqlite://{tmp_path / 'c.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/v1/costs", params={"period": "1d"}, headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 200 and r.json()["window"]["period"] == "24h", r.text
        r = client.get("/v1/costs", params={"period": "3d"}, headers={"Authorization": f"Bearer {ADMIN}"})
        assert (r.status_code, r.json()["field"]) == (422, "period") and "24h (or 1d)" in r.json()["detail"], r.text


# -- a bound's time as people and URLs write it (QA audit, Dec 7) ---------------------------------------------------

WINDOW_NOW = 1_796_669_000.0  # 2026-12-07T18:43:20Z


@pytest.mark.parametrize("since, at", [
    ("2026-12-07T18:00z", 1_796_666_400), ("2026-12-07T18:00Z", 1_796_666_400), ("2026-12-07T18:00 utc", 1_796_666_400),
    ("2026-12-07T19:36:30+01:00", 1_796_668_590),
], ids=["a lowercase z → UTC, as RFC 3339 allows", "Z → UTC", "utc → UTC", "an offset"])
def test_a_bound_in_utc_or_an_offset_is_read_as_that_moment(since, at):
    assert costs.window(now=WINDOW_NOW, since=since).since == at


@pytest.mark.parametrize("since, said", [
    ("2026-12-07T19:36:30 01:00", "has a space where its offset's + would be (2026-12-07T19:36:30 01:00): in a URL a + "
                                  "reads as a space, so write it as %2B (since=2026-12-07T19:36:30%2B01:00)"),
    ("2026-11-01 01:30 America/New_York",
     "2026-11-01 01:30 America/New_York: that time comes twice on that clock (summer time ends); give its offset: "
     "2026-11-01T01:30-04:00 for the first, 2026-11-01T01:30-05:00 for the second"),
    ("2026-03-08 02:30 America/New_York",
     "2026-03-08 02:30 America/New_York: that time does not exist on that clock (summer time skips it); give a time "
     "outside the hour skipped, or its offset if one is meant (2026-03-08T02:30-05:00 is 2026-03-08T03:30-04:00 "
     "there)"),
], ids=["an offset's + that came as a space → says to write %2B", "an hour summer time repeats → refused, with the "
        "offsets", "an hour summer time skips → refused"])
def test_a_bound_that_names_no_one_moment_is_refused_saying_how_to_write_it(since, said):
    with pytest.raises(costs.CostQueryError) as refused:
        costs.window(now=WINDOW_NOW, since=since)
    assert (refused.value.field, refused.value.reason) == ("since", said)


def test_the_api_says_to_write_an_offsets_plus_as_2b_and_reads_it_so(make_settings, tmp_path):
    app = create_app(make_settings(), store=open_store(f"sqlite://{tmp_path / 'c.db'}"), engine=False)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        # as curl sends it: the + unencoded, which the query string reads as a space
        r = client.get("/v1/costs?since=2026-12-07T09:36:30+01:00&until=2026-12-07T10:00Z", headers=headers)
        assert (r.status_code, r.json()["field"]) == (422, "since"), r.text
        assert "write it as %2B (since=2026-12-07T09:36:30%2B01:00)" in r.json()["detail"], r.text
        r = client.get("/v1/costs?since=2026-12-07T09:36:30%2B01:00&until=2026-12-07T10:00z", headers=headers)
        assert r.status_code == 200 and r.json()["window"] == {
            "since": "2026-12-07T08:36:30Z", "until": "2026-12-07T10:00:00Z", "period": "custom"}, r.text
