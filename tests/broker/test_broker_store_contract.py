"""One contract, every store: SQLite (embedded) and Redis (a real redis-server)."""

import logging
import threading
from dataclasses import replace

import pytest
import redis

from broker.lifecycle import AttemptState, JobEvent, JobState, apply
from broker.models import Attempt, Event, Job
from broker.store import Change, DuplicateJob, Pruned, VersionConflict, open_store

from broker_testing import RedisServer


def make_job(job_id="j-1", team="vision", key=None, t=100.0) -> Job:
    return Job(id=job_id, name="train", team=team, state=JobState.QUEUED, spec={"run": "echo"}, budget=5_000_000,
               priority=0, submitted_at=t, updated_at=t, idempotency_key=key)


def event(job: Job, ev: JobEvent, frm, to, t=100.0) -> Event:
    return Event(job_id=job.id, time=t, event=ev.value, from_state=frm and frm.value, to_state=to.value,
                 reason="r", actor="test")


def create(store, job: Job) -> Job:
    return store.commit(Change(job=job, expected_version=None, events=[event(job, JobEvent.SUBMIT, None, JobState.QUEUED)]))


def test_create_then_read_back_everything(store):
    job = create(store, make_job())
    assert job.version == 1
    got = store.get_job("j-1")
    assert got == job
    assert [e.event for e in store.events("j-1")] == ["submit"]
    assert store.events("j-1")[0].seq == 1
    assert store.get_job("nope") is None


def test_creating_the_same_id_twice_is_refused(store):
    create(store, make_job())
    with pytest.raises(DuplicateJob):
        create(store, make_job())


def test_an_idempotency_key_maps_to_one_job_per_team(store):
    create(store, make_job("j-1", key="k1"))
    with pytest.raises(DuplicateJob) as info:
        create(store, make_job("j-2", key="k1"))
    assert info.value.existing_id == "j-1"
    assert store.find_idempotent("vision", "k1").id == "j-1"
    create(store, make_job("j-3", team="nlp", key="k1"))  # another team's key space
    assert store.find_idempotent("nlp", "k1").id == "j-3"
    assert store.get_job("j-2") is None


def test_a_team_name_with_a_colon_does_not_share_another_teams_keys(store):
    create(store, make_job("j-1", team="a:b", key="c"))
    create(store, make_job("j-2", team="a", key="b:c"))  # the same "a:b:c" once written out
    assert store.find_idempotent("a:b", "c").id == "j-1"
    assert store.find_idempotent("a", "b:c").id == "j-2"
    assert store.find_idempotent("a", "b") is None and store.find_idempotent("a%3Ab", "c") is None


@pytest.fixture
def redis_store(redis_server):
    import os
    import time

    from broker.store.redis import RedisStore

    s = RedisStore(redis_server.url, prefix=f"t{os.getpid()}-{time.monotonic_ns()}")
    yield s
    s.close()


def stored_before_escaping(store, job: Job) -> Job:
    """``job`` as a broker from before team names were escaped stored it: its key at ``idem:{team}:{key}``."""
    job = create(store, job)
    r = redis.Redis.from_url(_redis_url(store), decode_responses=True)
    r.rename(store.keys.idempotency(job.team, job.idempotency_key),
             f"{store.keys.prefix}:idem:{job.team}:{job.idempotency_key}")
    r.close()
    return job


@pytest.mark.parametrize("team", ["ml:vision", "ml%vision", "a%3Ab:c"])
def test_a_redis_idempotency_key_stored_before_team_names_were_escaped_is_still_the_jobs(redis_store, team):
    """After the upgrade a retried submit finds the job (it does not make a second), and pruning takes the old key."""
    store = redis_store
    first = stored_before_escaping(store, make_job("j-first", team=team, key="retry-1"))
    assert store.find_idempotent(team, "retry-1") == first
    with pytest.raises(DuplicateJob) as info:
        create(store, make_job("j-second", team=team, key="retry-1"))
    assert info.value.existing_id == "j-first" and store.get_job("j-second") is None
    done = store.commit(Change(job=replace(first, state=JobState.SUCCEEDED, updated_at=10.0), expected_version=1))
    assert store.prune([done]) == ["j-first"]
    assert traces(store, "j-first") == []  # the old key too
    assert store.find_idempotent(team, "retry-1") is None
    assert create(store, make_job("j-third", team=team, key="retry-1")) == store.find_idempotent(team, "retry-1")


def test_a_redis_key_from_before_the_escaping_never_answers_for_another_team(redis_store):
    """Team 'ml:vision' key 'retry-1' was stored where team 'ml' keeps key 'vision:retry-1': that key is 'ml's now,
    and the other team's job moves to its own (escaped) key, where it is still found."""
    store = redis_store
    first = stored_before_escaping(store, make_job("j-first", team="ml:vision", key="retry-1"))
    assert store.find_idempotent("ml", "vision:retry-1") is None
    mine = create(store, make_job("j-ml", team="ml", key="vision:retry-1"))  # not a duplicate of another team's job
    assert store.find_idempotent("ml", "vision:retry-1") == mine
    assert store.find_idempotent("ml:vision", "retry-1") == first
    r = redis.Redis.from_url(_redis_url(store), decode_responses=True)
    assert r.get(store.keys.idempotency("ml:vision", "retry-1")) == "j-first"
    with pytest.raises(DuplicateJob) as info:
        create(store, make_job("j-again", team="ml:vision", key="retry-1"))
    assert info.value.existing_id == "j-first"

    # the commit script escapes a team's name as Keys does ('%' too): team 'a%3Ab''s old key is team 'a:b''s new one
    odd = stored_before_escaping(store, make_job("j-odd", team="a%3Ab", key="c"))
    assert r.get(store.keys.idempotency("a:b", "c")) == "j-odd"
    create(store, make_job("j-ab", team="a:b", key="c"))
    assert r.get(store.keys.idempotency("a%3Ab", "c")) == "j-odd" and store.find_idempotent("a%3Ab", "c") == odd
    assert store.find_idempotent("a:b", "c").id == "j-ab"

    # pruning one deletes only the keys that name it
    for job_id in ("j-ml", "j-first"):
        job = store.get_job(job_id)
        done = store.commit(Change(job=replace(job, state=JobState.CANCELLED, updated_at=10.0),
                                   expected_version=job.version))
        assert store.prune([done]) == [job_id]
        assert traces(store, job_id) == []
        if job_id == "j-ml":
            assert store.find_idempotent("ml:vision", "retry-1") == first
    r.close()


