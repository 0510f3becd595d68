"""A capped team's spend this month (``broker_team_month_spent_dollars``, ``GET /v1/costs``' ``monthly_caps``, what a
submit is weighed against) is its cost report's total for the month, to the micro-dollar, without the report.

On both stores, over jobs whose attempts cross the month's first midnight, attempts still running (one billed to a
moment, one just launched and billed nothing yet), a final job updated after the month by a writer whose clock runs
ahead, and jobs pruned into the ledger on either side of the month's start: ``costs.spent`` over the report's own
read, ``service.team_standing`` and a scrape of ``/metrics`` (its first, and one after the month turned, read
incrementally) each equal the full report's ``totals.spent``. A scrape reads the month from the records it reads
anyway: no cost report's read per capped team, one read of the ledger for all of them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from broker import costs
from broker.api.metrics import StoreCollector
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.service import BrokerService
from broker.store import Change
from broker.team_budget import month_of

HOUR = 3600
NOW = 1_800_000_000.0  # 2027-01-15 08:00 UTC
MONTH = month_of(NOW)  # 2027-01
NEXT = month_of(MONTH.until)  # 2027-02
CONFIG = """
pools:
  - {name: gpu-box, slots: 4, accelerator: A100, price_per_slot_hour: "2.00"}
teams:
  vision: {monthly_budget_usd: "100000"}
  nlp: {monthly_budget_usd: "50000"}
"""
CAPPED = ("nlp", "vision")


def job_with(store, job_id: str, team: str, state: JobState, tries: list[tuple], *, updated: float | None = None):
    """A job of ``team`` in ``state`` with attempts ``(attempt state, start, end or None, billed until or None,
    cost)``, last updated at ``updated`` (else its last attempt's end, or ``NOW``)."""
    submitted = tries[0][1] - 600
    job = store.commit(Change(job=Job(id=job_id, name="train", team=team, state=JobState.QUEUED, spec={"run": "x"},
                                      budget=900_000_000_000, priority=0, submitted_at=submitted,
                                      updated_at=submitted), expected_version=None))
    attempts = [Attempt(id=f"{job_id}-a{n}", job_id=job_id, n=n, state=st, launcher="local",
                        placement={"tier": "spot", "zone": "sim-a", "ondemand_price_per_hour": 9_000_000},
                        price_per_hour=4_000_000, created_at=start, started_at=start + 5, ended_at=end,
                        billed_until=billed, cost=cost)
                for n, (st, start, end, billed, cost) in enumerate(tries, 1)]
    if updated is None:
        updated = tries[-1][2] if tries[-1][2] is not None else NOW
    return store.commit(Change(job=replace(job, state=state, updated_at=updated, attempts=len(attempts),
                                           spent=sum(a.cost for a in attempts)),
                               expected_version=job.version, attempts=attempts))


def history(store) -> None:
    S, E = AttemptState.SUCCEEDED, AttemptState.PREEMPTED
    start = MONTH.since
    for k, team in enumerate(("vision", "nlp", "research")):  # research: no cap, its spend counts for no capped team
        t = f"{team[:3]}"
        more = 1_000 * k  # each team's costs its own
        # across the month's first midnight, an odd cost split unevenly
        job_with(store, f"j-{t}-cross", team, JobState.SUCCEEDED,
                 [(E, start - 30 * HOUR + 17, start - 2 * HOUR, start - 2 * HOUR, 5_555_557 + more),
                  (S, start - HOUR + 3, start + 5 * HOUR + 11, start + 5 * HOUR + 11, 7_777_777 + more)])
        # all of it last month: left out of the month's read, and nothing of it in the month anyway
        job_with(store, f"j-{t}-old", team, JobState.SUCCEEDED, [(S, start - 9 * HOUR, start - 8 * HOUR,
                                                                   start - 8 * HOUR, 1_000_001 + more)])
        # final, updated this month (a cancel's write, say) though its attempt ended before: read, counts 0
        job_with(store, f"j-{t}-touched", team, JobState.CANCELLED,
                 [(E, start - 5 * HOUR, start - 4 * HOUR, start - 4 * HOUR, 2_000_003 + more)], updated=start + 60)
        # running: preempted across the midnight, then an attempt billed to a moment before now
        job_with(store, f"j-{t}-run", team, JobState.RUNNING,
                 [(E, start - 3 * HOUR + 1, start + 2 * HOUR - 1, start + 2 * HOUR - 1, 3_333_331 + more),
                  (AttemptState.RUNNING, start + 3 * HOUR, None, NOW - 7, 123_456_789 + more)])
        # launched a moment ago: billed nothing yet (no seconds), a cost already (all of it once a bound passes)
        job_with(store, f"j-{t}-launch", team, JobState.LAUNCHING,
                 [(AttemptState.LAUNCHING, NOW - 5, None, None, 1_234 + more)])
        # a final job whose writer's clock ran ahead: updated (and billed) past the month's end
        job_with(store, f"j-{t}-ahead", team, JobState.SUCCEEDED,
                 [(S, MONTH.until - 2 * HOUR + 9, MONTH.until + HOUR + 1, MONTH.until + HOUR + 1, 4_444_447 + more)])
        # pruned: the ledger's hours on both sides of the month's start count from the hour they begin in
        for n, (a, b) in enumerate([(start - 2.5 * HOUR + 13, start + 1.5 * HOUR + 7), (start + 40 * HOUR,
                                                                                         start + 41 * HOUR + 1)]):
            gone = job_with(store, f"j-{t}-gone{n}", team, JobState.SUCCEEDED, [(S, a, b, b, 9_876_543 + n + more)])
            assert store.prune([gone]) == [gone.id]


def report_total(store, team: str, month) -> int:
    win = costs.Window(month.since, month.until, month.name)
    read = costs.gather(store, team=team, win=win)
    return costs.report(read.jobs, read.attempts, win=win, now=NOW, positions={}, team=team,
                        ledger=read.ledger)["totals"]["spent"]["micros"]


def scraped(collector) -> dict[str, int]:
    """``broker_team_month_spent_dollars`` by team, back in micro-dollars."""
    [family] = [f for f in collector.collect() if f.name == "broker_team_month_spent_dollars"]
    return {s.labels["team"]: round(s.value * 1_000_000) for s in family.samples}


class Counting:
    """The store, counting the calls of each of its methods."""

    def __init__(self, store):
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name):
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


