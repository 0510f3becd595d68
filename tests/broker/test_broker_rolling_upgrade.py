"""Brokers of two versions sharing one store (a rolling upgrade): what a newer broker stored survives this one.

The "newer broker" here writes the store's JSON directly, as its own models would: a field this version does not
know on a job and on an attempt, or a state it does not know. This broker's engine and API then read, change and
write those records back (a tick billing the attempt, a progress report, a cancel) on the real SQLite file and
the real redis-server, and the newer fields must still be there, byte for byte; a record in an unknown state is
shown as stored and never written back.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from contextlib import contextmanager
from dataclasses import replace

import pytest
import redis
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import job_token
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.models import Job
from broker.runtime import open_launcher
from broker.store import Change
from broker.store.sqlite import SqliteStore

from broker_testing import ADMIN, wait_for

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "36.00"}
stop_grace_seconds: 1
tick_seconds: 0.05
"""
TASK = {"name": "t", "run": "sleep 60", "resources": {"cpus": 1}, "broker": {"budget_usd": 20}}
AUTH = {"Authorization": f"Bearer {ADMIN}"}

# values whose JSON text is easy to disturb on the way through: nesting and key order, a float, a number
# beyond 64 bits, non-ASCII text (escaped by json.dumps), null
FUTURE_JOB = {"preemption_forecast": {"zone": "us-east-1a", "p": 0.1, "by": [3, 1, 2]},
              "fair_share_debt": 2 ** 70, "note_v9": "réessayer", "paused_until": None}
FUTURE_ATTEMPT = {"spot_interruption_notice_at": 1733011200.125, "host_fingerprint": {"z": 1, "a": "b"}}


class NewerBroker:
    """Reads and writes the stored records as raw JSON text, as a broker of a newer version would (its commit
    moves the version on by one and keeps the state index true)."""

    def __init__(self, store, redis_url: str):
        self.store = store
        if isinstance(store, SqliteStore):
            self.db = sqlite3.connect(store.path, isolation_level=None)
        else:
            self.r = redis.Redis.from_url(redis_url, decode_responses=True)
            self.keys = store.keys

    def job(self, job_id: str) -> str:
        if hasattr(self, "db"):
            return self.db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
        return self.r.get(self.keys.job(job_id))

    def attempt(self, job_id: str, n: int) -> str:
        if hasattr(self, "db"):
            return self.db.execute("SELECT body FROM attempts WHERE id = ?", (f"{job_id}-a{n}",)).fetchone()[0]
        return self.r.hget(self.keys.attempts(job_id), str(n))

    def put(self, job_id: str, job_fields: dict, attempt_fields: dict | None = None, n: int | None = None) -> None:
        body = json.loads(self.job(job_id))
        old_state = body["state"]
        body.update(job_fields, version=body["version"] + 1)
        attempt = None
        if attempt_fields is not None:
            n = n or body["attempts"]
            raw = self.attempt(job_id, n) if self._has_attempt(job_id, n) else None
            attempt = {**(json.loads(raw) if raw else {}), **attempt_fields}
        if hasattr(self, "db"):
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("UPDATE jobs SET body = ?, version = ?, state = ? WHERE id = ?",
                            (json.dumps(body), body["version"], body["state"], job_id))
            if attempt is not None:
                self.db.execute("INSERT OR REPLACE INTO attempts (id, job_id, n, body) VALUES (?, ?, ?, ?)",
                                (f"{job_id}-a{n}", job_id, n, json.dumps(attempt)))
            self.db.execute("COMMIT")
            return
        with self.r.pipeline(transaction=True) as p:
            p.set(self.keys.job(job_id), json.dumps(body))
            p.srem(self.keys.by_state(old_state), job_id)
            p.sadd(self.keys.by_state(body["state"]), job_id)
            p.sadd(self.keys.state_names(), body["state"])  # as this version's commit does, which a newer one keeps
            if attempt is not None:
                p.hset(self.keys.attempts(job_id), str(n), json.dumps(attempt))
            p.execute()

    def _has_attempt(self, job_id: str, n: int) -> bool:
        if hasattr(self, "db"):
            return self.db.execute("SELECT 1 FROM attempts WHERE id = ?", (f"{job_id}-a{n}",)).fetchone() is not None
        return self.r.hexists(self.keys.attempts(job_id), str(n))

    def close(self) -> None:
        if hasattr(self, "db"):
            self.db.close()
        else:
            self.r.close()


