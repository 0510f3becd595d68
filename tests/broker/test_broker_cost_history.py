"""The cost report read narrowly (``JobStore.cost_history``, one boundary at a time) gives exactly the report
computed the way it was before (``costs_before``: whole jobs and attempts, two shares a day), on both stores."""

from __future__ import annotations

from cost_history import DAY, history
from costs_before import as_before, zones_apart
from costs_before import gather as gather_before
from costs_before import report as report_before

from broker import costs

NOW = 1_800_000_000.25


WINDOWS = {  # what each case reads, in words → (window, team)
    "the last day, all teams": ({"period": "24h"}, None),
    "a week, all teams": ({"period": "7d"}, None),
    "90 days, all teams": ({"period": "90d"}, None),
    "90 days, one team": ({"period": "90d"}, "nlp"),
    "a custom window with fractional edges, ending after now":
        ({"since": "2026-11-20T07:31:12.5Z", "until": "2027-01-31T13:00:00.75Z"}, None),
    "a window long before now, one team": ({"since": "2026-08-01", "until": "2026-10-01"}, "vision"),
}


def test_the_narrow_read_gives_exactly_the_report_of_whole_records(store):
    history(store, 240, NOW, seed=7)  # one store for every window: seeding is most of the test's time
    positions = {j.id: i for i, j in enumerate(store.list_jobs(states=["queued"])[::-1], 1)}
    for case, (window, team) in WINDOWS.items():
        win = costs.window(now=NOW, **window)
        jobs, attempts = gather_before(store, team=team, win=win)
        expected = report_before(jobs, attempts, win=win, now=NOW, positions=positions, team=team)
        read = costs.gather(store, team=team, win=win)
        got = costs.report(read.jobs, read.attempts, win=win, now=NOW, positions=positions, team=team,
                           ledger=read.ledger)
        assert [j.id for j in read.jobs] == [j.id for j in jobs], case
        # the time to recover is the exact sum rounded up once since, where the report from before summed each
        # event's whole seconds (as_before leaves it out): checked against the report now over the whole records
        whole = costs.report(jobs, attempts, win=win, now=NOW, positions=positions, team=team)
        assert got["preemptions"]["recovery_seconds"] == whole["preemptions"]["recovery_seconds"], case
        each = expected["preemptions"]["recovery_seconds"]
        assert each - max(expected["preemptions"]["count"], 1) < got["preemptions"]["recovery_seconds"] <= each, case
        assert as_before(got) == zones_apart(expected), case
        assert got["totals"]["spent"]["micros"] > 0, case
    assert expected["preemptions"]["count"] > 0


def test_cost_records_carry_the_stored_values(store):
    history(store, 60, NOW, seed=3)
    read = costs.gather(store, team=None, win=costs.Window(NOW - 200 * DAY, NOW + DAY, "custom"))
    jobs, attempts = read.jobs, read.attempts
    whole = {j.id: j for j in store.list_jobs(limit=10**6)}
    assert len(jobs) == len(whole) == 60
    for job in jobs:
        full = whole[job.id]
        assert (job.name, job.team, job.state, job.submitted_at, job.priority, job.reason, job.budget, job.spent,
                job.quote["tiers"], job.updated_at) == (full.name, full.team, full.state, full.submitted_at,
                                                        full.priority, full.reason, full.budget, full.spent,
                                                        full.quote["tiers"], full.updated_at)
        assert job.placement.get("price_per_hour") == full.placement.get("price_per_hour")
        tries = store.attempts(job.id)
        assert [a.n for a in attempts[job.id]] == [a.n for a in tries]
        for got, a in zip(attempts[job.id], tries):
            assert (got.state, got.price_per_hour, got.created_at, got.started_at, got.ended_at, got.billed_until,
                    got.cost) == (a.state, a.price_per_hour, a.created_at, a.started_at, a.ended_at, a.billed_until,
                                  a.cost)
            assert all(got.placement[k] == a.placement.get(k) for k in got.placement)
