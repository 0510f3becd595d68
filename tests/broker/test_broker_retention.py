"""Retention (``job_retention_days``, ``broker/retention.py``): finished jobs past it are deleted, hourly, by each
broker that runs an engine; live jobs and recent ones stay. On real stores, and real ``broker serve`` / ``broker
worker`` processes."""

import os
import re
import subprocess
import sys
import time
from dataclasses import replace

import httpx
import pytest

from broker.config import ConfigError
from broker.lifecycle import JobState
from broker.models import Job
from broker.retention import DAY, PRUNE_SECONDS, Retention
from broker.store import Change, open_store

from broker_testing import ADMIN, REPO, RedisServer, start_broker, wait_for

HOUR = 3600.0
NOW = 1_800_000_000.0


def job_at(store, job_id: str, state: JobState, updated: float, team: str = "vision") -> Job:
    """A job submitted a week before ``updated`` and last written then, in ``state``."""
    job = Job(id=job_id, name="train", team=team, state=JobState.QUEUED, spec={"run": "echo"}, budget=5_000_000,
              priority=0, submitted_at=updated - 7 * DAY, updated_at=updated - 7 * DAY, idempotency_key=job_id)
    job = store.commit(Change(job=job, expected_version=None))
    return store.commit(Change(job=replace(job, state=state, updated_at=updated), expected_version=1,
                               metrics=[{"step": 1}]))


@pytest.mark.parametrize("config, days", [
    ("{}\n", None),
    ("job_retention_days: null\n", None),
    ("job_retention_days: 180\n", 180.0),
    ("job_retention_days: 1\n", 1.0),
    ("job_retention_days: 7.5\n", 7.5),
], ids=["left out: every job is kept", "null: every job is kept", "180 days", "the floor, one day", "a fraction"])
def test_job_retention_days_is_read_from_the_config_file(make_settings, config, days):
    assert make_settings(config=config).job_retention_days == days


@pytest.mark.parametrize("config, message", [
    ("job_retention_days: 0\n", r"^job_retention_days: must be at least 1 \(days\), not 0; leave it out to keep"),
    ("job_retention_days: 0.5\n", r"^job_retention_days: must be at least 1 \(days\), not 0.5;"),
    ("job_retention_days: -3\n", r"^job_retention_days: must be at least 1 \(days\), not -3; leave it out to keep"),
    ("job_retention_days: 180d\n", r"^job_retention_days: must be a number, not '180d'$"),
    ("job_retention_days: true\n", r"^job_retention_days: must be a number, not True$"),
], ids=["0 is refused, not read as off", "under a day", "negative", "a duration text", "a boolean"])
def test_a_job_retention_days_below_a_day_or_not_a_number_is_refused(make_settings, config, message):
    with pytest.raises(ConfigError, match=message):
        make_settings(config=config)


def test_a_prune_runs_at_start_then_once_an_hour_and_takes_only_finished_jobs_past_retention(store):
    job_at(store, "j-old", JobState.SUCCEEDED, NOW - 2 * DAY)
    job_at(store, "j-soon", JobState.FAILED, NOW - DAY + 10 * 60)  # due ten minutes from now
    job_at(store, "j-recent", JobState.STOPPED_BUDGET, NOW - HOUR)
    job_at(store, "j-live", JobState.QUEUED, NOW - 30 * DAY)  # waiting for a month: not final, never pruned
    retention = Retention(store, days=1, pause=0)

    assert retention.tick(NOW) == 1
    assert store.get_job("j-old") is None and store.events("j-old") == [] and store.metrics("j-old") == []
    assert {j.id for j in store.list_jobs()} == {"j-soon", "j-recent", "j-live"}
    assert retention.tick(NOW + 30 * 60) is None  # due since 20 minutes, but the hour has not passed
    assert store.get_job("j-soon") is not None
    assert retention.tick(NOW + PRUNE_SECONDS) == 1
    assert {j.id for j in store.list_jobs()} == {"j-recent", "j-live"}
    assert retention.tick(NOW + 2 * PRUNE_SECONDS) == 0  # nothing due: nothing deleted
    assert retention.tick(NOW + 100 * DAY) == 1
    assert [j.id for j in store.list_jobs()] == ["j-live"]
    assert store.pruned() == 3