@pytest.fixture
def broker(store, make_settings, redis_server):
    """This version's API and engine on the store (SQLite file or redis-server), and a newer broker beside them."""
    settings = make_settings(config=CONFIG)
    launcher = open_launcher(settings)
    app = create_app(settings, store=store, launcher=launcher, engine=False)
    engine = Engine(settings, store, launcher)
    newer = NewerBroker(store, redis_server.url)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, engine, store, newer, settings
    newer.close()
    for job in store.list_jobs(states=["launching", "running", "cancelling", "stopping"]):
        launcher.stop(f"{job.id}-a{job.attempts}", grace_seconds=0, reason="test over")


def kept(raw: str, fields: dict) -> None:
    """Each newer field is in the stored JSON text exactly as the newer broker wrote it."""
    for name, value in fields.items():
        assert f"{json.dumps(name)}: {json.dumps(value)}" in raw, (name, raw)


def tick_until(engine, store, job_id, state: str, timeout: float = 20):
    def done():
        engine.tick()
        job = store.get_job(job_id)
        return job if job.state.value == state else None

    return wait_for(done, timeout=timeout)


def test_fields_a_newer_broker_added_survive_this_brokers_tick_progress_report_and_cancel(broker):
    client, engine, store, newer, settings = broker
    job_id = client.post("/v1/jobs", json=TASK, headers=AUTH).json()["id"]
    tick_until(engine, store, job_id, "running")
    newer.put(job_id, FUTURE_JOB, FUTURE_ATTEMPT)
    version = store.get_job(job_id).version

    engine.tick()  # bills the running attempt: job and attempt written back
    assert store.get_job(job_id).version == version + 1
    kept(newer.job(job_id), FUTURE_JOB)
    kept(newer.attempt(job_id, 1), FUTURE_ATTEMPT)

    r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 7, "checkpoint": {"step": 7, "uri": "file:///c/7"}},
                    headers={"Authorization": f"Bearer {job_token(settings, job_id)}"})
    assert r.status_code == 200, r.text
    assert json.loads(newer.attempt(job_id, 1))["last_step"] == 7
    kept(newer.job(job_id), FUTURE_JOB)
    kept(newer.attempt(job_id, 1), FUTURE_ATTEMPT)

    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "cancelling", r.text
    assert "preemption_forecast" not in r.json() and "extra" not in r.json()  # views show what they always showed
    tick_until(engine, store, job_id, "cancelled")
    body = json.loads(newer.job(job_id))
    assert body["state"] == "cancelled" and "extra" not in body
    kept(newer.job(job_id), FUTURE_JOB)
    kept(newer.attempt(job_id, 1), FUTURE_ATTEMPT)
    assert json.loads(newer.attempt(job_id, 1))["state"] == "stopped"


def test_a_newer_brokers_sqlite_columns_are_not_reset_by_this_brokers_writes(tmp_path):
    """A newer broker on the same SQLite file may add a column: a commit here updates its row in place (an
    upsert) rather than deleting it and inserting it anew, which left an added column empty."""
    store = SqliteStore(tmp_path / "s.db")
    job = store.commit(Change(job=Job(id="j-1", name="t", team="vision", state=JobState.QUEUED, spec={"run": "echo"},
                                      budget=5_000_000, priority=0, submitted_at=1.0, updated_at=1.0),
                              expected_version=None))
    db = sqlite3.connect(store.path, isolation_level=None)
    db.execute("ALTER TABLE jobs ADD COLUMN lease_owner TEXT")
    db.execute("ALTER TABLE jobs ADD COLUMN budget_col INTEGER GENERATED ALWAYS AS (json_extract(body, '$.budget'))")
    db.execute("UPDATE jobs SET lease_owner = 'broker-v9'")
    store.commit(Change(job=replace(job, budget=7_000_000), expected_version=job.version))
    assert db.execute("SELECT lease_owner, budget_col FROM jobs").fetchone() == ("broker-v9", 7_000_000)
    db.close()
    store.close()


