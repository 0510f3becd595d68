"""SQLite job store: the embedded default.

One file (WAL journal, ``synchronous=FULL`` so a commit that returned survives
power loss of the process), one connection guarded by a lock: SQLite
serializes writers anyway, and one connection keeps the compare-and-set inside
a single ``BEGIN IMMEDIATE`` transaction. Writers that queue up behind a sync
are committed together (group commit): one fsync for the batch, a savepoint
per change so a conflict in one leaves the others alone.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from broker import costs, totals
from broker.lifecycle import FINAL_STATES, AttemptState, JobState, attempt_state, job_state
from broker.models import COST_PLACEMENT_KEYS, Attempt, CostAttempt, CostJob, Event, Job
from broker.store.base import (BATCH_IDS, Change, DuplicateJob, Expired, Pruned, PrunedCosts,
                               StoreUnusable, VersionConflict, check_writable, unavailable_on)
from broker.store.group_commit import GroupCommit, Slot

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    state TEXT NOT NULL,
    version INTEGER NOT NULL,
    submitted_at REAL NOT NULL,
    idempotency_key TEXT,
    body TEXT NOT NULL,
    updated_at REAL
);
CREATE TABLE IF NOT EXISTS attempts (
    id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS metrics (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS engines (
    domain TEXT PRIMARY KEY,
    seen REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pruned_totals (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS pruned_costs (
    hour INTEGER NOT NULL,
    team TEXT NOT NULL,
    tier TEXT NOT NULL,
    cost INTEGER NOT NULL,
    ondemand_equivalent INTEGER NOT NULL,
    PRIMARY KEY (hour, team, tier)
);
CREATE TABLE IF NOT EXISTS pruned_metrics (
    job_id TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL
);
"""
# pruned_costs: the pruned-cost ledger (JobStore.pruned_costs): what the jobs deleted cost, by UTC hour (its start,
# epoch seconds), team and tier, in micro-dollars (costs.ledger_of); counters 'ledger_jobs' counts the jobs in it.
# pruned_metrics: the jobs deleted whose metric points are still being deleted, in writes of their own after the job
# (SqliteStore.prune with ``rows``, then prune_leftovers), each with the highest seq of those points: a point after it
# would be a new job's of the same id. A broker of an earlier version sharing the file ignores the table.
# Indexes come after the migrations, which may add the columns they cover.
INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs(team, idempotency_key) WHERE idempotency_key IS NOT NULL;
DROP INDEX IF EXISTS jobs_state;
CREATE INDEX IF NOT EXISTS jobs_state_time ON jobs(state, submitted_at, id);
DROP INDEX IF EXISTS jobs_team;
CREATE INDEX IF NOT EXISTS jobs_team_time ON jobs(team, submitted_at, id);
CREATE INDEX IF NOT EXISTS jobs_updated ON jobs(updated_at);
CREATE INDEX IF NOT EXISTS jobs_submitted ON jobs(submitted_at, id);
CREATE INDEX IF NOT EXISTS attempts_job ON attempts(job_id, n);
"""
FINAL = tuple(sorted(s.value for s in FINAL_STATES))


def _not_final(column: str) -> tuple[str, tuple[str, ...]]:
    """``column NOT IN FINAL`` as the ranges of state names between the final ones (``state < 'cancelled' OR
    (state > 'cancelled' AND state < 'failed') OR …``), with their arguments. The same rows, a state a newer broker
    keeps of its own included; but SQLite answers each range, and ``… OR updated_at >= ?`` beside them, from an
    index (jobs_state_time, jobs_updated) and reads only the rows they name, where ``NOT IN`` read every job
    (100 ms a listing at 100,000 jobs, on each scrape of /metrics; docs/benchmarks.md)."""
    names = sorted(FINAL)
    terms = [f"{column} < ?"] + [f"({column} > ? AND {column} < ?)"] * (len(names) - 1) + [f"{column} > ?"]
    args = (names[0], *(x for low, high in zip(names, names[1:]) for x in (low, high)), names[-1])
    return " OR ".join(terms), args


_FINAL_ARGS = ",".join("?" * len(FINAL))
# What the cost report reads of a stored body (models.CostJob, CostAttempt), in that order. SQLite extracts them
# into one small JSON array per row, copying each value's text as stored, so decoding the array gives exactly
# the values decoding the whole body would (numbers are not re-parsed in SQL).
_JOB_COST = ("id", "name", "team", "state", "submitted_at", "priority", "reason", "budget", "spent",
             "placement.price_per_hour", "updated_at", "queued_at")
_ATTEMPT_COST = ("n", "state", "price_per_hour", "created_at", "started_at", "ended_at", "billed_until", "cost",
                 *(f"placement.{k}" for k in COST_PLACEMENT_KEYS))


_DECODE = json.JSONDecoder().raw_decode  # json.loads less its whitespace scans: a report decodes ~50,000 small rows


def _paths(names: Sequence[str]) -> str:
    return ", ".join(f"'$.{n}'" for n in names)


_COST_COLUMNS = f"json_extract(body, {_paths(_JOB_COST)}), json_extract(body, '$.quote.tiers')"
"""What ``cost_page`` and ``cost_records`` select of a job's row: ``cost_history``'s two columns."""
_JOB_STATES = {s.value: s for s in JobState}
_ATTEMPT_STATES = {s.value: s for s in AttemptState}
"""A stored state's name to its state, looked up (an ``Enum`` call is most of the time a decoded row takes); a name
not among them (a newer broker's) goes to ``job_state``/``attempt_state``, which read it as a foreign state."""


def _cost_jobs(rows: Sequence[tuple]) -> list[CostJob]:
    """``CostJob``s of rows of ``_COST_COLUMNS``, in their order."""
    jobs = []
    for values, tiers in rows:
        jid, name, team, state, submitted, priority, reason, budget, spent, price, updated, queued = _DECODE(values)[0]
        jobs.append(CostJob(jid, name, team, _JOB_STATES.get(state) or job_state(state), submitted, priority,
                            "" if reason is None else reason, budget, spent or 0, {"price_per_hour": price}, tiers,
                            updated, queued))
    return jobs


def _cost_attempts(jobs: Sequence[CostJob], rows: Sequence[tuple]) -> dict[str, list[CostAttempt]]:
    """Each of ``jobs``' attempts (every job a key), from rows ``(job_id, the attempt's cost fields)`` in the
    order of ``n``."""
    attempts: dict[str, list[CostAttempt]] = {j.id: [] for j in jobs}
    for job_id, values in rows:
        n, state, price, created, started, ended, billed, cost, *place = _DECODE(values)[0]
        attempts[job_id].append(CostAttempt(n, _ATTEMPT_STATES.get(state) or attempt_state(state),
                                            dict(zip(COST_PLACEMENT_KEYS, place)), price, created, started, ended,
                                            billed, cost or 0))
    return attempts


_LOCKED = ("SQLITE_BUSY", "SQLITE_LOCKED")  # locked past the timeout
_READONLY = ("SQLITE_READONLY",)  # the file or its file system turned read-only (remounted so after disk errors)
_DISK = ("SQLITE_IOERR", "SQLITE_FULL", "SQLITE_CANTOPEN")  # the disk fails
_UNREADABLE = ("SQLITE_NOTADB", "SQLITE_CORRUPT")  # not a database, or one damaged (random bytes, cut short)


def _error_name(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", "") or ""


def _unavailable(exc: BaseException) -> bool:
    """Locked, read-only or a failing disk: not a bug in what was asked (those stay errors of their own). A
    read-only file was a plain ``OperationalError``: a 500 per submit and a traceback per engine tick, for ever."""
    return _error_name(exc).startswith(_LOCKED + _READONLY + _DISK)


def _written(exc: BaseException) -> bool | None:
    """Locked or read-only: the transaction never began or was rolled back (nothing stored); a disk error may
    strike as the commit reaches the WAL, which recovery may still replay (unknown)."""
    return False if _error_name(exc).startswith(_LOCKED + _READONLY) else None


def _unusable(path: str, exc: BaseException) -> StoreUnusable | None:
    """What ``exc``, raised as the store at ``path`` opened, says of the file; ``None`` for an error of another
    kind (locked past the timeout), which stays as raised."""
    name = _error_name(exc)
    if name.startswith(_UNREADABLE):
        return StoreUnusable(f"{path}: the job store is not a SQLite database it can read ({exc}): restore it from "
                             "a backup, or move it aside to start with an empty store")
    if name.startswith(_READONLY):
        return StoreUnusable(f"{path}: the job store cannot be written ({exc}): its file or its file system is "
                             "read-only (remounted so after disk errors?) or not writable by the broker's user")
    if name.startswith("SQLITE_CANTOPEN"):
        return StoreUnusable(f"{path}: the job store cannot be opened ({exc}): {_why_not_opened(path)}")
    return None


def _why_not_opened(path: str) -> str:
    """The likely cause SQLite's "unable to open database file" leaves unsaid."""
    if os.path.isdir(path):
        return "it is a directory, not a file"
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as err:
        if err.errno == errno.EROFS:
            return "its file system is read-only (remounted so after disk errors?)"
        return (f"the broker's user (uid {os.geteuid()}) may not read and write it ({err.strerror}): check its owner "
                "and mode")
    parent = os.path.dirname(path) or "."
    if not os.access(parent, os.W_OK):  # a WAL database needs its -wal and -shm files beside it
        return (f"its directory {parent} is not writable by the broker's user, or is on a read-only file system "
                "(SQLite keeps its -wal and -shm files there)")
    return "check its owner and mode, and its directory's"


@unavailable_on((sqlite3.OperationalError,), written=_written, when=_unavailable)
class SqliteStore:
    """:class:`~broker.store.base.JobStore` on one SQLite file."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            # the store holds every team's jobs, logs' places and sealed secrets: readable by the broker's user
            # alone (SQLite gives its -wal and -shm files the database file's mode)
            parent = Path(self.path).parent
            try:
                parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise StoreUnusable(f"{self.path}: the job store's directory {parent} is (or is under) a file, "
                                    "not a directory") from None
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                pass  # an existing store keeps the mode it has
        self._group = GroupCommit(self._write_batch)
        self._lock = self._group.lock  # one connection: reads wait for the batch being written
        self._db = None
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.executescript(SCHEMA)
            self._migrate()
            self._db.executescript(INDEXES)
            # A file that reads but cannot be written (a file system remounted read-only after disk errors, a file
            # not the broker's user's) opened without a word, and then failed every write: refused here instead.
            # A row written and rolled back stores nothing (the write lock alone, BEGIN IMMEDIATE, is granted on a
            # read-only file: only a write to a page is refused).
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT INTO counters (name, value) VALUES ('write check', 0) "
                                 "ON CONFLICT(name) DO UPDATE SET value = value")
            finally:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
        except sqlite3.Error as exc:
            if self._db is not None:
                self._db.close()
            unusable = _unusable(self.path, exc)
            if unusable is None:
                raise
            raise unusable from None

    def _migrate(self) -> None:
        """Bring a file written by an older broker up to this schema (in one transaction)."""
        def columns() -> set[str]:
            return {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}

        if "updated_at" in columns():
            return
        self._db.execute("BEGIN IMMEDIATE")  # another process opening the same file migrates once, not twice
        try:
            if "updated_at" not in columns():  # added for windowed reads (list_jobs(active_since=...))
                self._db.execute("ALTER TABLE jobs ADD COLUMN updated_at REAL")
                self._db.execute("UPDATE jobs SET updated_at = json_extract(body, '$.updated_at')")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    # -- writes ---------------------------------------------------------------------------------

    def commit(self, change: Change) -> Job:
        """Group commit: writers that arrive while another is syncing are written together, each in
        its own savepoint (so one's conflict leaves the others alone), then made durable by one
        fsync. Every caller returns only after the transaction holding its change has committed."""
        check_writable(change)
        return self._group.submit(Slot(change))

    def _write_batch(self, batch: Sequence[Slot]) -> None:
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")  # may fail (locked past the timeout): every slot hears of it
            try:
                for slot in batch:
                    db.execute("SAVEPOINT change")
                    try:
                        slot.result = self._apply(db, slot.item)
                    except BaseException as exc:  # this change only: the batch goes on
                        if not db.in_transaction:  # a full disk or an I/O error rolled the whole batch back
                            raise
                        db.execute("ROLLBACK TO change")
                        slot.error = exc
                    db.execute("RELEASE change")
                db.execute("COMMIT")
            except BaseException:
                # SQLite itself rolls back a transaction a full disk or an I/O error struck (at COMMIT too): a second
                # ROLLBACK would fail ('no transaction is active') and hide that error behind one of its own
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except BaseException as exc:  # rolled back: each change's own outcome (a conflict, a duplicate) is void too
            for slot in batch:
                slot.result, slot.error = None, exc
            raise
        finally:
            for slot in batch:
                slot.done = True

    @staticmethod
    def _apply(db: sqlite3.Connection, change: Change) -> Job:
        job = change.job
        row = db.execute("SELECT version FROM jobs WHERE id = ?", (job.id,)).fetchone()
        if change.expected_version is None:
            # an id whose pruned job's points are still being deleted is taken too: the new job would read them
            if row is not None or db.execute("SELECT 1 FROM pruned_metrics WHERE job_id = ?", (job.id,)).fetchone():
                raise DuplicateJob(job.id)
            if job.idempotency_key:
                dup = db.execute(
                    "SELECT id FROM jobs WHERE team = ? AND idempotency_key = ?",
                    (job.team, job.idempotency_key),
                ).fetchone()
                if dup:
                    raise DuplicateJob(dup[0])
            new_version = 1
        else:
            if row is None or row[0] != change.expected_version:
                raise VersionConflict(f"job {job.id} is at version {row[0] if row else None}, "
                                      f"expected {change.expected_version}")
            new_version = change.expected_version + 1
        if change.expected_placements is not None:
            row = db.execute("SELECT value FROM counters WHERE name = 'placements'").fetchone()
            placed = row[0] if row else 0
            if placed != change.expected_placements:
                raise VersionConflict(f"{placed - change.expected_placements} placement(s) were committed since the "
                                      f"snapshot job {job.id} was placed on")
            db.execute("INSERT INTO counters (name, value) VALUES ('placements', 1) "
                       "ON CONFLICT(name) DO UPDATE SET value = value + 1")
        if change.team_fence is not None:
            team, expected = change.team_fence
            name = f"team_admissions:{team}"
            row = db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
            admitted = row[0] if row else 0
            if admitted != expected:
                raise VersionConflict(f"{admitted - expected} change(s) to what team {team}'s jobs may spend were "
                                      f"committed since job {job.id}'s was weighed against its monthly cap")
            db.execute("INSERT INTO counters (name, value) VALUES (?, 1) "
                       "ON CONFLICT(name) DO UPDATE SET value = value + 1", (name,))
        stored = replace(job, version=new_version)
        # an upsert, not INSERT OR REPLACE: a replace deletes the row first, resetting any column a newer broker
        # sharing the file added (and firing its delete triggers); an update changes only the columns named here
        db.execute(
            "INSERT INTO jobs (id, team, state, version, submitted_at, idempotency_key, body, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET team = excluded.team,"
            " state = excluded.state, version = excluded.version, submitted_at = excluded.submitted_at,"
            " idempotency_key = excluded.idempotency_key, body = excluded.body, updated_at = excluded.updated_at",
            (stored.id, stored.team, stored.state.value, new_version, stored.submitted_at,
             stored.idempotency_key, json.dumps(stored.to_dict()), stored.updated_at),
        )
        for attempt in change.attempts:
            db.execute(
                "INSERT INTO attempts (id, job_id, n, body) VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET"
                " job_id = excluded.job_id, n = excluded.n, body = excluded.body",
                (attempt.id, attempt.job_id, attempt.n, json.dumps(attempt.to_dict())),
            )
        SqliteStore._append(db, "events", job.id, [e.to_dict() for e in change.events])
        SqliteStore._append(db, "metrics", job.id, list(change.metrics))
        return stored

    @staticmethod
    def _append(db: sqlite3.Connection, table: str, job_id: str, bodies: list[dict]) -> None:
        if not bodies:
            return
        (last,) = db.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {table} WHERE job_id = ?", (job_id,)).fetchone()
        for i, body in enumerate(bodies, start=last + 1):
            body = {**body, "seq": i}
            db.execute(f"INSERT INTO {table} (job_id, seq, body) VALUES (?, ?, ?)", (job_id, i, json.dumps(body)))

    def prune(self, jobs: Sequence[Job | Expired], *, rows: int | None = None) -> list[str]:
        """One ``BEGIN IMMEDIATE`` transaction for the batch: each job's row goes only while its version and a final
        state are still the ones read (its idempotency key is a column of that row), then its attempts — read first,
        for what the job adds to the running totals (``pruned_totals``, in the same transaction) — events and metric
        points. Commits wait meanwhile (the batch holds the connection): with ``rows``, the points that would take
        the transaction past that many records are left to :meth:`prune_leftovers` (``pruned_metrics``), the oldest
        deleted first."""
        deleted: list[str] = []
        if not jobs:
            return deleted
        db = self._db
        added: dict[totals.Key, int] = {}
        ledger: dict[tuple[str, str, str, int], int] = {}
        left = float("inf") if rows is None else rows  # records this transaction may still delete
        with self._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                for job in jobs:
                    gone = db.execute(f"DELETE FROM jobs WHERE id = ? AND version = ? AND state IN ({_FINAL_ARGS})",
                                      (job.id, job.version, *FINAL)).rowcount
                    if not gone:
                        continue
                    # the job as read is the job as stored (same version): its attempts are those of it, read as
                    # cost records (all that of_job and ledger_of read of them)
                    tries = _cost_attempts([job], self._attempt_rows([job.id]))[job.id]
                    totals.add(added, totals.of_job(job, tries))
                    for key, value in costs.ledger_of(job, tries).items():
                        ledger[key] = ledger.get(key, 0) + value
                    left -= 1
                    for table in ("attempts", "events"):
                        left -= db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job.id,)).rowcount
                    left -= self._delete_points(db, job.id, left)
                    deleted.append(job.id)
                if deleted:
                    db.execute("INSERT INTO counters (name, value) VALUES ('pruned', ?) "
                               "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", (len(deleted),))
                    db.executemany("INSERT INTO pruned_totals (key, value) VALUES (?, ?) "
                                   "ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
                                   [(totals.encode(key), value) for key, value in sorted(added.items())])
                    db.execute("INSERT INTO counters (name, value) VALUES ('ledger_jobs', ?) "
                               "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value", (len(deleted),))
                    buckets: dict[tuple[int, str, str], list[int]] = {}
                    for (kind, team, tier, hour), value in ledger.items():
                        buckets.setdefault((hour, team, tier), [0, 0])[kind == costs.ODEQ] += value
                    db.executemany("INSERT INTO pruned_costs (hour, team, tier, cost, ondemand_equivalent) "
                                   "VALUES (?, ?, ?, ?, ?) ON CONFLICT(hour, team, tier) DO UPDATE SET "
                                   "cost = cost + excluded.cost, "
                                   "ondemand_equivalent = ondemand_equivalent + excluded.ondemand_equivalent",
                                   [(*key, *value) for key, value in sorted(buckets.items())])
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # a full disk or an I/O error rolled it back already
                    db.execute("ROLLBACK")
                raise
        return deleted

    @staticmethod
    def _span(db: sqlite3.Connection, job_id: str, last: float = float("inf")) -> tuple[int, int] | None:
        """The lowest and highest seq of the job's metric points up to ``last`` (two seeks in the primary key)."""
        (low,) = db.execute("SELECT MIN(seq) FROM metrics WHERE job_id = ? AND seq <= ?", (job_id, last)).fetchone()
        if low is None:
            return None
        (high,) = db.execute("SELECT MAX(seq) FROM metrics WHERE job_id = ? AND seq <= ?", (job_id, last)).fetchone()
        return low, high

    @classmethod
    def _delete_points(cls, db: sqlite3.Connection, job_id: str, left: float) -> int:
        """In a prune's transaction, the metric points of a job just deleted: all of them if ``left`` allows, else
        the oldest ``left`` and a record of the rest for :meth:`prune_leftovers`. How many it deleted."""
        if left == float("inf"):
            return db.execute("DELETE FROM metrics WHERE job_id = ?", (job_id,)).rowcount
        span = cls._span(db, job_id)
        if span is None:
            return 0
        low, high = span
        if high - low < left:  # every point fits (seqs are consecutive: appended one by one, deleted oldest first)
            return db.execute("DELETE FROM metrics WHERE job_id = ?", (job_id,)).rowcount
        db.execute("INSERT INTO pruned_metrics (job_id, last_seq) VALUES (?, ?) "
                   "ON CONFLICT(job_id) DO UPDATE SET last_seq = MAX(last_seq, excluded.last_seq)", (job_id, high))
        if left < 1:
            return 0
        return db.execute("DELETE FROM metrics WHERE job_id = ? AND seq < ?", (job_id, low + int(left))).rowcount

    def prune_sizes(self, jobs: Sequence[Job | Expired]) -> list[int]:
        """The job's row, its attempts (a count in their index), events and metric points (the span of their seqs,
        which are consecutive: a seek at each end of it)."""
        sizes = []
        with self._lock:
            for job in jobs:
                (size,) = self._db.execute(
                    "SELECT 1 + (SELECT COUNT(*) FROM attempts WHERE job_id = ?1)"
                    " + COALESCE((SELECT MAX(seq) FROM events WHERE job_id = ?1)"
                    " - (SELECT MIN(seq) FROM events WHERE job_id = ?1) + 1, 0)"
                    " + COALESCE((SELECT MAX(seq) FROM metrics WHERE job_id = ?1)"
                    " - (SELECT MIN(seq) FROM metrics WHERE job_id = ?1) + 1, 0)", (job.id,)).fetchone()
                sizes.append(size)
        return sizes

    def prune_leftovers(self, *, limit: int) -> int:
        """One transaction: the oldest points of the jobs in ``pruned_metrics``, up to ``limit``; a job's record goes
        with its last point. When there are none it is one read of an empty table, and no transaction."""
        if limit < 1 or not self._query("SELECT 1 FROM pruned_metrics LIMIT 1"):
            return 0
        db = self._db
        done = 0
        with self._lock:
            db.execute("BEGIN IMMEDIATE")  # read again inside: another process may have deleted them meanwhile
            try:
                pending = db.execute("SELECT job_id, last_seq FROM pruned_metrics ORDER BY job_id").fetchall()
                for job_id, last in pending:
                    while done < limit:
                        span = self._span(db, job_id, last)
                        if span is None:
                            db.execute("DELETE FROM pruned_metrics WHERE job_id = ?", (job_id,))
                            break
                        low, high = span
                        done += db.execute("DELETE FROM metrics WHERE job_id = ? AND seq BETWEEN ? AND ?",
                                           (job_id, low, min(high, low + limit - done - 1))).rowcount
                    if done >= limit:
                        break
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return done

    # -- reads ----------------------------------------------------------------------------------

    def _query(self, sql: str, args: Sequence = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def get_job(self, job_id: str) -> Job | None:
        rows = self._query("SELECT body FROM jobs WHERE id = ?", (job_id,))
        return Job.from_dict(json.loads(rows[0][0])) if rows else None

    def find_idempotent(self, team: str, key: str) -> Job | None:
        rows = self._query("SELECT body FROM jobs WHERE team = ? AND idempotency_key = ?", (team, key))
        return Job.from_dict(json.loads(rows[0][0])) if rows else None

    def list_jobs(self, *, states: Sequence[str] | None = None, team: str | None = None,
                  limit: int = 1000, active_since: float | None = None,
                  before: tuple[float, str] | None = None, name_prefix: str | None = None) -> list[Job]:
        sql, args = self._listing("body", states=states, team=team, limit=limit, active_since=active_since,
                                  before=before, name_prefix=name_prefix)
        return [Job.from_dict(json.loads(r[0])) for r in self._query(sql, args)]

    @staticmethod
    def _listing(columns: str, *, states: Sequence[str] | None = None, team: str | None = None, limit: int = 1000,
                 active_since: float | None = None, before: tuple[float, str] | None = None,
                 name_prefix: str | None = None) -> tuple[str, list]:
        """The statement of a ``list_jobs`` listing that selects ``columns`` of each row (one statement for
        ``list_jobs`` and ``cost_page``, so that both read the same rows by the same plan)."""
        sql, args = f"SELECT {columns} FROM jobs WHERE 1=1", []
        if name_prefix:
            # the name is in the body alone: read in the listing's order until the limit of those that match (a
            # binary compare, not LIKE, whose '_' is a wildcard and which ignores case)
            sql += " AND substr(json_extract(body, '$.name'), 1, ?) = ?"
            args += [len(name_prefix), name_prefix]
        if before is not None:
            # the next page: a row-value comparison in the listing's own order, so the index that orders it seeks
            # straight to the key (no OFFSET re-reading the pages before)
            sql += " AND (submitted_at, id) < (?, ?)"
            args += [float(before[0]), str(before[1])]
        if states:
            sql += f" AND state IN ({','.join('?' * len(states))})"
            args += list(states)
        # Newest first, read in that order from an index where one serves (jobs_submitted, jobs_team_time, or
        # jobs_state_time for one state) so that the limit stops the read: a listing of every team read and sorted
        # the whole table (450 ms at 100,000 jobs), on each `broker status` and each refresh of the dashboard.
        order = "submitted_at DESC, id DESC"
        if active_since is not None:
            # the few jobs still running or updated since are found by their own indexes (see _not_final); the unary
            # `+` keeps the planner from walking jobs_submitted or jobs_team_time instead, through every row
            live, live_args = _not_final("state")
            sql += f" AND ({live} OR updated_at >= ?)"
            args += [*live_args, active_since]
            order = "+submitted_at DESC, id DESC"
        if team:
            sql += " AND +team = ?" if active_since is not None else " AND team = ?"
            args.append(team)
        sql += f" ORDER BY {order} LIMIT ?"
        args.append(limit)
        return sql, args

    def events(self, job_id: str, *, after_seq: int = 0) -> list[Event]:
        rows = self._query("SELECT body FROM events WHERE job_id = ? AND seq > ? ORDER BY seq", (job_id, after_seq))
        return [Event.from_dict(json.loads(r[0])) for r in rows]

    def attempts(self, job_id: str) -> list[Attempt]:
        return self.attempts_of([job_id])[job_id]

    def attempts_of(self, job_ids: Sequence[str]) -> dict[str, list[Attempt]]:
        out: dict[str, list[Attempt]] = {j: [] for j in job_ids}
        ids = list(out)
        for i in range(0, len(ids), BATCH_IDS):
            chunk = ids[i : i + BATCH_IDS]
            rows = self._query(f"SELECT job_id, body FROM attempts WHERE job_id IN ({','.join('?' * len(chunk))}) "
                               "ORDER BY job_id, n", chunk)
            for job_id, body in rows:
                out[job_id].append(Attempt.from_dict(json.loads(body)))
        return out

    def cost_history(self, *, team: str | None, since: float,
                     until: float) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        # a window of the report is a good part of the table: read it whole, as before jobs_submitted existed (the
        # unary `+`s), not row by row through that index or the OR's (benchmarks/store_listing.py: 0.7× at 90 days)
        where = f"+j.submitted_at < ? AND (j.state NOT IN ({','.join('?' * len(FINAL))}) OR j.updated_at >= ?)"
        args: list = [until, *FINAL, since]
        if team:
            where += " AND j.team = ?"
            args.append(team)
        with self._lock:
            self._db.execute("BEGIN")  # one snapshot for both reads, even with another process writing the file
            try:
                job_rows = self._db.execute(
                    f"SELECT json_extract(j.body, {_paths(_JOB_COST)}), json_extract(j.body, '$.quote.tiers') "
                    f"FROM jobs j WHERE {where} ORDER BY +j.submitted_at DESC, j.id DESC", args).fetchall()
                attempt_rows = self._db.execute(
                    f"SELECT a.job_id, json_extract(a.body, {_paths(_ATTEMPT_COST)}) FROM attempts a "
                    f"JOIN jobs j ON j.id = a.job_id WHERE {where} ORDER BY a.job_id, a.n", args).fetchall()
            finally:
                self._db.execute("COMMIT")
        jobs = _cost_jobs(job_rows)
        return jobs, _cost_attempts(jobs, attempt_rows)

    def cost_page(self, *, limit: int, active_since: float | None = None,
                  before: tuple[float, str] | None = None) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        sql, args = self._listing(_COST_COLUMNS, limit=limit, active_since=active_since, before=before)
        with self._lock:
            self._db.execute("BEGIN")  # one snapshot for the page and its attempts
            try:
                jobs = _cost_jobs(self._db.execute(sql, args).fetchall())
                attempt_rows = self._attempt_rows([j.id for j in jobs])
            finally:
                self._db.execute("COMMIT")
        return jobs, _cost_attempts(jobs, attempt_rows)

    def cost_records(self, job_ids: Sequence[str]) -> tuple[list[CostJob], dict[str, list[CostAttempt]]]:
        ids = list(dict.fromkeys(job_ids))
        jobs: list[CostJob] = []
        attempt_rows: list[tuple] = []
        for i in range(0, len(ids), BATCH_IDS):
            chunk = ids[i : i + BATCH_IDS]
            with self._lock:
                self._db.execute("BEGIN")
                try:
                    part = _cost_jobs(self._db.execute(
                        f"SELECT {_COST_COLUMNS} FROM jobs WHERE id IN ({','.join('?' * len(chunk))})"
                        " ORDER BY submitted_at DESC, id DESC", chunk).fetchall())
                    attempt_rows += self._attempt_rows([j.id for j in part])
                finally:
                    self._db.execute("COMMIT")
            jobs += part
        jobs.sort(key=lambda j: (j.submitted_at, j.id), reverse=True)
        return jobs, _cost_attempts(jobs, attempt_rows)

    def _attempt_rows(self, job_ids: Sequence[str]) -> list[tuple]:
        """``(job_id, the cost fields as one JSON array)`` of the attempts of ``job_ids``, in a transaction the
        caller holds (with the lock)."""
        rows: list[tuple] = []
        for i in range(0, len(job_ids), BATCH_IDS):
            chunk = job_ids[i : i + BATCH_IDS]
            rows += self._db.execute(
                f"SELECT job_id, json_extract(body, {_paths(_ATTEMPT_COST)}) FROM attempts "
                f"WHERE job_id IN ({','.join('?' * len(chunk))}) ORDER BY job_id, n", chunk).fetchall()
        return rows

    def job_count(self) -> int:
        return self._query("SELECT COUNT(*) FROM jobs")[0][0]

    def job_ids(self) -> set[str]:
        return {r[0] for r in self._query("SELECT id FROM jobs")}

    def metrics(self, job_id: str, *, limit: int = 10_000) -> list[dict]:
        rows = self._query(
            "SELECT body FROM (SELECT seq, body FROM metrics WHERE job_id = ? ORDER BY seq DESC LIMIT ?) ORDER BY seq",
            (job_id, limit),
        )
        return [json.loads(r[0]) for r in rows]

    def placements(self) -> int:
        rows = self._query("SELECT value FROM counters WHERE name = 'placements'")
        return rows[0][0] if rows else 0

    def team_admissions(self, team: str) -> int:
        rows = self._query("SELECT value FROM counters WHERE name = ?", (f"team_admissions:{team}",))
        return rows[0][0] if rows else 0

    def expired(self, *, before: float, limit: int) -> list[Expired]:
        # by the update-time index, whatever the planner would guess: nothing due is one seek, and a backlog is read
        # oldest first up to the limit (by jobs_state_time it would read and sort every final job, most of the table)
        # what prune needs of each, from the row's columns (written from the body by every commit) and the quote's
        # tiers extracted as stored, rather than each body decoded whole
        rows = self._query(f"SELECT id, team, state, version, submitted_at, updated_at, idempotency_key, "
                           f"json_extract(body, '$.quote.tiers') FROM jobs INDEXED BY jobs_updated "
                           f"WHERE updated_at < ? AND state IN ({_FINAL_ARGS}) ORDER BY updated_at LIMIT ?",
                           (before, *FINAL, limit))
        return [Expired(i, team, _JOB_STATES.get(state) or job_state(state), version, submitted, updated, idem, tiers)
                for i, team, state, version, submitted, updated, idem, tiers in rows]

    def pruned(self) -> int:
        rows = self._query("SELECT value FROM counters WHERE name = 'pruned'")
        return rows[0][0] if rows else 0

    def pruned_totals(self) -> Pruned:
        with self._lock:
            self._db.execute("BEGIN")  # one snapshot for both, even with another process pruning the file
            try:
                count = self._db.execute("SELECT value FROM counters WHERE name = 'pruned'").fetchone()
                rows = self._db.execute("SELECT key, value FROM pruned_totals").fetchall()
            finally:
                self._db.execute("COMMIT")
        return Pruned(count[0] if count else 0, {totals.decode(key): value for key, value in rows})

    def pruned_costs(self, *, team: str | None, since: float, until: float) -> PrunedCosts:
        sql = ("SELECT team, tier, hour, cost, ondemand_equivalent FROM pruned_costs WHERE hour >= ? AND hour < ?"
               + (" AND team = ?" if team is not None else "") + " ORDER BY hour, team, tier")
        with self._lock:
            self._db.execute("BEGIN")  # one snapshot for the counts and the buckets
            try:
                counts = dict(self._db.execute(
                    "SELECT name, value FROM counters WHERE name IN ('pruned', 'ledger_jobs')").fetchall())
                rows = self._db.execute(sql, (since, until, *([team] if team is not None else []))).fetchall()
            finally:
                self._db.execute("COMMIT")
        return PrunedCosts(counts.get("pruned", 0), counts.get("ledger_jobs", 0), [tuple(r) for r in rows])

    def existing(self, job_ids: Sequence[str]) -> set[str]:
        ids, found = list(dict.fromkeys(job_ids)), set()
        for i in range(0, len(ids), BATCH_IDS):
            chunk = ids[i : i + BATCH_IDS]
            found.update(r[0] for r in self._query(f"SELECT id FROM jobs WHERE id IN ({','.join('?' * len(chunk))})",
                                                   chunk))
        return found

    def beat(self, domain: str, now: float) -> None:
        with self._lock:  # one statement in autocommit: its own small transaction
            self._db.execute("INSERT INTO engines (domain, seen) VALUES (?, ?) "
                             "ON CONFLICT(domain) DO UPDATE SET seen = excluded.seen", (domain, now))

    def beats(self) -> dict[str, float]:
        return dict(self._query("SELECT domain, seen FROM engines"))

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.ProgrammingError:
                pass