def test_a_backlog_is_pruned_batch_after_batch_in_one_prune(store):
    for i in range(7):
        job_at(store, f"j-{i}", JobState.CANCELLED, NOW - 10 * DAY + i)
    job_at(store, "j-recent", JobState.SUCCEEDED, NOW - HOUR)
    assert Retention(store, days=1, batch=3, pause=0).tick(NOW) == 7
    assert [j.id for j in store.list_jobs()] == ["j-recent"]


def test_batches_that_take_too_long_shrink_and_the_backlog_still_goes(store):
    for i in range(7):
        job_at(store, f"j-{i}", JobState.SUCCEEDED, NOW - 10 * DAY + i)
    assert Retention(store, days=1, batch=4, batch_seconds=0.0, pause=0).tick(NOW) == 7  # every batch "too long"
    assert store.list_jobs() == []


class Writes:
    """A SQLite store that records each write of a prune: (method, the size it was given, records it deleted)."""

    def __init__(self, store):
        import sqlite3

        self._store = store
        self._db = sqlite3.connect(store.path)
        self.log: list[tuple[str, int, int]] = []
        self.after_first: list = []  # what a callback saw after the first write

    def __getattr__(self, name):
        return getattr(self._store, name)

    def records(self) -> int:
        return sum(self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                   for t in ("jobs", "attempts", "events", "metrics"))

    def prune(self, jobs, *, rows=None):
        before = self.records()
        deleted = self._store.prune(jobs, rows=rows)
        self.log.append(("prune", rows, before - self.records()))
        return deleted

    def prune_leftovers(self, *, limit):
        before = self.records()
        done = self._store.prune_leftovers(limit=limit)
        if done:
            self.log.append(("leftovers", limit, before - self.records()))
        return done


def sqlite_store(tmp_path):
    from broker.store.sqlite import SqliteStore

    return SqliteStore(tmp_path / "broker.db")


