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