def test_a_redis_key_left_naming_a_job_no_longer_stored_does_not_refuse_a_submit(redis_store):
    """A job pruned by a broker that deleted only the escaped key left its old one behind, naming nothing."""
    store = redis_store
    job = stored_before_escaping(store, make_job("j-gone", team="ml:vision", key="retry-1"))
    r = redis.Redis.from_url(_redis_url(store), decode_responses=True)
    r.delete(store.keys.job(job.id))
    r.close()
    assert store.find_idempotent("ml:vision", "retry-1") is None
    assert store.find_idempotent("ml", "vision:retry-1") is None
    assert create(store, make_job("j-ml", team="ml", key="vision:retry-1")).version == 1
    assert create(store, make_job("j-new", team="ml:vision", key="retry-1")).version == 1
    assert store.find_idempotent("ml:vision", "retry-1").id == "j-new"
    assert store.find_idempotent("ml", "vision:retry-1").id == "j-ml"


def test_compare_and_set_refuses_a_stale_version(store):
    job = create(store, make_job())
    placed = store.commit(Change(job=replace(job, state=JobState.PLACED), expected_version=1,
                                 events=[event(job, JobEvent.PLACE, JobState.QUEUED, JobState.PLACED)]))
    assert placed.version == 2
    with pytest.raises(VersionConflict):
        store.commit(Change(job=replace(job, state=JobState.CANCELLED), expected_version=1,
                            events=[event(job, JobEvent.CANCEL, JobState.QUEUED, JobState.CANCELLED)]))
    after = store.get_job(job.id)
    assert after.state is JobState.PLACED and after.version == 2
    assert [e.event for e in store.events(job.id)] == ["submit", "place"]  # the refused write left nothing


def test_two_writers_racing_for_one_launch_only_one_wins(store):
    job = create(store, make_job())
    job = store.commit(Change(job=replace(job, state=JobState.PLACED), expected_version=1))
    winners, barrier = [], threading.Barrier(8)

    def launch(i):
        attempt = Attempt(id=f"{job.id}-a1", job_id=job.id, n=1, state=AttemptState.LAUNCHING, launcher=f"w{i}",
                          placement={}, price_per_hour=1, created_at=1.0)
        barrier.wait()
        try:
            store.commit(Change(job=replace(job, state=apply(job.state, JobEvent.LAUNCH).to_state, attempts=1),
                                expected_version=job.version, attempts=[attempt],
                                events=[event(job, JobEvent.LAUNCH, JobState.PLACED, JobState.LAUNCHING)]))
            winners.append(i)
        except VersionConflict:
            pass

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1
    assert store.attempts(job.id)[0].launcher == f"w{winners[0]}"
    assert [e.event for e in store.events(job.id)] == ["submit", "launch"]


def test_attempts_are_upserted_and_listed_in_order(store):
    job = create(store, make_job())
    a1 = Attempt(id="j-1-a1", job_id="j-1", n=1, state=AttemptState.RUNNING, launcher="local", placement={"tier": "spot"},
                 price_per_hour=1_000_000, created_at=1.0)
    job = store.commit(Change(job=job, expected_version=1, attempts=[a1]))
    a2 = replace(a1, id="j-1-a2", n=2)
    job = store.commit(Change(job=job, expected_version=2, attempts=[replace(a1, state=AttemptState.PREEMPTED, cost=42), a2]))
    got = store.attempts("j-1")
    assert [(a.n, a.state, a.cost) for a in got] == [(1, AttemptState.PREEMPTED, 42), (2, AttemptState.RUNNING, 0)]


def test_attempts_of_many_jobs_read_in_batches_match_one_job_at_a_time(store):
    from broker.store.base import BATCH_IDS

    ids = [f"j-{i}" for i in range(BATCH_IDS + 7)]  # more than one batch
    for i, job_id in enumerate(ids):
        job = create(store, make_job(job_id))
        tries = [Attempt(id=f"{job_id}-a{n}", job_id=job_id, n=n, state=AttemptState.PREEMPTED, launcher="local",
                         placement={"tier": "spot"}, price_per_hour=1_000_000, created_at=float(n), cost=i * 10 + n)
                 for n in range(i % 3, 0, -1)]  # 0, 2 or 1 attempts, written newest first
        if tries:
            store.commit(Change(job=job, expected_version=1, attempts=tries))
    got = store.attempts_of(ids[::-1] + ["no-such-job"])
    assert set(got) == {*ids, "no-such-job"} and got["no-such-job"] == []
    assert all(got[j] == store.attempts(j) for j in ids)
    assert [a.n for a in got["j-2"]] == [1, 2] and [a.cost for a in got["j-2"]] == [21, 22]
    assert sum(len(v) for v in got.values()) == sum(i % 3 for i in range(len(ids)))


def test_list_filters_by_state_and_team_newest_first(store):
    create(store, make_job("j-a", t=1.0))
    create(store, make_job("j-b", team="nlp", t=2.0))
    j = create(store, make_job("j-c", t=3.0))
    store.commit(Change(job=replace(j, state=JobState.PLACED), expected_version=1))
    assert [x.id for x in store.list_jobs()] == ["j-c", "j-b", "j-a"]
    assert [x.id for x in store.list_jobs(team="vision")] == ["j-c", "j-a"]
    assert [x.id for x in store.list_jobs(states=["queued"])] == ["j-b", "j-a"]
    assert [x.id for x in store.list_jobs(states=["placed"], team="nlp")] == []
    assert [x.id for x in store.list_jobs(limit=1)] == ["j-c"]


