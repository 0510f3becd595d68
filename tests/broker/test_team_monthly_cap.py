"""A team's monthly cap (``teams.<team>.monthly_budget_usd``): the team's jobs together never spend more in a month.

Against the real app (in process) on both stores, SQLite and a real redis-server: a submit, a resume or a budget raise
that could take the month past the cap is refused naming the field and what fits; cancelling a job lets its part go;
spend of an earlier month does not count; two brokers on one Redis store admitting one team's jobs at once never
admit more than the cap holds; ``GET /v1/costs`` and ``broker costs`` say where the team stands.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import Principal
from broker.config import ConfigError
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt
from broker.service import BrokerService, Conflict, Invalid
from broker.store import Change, VersionConflict
from broker.team_budget import month_of
from broker_testing import ADMIN, TEAM_TOKENS

CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
default_budget_usd: "10"
teams:
  vision: {monthly_budget_usd: "100"}
"""
VISION = {"Authorization": f"Bearer {TEAM_TOKENS['vision']}"}
NLP = {"Authorization": f"Bearer {TEAM_TOKENS['nlp']}"}


def task(budget: str, name: str = "train", hours: float = 1) -> dict:
    return {"name": name, "resources": {"accelerators": "A100:1"}, "run": "echo hi",
            "broker": {"budget_usd": budget, "expected_hours": hours}}


@pytest.fixture
def served(store, make_settings):
    settings = make_settings(config=CONFIG)
    with TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False) as c:
        yield c, store, settings


def spend(store, job_id: str, cost: int, at: float) -> None:
    """What the engine writes when an attempt of ``job_id`` ran an hour from ``at`` for ``cost`` and the job failed."""
    job = store.get_job(job_id)
    attempt = Attempt(id=f"{job_id}-a1", job_id=job_id, n=1, state=AttemptState.FAILED, launcher="local",
                      placement={"tier": "onprem", "location": "gpu-box", "price_per_hour": cost},
                      price_per_hour=cost, created_at=at, started_at=at, ended_at=at + 3600, cost=cost,
                      billed_until=at + 3600, reason="node lost")
    store.commit(Change(job=replace(job, state=JobState.FAILED, spent=cost, attempts=1, updated_at=at + 3600,
                                    diagnosis={"infrastructure": True, "text": "the node was lost"}),
                        expected_version=job.version, attempts=[attempt]))


def test_a_submit_past_the_cap_is_refused_naming_the_budget_and_what_fits(served):
    client, _, _ = served
    first = client.post("/v1/jobs", json=task("60"), headers=VISION)
    assert first.status_code == 201, first.text
    r = client.post("/v1/jobs", json=task("50"), headers=VISION)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "broker.budget_usd"
    detail = r.json()["detail"]
    assert "monthly cap" in detail and "$60.00 held by 1 job not ended" in detail
    assert "at most $40.00" in detail, detail
    # what fits is admitted, to the cent; then nothing more is
    assert client.post("/v1/jobs", json=task("40"), headers=VISION).status_code == 201
    last = client.post("/v1/jobs", json=task("5"), headers=VISION)
    assert last.status_code == 422 and "nothing more fits: wait for the team's jobs to end" in last.json()["detail"]
    # a dry run is refused the same way; another team (no cap) is not held to vision's
    dry = client.post("/v1/jobs?dry_run=true", json=task("5"), headers=VISION)
    assert dry.status_code == 422 and dry.json() == last.json()
    assert client.post("/v1/jobs", json=task("500"), headers=NLP).status_code == 201
    # a job cancelled lets its unspent budget go
    assert client.post(f"/v1/jobs/{first.json()['id']}/cancel", headers=VISION).status_code == 200
    assert client.post("/v1/jobs", json=task("60"), headers=VISION).status_code == 201


def test_this_months_spend_counts_and_an_earlier_months_does_not(served):
    client, store, _ = served
    month = month_of(time.time())
    old = client.post("/v1/jobs", json=task("90", "last-month"), headers=VISION).json()["id"]
    spend(store, old, 80_000_000, month.since - 10 * 86400)  # $80 spent last month: not this month's
    new = client.post("/v1/jobs", json=task("40", "this-month"), headers=VISION).json()["id"]
    spend(store, new, 30_000_000, month.since + 60)  # $30 this month, $10 of its budget unspent (it failed: ended)
    r = client.post("/v1/jobs", json=task("71"), headers=VISION)
    assert r.status_code == 422 and "$30.00 spent in " + month.name in r.json()["detail"], r.text
    assert "at most $70.00" in r.json()["detail"]
    assert client.post("/v1/jobs", json=task("70"), headers=VISION).status_code == 201

    costs = client.get("/v1/costs?period=30d", headers=VISION).json()
    [cap] = costs["monthly_caps"]
    assert (cap["team"], cap["month"], cap["cap"]["micros"]) == ("vision", month.name, 100_000_000)
    assert (cap["spent"]["micros"], cap["held"]["micros"], cap["holders"], cap["free"]["micros"]) \
        == (30_000_000, 70_000_000, 1, 0)
    assert client.get("/v1/costs", headers=NLP).json()["monthly_caps"] == []
    admin = client.get("/v1/costs", headers={"Authorization": f"Bearer {ADMIN}"}).json()
    assert [c["team"] for c in admin["monthly_caps"]] == ["vision"]


