"""What the retention policy (``job_retention_days``) does to what users read: a cost report over a window that begins
that holds the cost of jobs since pruned (the pruned-cost ledger) says how much of its totals that is, and one that
begins before the retention horizon, once jobs were pruned before the ledger was kept, says its totals leave them out
(``retention_note``: the API, the dashboard's page, ``broker costs``); a job's 404 says that finished jobs are deleted that many days after they end;
a retention below the floor gets one message, 0 or negative. On both stores."""

from __future__ import annotations

import argparse
import time
from contextlib import contextmanager
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from broker import costs
from broker.config import ConfigError
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.retention import DAY, Retention
from broker.store import Change

from broker_testing import ADMIN

HOUR = 3600.0
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


def finished(store, job_id: str, *, ended: float, cost: int, team: str = "vision") -> Job:
    """A succeeded job whose one attempt billed ``cost`` over the hour before ``ended``, last updated then."""
    job = Job(id=job_id, name="train", team=team, state=JobState.QUEUED, spec={"run": "echo"}, budget=50_000_000,
              priority=0, submitted_at=ended - 2 * HOUR, updated_at=ended - 2 * HOUR)
    job = store.commit(Change(job=job, expected_version=None))
    attempt = Attempt(id=f"{job_id}-a1", job_id=job_id, n=1, state=AttemptState.SUCCEEDED, launcher="local",
                      placement={"tier": "spot", "zone": "sim-a"}, price_per_hour=cost, created_at=ended - HOUR,
                      started_at=ended - HOUR, ended_at=ended, billed_until=ended, cost=cost)
    return store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=ended, attempts=1, spent=cost),
                               expected_version=job.version, attempts=[attempt]))


@contextmanager
def api(make_settings, store, config: str = ""):
    from broker.api.app import create_app

    app = create_app(make_settings(config="pools: []\n" + config), store=store, engine=False)
    with TestClient(app) as client:
        yield client


# -- the note, pure ---------------------------------------------------------------------------------------------------

NOW = 1_800_000_000.0


@pytest.mark.parametrize("since_days, pruned, counted, spent, days, says", [
    (90, 3, 0, 0, 30, "Totals leave out 3 finished jobs pruned before their costs were kept"),
    (90, 1, 0, 0, 30, "1 finished job pruned before"),
    (31, 2, 0, 0, 30, "begins before"),
    (29, 2, 0, 0, 30, None),  # within the horizon: a pruned job ended before the window began
    (90, 0, 0, 0, 30, None),  # nothing pruned: nothing left out
    (7, 2, 0, 0, None, "were pruned"),  # the horizon not known here (a broker without it, sharing a pruned store)
    (90, 3, 3, 0, 30, None),  # every pruned job is in the ledger, and none spent in this window
    (90, 3, 3, 7_000_000, 30, "Includes $7.00 spent in this window by jobs since pruned"),
    (90, 3, 2, 7_000_000, 30, "1 finished job pruned before"),  # one of them pruned before the ledger was kept
    (7, 3, 3, 7_000_000, None, "Includes $7.00"),
], ids=["before the horizon", "one job", "a day before it", "within it", "nothing pruned", "retention unknown",
        "all in the ledger", "ledger spend", "ledger and one before it", "ledger, retention unknown"])
def test_the_retention_note_is_there_exactly_when_pruned_jobs_may_be_missing_from_the_window(
        since_days, pruned, counted, spent, days, says):
    win = costs.Window(NOW - since_days * DAY, NOW, "custom")
    note = costs.retention_note(win, NOW, pruned, days, counted=counted, spent=spent)
    if says is None:
        assert note is None
    else:
        assert says in note and "job_retention_days" in note, note
    if spent and counted < pruned:  # both said
        assert note.startswith("Includes $7.00") and "Totals leave out" in note, note


# -- the report on real stores ------------------------------------------------------------------------------------------