def test_list_filters_by_the_start_of_the_name_and_pages_along_the_matches(store):
    for i, name in enumerate(["sweep-a", "other", "sweep-b", "Sweep-c", "sweep_x", "sweepy", "sweep-d"]):
        create(store, replace(make_job(f"j-{i}", t=float(i)), name=name))
    assert [x.name for x in store.list_jobs(name_prefix="sweep-")] == ["sweep-d", "sweep-b", "sweep-a"]
    assert [x.name for x in store.list_jobs(name_prefix="sweep")] == ["sweep-d", "sweepy", "sweep_x", "sweep-b",
                                                                       "sweep-a"]
    assert [x.name for x in store.list_jobs(name_prefix="sweep-a")] == ["sweep-a"]  # a whole name is its own start
    assert store.list_jobs(name_prefix="sweep-ab") == []
    # a page is full while more match, and the next reads on from the last one given
    first = store.list_jobs(name_prefix="sweep-", limit=2)
    assert [x.name for x in first] == ["sweep-d", "sweep-b"]
    rest = store.list_jobs(name_prefix="sweep-", limit=2, before=(first[-1].submitted_at, first[-1].id))
    assert [x.name for x in rest] == ["sweep-a"]
    assert [x.name for x in store.list_jobs(name_prefix="sweep", states=["queued"], team="vision", limit=1)] == [
        "sweep-d"]


def test_a_teams_listing_pages_through_jobs_submitted_at_one_time_past_a_round_trips_worth(store):
    """A team's listing read page by page gives each of its jobs once, in order, where more jobs than one round trip
    reads (``BATCH_IDS``) share one submit time and another team's jobs lie between them in the store's order."""
    from broker.store.base import BATCH_IDS

    jobs = [replace(make_job(f"j-{i:04d}", team="vision" if i % 3 else "nlp", t=7.0)) for i in range(BATCH_IDS + 260)]
    jobs += [make_job(f"j-late{i}", t=9.0 + i) for i in range(3)]
    for job in jobs:
        store.commit(Change(job=job, expected_version=None))
    wanted = [j.id for j in sorted((j for j in jobs if j.team == "vision"), key=lambda j: (j.submitted_at, j.id),
                                   reverse=True)]
    seen, before = [], None
    while True:
        page = store.list_jobs(team="vision", limit=97, before=before)
        if not page:
            break
        seen += [j.id for j in page]
        before = (page[-1].submitted_at, page[-1].id)
    assert seen == wanted


def test_a_redis_listing_of_a_few_jobs_reads_a_round_trip_of_ids_not_every_id_stored(redis_server):
    """Listing one job (``broker status``, a dashboard's first page) of a Redis store of 1,200 read all 1,200 ids
    before the first job (0.1 s at 5,000 jobs); it now reads the ids a page needs, a round trip's worth at most."""
    from broker.store.base import BATCH_IDS
    from broker.store.redis import RedisStore

    store = RedisStore(redis_server.url, prefix=f"ids-{id(object())}")
    try:
        for i in range(1200):
            store.commit(Change(job=make_job(f"j-{i:04d}", t=float(i)), expected_version=None))
        read = []
        client = store._r

        class Counting:
            def __getattr__(self, name):
                fn = getattr(client, name)
                if not name.startswith("zrev"):
                    return fn

                def counted(*args, **kwargs):
                    out = fn(*args, **kwargs)
                    read.append(len(out))
                    return out
                return counted

        store._r = Counting()
        assert [j.id for j in store.list_jobs(limit=1)] == ["j-1199"]
        assert [j.id for j in store.list_jobs(team="vision", limit=2)] == ["j-1199", "j-1198"]
        assert read and sum(read) <= 2 * BATCH_IDS, read
    finally:
        store._r = client
        store.close()


def test_active_since_skips_finished_history_but_keeps_live_and_recent_jobs(store):
    old_done = create(store, make_job("j-old", t=1.0))
    store.commit(Change(job=replace(old_done, state=JobState.SUCCEEDED, updated_at=50.0), expected_version=1))
    recent_done = create(store, make_job("j-recent", t=2.0))
    store.commit(Change(job=replace(recent_done, state=JobState.FAILED, updated_at=500.0), expected_version=1))
    create(store, make_job("j-live", t=3.0))  # queued since t = 3: not final, so always listed
    assert [x.id for x in store.list_jobs(active_since=100.0)] == ["j-live", "j-recent"]
    assert [x.id for x in store.list_jobs(active_since=1000.0)] == ["j-live"]
    assert [x.id for x in store.list_jobs(active_since=100.0, limit=1)] == ["j-live"]
    assert [x.id for x in store.list_jobs(active_since=0.0)] == ["j-live", "j-recent", "j-old"]
    # limit applies after the filter: the newest matches, however much history sits in between
    for i in range(600):
        done = create(store, make_job(f"j-h{i:03d}", t=10.0 + i))
        store.commit(Change(job=replace(done, state=JobState.CANCELLED, updated_at=20.0), expected_version=1))
    assert [x.id for x in store.list_jobs(active_since=100.0, limit=2)] == ["j-live", "j-recent"]