def add_points(store, job_id: str, n: int) -> None:
    """``n`` more metric points of the job, written straight into the file (as a few weeks of progress reports)."""
    import sqlite3

    db = sqlite3.connect(store.path)
    with db:
        (last,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM metrics WHERE job_id = ?", (job_id,)).fetchone()
        db.executemany("INSERT INTO metrics (job_id, seq, body) VALUES (?, ?, ?)",
                       ((job_id, s, '{"step": 1000, "metrics": {"loss": 2.3}}') for s in range(last + 1, last + n + 1)))
    db.close()


def test_a_prunes_first_write_deletes_at_most_rows_records_however_many_points_the_jobs_hold(tmp_path):
    """Whole jobs, 500 a transaction, was seconds of a SQLite file held (the API and the ticks waiting) when each job
    had hours of progress reports: a write is sized in records now, from a small first one, and each stays within
    the size it was given."""
    from broker import retention

    store = sqlite_store(tmp_path)
    for i in range(50):
        job_at(store, f"j-{i:02d}", JobState.SUCCEEDED, NOW - 10 * DAY + i)
        add_points(store, f"j-{i:02d}", 400)  # 50 jobs of 402 records (its row, 401 points): 20,100
    spy = Writes(store)
    assert Retention(spy, days=1, pause=0).prune(NOW) == 50
    assert spy.log[0][1] == retention.ROWS == 5_000
    assert all(deleted <= size for _, size, deleted in spy.log), spy.log
    assert sum(deleted for *_, deleted in spy.log) == 50 * 402 and spy.records() == 0
    store.close()


def test_a_job_with_more_points_than_a_write_goes_first_then_its_points_in_writes_of_their_own(tmp_path):
    store = sqlite_store(tmp_path)
    job_at(store, "j-long", JobState.SUCCEEDED, NOW - 10 * DAY)
    add_points(store, "j-long", 12_000)
    job_at(store, "j-short", JobState.FAILED, NOW - 9 * DAY)
    spy = Writes(store)
    retention = Retention(spy, days=1, pause=0, rows=1_000, batch_seconds=float("inf"))  # never "slow": it doubles
    assert retention.prune(NOW) == 2
    assert [(kind, size) for kind, size, _ in spy.log] == [
        ("prune", 1_000), ("leftovers", 2_000), ("leftovers", 4_000), ("leftovers", 8_000), ("prune", 16_000)]
    assert [deleted for *_, deleted in spy.log] == [1_000, 2_000, 4_000, 5_002, 2]  # the job's row went first
    assert store.get_job("j-long") is None and spy.records() == 0
    assert retention.rows == 16_000  # the last write used too little of its size to say more would be quick
    store.close()


def test_the_size_a_prune_reached_is_where_the_next_prune_starts(tmp_path):
    store = sqlite_store(tmp_path)
    for i in range(20):
        job_at(store, f"j-{i:02d}", JobState.CANCELLED, NOW - 10 * DAY + i)
        add_points(store, f"j-{i:02d}", 198)  # 200 records a job
    spy = Writes(store)
    retention = Retention(spy, days=1, pause=0, rows=400, batch_seconds=float("inf"))
    assert retention.prune(NOW) == 20
    assert [size for _, size, _ in spy.log] == [400, 800, 1_600, 3_200] and retention.rows == 3_200
    for i in range(20, 40):
        job_at(store, f"j-{i:02d}", JobState.CANCELLED, NOW + i)
        add_points(store, f"j-{i:02d}", 198)
    spy.log.clear()
    assert retention.prune(NOW + 2 * DAY) == 20
    assert [size for _, size, _ in spy.log] == [3_200, 6_400]
    store.close()


def test_a_prune_deletes_what_a_broker_stopped_halfway_left_even_with_no_job_due(tmp_path):
    store = sqlite_store(tmp_path)
    job = job_at(store, "j-long", JobState.SUCCEEDED, NOW - 10 * DAY)
    add_points(store, "j-long", 3_000)
    assert store.prune([store.get_job(job.id)], rows=10) == ["j-long"]  # then the broker stopped
    store.close()
    store = sqlite_store(tmp_path)  # the next broker
    spy = Writes(store)
    assert Retention(spy, days=1, pause=0).prune(NOW) == 0
    assert spy.records() == 0 and [kind for kind, *_ in spy.log] == ["leftovers"]
    store.close()


def test_a_prune_that_is_told_to_stop_stops_between_two_writes(tmp_path):
    """``Retention.stop`` (the broker shutting down) is heard in the pause after a write: a prune of a long backlog
    never keeps a broker's shutdown waiting longer than one bounded write."""
    store = sqlite_store(tmp_path)
    for i in range(6):
        job_at(store, f"j-{i}", JobState.SUCCEEDED, NOW - 10 * DAY + i)
        add_points(store, f"j-{i}", 96)
    spy = Writes(store)
    retention = Retention(spy, days=1, pause=0, rows=200, batch_seconds=float("inf"))
    real = spy.prune

    def prune_then_stop(jobs, *, rows=None):
        deleted = real(jobs, rows=rows)
        retention._stop.set()
        return deleted

    spy.prune = prune_then_stop
    assert retention.prune(NOW) == 2 and len(spy.log) == 1
    store.close()


def test_without_job_retention_days_nothing_is_ever_pruned(store):
    job_at(store, "j-ancient", JobState.SUCCEEDED, 1.0)
    retention = Retention(store, days=None)
    assert retention.tick(NOW) is None and retention.prune(NOW) == 0
    retention.start()  # no thread: nothing to do
    retention.stop()
    assert store.get_job("j-ancient") is not None and store.pruned() == 0


def test_broker_serve_prunes_an_old_finished_job_and_keeps_a_recent_one(tmp_path):
    """A real ``broker serve`` (engine on, SQLite): its first prune comes as it starts, beside the ticks."""
    now = time.time()
    store = open_store(f"sqlite://{tmp_path / 'data' / 'broker.db'}")
    job_at(store, "j-old", JobState.SUCCEEDED, now - 3 * DAY)
    job_at(store, "j-recent", JobState.FAILED, now - 2 * HOUR)
    job_at(store, "j-waiting", JobState.QUEUED, now - 3 * DAY)  # no pool fits it: it waits, and is kept
    store.close()
    config = "pools: []\njob_retention_days: 1\n"
    proc, url = start_broker(tmp_path, config=config)
    try:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"})
        wait_for(lambda: client.get("/v1/jobs/j-old").status_code == 404)
        assert client.get("/v1/jobs/j-old/events").status_code == 404
        assert client.get("/v1/jobs/j-recent").json()["state"] == "failed"
        assert client.get("/v1/jobs/j-waiting").status_code == 200
        assert "broker_jobs_pruned_total 1.0" in client.get("/metrics").text.splitlines()
        client.close()
    finally:
        proc.terminate()
        proc.wait(10)
    said = (tmp_path / f"broker-{url.rsplit(':', 1)[1]}.log").read_text()  # its stderr: the count, as worker says it
    # with the time first, in UTC, as the events' times are written: a line matched to a job's events
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ INFO broker\.retention: retention: deleted 1 finished "
                     r"job\(s\) last updated before", said, re.M), said


