"""The SQLite store's listings read what they return, not the whole table.

A year of a team's jobs is easily 100,000 rows, nearly all of them final. Each `broker status`, each refresh of the
dashboard and each scrape of /metrics lists jobs, and the listings used to read every row: the list of every team's
jobs read and sorted the whole table for its newest 200 (450 ms at 100,000 jobs), and "the jobs still running or
updated since T" (``state NOT IN final OR updated_at >= T``) walked every row to find a few dozen (100 ms), and still
lists a job in a state only a newer broker knows (`test_broker_rolling_upgrade.py`). Timings
are `benchmarks/store_listing.py`'s; these tests read SQLite's own query plan for each statement a listing sends, so
they hold on any machine: no full walk of the jobs or attempts, and newest-first listings ordered by an index, so the
limit stops the read.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest

from broker.lifecycle import JobEvent, JobState
from broker.store import open_store
from broker.store.base import Change

from test_broker_store_contract import create, event, make_job


class _Recording:
    """The store's connection, passing every call through and keeping each statement sent with its arguments."""

    def __init__(self, db: sqlite3.Connection):
        self.db, self.sent = db, []

    def execute(self, sql, args=()):
        self.sent.append((sql, tuple(args)))
        return self.db.execute(sql, args)

    def __getattr__(self, name):
        return getattr(self.db, name)


@pytest.fixture
def store(tmp_path):
    store = open_store(f"sqlite://{tmp_path / 'plans.db'}")
    for i in range(60):  # finished jobs, and a few live ones
        job = create(store, make_job(f"j-{i:010x}", team=("vision", "nlp")[i % 2], t=1000.0 + i))
        if i < 55:
            store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=1000.0 + i),
                                expected_version=job.version,
                                events=[event(job, JobEvent.SUCCEED, JobState.QUEUED, JobState.SUCCEEDED)]))
    yield store
    store.close()


def _plans(store, call) -> list[tuple[str, list[str]]]:
    """What ``call`` returned, and for each SELECT it sent on the jobs table: the statement and SQLite's plan."""
    db = store._db
    recording = _Recording(db)
    store._db = recording
    try:
        result = call(store)
    finally:
        store._db = db
    plans = [(sql, [row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}", args)])
             for sql, args in recording.sent if sql.lstrip().startswith("SELECT") and " jobs" in sql]
    assert plans, "the call sent no SELECT on jobs"
    return result, plans


def _walks(plan: list[str]) -> list[str]:
    """The steps of ``plan`` that read a whole table or a whole index rather than searching it."""
    return [step for step in plan if step.startswith("SCAN ")]


LISTINGS = [
    pytest.param(lambda s: s.list_jobs(active_since=1050.0, limit=100_000), {f"j-{i:010x}" for i in range(50, 60)},
                 id="the jobs running or updated since a time are found by their indexes, not by reading every job"),
    pytest.param(lambda s: s.list_jobs(team="vision", active_since=1050.0, limit=100_000),
                 {f"j-{i:010x}" for i in range(50, 60, 2)},
                 id="a team's jobs running or updated since a time too"),
    pytest.param(lambda s: s.list_jobs(states=["queued"], limit=100_000), {f"j-{i:010x}" for i in range(55, 60)},
                 id="the jobs in a state are found by its index"),
]


@pytest.mark.parametrize("call, ids", LISTINGS)
def test_a_listing_of_a_few_jobs_reads_no_more_than_those(store, call, ids):
    jobs, plans = _plans(store, call)
    assert {j.id for j in jobs} == ids
    for sql, plan in plans:
        assert not _walks(plan), (sql, plan)


NEWEST_FIRST = [
    pytest.param(lambda s: s.list_jobs(limit=20), None, id="every team's newest jobs: the limit stops the read"),
    pytest.param(lambda s: s.list_jobs(team="nlp", limit=20), "nlp", id="a team's newest jobs"),
    pytest.param(lambda s: s.list_jobs(states=["succeeded"], limit=20), None,
                 id="the newest jobs in one state, most of the table"),
]


@pytest.mark.parametrize("call, team", NEWEST_FIRST)
def test_a_newest_first_listing_is_read_in_an_indexs_order_not_sorted_whole(store, call, team):
    jobs, plans = _plans(store, call)
    assert len(jobs) == 20 and [j.submitted_at for j in jobs] == sorted((j.submitted_at for j in jobs), reverse=True)
    assert all(j.team == team for j in jobs) if team else {j.team for j in jobs} == {"vision", "nlp"}
    for sql, plan in plans:
        assert not any("TEMP B-TREE" in step for step in plan), (sql, plan)
        assert all("USING INDEX" in step or "USING COVERING INDEX" in step for step in _walks(plan)), (sql, plan)


def test_a_file_with_the_earlier_state_index_opens_and_lists_as_before(tmp_path):
    """The indexes on state alone and on (team, submitted_at) (before this version) give way to ones ending in
    (submitted_at, id)."""
    path = tmp_path / "old.db"
    store = open_store(f"sqlite://{path}")
    create(store, make_job("j-0000000001"))
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX jobs_state_time")
    db.execute("DROP INDEX jobs_team_time")
    db.execute("CREATE INDEX jobs_state ON jobs(state)")
    db.execute("CREATE INDEX jobs_team ON jobs(team, submitted_at)")
    db.commit()
    db.close()
    store = open_store(f"sqlite://{path}")
    try:
        names = {r[0] for r in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert {"jobs_state_time", "jobs_team_time"} <= names and not {"jobs_state", "jobs_team"} & names
        assert [j.id for j in store.list_jobs(states=["queued"])] == ["j-0000000001"]
        assert [j.id for j in store.list_jobs(team="vision")] == ["j-0000000001"]
    finally:
        store.close()