def test_a_sqlite_file_from_before_updated_at_is_migrated_in_place(tmp_path):
    import json
    import sqlite3

    from broker.store.sqlite import SqliteStore

    path = tmp_path / "old.db"
    job = replace(make_job("j-old", t=1.0), state=JobState.SUCCEEDED, updated_at=50.0, version=2)
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE jobs (id TEXT PRIMARY KEY, team TEXT NOT NULL, state TEXT NOT NULL, version INTEGER NOT NULL,
                           submitted_at REAL NOT NULL, idempotency_key TEXT, body TEXT NOT NULL);
        CREATE INDEX jobs_state ON jobs(state);
    """)
    db.execute("INSERT INTO jobs VALUES (?, ?, ?, ?, ?, ?, ?)",
               (job.id, job.team, job.state.value, 2, job.submitted_at, None, json.dumps(job.to_dict())))
    db.commit()
    db.close()
    store = SqliteStore(path)
    assert store.get_job("j-old") == job  # nothing lost
    assert [x.id for x in store.list_jobs(active_since=10.0)] == ["j-old"]
    assert store.list_jobs(active_since=100.0) == []
    create(store, make_job("j-new", t=5.0))
    assert [x.id for x in store.list_jobs(active_since=100.0)] == ["j-new"]
    store.close()
    SqliteStore(path).close()  # opening a migrated file again is a no-op


def test_events_after_a_sequence_number(store):
    job = create(store, make_job())
    store.commit(Change(job=job, expected_version=1, events=[event(job, JobEvent.PLACE, JobState.QUEUED, JobState.PLACED)]))
    assert [e.seq for e in store.events(job.id)] == [1, 2]
    assert [e.event for e in store.events(job.id, after_seq=1)] == ["place"]


def test_metrics_points_are_appended_in_order(store):
    job = create(store, make_job())
    store.commit(Change(job=job, expected_version=1, metrics=[{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]))
    assert [m["step"] for m in store.metrics(job.id)] == [1, 2]
    assert store.metrics(job.id, limit=1)[0]["step"] == 2


def create_at_once(store, jobs: list[Job]) -> dict:
    """Create ``jobs`` from one thread each, released together: index → version or the DuplicateJob."""
    results, barrier = {}, threading.Barrier(len(jobs))

    def write(i):
        barrier.wait()
        try:
            results[i] = create(store, jobs[i]).version
        except DuplicateJob as exc:
            results[i] = exc

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_writers_each_get_their_own_answer(store):
    """Many writers at once (batched by both stores' group commit): a refused change loses no other."""
    create(store, make_job("j-taken"))
    results = create_at_once(store, [make_job("j-taken" if i % 6 == 0 else f"j-{i}") for i in range(24)])
    for i, result in results.items():
        if i % 6 == 0:
            assert isinstance(result, DuplicateJob) and result.existing_id == "j-taken"
        else:
            assert result == 1 and store.get_job(f"j-{i}") is not None
            assert [e.event for e in store.events(f"j-{i}")] == ["submit"]
    assert len(store.list_jobs()) == 1 + 20


def test_redis_commits_go_on_after_the_server_forgets_the_script(redis_server):
    """A restart or SCRIPT FLUSH empties the server's script cache: a batch whose scripts were
    refused (NOSCRIPT, so none ran) is sent again once, after the script is loaded."""
    import os
    import time

    import redis

    from broker.store.redis import RedisStore

    store = RedisStore(redis_server.url, prefix=f"t{os.getpid()}-{time.monotonic_ns()}")
    try:
        create(store, make_job("j-1"))
        redis.Redis.from_url(redis_server.url).script_flush()
        results = create_at_once(store, [make_job("j-1" if i == 0 else f"j-{i + 1}") for i in range(8)])
        assert isinstance(results[0], DuplicateJob)
        assert all(results[i] == 1 for i in range(1, 8))
        assert len(store.list_jobs()) == 8
        assert [e.event for e in store.events("j-8")] == ["submit"]
    finally:
        store.close()


def test_a_redis_store_from_before_the_update_index_is_backfilled_on_first_windowed_read(redis_server):
    import os
    import time

    import redis

    from broker.store.redis import RedisStore
    from broker.store.redis_keys import Keys

    prefix = f"t{os.getpid()}-{time.monotonic_ns()}"
    store = RedisStore(redis_server.url, prefix=prefix)
    try:
        old = create(store, make_job("j-old", t=1.0))
        store.commit(Change(job=replace(old, state=JobState.SUCCEEDED, updated_at=500.0), expected_version=1))
        create(store, make_job("j-live", t=2.0))
        raw = redis.Redis.from_url(redis_server.url)
        raw.delete(Keys(prefix).updated())  # as written by a broker before the index existed
        later = RedisStore(redis_server.url, prefix=prefix)
        assert [x.id for x in later.list_jobs(active_since=100.0)] == ["j-live", "j-old"]
        assert [x.id for x in later.list_jobs(active_since=1000.0)] == ["j-live"]
        assert raw.zscore(Keys(prefix).updated(), "j-old") == 500.0
        later.close()
    finally:
        store.close()


def test_a_placement_decided_before_another_was_committed_conflicts_and_writes_nothing(store):
    # two engines read the store a moment apart and each hands the one free GPU to a different job: the
    # jobs' versions cannot tell (each job was written by one engine only), the count of placements can
    first, second = create(store, make_job("j-1")), create(store, make_job("j-2"))
    seen = store.placements()
    store.commit(Change(job=replace(first, state=JobState.PLACED, slots=[0]), expected_version=first.version,
                        expected_placements=seen))
    assert store.placements() == seen + 1
    with pytest.raises(VersionConflict):
        store.commit(Change(job=replace(second, state=JobState.PLACED, slots=[0]), expected_version=second.version,
                            events=[event(second, JobEvent.PLACE, JobState.QUEUED, JobState.PLACED)],
                            expected_placements=seen))
    assert store.get_job("j-2") == second and [e.event for e in store.events("j-2")] == ["submit"]
    assert store.placements() == seen + 1
    store.commit(Change(job=replace(second, reason="waiting"), expected_version=second.version))  # no placement
    assert store.placements() == seen + 1


def test_each_engine_domain_keeps_its_latest_beat(store):
    assert store.beats() == {}
    store.beat("local@a:/runs", 100.0)
    store.beat("skypilot:http://api", 50.5)
    store.beat("local@a:/runs", 160.25)
    assert store.beats() == {"local@a:/runs": 160.25, "skypilot:http://api": 50.5}
    store.beat("local@a:/runs", 130.0)  # its clock stepped back: still a beat, seen to change
    assert store.beats()["local@a:/runs"] == 130.0


def test_a_record_with_a_field_from_a_newer_broker_still_reads_and_keeps_it():
    """During a rolling upgrade an older broker reads what a newer one wrote: unknown fields are kept aside
    (``extra``) and written back as they were, beside the fields this version knows."""
    from broker.lifecycle import AttemptState
    from broker.models import Attempt

    attempt = Attempt(id="j-1-a1", job_id="j-1", n=1, state=AttemptState.RUNNING, launcher="local", placement={},
                      price_per_hour=1, created_at=0.0)
    stored = {**attempt.to_dict(), "a_field_from_the_future": {"x": 1}, "extra": "a newer field of that name"}
    read = Attempt.from_dict(stored)
    assert replace(read, extra={}) == attempt
    assert read.extra == {"a_field_from_the_future": {"x": 1}, "extra": "a newer field of that name"}
    assert replace(read, cost=5).to_dict() == {**stored, "cost": 5}


def test_a_redis_server_that_would_lose_accepted_jobs_in_a_crash_is_named_at_open(tmp_path, caplog):
    """An accepted job is durable before the 201 only with appendonly yes and appendfsync always;
    a server run with Redis's defaults (no AOF) or a lazier fsync is said so when the broker opens it."""
    server = RedisServer(tmp_path / "redis").start()  # its own: the session's server is not reconfigured
    try:
        admin = redis.Redis(port=server.port)
        with caplog.at_level(logging.WARNING, logger="broker.store"):
            open_store(server.url).close()
            assert not caplog.records  # appendonly yes, appendfsync always: nothing to say
            admin.config_set("appendfsync", "everysec")
            open_store(server.url).close()
            admin.config_set("appendonly", "no")
            open_store(server.url).close()
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2
        assert "appendfsync everysec" in said[0] and "appendfsync always" in said[0]
        assert "appendonly no" in said[1]
        admin.close()
    finally:
        server.stop()


def test_a_new_sqlite_store_and_its_folder_are_the_brokers_users_alone(tmp_path):
    """Every team's jobs and the sealed secrets are in it: on a shared host, other users read nothing (it was
    0644 in a 0755 folder)."""
    import stat

    from broker.lifecycle import JobState
    from broker.models import Job
    from broker.store import Change
    from broker.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "new" / "broker.db")
    store.commit(Change(job=Job(id="j-1", name="t", team="a", state=JobState.QUEUED, spec={"run": "x"}, budget=1,
                                priority=0, submitted_at=1.0, updated_at=1.0), expected_version=None))
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "new") == 0o700
    assert mode(tmp_path / "new" / "broker.db") == 0o600
    assert mode(tmp_path / "new" / "broker.db-wal") == 0o600
    store.close()