def test_a_job_in_a_state_this_version_does_not_know_is_shown_as_stored_and_never_written(broker, caplog):
    client, engine, store, newer, settings = broker
    job_id = client.post("/v1/jobs", json=TASK, headers=AUTH).json()["id"]
    newer.put(job_id, {"state": "paused", **FUTURE_JOB})
    raw = newer.job(job_id)

    with caplog.at_level(logging.ERROR, logger="broker.engine"):
        for _ in range(3):
            engine.tick()
    assert not caplog.records  # no failing step, tick after tick
    assert newer.job(job_id) == raw

    listed = client.get("/v1/jobs", headers=AUTH)
    assert listed.status_code == 200, listed.text
    assert [(j["id"], j["state"]) for j in listed.json()["jobs"]] == [(job_id, "paused")]
    one = client.get(f"/v1/jobs/{job_id}", headers=AUTH)
    assert one.status_code == 200 and one.json()["state"] == "paused", one.text
    assert client.get("/v1/costs", headers=AUTH).status_code == 200
    assert client.get("/v1/costs/jobs/" + job_id, headers=AUTH).status_code == 200
    assert client.get("/metrics").status_code == 200

    for path, body in (("cancel", None), ("budget", {"budget_usd": "30"}), ("resume", None)):
        r = client.post(f"/v1/jobs/{job_id}/{path}", json=body, headers=AUTH)
        assert r.status_code == 409, (path, r.text)
        assert "paused" in r.json()["detail"] and "does not know" in r.json()["detail"], (path, r.text)
    r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 3},
                    headers={"Authorization": f"Bearer {job_token(settings, job_id)}"})
    assert r.status_code == 409 and "does not know" in r.json()["detail"], r.text
    assert newer.job(job_id) == raw


def test_a_windowed_read_still_lists_a_job_a_newer_broker_keeps_in_a_state_of_its_own(broker):
    """The hourly workdir collection and the metrics read only live jobs and jobs changed since a time. A job in a
    state this version does not know may be live there (its pack in use), so it is read however old its last
    change: on Redis its state's set is found through the store's set of state names."""
    client, engine, store, newer, settings = broker
    job_id = client.post("/v1/jobs", json=TASK, headers=AUTH).json()["id"]
    newer.put(job_id, {"state": "paused", "updated_at": 1.0})
    listed = store.list_jobs(active_since=store.get_job(job_id).submitted_at + 3600)
    assert [(j.id, j.state.value) for j in listed] == [(job_id, "paused")]


@pytest.mark.parametrize("job_state", ["queued", "running"])
def test_a_job_whose_attempt_is_in_a_state_this_version_does_not_know_is_left_alone(broker, caplog, job_state):
    """A queued job whose attempt a newer broker holds in a state of its own (still live, perhaps) is not placed
    again here, nor is a running one monitored: the engine says so once and writes nothing."""
    client, engine, store, newer, settings = broker
    job_id = client.post("/v1/jobs", json=TASK, headers=AUTH).json()["id"]
    attempt = {"id": f"{job_id}-a1", "job_id": job_id, "n": 1, "state": "migrating", "launcher": "local",
               "placement": {"tier": "onprem", "pool": "cpu"}, "price_per_hour": 36_000_000, "created_at": 1.0,
               "launched_in": engine.launcher.domain, **FUTURE_ATTEMPT}
    newer.put(job_id, {"state": job_state, "attempts": 1}, attempt, n=1)
    raw_job, raw_attempt = newer.job(job_id), newer.attempt(job_id, 1)

    with caplog.at_level(logging.WARNING, logger="broker.engine"):
        for _ in range(4):
            engine.tick()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "migrating" in said[0] and job_id in said[0], said
    assert (newer.job(job_id), newer.attempt(job_id, 1)) == (raw_job, raw_attempt)
    assert store.get_job(job_id).state is JobState(job_state)

    view = client.get(f"/v1/jobs/{job_id}", headers=AUTH)
    assert view.status_code == 200, view.text
    assert [a["state"] for a in view.json()["attempt_list"]] == ["migrating"]
    assert client.get(f"/v1/costs/jobs/{job_id}", headers=AUTH).status_code == 200
    r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 3},
                    headers={"Authorization": f"Bearer {job_token(settings, job_id)}"})
    assert r.status_code == 409 and "migrating" in r.json()["detail"], r.text
    # a cancel here would end a queued job at once (final), and the newer broker would never stop its attempt
    r = client.post(f"/v1/jobs/{job_id}/cancel", headers=AUTH)
    assert r.status_code == 409 and "migrating" in r.json()["detail"], r.text
    assert (newer.job(job_id), newer.attempt(job_id, 1)) == (raw_job, raw_attempt)


