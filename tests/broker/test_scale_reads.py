"""The reads that scale with every job stored (``benchmarks/scale_reads.py``), made narrower or quicker, give what
they gave: ``/metrics``' pages of cost records (``JobStore.cost_page``) are ``list_jobs``' pages, each job's values
as stored; the cost report is the report of before to the micro-dollar and the character (``costs_report_b87e017``);
the retention policy's narrow read of what it deletes (``JobStore.expired``) adds to the pruned totals and the
pruned-cost ledger what the whole records add. And ``/metrics`` now sees the jobs an update time before its last
scrape hid from it: one imported (or restored) with its old update time, one that ended stamped by a lagging clock."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from cost_history import DAY, history
from costs_before import ondemand_as_before
from costs_report_b87e017 import report as report_before

from broker import costs, totals
from broker.api.metrics import StoreCollector
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt
from broker.retention import Retention
from broker.service import BrokerService
from broker.store import Change

NOW = 1_800_000_000.25
CONFIG = "pools:\n  - {name: box, slots: 1, price_per_slot_hour: '0.50'}\n"


def _twins(store, count: int) -> list[str]:
    """``count`` copies of one stored job with attempts, each submitted at the same time and with the same attempts
    ending at the same times: runs of equal keys, where a page, or the report's newest preemptions, ends inside one."""
    (model,) = [j for j in store.list_jobs(limit=10**6) if j.attempts >= 2][:1]
    tries = store.attempts(model.id)
    ids = []
    for i in range(count):
        jid = f"j-twin{i:04d}"
        job = replace(model, id=jid, idempotency_key=None, version=0)
        store.commit(Change(job=job, expected_version=None,
                            attempts=[replace(a, id=f"{jid}-a{a.n}", job_id=jid) for a in tries]))
        ids.append(jid)
    return ids


def _preempted_in_one_second(store, count: int) -> None:
    """``count`` copies of the stored job preempted last (before ``NOW``), each preempted within the same second as
    it, in an order of their own (neither the order the report reads them in nor its reverse): the newest 50
    preemptions, which the report lists by the second they are shown at, end inside that second."""
    jobs = {j.id: j for j in store.list_jobs(limit=10**6)}
    tries = store.attempts_of(list(jobs))
    ended, model = max((a.ended_at, job_id) for job_id, atts in tries.items() for a in atts[:-1]
                       if a.state is AttemptState.PREEMPTED and a.ended_at < NOW)
    order = random.Random(3).sample(range(count), count)
    for i in range(count):
        jid = f"j-same{i:04d}"
        moved = math.floor(ended) + 0.1 + order[i] * 0.8 / count
        atts = [replace(a, id=f"{jid}-a{a.n}", job_id=jid, ended_at=moved if a.ended_at == ended else a.ended_at)
                for a in tries[model]]
        store.commit(Change(job=replace(jobs[model], id=jid, idempotency_key=None, version=0), expected_version=None,
                            attempts=atts))


def _cost_view(job) -> tuple:
    return (job.id, job.name, job.team, job.state, job.submitted_at, job.priority, job.reason, job.budget, job.spent,
            job.placement.get("price_per_hour"), job.quote["tiers"], job.updated_at, job.queued_at)


def _attempt_view(a) -> tuple:
    return (a.n, a.state, a.price_per_hour, a.created_at, a.started_at, a.ended_at, a.billed_until, a.cost,
            *(a.placement.get(k) for k in ("tier", "ondemand_price_per_hour", "zone", "location", "region")))


