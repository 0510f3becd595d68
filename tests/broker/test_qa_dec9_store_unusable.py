"""A SQLite store that cannot serve as one. Read-only (a file system remounted so after disk errors): the broker
started, then every engine tick logged a traceback ("attempt to write a readonly database") and every submit was a
500; it is a 503 saying nothing was stored, and the start refuses such a file in one line. A file that is not a
database (random bytes, a database cut short), a directory, or one the broker's user may not open stopped
``serve``/``worker`` with a 22-line traceback that named no file; a data dir that is a file said only
"[Errno 17] File exists". Each is one ``error:`` line naming the file and why, exit 1."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from broker_testing import ADMIN, local_broker
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.store import StoreUnavailable, open_store

REPO = Path(__file__).parents[2]
CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
"""
TASK = {"name": "t", "run": "echo hi", "broker": {"budget_usd": 5}}
AUTH = {"Authorization": f"Bearer {ADMIN}"}


def _read_only(store) -> None:
    """The store's connection swapped for one SQLite opened read-only, as it opens a file on a read-only mount."""
    store._db.close()
    store._db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True, check_same_thread=False,
                                isolation_level=None)


def test_a_store_turned_read_only_is_a_503_saying_nothing_was_stored_not_a_500(make_settings, tmp_path):
    store = open_store(f"sqlite://{tmp_path / 'broker.db'}")
    app = create_app(make_settings(config=CONFIG), store=store, engine=False)
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            first = client.post("/v1/jobs", json=TASK, headers=AUTH)
            assert first.status_code == 201, first.text
            _read_only(store)
            submit = client.post("/v1/jobs", json=TASK, headers=AUTH)
            assert submit.status_code == 503 and submit.headers["Retry-After"], submit.text
            assert "nothing was changed" in submit.json()["detail"], submit.text
            # reads still answer: the jobs stored before can be looked at
            assert client.get(f"/v1/jobs/{first.json()['id']}", headers=AUTH).status_code == 200
        with pytest.raises(StoreUnavailable) as beat:
            store.beat("engine", 1.0)
        assert beat.value.written is None  # not a commit: nothing to say of it
    finally:
        store.close()


def test_an_engine_on_a_read_only_store_warns_once_instead_of_a_traceback_per_tick(make_settings, tmp_path, caplog):
    with local_broker(make_settings, tmp_path, CONFIG) as (_service, engine, store, _launcher):
        _read_only(store)
        with caplog.at_level(logging.WARNING, logger="broker.engine"):
            for _ in range(3):
                engine.tick_safely()
    said = [r for r in caplog.records if r.name == "broker.engine"]
    assert [r.levelno for r in said] == [logging.WARNING], [r.getMessage() for r in said]
    assert "readonly database" in said[0].getMessage() and not said[0].exc_info


def _broker(tmp_path: Path, data: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_DATA_DIR": str(data), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def _one_line(r: subprocess.CompletedProcess, said: str) -> None:
    lines = [line for line in r.stderr.splitlines() if not line.startswith("spot-broker worker ")]
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and said in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def _store_cut_in_half(path: Path) -> None:
    """A store with a job in it, its WAL folded in, then cut to half its size."""
    from broker.lifecycle import JobState
    from broker.models import Job
    from broker.store import Change

    store = open_store(f"sqlite://{path}")
    store.commit(Change(job=Job(id="j-1", name="t", team="vision", state=JobState.QUEUED, spec={}, budget=1,
                                priority=0, submitted_at=1.0, updated_at=1.0), expected_version=None))
    store.close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("worker",)], ids=["serve", "worker"])
@pytest.mark.parametrize("damage, said", [
    ("random bytes", "the job store is not a SQLite database it can read (file is not a database): restore it "
                     "from a backup, or move it aside to start with an empty store"),
    ("cut in half", "the job store is not a SQLite database it can read (database disk image is malformed)"),
    ("a directory", "the job store cannot be opened (unable to open database file): it is a directory, not a file"),
])
def test_a_store_file_that_cannot_be_one_stops_the_start_in_one_line_naming_it(tmp_path, command, damage, said):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    db = data / "broker.db"
    if damage == "random bytes":
        db.write_bytes(os.urandom(8192))
    elif damage == "cut in half":
        _store_cut_in_half(db)
    else:
        db.mkdir()
    _one_line(_broker(tmp_path, data, *command), f"error: {db}: {said}")