def test_a_job_token_is_keyed_by_the_secrets_key_and_one_minted_from_the_admin_hashes_is_refused_once_launched(
        broker):
    """Job tokens were keyed by the admin tokens' SHA-256 hashes, which a config may hold in the open: anyone reading
    them could report progress as any job (a checkpoint URI of theirs becoming its next BROKER_RESUME_FROM). A launch
    now records that its attempt holds a token keyed by the secrets key; one minted the old way is refused for it,
    and still taken for a job whose running attempt was launched before (version 1)."""
    from broker.auth import _legacy_job_token
    from broker.sealing import data_dir_key

    client, engine, store, newer, settings = broker
    data_dir_key(settings.data_dir, create=True)  # as broker serve makes it at start
    job_id = client.post("/v1/jobs", json=TASK, headers=AUTH).json()["id"]
    tick_until(engine, store, job_id, "running")
    assert store.get_job(job_id).job_token_version == 2
    token = job_token(settings, job_id)
    assert token.startswith("v2.")
    forged = _legacy_job_token(settings, job_id)  # all it takes: the admin token's hash
    r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 3}, headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 401, r.text  # not the job's token (it was a 404, "no job", for a job that was there)
    r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 3}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text

    before = store.get_job(job_id)  # as a broker before version 2 launched it (the field absent: version 1)
    store.commit(Change(job=replace(before, job_token_version=1), expected_version=before.version))
    r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 4}, headers={"Authorization": f"Bearer {forged}"})
    assert r.status_code == 200, r.text


def test_a_job_token_minted_before_the_secrets_key_was_rotated_still_reports(make_settings, tmp_path):
    from broker.auth import job_token_valid
    from broker.sealing import new_key_text

    old, new = new_key_text(), new_key_text()
    before = make_settings(BROKER_SECRETS_KEY=old)
    after = make_settings(BROKER_SECRETS_KEY=new, BROKER_SECRETS_OLD_KEYS=old)
    token = job_token(before, "j-1")
    assert job_token(after, "j-1") != token
    assert job_token_valid(after, "j-1", token, legacy_allowed=False)
    assert not job_token_valid(after, "j-2", token, legacy_allowed=False)
    assert not job_token_valid(make_settings(BROKER_SECRETS_KEY=new), "j-1", token, legacy_allowed=False)


def test_a_broker_with_no_secrets_key_yet_mints_version_1_tokens_and_takes_them(make_settings):
    """An embedded engine never makes the key file (broker serve does, at start): its jobs keep version 1 tokens."""
    from broker.auth import job_token_valid, job_token_version

    settings = make_settings()
    assert job_token_version(settings) == 1 and not job_token(settings, "j-1").startswith("v2.")
    assert job_token_valid(settings, "j-1", job_token(settings, "j-1"), legacy_allowed=True)
    assert not (settings.data_dir / "secrets-key").exists()


def _forged(key_text: str, job_id: str) -> str:
    """A job token minted from a secrets key as broker/auth.py mints one: all that a leaked key takes."""
    import hashlib
    import hmac

    from broker.sealing import parse_key

    derived = hmac.new(parse_key(key_text, "key"), b"spot-broker job tokens", hashlib.sha256).digest()
    return "v2." + hmac.new(derived, f"job:{job_id}".encode(), hashlib.sha256).hexdigest()


def test_a_job_token_is_taken_only_from_the_key_recorded_at_its_launch(make_settings):
    """After a rotation the old key stays listed for what it sealed; it checked the token of any job, launched before
    the rotation or after. A token from a key other than the one its job was launched under is refused; a job
    launched before keys were recorded (none on it) takes any of the broker's keys, as before."""
    from broker.auth import job_token_valid
    from broker.sealing import key_id, new_key_text, parse_key

    old, new = new_key_text(), new_key_text()
    old_id, new_id = key_id(parse_key(old, "old")), key_id(parse_key(new, "new"))
    after = make_settings(BROKER_SECRETS_KEY=new, BROKER_SECRETS_OLD_KEYS=old)
    before_token, after_token = _forged(old, "j-1"), job_token(after, "j-1")
    assert job_token_valid(after, "j-1", before_token, legacy_allowed=False, key=old_id)  # launched before: reports
    assert job_token_valid(after, "j-1", after_token, legacy_allowed=False, key=new_id)
    assert not job_token_valid(after, "j-1", before_token, legacy_allowed=False, key=new_id)  # launched after: refused
    assert not job_token_valid(after, "j-1", after_token, legacy_allowed=False, key=old_id)
    assert job_token_valid(after, "j-1", before_token, legacy_allowed=False, key=None)  # recorded nothing: as before
    assert not job_token_valid(after, "j-1", before_token, legacy_allowed=False, key="0badc0de")  # a key it lacks