def test_a_resume_holds_the_unspent_budget_again_and_a_raise_holds_more(served):
    client, store, _ = served
    failed = client.post("/v1/jobs", json=task("50", "failed"), headers=VISION).json()["id"]
    spend(store, failed, 10_000_000, time.time() - 7200)  # ended: $10 spent, its $40 unspent held by nothing
    queued = client.post("/v1/jobs", json=task("50", "queued"), headers=VISION).json()["id"]
    # $10 spent and $50 held: $40 free
    too_much = client.post(f"/v1/jobs/{queued}/budget", json={"budget_usd": "91"}, headers=VISION)
    assert too_much.status_code == 422 and too_much.json()["field"] == "budget_usd", too_much.text
    assert "raise it to at most $90.00" in too_much.json()["detail"]
    assert client.get(f"/v1/jobs/{queued}", headers=VISION).json()["budget"]["micros"] == 50_000_000
    assert client.post(f"/v1/jobs/{queued}/budget", json={"budget_usd": "70"}, headers=VISION).status_code == 200
    # $20 free now: resuming the failed job would hold its $40 unspent again
    r = client.post(f"/v1/jobs/{failed}/resume", headers=VISION)
    assert r.status_code == 409 and r.json()["field"] == "budget", r.text
    assert "not resumed" in r.json()["detail"] and "lower its budget to $30.00" in r.json()["detail"]
    assert client.get(f"/v1/jobs/{failed}", headers=VISION).json()["state"] == "failed"
    assert client.post(f"/v1/jobs/{failed}/budget", json={"budget_usd": "30"}, headers=VISION).status_code == 200
    resumed = client.post(f"/v1/jobs/{failed}/resume", headers=VISION)
    assert resumed.status_code == 200 and resumed.json()["state"] == "queued", resumed.text
    assert client.post("/v1/jobs", json=task("5"), headers=VISION).status_code == 422
    # lowering a budget is never refused for the cap
    assert client.post(f"/v1/jobs/{queued}/budget", json={"budget_usd": "20"}, headers=VISION).status_code == 200
    assert client.post("/v1/jobs", json=task("50"), headers=VISION).status_code == 201


def test_the_store_commits_one_of_two_changes_weighed_on_the_same_count(store):
    from broker.models import Job

    def job(jid: str) -> Job:
        return Job(id=jid, name="t", team="a:b", state=JobState.QUEUED, spec={}, budget=1, priority=0,
                   submitted_at=1.0, updated_at=1.0)

    seen = store.team_admissions("a:b")
    assert seen == 0 and store.team_admissions("a") == 0
    store.commit(Change(job=job("j-1"), expected_version=None, team_fence=("a:b", seen)))
    with pytest.raises(VersionConflict):
        store.commit(Change(job=job("j-2"), expected_version=None, team_fence=("a:b", seen)))
    assert store.get_job("j-2") is None
    assert store.team_admissions("a:b") == 1 and store.team_admissions("a") == 0  # another team's count is its own
    store.commit(Change(job=job("j-2"), expected_version=None, team_fence=("a:b", 1)))
    # a change with no fence (the engine's) neither checks nor counts
    store.commit(Change(job=job("j-3"), expected_version=None))
    assert store.team_admissions("a:b") == 2


def test_two_brokers_admitting_one_teams_jobs_at_once_stay_under_the_cap(make_settings, redis_server):
    """Both brokers weigh the cap on the same standing before either writes (a barrier holds each after its first
    read): without the store's fence both would admit the last $7 that fits."""
    from broker.store.redis import RedisStore

    settings = make_settings(config=CONFIG)
    prefix = f"cap-{time.monotonic_ns()}"
    barrier = threading.Barrier(2, timeout=10)
    local = threading.local()

    class Racing(BrokerService):
        def team_standing(self, team, now):
            standing = super().team_standing(team, now)
            if not getattr(local, "waited", False):
                local.waited = True
                barrier.wait()
            return standing

    brokers = [Racing(settings, RedisStore(redis_server.url, prefix=prefix)) for _ in range(2)]
    vision = Principal(name="vision", team="vision", admin=False)
    local.waited = True  # this thread's submits are not held
    for i in range(13):
        brokers[i % 2].submit(vision, task("7", f"before-{i}"))  # $91 held: $9 free, one more $7 job fits
    admitted, refused, errors = [], [], []

    def submit(service: BrokerService) -> None:
        try:
            # half an hour ($1.00, and its clean stop): what is left after the other's $7 runs it
            admitted.append(service.submit(vision, task("7", "last", hours=0.5))[0].id)
        except Invalid as exc:
            refused.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=submit, args=(b,)) for b in brokers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(admitted) == 1 and len(refused) == 1, (admitted, refused)
    assert "nothing more fits" not in refused[0] and "at most $2.00" in refused[0]
    stored = brokers[0].store.list_jobs(team="vision", limit=1000)
    assert sum(j.budget for j in stored) == 98_000_000


