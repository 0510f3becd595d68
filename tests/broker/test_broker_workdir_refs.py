"""Which workdir packs the jobs refer to, as the hourly collection reads them: only what changed since the
collection before, on each store (SQLite and a real redis-server), and never fewer references than a
read of every job in the retention window would give."""

from dataclasses import replace

import pytest

from broker.engine.workdir_refs import MARGIN_SECONDS, WHOLE_READ_SECONDS, PackReferences
from broker.lifecycle import JobState
from broker.models import Job
from broker.store import Change

DAY = 86400.0
RETENTION = 30 * DAY
NOW = 1_000 * DAY
HOUR = 3600.0


def digest(c: str) -> str:
    return c * 64


def put(store, job_id: str, *, pack: str | None, state: JobState, at: float) -> Job:
    """Store the job as it stands at ``at`` (created, or written over its stored version)."""
    spec = {"run": "python train.py", **({"broker": {"workdir": f"sha256:{digest(pack)}"}} if pack else {})}
    stored = store.get_job(job_id)
    job = Job(id=job_id, name="train", team="vision", state=state, spec=spec, budget=5_000_000, priority=0,
              submitted_at=at, updated_at=at) if stored is None else replace(stored, state=state, updated_at=at)
    return store.commit(Change(job=job, expected_version=None if stored is None else stored.version))


@pytest.fixture
def reads(store, monkeypatch):
    """The ``active_since`` of each read, and how many jobs it returned."""
    seen: list[tuple[float, int]] = []
    real = store.list_jobs

    def list_jobs(**kw):
        jobs = real(**kw)
        seen.append((kw["active_since"], len(jobs)))
        return jobs

    monkeypatch.setattr(store, "list_jobs", list_jobs)
    return seen


def test_a_collection_reads_only_what_changed_since_the_one_before_and_misses_no_reference(store, reads):
    put(store, "j-ended-recently", pack="a", state=JobState.FAILED, at=NOW - 10 * DAY)
    put(store, "j-running", pack="b", state=JobState.RUNNING, at=NOW - HOUR)
    put(store, "j-expiring", pack="c", state=JobState.SUCCEEDED, at=NOW - RETENTION + HOUR / 2)
    put(store, "j-ended-long-ago", pack="d", state=JobState.SUCCEEDED, at=NOW - RETENTION - DAY)
    put(store, "j-no-pack", pack=None, state=JobState.SUCCEEDED, at=NOW - DAY)
    for i in range(50):  # history in the window that no later collection needs to read again
        put(store, f"j-history-{i:02d}", pack="e", state=JobState.CANCELLED, at=NOW - 20 * DAY + i)
    refs = PackReferences(store, retention=RETENTION, limit=1_000_000)

    assert refs.read(NOW) == {digest(c) for c in "abce"}
    assert reads[-1] == (NOW - RETENTION, 54)  # the first collection reads the whole window

    put(store, "j-running", pack="b", state=JobState.SUCCEEDED, at=NOW + 10)  # ended since
    put(store, "j-new", pack="f", state=JobState.QUEUED, at=NOW + 20)  # submitted since
    put(store, "j-ended-recently", pack="a", state=JobState.QUEUED, at=NOW + 30)  # resumed since
    assert refs.read(NOW + HOUR) == {digest(c) for c in "abef"}  # "c" ended more than the retention ago now
    since, count = reads[-1]
    # from a margin before the latest update the collection before read (j-running's): what changed, not the window
    assert since == NOW - HOUR - MARGIN_SECONDS and count == 3

    put(store, "j-ended-recently", pack="a", state=JobState.FAILED, at=NOW + HOUR + 5)
    assert refs.read(NOW + 2 * HOUR) == {digest(c) for c in "abef"}  # a final job keeps its pack through retention
    assert refs.read(NOW + 20 * DAY + 50) == {digest(c) for c in "abf"}  # "e"'s last job ended 40 days ago


def test_a_job_written_with_a_clock_behind_the_margin_is_read_by_the_next_whole_read(store, reads):
    put(store, "j-running", pack="a", state=JobState.RUNNING, at=NOW)
    refs = PackReferences(store, retention=RETENTION, limit=1_000_000)
    assert refs.read(NOW) == {digest("a")}
    # another broker, its clock hours behind, stores a job that has ended by the next collection
    put(store, "j-behind", pack="b", state=JobState.FAILED, at=NOW - 3 * MARGIN_SECONDS)
    put(store, "j-running", pack="a", state=JobState.SUCCEEDED, at=NOW - 3 * MARGIN_SECONDS)  # ended, seen late
    assert refs.read(NOW + HOUR) == {digest("a")}  # missed: "a" kept as last seen (running), never dropped
    assert refs.read(NOW + WHOLE_READ_SECONDS) == {digest("a"), digest("b")}  # the daily whole read sees both
    assert reads[-1][0] == NOW + WHOLE_READ_SECONDS - RETENTION


def test_an_engine_clock_that_went_back_reads_the_whole_window_again(store, reads):
    put(store, "j-ended", pack="a", state=JobState.FAILED, at=NOW - 10 * DAY)
    refs = PackReferences(store, retention=RETENTION, limit=1_000_000)
    assert refs.read(NOW + 25 * DAY) == set()  # a clock far ahead: "a" is past its retention
    assert refs.read(NOW) == {digest("a")}
    assert reads[-1][0] == NOW - RETENTION


def test_a_read_that_meets_the_limit_gives_nothing_to_collect_by(store, reads):
    for i in range(3):
        put(store, f"j-{i}", pack="a", state=JobState.RUNNING, at=NOW)
    assert PackReferences(store, retention=RETENTION, limit=3).read(NOW) is None
    assert PackReferences(store, retention=RETENTION, limit=4).read(NOW) == {digest("a")}