# -- retention: JobStore.expired and JobStore.prune -------------------------------------------------------------


def ended(store, job_id: str, state: JobState, updated: float, *, team="vision", key=None) -> Job:
    """A job with an attempt, two events and two metric points, last written at ``updated`` in ``state``."""
    job = create(store, make_job(job_id, team=team, key=key, t=1.0))
    attempt = Attempt(id=f"{job_id}-a1", job_id=job_id, n=1, state=AttemptState.FAILED, launcher="local",
                      placement={"tier": "spot"}, price_per_hour=1_000_000, created_at=2.0, cost=7)
    return store.commit(Change(job=replace(job, state=state, updated_at=updated, attempts=1), expected_version=1,
                               attempts=[attempt], events=[event(job, JobEvent.PLACE, JobState.QUEUED, state)],
                               metrics=[{"step": 1}, {"step": 2}]))


def waited(jobs: int, seconds: float = 1.0) -> dict:
    """What ``jobs`` jobs whose first attempt came ``seconds`` after their submit (as :func:`ended` makes them) add
    to the queue-wait histogram of the pruned totals: a count in the bucket that holds them, and the sum."""
    from broker import totals

    part: dict = {}
    totals.observe(part, totals.QUEUE_WAIT, seconds)
    return {key: n * jobs for key, n in part.items()}


def twin(store):
    """A second handle on the same store, as another broker process holds."""
    from broker.store.redis import RedisStore
    from broker.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        return SqliteStore(store.path)
    return RedisStore(_redis_url(store), prefix=store.keys.prefix)


def _redis_url(store) -> str:
    kw = store._r.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def traces(store, job_id: str) -> list[str]:
    """Everything of the store that still names ``job_id``: rows (SQLite); keys, index members, values (Redis)."""
    from broker.store.sqlite import SqliteStore

    if isinstance(store, SqliteStore):
        import sqlite3

        db = sqlite3.connect(store.path)
        try:
            found = [f"jobs: {r}" for r in db.execute("SELECT id FROM jobs WHERE id = ?", (job_id,))]
            for table in ("attempts", "events", "metrics", "pruned_metrics"):
                found += [f"{table}: {r}" for r in db.execute(f"SELECT * FROM {table} WHERE job_id = ?", (job_id,))]
            return found
        finally:
            db.close()
    r = redis.Redis.from_url(_redis_url(store), decode_responses=True)
    found = []
    for key in r.scan_iter(f"{store.keys.prefix}:*"):
        kind = r.type(key)
        if job_id in key:
            found.append(key)
        elif kind == "zset" and r.zscore(key, job_id) is not None:
            found.append(f"{key} (member)")
        elif kind == "set" and r.sismember(key, job_id):
            found.append(f"{key} (member)")
        elif kind == "string" and r.get(key) == job_id:
            found.append(f"{key} (value)")
        elif kind == "hash" and job_id in r.hkeys(key):
            found.append(f"{key} (field)")
    r.close()
    return found


