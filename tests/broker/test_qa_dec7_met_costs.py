"""The cost report as a QA tester read it on a real broker: spent, on-demand and saved that add up as shown, and a
window inside an hour that says what it leaves out of the pruned jobs' spend. Through the real API on both stores."""

from __future__ import annotations

import random
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone

from fastapi.testclient import TestClient

from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.retention import DAY, Retention
from broker.store import Change
from broker_testing import ADMIN
from pricing.money import amount_shown, fmt, fmt_ondemand, fmt_saving

HOUR = 3600
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


@contextmanager
def api(make_settings, store, config: str = ""):
    from broker.api.app import create_app

    app = create_app(make_settings(config="pools: []\n" + config), store=store, engine=False)
    with TestClient(app) as client:
        yield client


def finished(store, job_id: str, *, start: float, seconds: int, cost: int, ondemand_per_hour: int) -> Job:
    """A succeeded spot job whose one attempt billed ``cost`` over ``seconds`` from ``start``, at an on-demand price
    of ``ondemand_per_hour`` for its shape."""
    end = start + seconds
    job = Job(id=job_id, name="train", team="vision", state=JobState.QUEUED, spec={"run": "echo"}, budget=50_000_000,
              priority=0, submitted_at=start - 60, updated_at=start - 60)
    job = store.commit(Change(job=job, expected_version=None))
    attempt = Attempt(id=f"{job_id}-a1", job_id=job_id, n=1, state=AttemptState.SUCCEEDED, launcher="local",
                      placement={"tier": "spot", "zone": "sim-a", "ondemand_price_per_hour": ondemand_per_hour},
                      price_per_hour=cost * HOUR // seconds, created_at=start, started_at=start, ended_at=end,
                      billed_until=end, cost=cost)
    return store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=end, attempts=1, spent=cost),
                               expected_version=job.version, attempts=[attempt]))


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _adds_up(row: dict) -> None:
    spent, ondemand, saved = (amount_shown(row[k]["usd"]) for k in ("spent", "ondemand_equivalent", "saving"))
    assert spent + saved == ondemand, (row["spent"], row["ondemand_equivalent"], row["saving"])
    assert saved <= row["saving"]["micros"]  # a saving is never overstated


# -- 2. spent + saved = on-demand, as shown -------------------------------------------------------------------------


def test_spent_and_saved_add_up_to_the_ondemand_figure_shown_in_every_part_of_the_report(make_settings, store):
    # the tester's exact figures: $0.096145 spent against $0.270512 on-demand read $0.0962 + $0.1743 = $0.2705
    # beside "$0.2706"
    start = (time.time() - 2 * DAY) // DAY * DAY + 3 * HOUR  # within one UTC day, so one by_day row holds it
    finished(store, "j-qa", start=start, seconds=HOUR, cost=96_145, ondemand_per_hour=270_512)
    with api(make_settings, store) as client:
        report = client.get("/v1/costs?period=7d", headers=ADMIN_AUTH).json()
        job = client.get("/v1/costs/jobs/j-qa", headers=ADMIN_AUTH).json()
    totals = report["totals"]
    assert (totals["spent"]["usd"], totals["ondemand_equivalent"]["usd"], totals["saving"]["usd"]) == \
        ("$0.0962", "$0.2705", "$0.1743")
    assert totals["ondemand_equivalent"]["micros"] == 270_512 and totals["saving"]["micros"] == 174_367  # exact
    (day,) = [d for d in report["by_day"] if d["total"]["micros"]]
    rows = [totals, *report["by_team"], *report["top_jobs"], job, {**day, "spent": day["total"]}]
    for row in rows:
        _adds_up(row)


def test_spent_and_saved_add_up_to_the_ondemand_figure_shown_whatever_the_amounts():
    rng = random.Random(7)
    for _ in range(20_000):
        spent = rng.choice([rng.randrange(0, 10_000), rng.randrange(0, 2_000_000), rng.randrange(0, 10**9)])
        equivalent = max(0, spent + rng.choice([rng.randrange(-5_000, 5_000), rng.randrange(-10**6, 10**7)]))
        shown_spent, shown_saved = amount_shown(fmt(spent)), \
            (0 if fmt_saving(spent, equivalent) == "under $0.0001" else amount_shown(fmt_saving(spent, equivalent)))
        assert shown_spent + shown_saved == amount_shown(fmt_ondemand(spent, equivalent)), (spent, equivalent)
        assert shown_saved <= max(equivalent - spent, 0) or equivalent < spent


# -- 4. a window inside an hour says what it leaves out of the pruned jobs' spend ----------------------------------------


def test_a_window_inside_an_hour_says_it_leaves_out_the_pruned_spend_of_that_hour(make_settings, store):
    # billed $4.00 over an hour from 15 min before an hour's start: $3.00 of it in that hour, in the ledger once pruned
    hour = (time.time() - 60 * DAY) // HOUR * HOUR
    finished(store, "j-old", start=hour - 15 * 60, seconds=HOUR, cost=4_000_000, ondemand_per_hour=8_000_000)
    with api(make_settings, store, "job_retention_days: 30\n") as client:
        assert Retention(store, days=30, pause=0).prune(time.time()) == 1
        inside = client.get("/v1/costs", params={"since": _iso(hour + 10 * 60), "until": _iso(hour + 40 * 60)},
                            headers=ADMIN_AUTH).json()
        # a window from that hour's start counts it all, and says so as before
        whole = client.get("/v1/costs", params={"since": _iso(hour), "until": _iso(hour + 40 * 60)},
                           headers=ADMIN_AUTH).json()
    assert inside["totals"]["spent"]["micros"] == 0  # to the hour: the hour began before the window
    note = inside["retention_note"]
    assert note and note.startswith("Leaves out what jobs since pruned (job_retention_days: finished jobs are "
                                    "deleted 30 days after they end) spent in this window"), note
    assert "$3.00" in note and "begins before this window" in note, note
    assert whole["totals"]["spent"]["micros"] == 3_000_000
    assert whole["retention_note"].startswith("Includes $3.00 spent in this window by jobs since pruned")
    assert "Leaves out" not in whole["retention_note"]