def test_a_90_day_report_after_a_30_day_prune_keeps_the_pruned_spend_and_says_so(make_settings, store):
    now = time.time()
    finished(store, "j-old", ended=now - 60 * DAY, cost=7_000_000)
    finished(store, "j-new", ended=now - 2 * DAY, cost=1_000_000)
    with api(make_settings, store, "job_retention_days: 30\n") as client:
        before = client.get("/v1/costs?period=90d", headers=ADMIN_AUTH).json()
        assert before["totals"]["spent"]["micros"] == 8_000_000 and before["retention_note"] is None
        assert Retention(store, days=30, pause=0).prune(now) == 1
        after = client.get("/v1/costs?period=90d", headers=ADMIN_AUTH).json()
        note = after["retention_note"]
        assert after["totals"] == before["totals"]  # the pruned job's spend is in the ledger: and the report says so
        assert [j["id"] for j in after["top_jobs"]] == ["j-new"]  # but it is listed no more
        assert note and note.startswith("Includes $7.00 spent in this window by jobs since pruned") and \
            "30 days after they end" in note and "job_retention_days" in note, note
        # a week is within the horizon: nothing pruned was in it, and nothing is said
        assert client.get("/v1/costs?period=7d", headers=ADMIN_AUTH).json()["retention_note"] is None
        # a team's own token sees it too (the count is the store's, no job named)
        assert client.get("/v1/costs?period=90d", headers={"Authorization": "Bearer vision-token"}).json()[
            "retention_note"] == note


def test_broker_costs_prints_the_retention_note(make_settings, store, monkeypatch, capsys):
    from broker import cli

    now = time.time()
    finished(store, "j-old", ended=now - 60 * DAY, cost=7_000_000)
    with api(make_settings, store, "job_retention_days: 30\n") as client:
        Retention(store, days=30, pause=0).prune(now)
        report = client.get("/v1/costs?period=90d", headers=ADMIN_AUTH).json()

    class Client:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def costs(self, **params):
            return report

    monkeypatch.setattr(cli, "_client", lambda args: Client())
    args = argparse.Namespace(id=None, team=None, period="90d", since=None, until=None, json=False)
    assert cli.cmd_costs(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert report["retention_note"] and report["retention_note"] in out, out


def test_the_dashboard_page_has_a_place_for_the_retention_note(make_settings, store):
    with api(make_settings, store) as client:
        page = client.get("/dashboard").text
        script = client.get("/dashboard/static/dashboard.js").text
    assert 'id="retention-note"' in page
    assert "r.retention_note" in script


# -- a pruned job's 404 -----------------------------------------------------------------------------------------------


def test_a_pruned_jobs_404_says_finished_jobs_are_deleted_after_job_retention_days(make_settings, store):
    now = time.time()
    finished(store, "j-old", ended=now - 60 * DAY, cost=1)
    with api(make_settings, store, "job_retention_days: 30\n") as client:
        Retention(store, days=30, pause=0).prune(now)
        for method, path in (("GET", "/v1/jobs/j-old"), ("POST", "/v1/jobs/j-old/resume"),
                             ("GET", "/v1/costs/jobs/j-old")):
            r = client.request(method, path, headers=ADMIN_AUTH)
            assert r.status_code == 404, (path, r.text)
            detail = r.json()["detail"]
            assert detail.startswith("no job j-old") and "deleted 30 days after they end (job_retention_days)" in \
                detail and "so if it ended before that it may have been pruned" in detail, detail


def test_without_retention_a_404_says_nothing_of_pruning(make_settings, store):
    with api(make_settings, store) as client:
        r = client.get("/v1/jobs/j-nope", headers=ADMIN_AUTH)
    assert r.status_code == 404 and r.json()["detail"] == "no job j-nope"


# -- the config message -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-3", "0.5", "-0.5"])
def test_a_retention_below_a_day_gets_one_message_whatever_its_sign(make_settings, value):
    with pytest.raises(ConfigError) as err:
        make_settings(config=f"job_retention_days: {value}\n")
    assert str(err.value) == (f"job_retention_days: must be at least 1 (days), not {value}; leave it out to keep "
                              "every job")