def test_prune_deletes_the_final_jobs_updated_before_the_cutoff_with_everything_of_theirs(store):
    done = [ended(store, "j-ok", JobState.SUCCEEDED, 10.0, key="k1"),
            ended(store, "j-failed", JobState.FAILED, 20.0),
            ended(store, "j-cancelled", JobState.CANCELLED, 30.0, team="nlp"),
            ended(store, "j-stopped", JobState.STOPPED_BUDGET, 40.0)]
    ended(store, "j-recent", JobState.SUCCEEDED, 500.0)
    for job_id, state in [("j-queued", JobState.QUEUED), ("j-running", JobState.RUNNING),
                          ("j-stopping", JobState.STOPPING), ("j-cancelling", JobState.CANCELLING)]:
        ended(store, job_id, state, 5.0)  # older than any, and not final: never pruned, whatever their age
    kept = {j.id: (j, store.events(j.id), store.attempts(j.id), store.metrics(j.id))
            for j in store.list_jobs() if j.id not in {d.id for d in done}}

    assert [j.id for j in store.expired(before=100.0, limit=10)] == ["j-ok", "j-failed", "j-cancelled", "j-stopped"]
    assert [j.id for j in store.expired(before=100.0, limit=2)] == ["j-ok", "j-failed"]  # least recently updated
    assert store.expired(before=10.0, limit=10) == []  # before: strictly
    assert store.pruned() == 0

    assert sorted(store.prune(store.expired(before=100.0, limit=10))) == sorted(j.id for j in done)
    for job in done:
        assert store.get_job(job.id) is None
        assert store.events(job.id) == [] and store.attempts(job.id) == [] and store.metrics(job.id) == []
        assert store.attempts_of([job.id]) == {job.id: []}
        assert traces(store, job.id) == []
    assert store.find_idempotent("vision", "k1") is None
    assert {j.id for j in store.list_jobs()} == set(kept)
    assert store.list_jobs(team="nlp") == []
    assert store.list_jobs(states=["failed", "cancelled", "stopped_budget"]) == []
    assert [j.id for j in store.list_jobs(states=["succeeded"], team="vision")] == ["j-recent"]
    assert {j.id for j in store.list_jobs(active_since=0.0)} == set(kept)
    jobs, _ = store.cost_history(team=None, since=0.0, until=1e12)
    assert {j.id for j in jobs} == set(kept)
    assert store.expired(before=100.0, limit=10) == []
    assert [j.id for j in store.expired(before=1e12, limit=10)] == ["j-recent"]
    assert store.pruned() == 4
    for job_id, (job, events, attempts, metrics) in kept.items():  # the rest untouched
        assert (store.get_job(job_id), store.events(job_id), store.attempts(job_id), store.metrics(job_id)) == (
            job, events, attempts, metrics)

    again = create(store, make_job("j-again", key="k1"))  # the idempotency key is free again
    assert store.find_idempotent("vision", "k1") == again


def test_a_job_changed_after_it_was_read_for_pruning_stays_whole(store):
    for job_id in ("j-resumed", "j-raised", "j-untouched"):
        ended(store, job_id, JobState.FAILED, 10.0, key=job_id)
    read = store.expired(before=100.0, limit=10)
    assert sorted(j.id for j in read) == ["j-raised", "j-resumed", "j-untouched"]
    resumed, raised = store.get_job("j-resumed"), store.get_job("j-raised")
    store.commit(Change(job=replace(resumed, state=JobState.QUEUED), expected_version=resumed.version,
                        events=[event(resumed, JobEvent.RESUME, JobState.FAILED, JobState.QUEUED)]))
    # still failed, still as old: only its version says it changed
    store.commit(Change(job=replace(raised, budget=raised.budget * 2), expected_version=raised.version))

    assert store.prune(read) == ["j-untouched"]
    assert store.get_job("j-resumed").state is JobState.QUEUED
    assert store.get_job("j-raised").budget == raised.budget * 2
    for job_id in ("j-resumed", "j-raised"):
        assert len(store.events(job_id)) >= 2 and len(store.attempts(job_id)) == 1
        assert len(store.metrics(job_id)) == 2 and store.find_idempotent("vision", job_id).id == job_id
    assert store.pruned() == 1
    # what the jobs that stayed spent is not in the totals: only the one deleted's 7 micro-dollars of spot
    assert store.pruned_totals() == Pruned(1, {("spend", "vision", "spot"): 7, ("ondemand_equivalent", "vision"): 7,
                                               ("attempts_ended", "vision", "failed"): 1, **waited(1)})
    # read again, the budget-raised job is due (final, old) at its new version; the resumed one is not final
    assert store.prune(store.expired(before=100.0, limit=10)) == ["j-raised"]
    assert store.get_job("j-resumed") is not None
    assert store.pruned_totals() == Pruned(2, {("spend", "vision", "spot"): 14, ("ondemand_equivalent", "vision"): 14,
                                               ("attempts_ended", "vision", "failed"): 2, **waited(2)})


def with_points(store, job: Job, n: int) -> Job:
    """``job`` with ``n`` more metric points, committed as one progress report would be."""
    return store.commit(Change(job=job, expected_version=job.version, metrics=[{"step": 10 + i} for i in range(n)]))


def drained(store, limit: int) -> list[int]:
    """What each ``prune_leftovers(limit=limit)`` deleted, until one deleted nothing."""
    counts = []
    while not counts or counts[-1]:
        counts.append(store.prune_leftovers(limit=limit))
        assert counts[-1] <= limit and len(counts) < 100
    return counts


def test_a_write_bounded_by_rows_deletes_the_job_first_and_its_other_points_after_it(store):
    """The job's row, attempt and events go in the compare-and-set write with the oldest points that fit; the rest of
    its points follow in writes of at most ``limit`` (SQLite; Redis unlinks them whole with the job)."""
    from broker.store.sqlite import SqliteStore

    job = with_points(store, ended(store, "j-long", JobState.SUCCEEDED, 10.0, key="k-long"), 100)  # 102 points
    assert store.prune_sizes([job]) == ([1 + 1 + 2 + 102] if isinstance(store, SqliteStore) else [1])
    (read,) = store.expired(before=100.0, limit=10)
    assert store.prune([read], rows=30) == ["j-long"]
    assert store.get_job("j-long") is None and store.find_idempotent("vision", "k-long") is None
    assert store.existing(["j-long"]) == set() and store.list_jobs() == []
    assert store.pruned_totals() == Pruned(1, {("spend", "vision", "spot"): 7, ("ondemand_equivalent", "vision"): 7,
                                               ("attempts_ended", "vision", "failed"): 1, **waited(1)})
    if isinstance(store, SqliteStore):  # 30 records: its row, its attempt, 2 events and 26 points
        assert len([t for t in traces(store, "j-long") if t.startswith("metrics:")]) == 102 - 26
        assert drained(store, 30) == [30, 30, 16, 0]
    else:
        assert drained(store, 30) == [0]
    assert traces(store, "j-long") == [] and store.metrics("j-long") == []
    assert store.pruned() == 1
    again = create(store, make_job("j-again", key="k-long"))
    assert store.find_idempotent("vision", "k-long") == again