@pytest.mark.parametrize("teams, field", [
    ('vision: {monthly_budget_usd: "0"}', "teams.vision.monthly_budget_usd: must be more than $0"),
    ('vision: {monthly_budget: "100"}', "teams.vision.monthly_budget: is not a team setting"),
    ('vision: {monthly_budget_usd: "100", default_budget_usd: "150"}',
     "teams.vision.default_budget_usd: is $150.00, more than the team's monthly_budget_usd ($100.00)"),
    ('vision: {monthly_budget_usd: "5"}', "teams.vision.monthly_budget_usd: is $5.00, less than default_budget_usd "
                                          "($10.00)"),
], ids=["a cap of nothing is refused", "a misspelt key is refused with a hint",
        "a team default above its cap is refused", "the broker's default above a team's cap is refused"])
def test_a_cap_that_could_not_work_is_refused_at_start(make_settings, teams, field):
    with pytest.raises(ConfigError) as err:
        make_settings(config=f"default_budget_usd: \"10\"\nteams:\n  {teams}\n")
    assert field in str(err.value)


def test_team_tokens_from_the_environment_keep_the_configs_cap(make_settings):
    settings = make_settings(config=CONFIG)  # BROKER_TEAM_TOKENS names vision too
    assert settings.teams["vision"].monthly_budget == 100_000_000 and settings.teams["vision"].token_hashes


def test_what_fits_is_offered_only_when_it_runs_the_job_and_a_month_spent_says_when_room_comes(served, make_settings,
                                                                                                 store):
    client, _, _ = served
    assert client.post("/v1/jobs", json=task("99"), headers=VISION).status_code == 201
    r = client.post("/v1/jobs", json=task("5"), headers=VISION)  # $1 free; the job's hour on the pool is $2
    assert r.status_code == 422 and r.json()["field"] == "broker.budget_usd"
    assert "the $1.00 free would not run this job (estimated $2.00 on onprem" in r.json()["detail"], r.text
    assert "at most" not in r.json()["detail"]

    # the month spent past a cap lowered since (a restart with a smaller one): over it, and room only next month
    job = store.list_jobs(team="vision", limit=1)[0]
    spend(store, job.id, 80_000_000, time.time() - 7200)  # $80 spent this month, the job ended
    lowered = make_settings(config=CONFIG.replace('monthly_budget_usd: "100"', 'monthly_budget_usd: "50"'))
    with TestClient(create_app(lowered, store=store, engine=False), raise_server_exceptions=False) as again:
        r = again.post("/v1/jobs", json=task("5"), headers=VISION)
    month = month_of(time.time())
    next_month = time.strftime("%Y-%m-%d", time.gmtime(month.until))
    assert r.status_code == 422, r.text
    assert "$80.00 spent in " + month.name in r.json()["detail"]
    assert "it is over the cap by $30.00 (the cap was lowered since)" in r.json()["detail"], r.text
    assert f"nothing fits until {next_month} (UTC), when a new month begins" in r.json()["detail"], r.text


def test_a_budget_stopped_jobs_raise_says_the_cap_holds_its_resume_back(served, store):
    """A raise on a budget-stopped job read "resume it to continue", and the resume was then refused by the cap."""
    client, _, _ = served
    stopped = client.post("/v1/jobs", json=task("20", "stopped"), headers=VISION).json()["id"]
    spend(store, stopped, 20_000_000, time.time() - 7200)
    job = store.get_job(stopped)
    store.commit(Change(job=replace(job, state=JobState.STOPPED_BUDGET, reason="stopped at its budget"),
                        expected_version=job.version))
    assert client.post("/v1/jobs", json=task("75"), headers=VISION).status_code == 201  # $20 + $75: $5 free
    r = client.post(f"/v1/jobs/{stopped}/budget", json={"budget_usd": "40"}, headers=VISION)
    assert r.status_code == 200, r.text  # an ended job holds nothing: the raise is taken
    # dated, and no promise that it resumes by itself (nothing resumes a stopped job when the cap makes room)
    assert "a resume is refused while team vision's monthly cap has no room for its $20.00 unspent (as of " \
        in r.json()["reason"] and "$5.00 free): lower its budget to $25.00 first" in r.json()["reason"], \
        r.json()["reason"]
    assert "it does not resume by itself" in r.json()["reason"]
    assert "resume it to continue" not in r.json()["reason"]
    assert client.post(f"/v1/jobs/{stopped}/resume", headers=VISION).status_code == 409