@pytest.mark.parametrize("page", [1, 7, 1000])
def test_cost_pages_are_the_listing_pages_with_the_stored_values(store, monkeypatch, page):
    history(store, 60, NOW, seed=11)
    _twins(store, 9)
    import broker.store.redis as redis_store
    import broker.store.sqlite as sqlite_store
    # batches of 4 ids: the Redis index is read on from a run of equal scores longer than a batch
    monkeypatch.setattr(redis_store, "BATCH_IDS", 4)
    monkeypatch.setattr(sqlite_store, "BATCH_IDS", 4)
    whole = {j.id: j for j in store.list_jobs(limit=10**6)}
    attempts = store.attempts_of(list(whole))
    for since in (None, NOW - 5 * DAY):
        listed, paged, before = [], [], None
        while True:
            jobs = store.list_jobs(limit=page, active_since=since, before=before)
            got, tries = store.cost_page(limit=page, active_since=since, before=before)
            assert [j.id for j in got] == [j.id for j in jobs]
            listed += jobs
            paged += got
            for job in got:
                assert _cost_view(job) == _cost_view(whole[job.id])
                assert [_attempt_view(a) for a in tries[job.id]] == [_attempt_view(a) for a in attempts[job.id]]
            if len(jobs) < page:
                break
            before = (jobs[-1].submitted_at, jobs[-1].id)
        assert len({j.id for j in paged}) == len(paged) == len(listed)
        assert len(paged) == (len(whole) if since is None else len(store.list_jobs(limit=10**6, active_since=since)))


def test_cost_records_by_id_and_the_count_and_ids_of_every_job(store):
    history(store, 30, NOW, seed=12)
    ids = sorted(j.id for j in store.list_jobs(limit=10**6))
    assert store.job_count() == 30 and store.job_ids() == set(ids)
    jobs, tries = store.cost_records([ids[3], "j-no-such-job", ids[0], ids[3]])
    page, page_tries = store.cost_page(limit=10**6)
    by_id = {j.id: j for j in page}
    assert sorted(j.id for j in jobs) == sorted([ids[0], ids[3]])
    assert [_cost_view(j) for j in jobs] == [_cost_view(by_id[j.id]) for j in jobs]
    assert {i: [_attempt_view(a) for a in t] for i, t in tries.items()} == \
        {j.id: [_attempt_view(a) for a in page_tries[j.id]] for j in jobs}


def _collector(store, make_settings, clock):
    settings = make_settings(config=CONFIG)
    return StoreCollector(BrokerService(settings, store, clock=lambda: clock[0]), settings=settings)


def test_a_job_imported_with_an_old_update_time_is_counted_at_the_next_scrape(store, make_settings):
    clock = [NOW]
    history(store, 20, NOW - 10 * DAY, seed=13)
    collector = _collector(store, make_settings, clock)
    first, _ = collector._refresh()
    assert len(first) == 20
    # written now, but stamped as it was days ago: no listing since the scrape names it, its update time is older
    old = next(j for j in store.list_jobs(limit=100) if j.state is JobState.SUCCEEDED)
    imported = replace(old, id="j-imported", idempotency_key=None, version=0)
    store.commit(Change(job=imported, expected_version=None,
                        attempts=[replace(a, id=f"j-imported-a{a.n}", job_id="j-imported")
                                  for a in store.attempts(old.id)]))
    clock[0] += 60
    second, _ = collector._refresh()
    assert len(second) == 21 and collector._figures["j-imported"].totals == collector._figures[old.id].totals
    assert collector._figures["j-imported"].state == "succeeded"


def test_a_running_job_that_ended_stamped_by_a_lagging_clock_is_seen_ended(store, make_settings):
    clock = [NOW]
    history(store, 20, NOW, seed=14)
    running = next(j for j in store.list_jobs(limit=100) if j.state is JobState.RUNNING)
    collector = _collector(store, make_settings, clock)
    collector._refresh()
    assert collector._figures[running.id].state == "running"
    clock[0] += 3600
    # another broker ends it, its clock two hours behind this one's: its update time is before the scrape's since
    (*_, last) = store.attempts(running.id)
    store.commit(Change(job=replace(running, state=JobState.SUCCEEDED, updated_at=NOW - 3600),
                        expected_version=running.version,
                        attempts=[replace(last, state=AttemptState.SUCCEEDED, ended_at=NOW - 3600,
                                          cost=last.cost + 1_000_000)]))
    collector._refresh()
    figures = collector._figures[running.id]
    assert figures.state == "succeeded" and figures.ended
    assert sum(v for k, v in figures.totals if k[0] == totals.SPEND) == \
        sum(a.cost for a in store.attempts(running.id))