@pytest.mark.parametrize("old_in", ["BROKER_SECRETS_OLD_KEYS", "the data dir's key file"])
def test_a_launch_records_the_key_its_job_token_is_made_from_and_an_old_keys_token_is_not_the_jobs(
        make_settings, tmp_path, old_in):
    """QA INCIDENT: with the key rotated, a token made from the old key (listed in BROKER_SECRETS_OLD_KEYS, or the key
    file left in the data dir, which stays an old key while it is there) is not the token of a job launched since."""
    from broker.auth import job_token_valid
    from broker.sealing import key_id, new_key_text, parse_key

    old, new = new_key_text(), new_key_text()
    key_file = old_in != "BROKER_SECRETS_OLD_KEYS"
    with _launched_after_rotation(make_settings, tmp_path, old, new, key_file=key_file) as (settings, store, _, job_id):
        job = store.get_job(job_id)
        assert (job.job_token_version, job.job_token_key) == (2, key_id(parse_key(new, "new")))
        assert job_token_valid(settings, job_id, job_token(settings, job_id), legacy_allowed=False,
                               key=job.job_token_key)
        assert not job_token_valid(settings, job_id, _forged(old, job_id), legacy_allowed=False, key=job.job_token_key)
        assert json.loads(store_body(store, job_id))["job_token_key"] == job.job_token_key  # stored, read back


@contextmanager
def _launched_after_rotation(make_settings, tmp_path, old: str, new: str, *, key_file: bool):
    """A broker whose secrets key is ``new``, ``old`` kept as an old key (in BROKER_SECRETS_OLD_KEYS, or with
    ``key_file`` as the data dir's key file left in place), with a job submitted and launched since: (its settings, its
    store, a client of its API, the job's id), the job's run stopped after."""
    from broker.sealing import KEY_FILE
    from broker.store import open_store

    if key_file:
        settings = make_settings(store_url=f"sqlite://{tmp_path / 'b.db'}", config=CONFIG, BROKER_SECRETS_KEY=new)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        (settings.data_dir / KEY_FILE).write_text(old + "\n")
    else:
        settings = make_settings(store_url=f"sqlite://{tmp_path / 'b.db'}", config=CONFIG, BROKER_SECRETS_KEY=new,
                                 BROKER_SECRETS_OLD_KEYS=old)
    store = open_store(settings.store_url)
    launcher = open_launcher(settings)
    engine = Engine(settings, store, launcher)
    job_id = None
    try:
        with TestClient(create_app(settings, store=store, launcher=launcher, engine=False)) as client:
            job_id = client.post("/v1/jobs", json=TASK, headers=AUTH).json()["id"]
            tick_until(engine, store, job_id, "running")
            yield settings, store, client, job_id
    finally:
        if job_id is not None:
            launcher.stop(f"{job_id}-a1", grace_seconds=0, reason="test over")
        store.close()


def test_an_old_keys_token_is_refused_over_http_for_a_job_launched_after_the_rotation(make_settings, tmp_path):
    from broker.sealing import new_key_text

    old, new = new_key_text(), new_key_text()
    with _launched_after_rotation(make_settings, tmp_path, old, new, key_file=False) as (settings, _, client, job_id):
        r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 42},
                        headers={"Authorization": f"Bearer {_forged(old, job_id)}"})
        assert r.status_code == 401, r.text
        r = client.post(f"/v1/jobs/{job_id}/progress", json={"step": 43},
                        headers={"Authorization": f"Bearer {job_token(settings, job_id)}"})
        assert r.status_code == 200, r.text


def store_body(store, job_id: str) -> str:
    """The job's stored JSON text (SQLite)."""
    db = sqlite3.connect(store.path)
    try:
        return db.execute("SELECT body FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
    finally:
        db.close()