def test_a_job_changed_after_it_was_read_keeps_every_point_however_small_the_write(store):
    job = with_points(store, ended(store, "j-resumed", JobState.FAILED, 10.0), 100)
    (read,) = store.expired(before=100.0, limit=10)
    store.commit(Change(job=replace(job, state=JobState.QUEUED), expected_version=job.version,
                        events=[event(job, JobEvent.RESUME, JobState.FAILED, JobState.QUEUED)]))
    assert store.prune([read], rows=5) == []
    assert store.prune_leftovers(limit=1000) == 0
    assert len(store.metrics("j-resumed")) == 102 and store.get_job("j-resumed").state is JobState.QUEUED
    assert store.pruned() == 0


def test_the_id_of_a_job_whose_points_are_still_going_is_taken_until_they_are_gone(store):
    """A new job under that id would read the pruned job's points (another team's, maybe) as its own: SQLite refuses
    it as a duplicate until they are deleted (the service then draws another id); Redis deletes them with the job."""
    from broker.store.sqlite import SqliteStore

    with_points(store, ended(store, "j-1", JobState.SUCCEEDED, 10.0), 50)
    assert store.prune(store.expired(before=100.0, limit=10), rows=5) == ["j-1"]
    if isinstance(store, SqliteStore):
        with pytest.raises(DuplicateJob) as taken:
            create(store, make_job("j-1"))
        assert taken.value.existing_id == "j-1" and store.get_job("j-1") is None
        assert sum(drained(store, 7)) <= 52
    job = create(store, make_job("j-1"))
    store.commit(Change(job=job, expected_version=1, metrics=[{"step": "mine"}]))
    assert [p["step"] for p in store.metrics("j-1")] == ["mine"]
    assert store.prune_leftovers(limit=1000) == 0


def test_what_a_write_left_is_deleted_by_any_handle_on_the_store(store):
    """A broker stopped after the jobs' write leaves their points to the next prune, its own or another broker's."""
    from broker.store.sqlite import SqliteStore

    for i in range(3):
        with_points(store, ended(store, f"j-{i}", JobState.CANCELLED, float(i)), 20)  # 22 points each
    # SQLite: the first job's row, attempt, 2 events and 6 points fill the 10; the others' rows go, and every point
    assert store.prune(store.expired(before=100.0, limit=10), rows=10) == ["j-0", "j-1", "j-2"]
    other = twin(store)
    try:
        assert drained(other, 25) == ([25, 25, 10, 0] if isinstance(store, SqliteStore) else [0])
        assert store.prune_leftovers(limit=25) == 0
        assert all(traces(store, f"j-{i}") == [] for i in range(3)) and store.pruned() == 3
    finally:
        other.close()


def test_a_job_not_final_is_not_pruned_even_when_handed_to_prune(store):
    live = ended(store, "j-live", JobState.RUNNING, 1.0)
    assert store.prune([live]) == []
    assert store.get_job("j-live") == live and len(store.attempts("j-live")) == 1
    assert store.prune([]) == [] and store.pruned() == 0
    assert store.pruned_totals() == Pruned(0, {})


def test_two_brokers_pruning_the_same_jobs_at_once_delete_each_one_once(store):
    jobs = [ended(store, f"j-{i:02d}", JobState.SUCCEEDED, float(i), key=f"k{i}") for i in range(40)]
    other = twin(store)
    try:
        reads = [store.expired(before=100.0, limit=100), other.expired(before=100.0, limit=100)]
        assert [j.id for j in reads[0]] == [j.id for j in reads[1]] == [j.id for j in jobs]
        results, errors, barrier = {}, [], threading.Barrier(2)

        def prune(i, handle):
            barrier.wait()
            try:
                results[i] = handle.prune(reads[i])
            except Exception as exc:  # noqa: BLE001 - the test asserts there is none
                errors.append(exc)

        threads = [threading.Thread(target=prune, args=(i, h)) for i, h in enumerate((store, other))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert set(results[0]).isdisjoint(results[1])
        assert sorted(results[0] + results[1]) == [j.id for j in jobs]
        assert store.pruned() == other.pruned() == 40
        # each job's 7 micro-dollars added once, by whichever broker deleted it
        assert store.pruned_totals() == other.pruned_totals() == Pruned(40, {("spend", "vision", "spot"): 280,
                                                                            ("ondemand_equivalent", "vision"): 280,
                                                                            ("attempts_ended", "vision", "failed"): 40,
                                                                            **waited(40)})
        assert store.list_jobs() == [] and all(traces(store, j.id) == [] for j in jobs)
    finally:
        other.close()


def test_expired_skips_old_jobs_that_are_not_final_without_counting_them_against_the_limit(store):
    for i in range(3):
        ended(store, f"j-live{i}", JobState.QUEUED, float(i))  # the oldest in the update-time index
    for i in range(5):
        ended(store, f"j-done{i}", JobState.CANCELLED, 10.0 + i)
    assert [j.id for j in store.expired(before=100.0, limit=2)] == ["j-done0", "j-done1"]


def test_sqlite_reads_what_is_due_by_the_update_time_index(tmp_path):
    """Nothing due is one seek; read by the state index instead, it would sort every final job (most of the table)."""
    import sqlite3

    from broker.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "s.db")
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    store.expired(before=100.0, limit=10)
    store.close()
    (query,) = [s for s in statements if s.startswith("SELECT")]
    db = sqlite3.connect(tmp_path / "s.db")
    plan = " ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {query}"))
    db.close()
    assert "USING INDEX jobs_updated (updated_at<?)" in plan and "TEMP B-TREE" not in plan, plan