def test_a_data_dir_that_is_a_file_is_said_so(tmp_path):
    data = tmp_path / "data"
    data.write_text("x\n")
    _one_line(_broker(tmp_path, data, "serve", "--port", "0"), f"error: the data directory {data} is a file, not a "
                                                               "directory")


NOBODY = r'''
import os, sys
import broker.store.sqlite  # imported as root: the interpreter's own files may be root's alone
from broker.store import StoreError, open_store

os.setgroups([]); os.setgid(65534); os.setuid(65534)  # the broker's user: not the files' owner
try:
    open_store("sqlite://" + sys.argv[1]).close()
    print("opened")
except StoreError as exc:
    print(f"{type(exc).__name__}: {exc}")
'''


@pytest.fixture
def shared_dir():
    """A directory another user may pass through (tmp_path's parents are root's alone)."""
    where = Path(tempfile.mkdtemp(prefix="broker-store-"))
    where.chmod(0o711)
    yield where
    shutil.rmtree(where)


@pytest.mark.parametrize("mode, said", [
    (0o644, "the job store cannot be written (attempt to write a readonly database): its file or its file system "
            "is read-only"),
    (0o600, "the job store cannot be opened (unable to open database file): the broker's user (uid 65534) may not "
            "read and write it"),
])
def test_a_store_the_brokers_user_cannot_write_or_open_is_refused_as_it_opens_naming_it(shared_dir, mode, said):
    # it runs the store as another user: a host where the suite cannot (not root) fails here, rather than skip
    assert os.geteuid() == 0, "this test runs the store as uid 65534, which takes root (make test runs as root)"
    db = shared_dir / "broker.db"
    open_store(f"sqlite://{db}").close()
    db.chmod(mode)
    shared_dir.chmod(0o755 if mode == 0o644 else 0o711)  # readable, never writable, by the broker's user
    done = subprocess.run([sys.executable, "-c", NOBODY, str(db)], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"StoreUnusable: {db}: {said}"), done.stdout


CRASH = r'''
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("INSERT INTO engines (domain, seen) VALUES ('gone', 1) ON CONFLICT(domain) DO UPDATE SET seen = 1")
os._exit(0)  # as a broker killed: its -wal and -shm files stay beside the store
'''


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("worker",)], ids=["serve", "worker"])
@pytest.mark.parametrize("left, said", [
    ("killed", "the job store cannot be written (attempt to write a readonly database): its file or its file system "
               "is read-only"),
    ("stopped", "the job store cannot be opened (unable to open database file): its file system is read-only"),
])
def test_a_data_dir_on_a_read_only_mount_stops_the_start_in_one_line(tmp_path, command, left, said):
    data = tmp_path / "data"
    first = _broker(tmp_path, data, "worker", "--burst")  # a data dir as a broker leaves it: its key, its store
    assert first.returncode == 0, first.stderr
    db = sqlite3.connect(data / "broker.db")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()  # the last connection: SQLite removes the -wal and -shm files, as a broker stopped leaves the store
    assert not (data / "broker.db-wal").exists()
    if left == "killed":
        subprocess.run([sys.executable, "-c", CRASH, str(data / "broker.db")], check=True, timeout=60)
        assert (data / "broker.db-wal").exists()
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount --bind -o ro {data} {data}"], capture_output=True)
    assert probe.returncode == 0, f"a read-only bind mount in a mount namespace takes root and unshare: {probe.stderr!r}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_DATA_DIR": str(data), "PYTHONPATH": str(REPO)}
    line = f"mount --bind -o ro {data} {data} && exec {sys.executable} -m broker.cli {' '.join(command)}"
    r = subprocess.run(["unshare", "-m", "sh", "-c", line], env=env, cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    _one_line(r, f"error: {data / 'broker.db'}: {said}")
