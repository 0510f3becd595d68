"""A team sharing pools with others may be held to a highest priority: `teams.<team>.max_priority`.

QA walkthrough (Dec 8): two teams shared a two-slot pool; team alpha's token submitted `broker.priority: 1000` and went
ahead of every job team beta had queued, with nothing an admin could set against it. Now a team's ``max_priority`` caps
what its own token may give (a 403 on broker.priority naming the cap); an admin may give any priority, for any team.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.config import ConfigError, load_settings
from broker_testing import ADMIN

ALPHA, BETA = "alpha-token-for-priority-tests-01", "beta-token-for-priority-tests-012"


def settings(tmp_path, teams: str):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"pools:\n  - {{name: cpu, slots: 2, price_per_slot_hour: \"0.36\"}}\nteams:\n{teams}")
    return load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}, config_path=cfg)


@pytest.fixture
def api(tmp_path):
    s = settings(tmp_path, f"  alpha: {{tokens: [{ALPHA}], max_priority: 10}}\n  beta: {{tokens: [{BETA}]}}\n")
    with TestClient(create_app(s, engine=False), raise_server_exceptions=False) as c:
        yield c


def submit(api, token, priority, **broker):
    task = {"name": "t", "resources": {"cpus": 1}, "run": "true",
            "broker": {"budget_usd": "1", "priority": priority, **broker}}
    return api.post("/v1/jobs", json=task, headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize("token, priority, extra, status", [
    pytest.param(ALPHA, 10, {}, 201, id="alpha at its max_priority → accepted"),
    pytest.param(ALPHA, -5, {}, 201, id="alpha below it → accepted"),
    pytest.param(BETA, 1000, {}, 201, id="beta, given no max_priority → up to 1000"),
    pytest.param(ADMIN, 1000, {"team": "alpha"}, 201, id="an admin submitting for alpha → any priority"),
])
def test_a_priority_within_what_the_team_may_give_is_taken(api, token, priority, extra, status):
    r = submit(api, token, priority, **extra)
    assert r.status_code == status, r.text
    assert api.get(f"/v1/jobs/{r.json()['id']}", headers={"Authorization": f"Bearer {ADMIN}"}).json()[
        "priority"] == priority


def test_a_priority_above_the_teams_max_priority_is_refused_naming_it(api):
    r = submit(api, ALPHA, 11)
    assert r.status_code == 403, r.text
    assert r.json()["field"] == "broker.priority"
    assert "is 11, above the most team alpha may give, 10 (teams.alpha.max_priority" in r.json()["detail"]
    assert api.get("/v1/jobs", headers={"Authorization": f"Bearer {ADMIN}"}).json()["jobs"] == []  # nothing stored


@pytest.mark.parametrize("value", ["high", 1001, True, 2.5])
def test_a_max_priority_that_is_no_priority_stops_the_broker_naming_it(tmp_path, value):
    with pytest.raises(ConfigError) as caught:
        settings(tmp_path, f"  alpha: {{max_priority: {value}}}\n")
    assert "teams.alpha.max_priority" in str(caught.value) and "-1000 to 1000" in str(caught.value)


def test_a_team_capped_below_zero_that_gives_no_priority_gets_its_cap_and_one_that_gives_zero_is_refused(tmp_path):
    """QA walkthrough (Dec 8): with `max_priority: -10`, every submit that gave no priority was refused: "is 0, above
    the most team gamma may give", of a broker.priority its task did not have."""
    s = settings(tmp_path, f"  alpha: {{tokens: [{ALPHA}], max_priority: -10}}\n")
    with TestClient(create_app(s, engine=False), raise_server_exceptions=False) as api:
        task = {"name": "t", "resources": {"cpus": 1}, "run": "true", "broker": {"budget_usd": "1"}}
        r = api.post("/v1/jobs", json=task, headers={"Authorization": f"Bearer {ALPHA}"})
        assert r.status_code == 201, r.text
        assert api.get(f"/v1/jobs/{r.json()['id']}", headers={"Authorization": f"Bearer {ADMIN}"}).json()[
            "priority"] == -10
        assert submit(api, ALPHA, 0).status_code == 403  # given, and above the cap
