"""A small, fixed world for the edge tests: two teams, jobs with priced attempts, progress points.

Everything is committed straight through the store (no processes run), with
times relative to ``NOW`` so a 7-day window holds all of it. The expected
figures below are worked out by hand from the cost rules in
``broker/costs.py`` — the tests compare the API, the page, Slack and
``/metrics`` against them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from broker.config import Pool, Settings, Team, hash_token
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Event, Job
from broker.store import Change

H = 3600
ADMIN = "admin-token-edges"
TOKENS = {"team-a": "token-team-a", "team-b": "token-team-b"}
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"


def settings(tmp: Path, *, slack: dict | None = None, notifications: dict | None = None,
             public_url: str = "http://127.0.0.1:8000") -> Settings:
    extra = {}
    if slack is not None:
        extra["slack"] = slack
    if notifications is not None:
        extra["notifications"] = notifications
    return Settings(
        data_dir=tmp, store_url=f"sqlite://{tmp / 'broker.db'}",
        pools=(Pool("local", 2, None, 200_000),),
        teams={t: Team(t, frozenset({hash_token(tok)})) for t, tok in TOKENS.items()},
        admin_token_hashes=frozenset({hash_token(ADMIN)}), default_budget=10_000_000,
        checkpoint_root=(tmp / "ckpt").as_uri(), public_url=public_url, engine=False, extra=extra,
    )


def spot(zone: str, price: int, od: int | None = None) -> dict:
    p = {"tier": "spot", "cloud": "aws", "region": "us-east-1", "zone": zone, "location": zone,
         "instance_type": "g5.xlarge", "price_per_hour": price}
    if od is not None:
        p["ondemand_price_per_hour"] = od
    return p


def ondemand(price: int) -> dict:
    return {"tier": "ondemand", "cloud": "aws", "region": "us-east-1", "zone": "us-east-1a", "location": "us-east-1a",
            "instance_type": "g5.xlarge", "price_per_hour": price}


def onprem(price: int) -> dict:
    return {"tier": "onprem", "cloud": "local", "region": "local", "zone": "local", "location": "local",
            "instance_type": "local-1slot", "price_per_hour": price}


def attempt(job_id: str, n: int, state: AttemptState, placement: dict, *, start: float, seconds: int, cost: int,
            running: bool = False) -> Attempt:
    return Attempt(id=f"{job_id}-a{n}", job_id=job_id, n=n, state=state, launcher="fake", placement=placement,
                   price_per_hour=placement["price_per_hour"], created_at=start, started_at=start + 60,
                   ended_at=None if running else start + seconds, cost=cost, billed_until=start + seconds)


def job(job_id: str, team: str, state: JobState, *, submitted: float, budget: int, spent: int, attempts: int,
        reason: str = "", quote_od: int | None = None, priority: int = 0, updated: float | None = None,
        placement: dict | None = None, diagnosis: dict | None = None, checkpoint: dict | None = None) -> Job:
    tiers = [{"tier": "onprem", "price_per_hour": 200_000, "estimate": None, "text": "$0.20/h"}]
    if quote_od is not None:
        tiers.append({"tier": "ondemand", "price_per_hour": quote_od, "estimate": None, "text": "$1.00/h"})
    return Job(id=job_id, name=f"train-{job_id}", team=team, state=state, spec={"name": f"train-{job_id}",
               "run": "echo hi"}, budget=budget, priority=priority, submitted_at=submitted,
               updated_at=updated or submitted, spent=spent, attempts=attempts, reason=reason,
               quote={"tiers": tiers}, placement=placement or {}, diagnosis=diagnosis or {},
               last_checkpoint=checkpoint or {})


@dataclass
class World:
    now: float
    jobs: dict[str, Job] = field(default_factory=dict)


def seed(store, now: float | None = None) -> World:
    """Team A: a spot job preempted once then finished, an on-demand job running at 75% of its budget,
    a queued job. Team B: an on-prem job that failed in its own code (out of GPU memory; checkpoint at
    step 400). Expected numbers in :data:`EXPECTED`."""
    now = now or time.time()
    w = World(now=now)
    t0 = now - 3 * 24 * H  # three days ago: spans several UTC days

    a1 = job("j-a1", "team-a", JobState.SUCCEEDED, submitted=t0 - 600, budget=20_000_000, spent=5_000_000,
             attempts=2, reason="succeeded: the run command exited 0", updated=t0 + 11 * H)
    a1_tries = [
        attempt("j-a1", 1, AttemptState.PREEMPTED, spot("us-east-1a", 500_000, od=2_000_000), start=t0,
                seconds=4 * H, cost=2_000_000),
        attempt("j-a1", 2, AttemptState.SUCCEEDED, spot("us-east-1b", 500_000, od=2_000_000), start=t0 + 5 * H,
                seconds=6 * H, cost=3_000_000),
    ]
    a1_tries[0].reason = "the spot capacity was preempted; requeued to resume from its last checkpoint"
    points = [{"time": t0 + i * 600, "step": i * 100, "total_steps": 6000, "metrics": {"loss": round(2.5 / (1 + i), 4)}}
              for i in range(1, 60)]
    _commit(store, a1, a1_tries, metrics=points)

    a2 = job("j-a2", "team-a", JobState.RUNNING, submitted=now - 2 * H, budget=2_000_000, spent=1_500_000,
             attempts=1, reason="running attempt 1", placement=ondemand(3_000_000), updated=now - 60)
    _commit(store, a2, [attempt("j-a2", 1, AttemptState.RUNNING, ondemand(3_000_000), start=now - 1800 - 60,
                                seconds=1800, cost=1_500_000, running=True)])

    a3 = job("j-a3", "team-a", JobState.QUEUED, submitted=now - 300, budget=5_000_000, spent=0, attempts=0,
             reason="waiting: no capacity for 8x H100 right now", priority=5)
    _commit(store, a3, [])

    b1 = job("j-b1", "team-b", JobState.FAILED, submitted=t0, budget=3_000_000, spent=400_000, attempts=1,
             reason="failed: the run command exited with code 1", quote_od=1_000_000, updated=t0 + 2 * H,
             diagnosis=B1_DIAGNOSIS, checkpoint={"step": 400, "uri": "file:///ckpt/j-b1/400", "at": t0 + H})
    _commit(store, b1, [attempt("j-b1", 1, AttemptState.FAILED, onprem(200_000), start=t0, seconds=2 * H,
                                cost=400_000)])
    for j in (a1, a2, a3, b1):
        w.jobs[j.id] = store.get_job(j.id)
    return w


B1_DIAGNOSIS = {"class": "gpu_oom", "sentence": "Out of GPU memory at step 450 (batch size 64).",
                "hint": "Try a smaller batch size, gradient accumulation or activation checkpointing.",
                "infrastructure": False, "step": 450, "attempt": 1,
                "text": "Out of GPU memory at step 450 (batch size 64). Try a smaller batch size, gradient "
                        "accumulation or activation checkpointing."}
"""What the engine's diagnosis left on j-b1: a failure in the job's own code (a resume needs ``force``)."""

EXPECTED = {
    "team-a": {"spent": 6_500_000, "onprem": 0, "ondemand": 1_500_000, "spot": 5_000_000,
               # spot at the placement's on-demand price (2.00/h × 4 h + 2.00/h × 6 h), on-demand = itself
               "ondemand_equivalent": 8_000_000 + 12_000_000 + 1_500_000},
    "team-b": {"spent": 400_000, "onprem": 400_000, "ondemand": 0, "spot": 0,
               # on-prem at the quote's on-demand price: 1.00/h × 2 h
               "ondemand_equivalent": 2_000_000},
}


def _commit(store, j: Job, attempts: list[Attempt], metrics: list[dict] = ()) -> None:
    ev = Event(job_id=j.id, time=j.submitted_at, event="submit", from_state=None, to_state="queued",
               reason="submitted", actor="test")
    store.commit(Change(job=j, expected_version=None, events=[ev], attempts=attempts, metrics=list(metrics)))


def wait_behind_a_running_job(store, w: World) -> float:
    """Fill the on-prem pool with a running job of team B expected to take an hour, and leave team A's
    j-a3 waiting for that pool: returns when j-a3 should roughly start (the running job's end)."""
    since = w.now - 600
    b2 = job("j-b2", "team-b", JobState.RUNNING, submitted=since - 60, budget=5_000_000, spent=34_000, attempts=1,
             reason="the attempt started", placement=onprem(200_000), updated=since)
    b2.running_since, b2.expected_hours, b2.slots = since, "1", [0, 1]
    _commit(store, b2, [attempt("j-b2", 1, AttemptState.RUNNING, onprem(200_000), start=since, seconds=600,
                                cost=34_000, running=True)])
    a3 = store.get_job("j-a3")
    store.commit(Change(job=replace(a3, reason="waiting: every matching pool or zone is full right now"),
                        expected_version=a3.version))
    return since + 3600