def test_broker_worker_prunes_a_shared_redis_and_logs_how_many(tmp_path):
    """``broker worker`` (the engine apart from the API) on Redis prunes too, and says so in its log."""
    from broker.store.redis import RedisStore

    server = RedisServer(tmp_path / "redis").start()
    now = time.time()
    store = RedisStore(server.url)
    try:
        job_at(store, "j-old", JobState.CANCELLED, now - 40 * DAY)
        job_at(store, "j-old2", JobState.STOPPED_BUDGET, now - 31 * DAY)
        job_at(store, "j-recent", JobState.SUCCEEDED, now - 29 * DAY)
        cfg = tmp_path / "worker.yaml"
        cfg.write_text("pools: []\njob_retention_days: 30\n")
        log = tmp_path / "worker.log"
        env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
               "BROKER_STORE_URL": server.url}
        with open(log, "w") as err:
            worker = subprocess.Popen([sys.executable, "-m", "broker.cli", "worker", "--config", str(cfg)], env=env,
                                      cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: "retention: deleted 2 finished job(s)" in log.read_text(), timeout=30)
            assert store.get_job("j-old") is None and store.get_job("j-old2") is None
            assert store.get_job("j-recent") is not None and store.pruned() == 2
            assert "job_retention_days: 30" in log.read_text()
        finally:
            worker.terminate()
            worker.wait(10)
    finally:
        store.close()
        server.stop()