@pytest.fixture
def world(store, make_settings):
    history(store)
    clock = [NOW]
    service = BrokerService(make_settings(config=CONFIG), Counting(store), clock=lambda: clock[0])
    return store, service, clock


def test_a_capped_teams_month_spend_is_its_reports_total_to_the_micro_dollar(world):
    store, service, clock = world
    collector = StoreCollector(service, settings=service.settings)
    want = {team: report_total(store, team, MONTH) for team in CAPPED}
    assert all(want.values()) and want["vision"] != want["nlp"]
    win = costs.Window(MONTH.since, MONTH.until, MONTH.name)
    for team in CAPPED:
        read = costs.gather(store, team=team, win=win)
        assert read.ledger.buckets  # the pruned jobs' hours are there
        assert costs.spent(read.jobs, read.attempts, win=win, team=team, ledger=read.ledger) == want[team]
        assert service.team_standing(team, NOW).spent == want[team]
    assert scraped(collector) == want
    assert scraped(collector) == want  # a later scrape, which reads only what changed

    # the month turns: the running attempt billed on into it, a job finished in it; the same collector reads on
    run = store.get_job("j-vis-run")
    [_, live] = store.attempts(run.id)
    store.commit(Change(job=replace(run, updated_at=NEXT.since + 2 * HOUR), expected_version=run.version,
                        attempts=[replace(live, billed_until=NEXT.since + 2 * HOUR + 13, cost=987_654_321)]))
    job_with(store, "j-vis-feb", "vision", JobState.SUCCEEDED,
             [(AttemptState.SUCCEEDED, NEXT.since + 60, NEXT.since + HOUR, NEXT.since + HOUR, 3_000_001)])
    clock[0] = NEXT.since + 3 * HOUR
    later = {team: report_total(store, team, NEXT) for team in CAPPED}
    assert later["vision"] > later["nlp"] > 0  # the attempt billed past the month's end, the clock ahead's
    for team in CAPPED:
        assert service.team_standing(team, clock[0]).spent == later[team]
    assert scraped(collector) == later


def test_a_scrape_reads_no_cost_report_per_capped_team(world):
    """Each scrape ran a cost report's read of the whole month for every capped team (a scan of the jobs table each);
    now the month's spend comes from the records the scrape reads anyway, and the ledger is read once."""
    _, service, _ = world
    collector = StoreCollector(service, settings=service.settings)
    for _ in range(2):
        service.store.calls.clear()
        scraped(collector)
        assert service.store.calls["cost_history"] == 0
        assert service.store.calls["pruned_costs"] == 1