WINDOWS = {
    "a week, all teams": ({"period": "7d"}, None),
    "30 days, all teams": ({"period": "30d"}, None),
    "90 days, all teams": ({"period": "90d"}, None),
    "90 days, one team": ({"period": "90d"}, "nlp"),
    "a custom window with fractional edges, ending after now":
        ({"since": "2026-11-20T07:31:12.5Z", "until": "2027-01-31T13:00:00.75Z"}, None),
}


def test_the_report_is_the_report_of_before_to_the_micro_dollar(store):
    history(store, 300, NOW, seed=15)
    _preempted_in_one_second(store, 30)
    positions = {j.id: i for i, j in enumerate(store.list_jobs(states=["queued"])[::-1], 1)}
    whole = store.list_jobs(limit=10**6)
    whole_attempts = store.attempts_of([j.id for j in whole])
    for case, (window, team) in WINDOWS.items():
        win = costs.window(now=NOW, **window)
        read = costs.gather(store, team=team, win=win)
        for jobs, attempts in ((read.jobs, read.attempts),
                               ([j for j in whole if team in (None, j.team)], whole_attempts)):
            expected = report_before(jobs, attempts, win=win, now=NOW, positions=positions, team=team,
                                     ledger=read.ledger)
            got = costs.report(jobs, attempts, win=win, now=NOW, positions=positions, team=team, ledger=read.ledger)
            # the on-demand figures are written since as the spend shown plus the saving shown (checked there)
            assert ondemand_as_before(got) == {**expected, "rounding_note": None}, case
        if window.get("period") == "90d" and team is None:
            assert got["preemptions"]["count"] + got["preemptions"]["lost"] > 50, "the newest 50 are a choice"


def test_the_second_a_time_is_shown_at_is_the_second_of_its_text():
    rng = random.Random(5)
    times = [NOW, 1_800_000_000.9999996, 1_800_000_000.9999995, 1_800_000_000.0000004, 1_799_999_999.4999995,
             0.9999996, 0.0, 1e-7, 253_402_300_799.0, -1.5, -0.9999996, -0.0000004]
    times += [rng.uniform(0, 4e9) for _ in range(2000)] + [math.floor(t) + 0.9999995 + rng.random() * 1e-6
                                                           for t in (rng.uniform(0, 4e9) for _ in range(2000))]
    for t in times:
        shown = costs._iso_out(t)
        assert costs._iso_out(float(costs._second(t))) == shown, t


def _of_job_before(job, attempts) -> dict:
    """``totals.of_job`` as it was at b87e017 (through ``add`` and a dict per attempt)."""
    tries = list(attempts)
    out: dict = {}
    for a in tries:
        tier = costs.tier_of(a)
        totals.add(out, {(totals.SPEND, job.team, tier): a.cost,
                         (totals.ONDEMAND_EQUIVALENT, job.team): costs.ondemand_equivalent(a, job)})
        if a.state.value in costs.PREEMPTED_STATES:
            totals.add(out, {(totals.LOST if a.state.value == costs.LOST_STATE else totals.PREEMPTIONS,
                              costs.location(a), tier): 1})
        if getattr(a.state, "is_final", False):
            totals.add(out, {(totals.ATTEMPTS_ENDED, job.team, a.state.value): 1})
    for seconds in costs.recoveries(tries):
        where = next((totals.bound(b) for b in totals.BUCKETS[totals.RECOVERY] if seconds <= b), totals.INF)
        out[(totals.RECOVERY, where)] = out.get((totals.RECOVERY, where), 0) + 1
        totals.add(out, {(totals.RECOVERY, totals.SUM): round(seconds * 1_000_000)})
    if tries:
        seconds = max(0.0, min(a.created_at for a in tries) - job.submitted_at)
        where = next((totals.bound(b) for b in totals.BUCKETS[totals.QUEUE_WAIT] if seconds <= b), totals.INF)
        out[(totals.QUEUE_WAIT, where)] = out.get((totals.QUEUE_WAIT, where), 0) + 1
        totals.add(out, {(totals.QUEUE_WAIT, totals.SUM): round(seconds * 1_000_000)})
    return out