def test_broker_worker_burst_prunes_as_it_starts_too(tmp_path):
    """``broker worker --burst`` (run from cron until no job is active) prunes as every engine does as it starts: it
    went straight to its ticks, and a store served by burst runs alone kept its finished jobs for ever."""
    now = time.time()
    store = open_store(f"sqlite://{tmp_path / 'data' / 'broker.db'}")
    job_at(store, "j-old", JobState.CANCELLED, now - 3 * DAY)
    job_at(store, "j-recent", JobState.SUCCEEDED, now - 2 * HOUR)
    store.close()
    cfg = tmp_path / "worker.yaml"
    cfg.write_text("pools: []\njob_retention_days: 1\n")
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    env.pop("BROKER_STORE_URL", None)
    done = subprocess.run([sys.executable, "-m", "broker.cli", "worker", "--burst", "--config", str(cfg)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "retention: deleted 1 finished job(s)" in done.stderr, done.stderr
    store = open_store(f"sqlite://{tmp_path / 'data' / 'broker.db'}")
    try:
        assert store.get_job("j-old") is None and store.get_job("j-recent") is not None
    finally:
        store.close()


COUNTERS = ("broker_spend_dollars_total", "broker_ondemand_equivalent_dollars_total", "broker_preemptions_total",
            "broker_saved_vs_ondemand_dollars")


def scraped(url: str) -> dict[tuple, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name in COUNTERS or s.name in ("broker_jobs", "broker_jobs_pruned_total")}


def spent(store, job: Job, attempts: list[tuple]) -> None:
    """``attempts``: (state, placement, price per hour, cost) each, an hour billed each."""
    from broker.lifecycle import AttemptState
    from broker.models import Attempt

    tries = [Attempt(id=f"{job.id}-a{n}", job_id=job.id, n=n, state=AttemptState(state), launcher="local",
                     placement=placement, price_per_hour=price, created_at=job.submitted_at + 60,
                     billed_until=job.submitted_at + 60 + HOUR, cost=cost)
             for n, (state, placement, price, cost) in enumerate(attempts, 1)]
    store.commit(Change(job=replace(job, attempts=len(tries), spent=sum(a.cost for a in tries)),
                        expected_version=job.version, attempts=tries))


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_the_counters_do_not_fall_when_jobs_are_pruned_in_a_broker_that_had_read_them_nor_in_one_started_after(
        tmp_path, backend):
    """``broker_spend_dollars_total`` and the rest are sums over the jobs in the store plus the store's totals of the
    jobs pruned: the same before and after a prune, label for label, for a broker that had counted the jobs (it does
    not count them twice) and for one that never saw them — a team whose every job was pruned included."""
    server = RedisServer(tmp_path / "redis").start() if backend == "redis" else None
    url = server.url if server else f"sqlite://{tmp_path / 'data' / 'broker.db'}"
    now = time.time()
    store = open_store(url)
    spot = {"tier": "spot", "zone": "us-east-1a", "ondemand_price_per_hour": 2_000_000}
    spent(store, job_at(store, "j-spot", JobState.SUCCEEDED, now - 3 * DAY),
          [("preempted", spot, 500_000, 500_000), ("succeeded", {**spot, "zone": "us-east-1b"}, 500_000, 333_333)])
    spent(store, job_at(store, "j-onprem", JobState.FAILED, now - 3 * DAY, team="nlp"),  # nlp: only this job
          [("lost", {"tier": "onprem", "location": "rack-1"}, 200_000, 200_001)])
    spent(store, job_at(store, "j-recent", JobState.SUCCEEDED, now - 2 * HOUR),
          [("succeeded", {"tier": "ondemand", "region": "us-east-1"}, 3_000_000, 3_000_000)])
    job_at(store, "j-waiting", JobState.QUEUED, now - 3 * DAY)  # no pool fits it: kept, waiting
    procs = []
    try:
        reader, reader_url = start_broker(tmp_path, url, engine="off")  # no engine: never prunes
        procs.append(reader)
        before = scraped(reader_url)
        assert before[("broker_spend_dollars_total", (("team", "nlp"), ("tier", "onprem")))] == 0.200001
        assert before[("broker_preemptions_total", (("tier", "spot"), ("zone", "us-east-1a")))] == 1
        assert before[("broker_jobs_pruned_total", ())] == 0

        pruner, pruner_url = start_broker(tmp_path, url, config="pools: []\njob_retention_days: 1\n")
        procs.append(pruner)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        wait_for(lambda: all(httpx.get(f"{pruner_url}/v1/jobs/{j}", headers=admin).status_code == 404
                             for j in ("j-spot", "j-onprem")), timeout=30)
        assert store.pruned() == 2 and {j.id for j in store.list_jobs()} == {"j-recent", "j-waiting"}

        for after in (scraped(pruner_url), scraped(reader_url)):  # first scrape after the prune; one that read before
            assert {k: v for k, v in after.items() if k[0] in COUNTERS} == {
                k: v for k, v in before.items() if k[0] in COUNTERS}
            assert after[("broker_jobs_pruned_total", ())] == 2
            assert after[("broker_jobs", (("state", "failed"), ("team", "nlp")))] == 0  # the jobs gone, not counted
            assert after[("broker_jobs", (("state", "succeeded"), ("team", "vision")))] == 1
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        store.close()
        if server:
            server.stop()