def test_a_redis_server_at_its_maxmemory_can_still_be_pruned_back_under_it(tmp_path):
    """A store that filled up answers every write with OOM (the API's 503): pruning, which only deletes, still runs,
    and frees what the next writes need."""
    from broker.store import StoreUnavailable
    from broker.store.redis import RedisStore

    server = RedisServer(tmp_path / "redis").start()
    store = RedisStore(server.url)
    admin = redis.Redis(port=server.port)
    try:
        for i in range(300):
            job = ended(store, f"j-{i:03d}", JobState.SUCCEEDED, float(i))
            store.commit(Change(job=job, expected_version=job.version, metrics=[{"step": n, "pad": "x" * 200}
                                                                                 for n in range(20)]))
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", admin.info("memory")["used_memory"])
        with pytest.raises(StoreUnavailable):
            create(store, make_job("j-new"))
        assert admin.exists(store.keys.pruned_totals()) == 0  # the totals are a key the full server must add
        assert len(store.prune(store.expired(before=1e9, limit=500))) == 300
        # every deletion's count and totals were written, in the script that deleted it
        assert store.pruned_totals() == Pruned(300, {("spend", "vision", "spot"): 2100,
                                                     ("ondemand_equivalent", "vision"): 2100,
                                                     ("attempts_ended", "vision", "failed"): 300, **waited(300)})
        assert create(store, make_job("j-new")).version == 1
        assert traces(store, "j-000") == []
    finally:
        admin.close()
        store.close()
        server.stop()


# -- the totals of pruned jobs, which keep the counters of /metrics from falling -----------------------------------


def tried(job_id: str, n: int, state: AttemptState, placement: dict, *, price: int, cost: int, hours: int,
          **more) -> Attempt:
    return Attempt(id=f"{job_id}-a{n}", job_id=job_id, n=n, state=state, launcher="local", placement=placement,
                   price_per_hour=price, created_at=1000.0, billed_until=1000.0 + hours * 3600, cost=cost, **more)


def finished(store, job: Job, attempts: list[Attempt], updated: float) -> Job:
    job = create(store, replace(job, submitted_at=1.0, updated_at=1.0))
    return store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=updated, attempts=len(attempts)),
                               expected_version=1, attempts=attempts))


BIG = 2**53 + 1  # micro-dollars no float holds: a total that passed through one would be off by one


def test_a_pruned_job_adds_exactly_what_it_counted_for_to_the_totals_by_counter_and_labels(store):
    """Spend by (team, tier), the on-demand equivalent by team, preemptions and lost nodes by (zone, tier), attempts ended by
    (team, state) and the recovery and queue-wait histograms, as /metrics counts a job: so a sum over the jobs left plus the totals stays what it was."""
    spot = {"tier": "spot", "zone": "us-east-1a"}
    vision = finished(store, make_job("j-vision", team="vision"), [
        # preempted spot: its equivalent at the placement's on-demand price, 2.00/h for an hour
        tried("j-vision", 1, AttemptState.PREEMPTED, {**spot, "ondemand_price_per_hour": 2_000_000}, price=500_000,
              cost=500_000, hours=1, ended_at=4600.0),
        tried("j-vision", 2, AttemptState.SUCCEEDED, {"tier": "ondemand", "region": "us-east-1"}, price=3_000_000,
              cost=BIG, hours=1, started_at=4690.0),  # on-demand: its equivalent is its cost; 90 s to recover
        tried("j-vision", 3, AttemptState.LOST, spot, price=250_000, cost=250_000, hours=1),
    ], updated=10.0)
    pool = 'pool "gpu", rack 1'  # a label a naive key (joined with a separator) would split
    onprem = finished(store, replace(make_job("j-onprem", team="a:b"),
                                     quote={"tiers": [{"tier": "ondemand", "price_per_hour": 1_000_000}]}), [
        tried("j-onprem", 1, AttemptState.PREEMPTED, {"tier": "onprem", "location": pool}, price=200_000,
              cost=400_000, hours=2),  # its equivalent at the quote's on-demand price: 1.00/h for two hours
    ], updated=20.0)
    finished(store, make_job("j-recent"), [tried("j-recent", 1, AttemptState.SUCCEEDED, spot, price=1, cost=99,
                                                 hours=1)], updated=500.0)

    assert store.prune([vision]) == ["j-vision"]
    first = {("spend", "vision", "spot"): 750_000, ("spend", "vision", "ondemand"): BIG,
             ("ondemand_equivalent", "vision"): 2_000_000 + BIG + 250_000, ("preemptions", "us-east-1a", "spot"): 1,
             ("lost", "us-east-1a", "spot"): 1,  # a node lost without notice is not a preemption
             ("recovery_seconds", "120.0"): 1, ("recovery_seconds", "sum"): 90_000_000, **waited(1, 999.0),
             ("attempts_ended", "vision", "preempted"): 1, ("attempts_ended", "vision", "succeeded"): 1,
             ("attempts_ended", "vision", "lost"): 1}
    assert store.pruned_totals() == Pruned(1, first)
    assert store.prune([vision]) == []  # gone already: nothing added twice
    assert store.prune(store.expired(before=100.0, limit=10)) == ["j-onprem"]
    assert store.pruned_totals() == Pruned(2, {**first, ("spend", "a:b", "onprem"): 400_000,
                                                ("ondemand_equivalent", "a:b"): 2_000_000,
                                                ("preemptions", pool, "onprem"): 1, **waited(2, 999.0),
                                                ("attempts_ended", "a:b", "preempted"): 1})
    other = twin(store)  # another broker (or one started later) reads the same totals
    try:
        assert other.pruned_totals() == store.pruned_totals()
    finally:
        other.close()
    assert onprem.id not in store.existing(["j-onprem", "j-vision", "j-recent", "j-never"])


def test_existing_names_the_stored_jobs_among_those_asked_in_batches(store):
    for i in range(0, 1200, 2):
        create(store, make_job(f"j-{i:04d}"))
    asked = [f"j-{i:04d}" for i in range(1200)] + ["j-0000", "j-nope"]
    assert store.existing(asked) == {f"j-{i:04d}" for i in range(0, 1200, 2)}
    assert store.existing([]) == set()