def test_what_a_job_adds_to_the_counters_is_what_it_added_whole_or_as_its_cost_record(store):
    history(store, 120, NOW, seed=16)
    whole = store.list_jobs(limit=10**6)
    attempts = store.attempts_of([j.id for j in whole])
    records, record_attempts = store.cost_page(limit=10**6)
    narrow = {j.id: (j, record_attempts[j.id]) for j in records}
    # an attempt starting the second its job was submitted: a queue wait of 0 s is an observation with no sum
    job0 = whole[0]
    zero = [replace(attempts[job0.id][0], created_at=job0.submitted_at)] if attempts[job0.id] else []
    cases = [(j, attempts[j.id]) for j in whole] + [narrow[j.id] for j in whole] + [(job0, zero)]
    assert any(_of_job_before(j, t) for j, t in cases)
    for job, tries in cases:
        assert totals.of_job(job, tries) == _of_job_before(job, tries), job.id


def test_the_narrow_read_of_what_is_pruned_adds_what_the_whole_records_add(store):
    history(store, 80, NOW - 200 * DAY, seed=17)
    whole = store.list_jobs(limit=10**6)
    attempts = store.attempts_of([j.id for j in whole])
    due = [j for j in whole if j.state.is_final]
    expected_totals: dict = {}
    expected_ledger: dict = {}
    for job in due:
        totals.add(expected_totals, totals.of_job(job, attempts[job.id]))
        for (kind, team, tier, hour), value in costs.ledger_of(job, attempts[job.id]).items():
            entry = expected_ledger.setdefault((team, tier, hour), [0, 0])
            entry[kind == costs.ODEQ] += value
    narrow = store.expired(before=NOW, limit=1000)
    assert sorted(j.id for j in narrow) == sorted(j.id for j in due)
    by_id = {j.id: j for j in whole}
    for job in narrow:
        full = by_id[job.id]
        assert (job.team, job.state, job.version, job.submitted_at, job.updated_at, job.idempotency_key,
                job.quote["tiers"]) == (full.team, full.state, full.version, full.submitted_at, full.updated_at,
                                        full.idempotency_key, full.quote["tiers"])
    assert Retention(store, days=30, pause=0).prune(NOW) == len(due) > 0
    pruned = store.pruned_totals()
    assert pruned.jobs == len(due) and dict(pruned.totals) == expected_totals
    ledger = store.pruned_costs(team=None, since=0.0, until=NOW + DAY)
    assert {(team, tier, hour): [cost, equiv] for team, tier, hour, cost, equiv in ledger.buckets} == expected_ledger


def test_a_job_with_an_attempt_record_of_before_is_pruned_with_its_cost(store):
    """An attempt stored with none of the optional fields (as a broker of an earlier version stored it) reads as
    its cost record all the same: its cost goes to the pruned totals."""
    history(store, 1, NOW - 200 * DAY, seed=18)
    (job,) = store.list_jobs()
    bare = Attempt(id=f"{job.id}-a9", job_id=job.id, n=9, state=AttemptState.SUCCEEDED, launcher="local",
                   placement={}, price_per_hour=1_000_000, created_at=job.submitted_at + 10, cost=123_456)
    job = store.commit(Change(job=replace(job, state=JobState.SUCCEEDED), expected_version=job.version,
                              attempts=[bare]))
    spent = sum(a.cost for a in store.attempts(job.id))
    assert Retention(store, days=30, pause=0).prune(NOW) == 1
    assert sum(v for k, v in store.pruned_totals().totals.items() if k[0] == totals.SPEND) == spent
