"""What becomes of uploaded workdir packs and their unpacked copies: nothing is kept for ever.

Real parts: the HTTP API in process, real attempts run by the local launcher from their unpacked
directories, packs on the local disk and on S3 through a moto server over HTTP. The object store's
clock cannot be moved, so a collection is run at a later ``wall`` time instead.
"""

import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.store import open_store
from broker.workdir import pack

from broker_testing import ADMIN, DAY, WORKDIR_GRACE as GRACE, WORKDIR_RETENTION as RETENTION, wait_for

H = {"Authorization": f"Bearer {ADMIN}"}
pytestmark = pytest.mark.usefixtures("packs_in_tmp_path")


def code(root: Path, text: str = "v1") -> Path:
    root.mkdir(parents=True)
    (root / "train.py").write_text(f"print('code {text}')\n")
    return root


@pytest.fixture(params=["disk", "s3"])
def broker(request, make_settings, tmp_path, monkeypatch):
    """An API (no engine thread), its service, and an engine to tick by hand; packs on the local disk or on S3."""
    env = {}
    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                     "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(k, v)
        env["BROKER_CHECKPOINT_ROOT"] = f"s3://runs/t-{tmp_path.name}-{time.monotonic_ns()}"
    settings = make_settings(config="tick_seconds: 0.1\nstop_grace_seconds: 1\n", **env)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        service = client.app.state.service
        engine = Engine(settings, service.store, service.launcher)
        yield client, service, engine


def upload(client, directory: Path) -> str:
    p = pack(directory)
    r = client.put(f"/v1/workdirs/{p.digest}", content=p.path.read_bytes(), headers=H)
    assert r.status_code in (200, 201), r.text
    p.path.unlink()
    return p.digest


def submit(client, digest: str, run: str = "python train.py") -> dict:
    r = client.post("/v1/jobs", json={"run": run, "broker": {"workdir": digest}}, headers=H)
    assert r.status_code == 201, r.text
    return r.json()


def until(engine, service, job_id, *states):
    try:
        return wait_for(lambda: engine.tick() or ((j := service.store.get_job(job_id)).state in states and j), timeout=60)
    except AssertionError:
        j = service.store.get_job(job_id)
        raise AssertionError(f"{j.state} {j.reason}")


def stored(engine, digest: str) -> tuple[bool, bool]:
    """Whether the pack is in the object store, and whether it is in its trash (set aside)."""
    s = engine._workdir_store()
    s.fs.invalidate_cache()
    return s.fs.exists(s._path(digest[7:])), s.fs.exists(s._trashed(digest[7:]))


def attempts_dir(service) -> Path:
    return service.settings.data_dir / "workdirs" / "attempts"


# -- an attempt's unpacked copy ---------------------------------------------------------------------


@pytest.mark.parametrize("broker", ["disk"], indirect=True)
def test_an_attempts_workdir_stays_while_it_runs_and_goes_once_it_has_ended(broker, tmp_path):
    client, service, engine = broker
    go = tmp_path / "go"
    job = submit(client, upload(client, code(tmp_path / "c")),
                 run=f"python train.py; touch started; while [ ! -f {go} ]; do sleep 0.05; done")
    until(engine, service, job["id"], JobState.RUNNING)
    copy = attempts_dir(service) / f"{job['id']}-a1"
    wait_for(lambda: (copy / "started").exists())
    for _ in range(5):  # ticks and sweeps while it runs: its directory stays
        engine.tick()
        engine.sweep_workdirs()
    assert (copy / "train.py").exists()
    go.touch()
    done = until(engine, service, job["id"], JobState.SUCCEEDED)
    assert done.state is JobState.SUCCEEDED
    wait_for(lambda: not copy.exists())
    # nothing half-removed left behind: the copy is renamed aside (.<attempt>.rm-…) and then removed, in the
    # background; on a loaded machine the second step may come a moment after the first
    wait_for(lambda: os.listdir(attempts_dir(service)) == [])


@pytest.mark.parametrize("broker", ["disk"], indirect=True)
def test_a_workdir_is_kept_while_a_process_the_attempt_left_still_runs_in_it(broker, tmp_path):
    client, service, engine = broker
    pid_file = tmp_path / "pid"
    job = submit(client, upload(client, code(tmp_path / "c")), run=f"sleep 300 & echo $! > {pid_file}")
    until(engine, service, job["id"], JobState.SUCCEEDED)  # its run ended; the process it started did not
    copy = attempts_dir(service) / f"{job['id']}-a1"
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip()))
    try:
        time.sleep(0.5)
        assert engine.sweep_workdirs() == [] and (copy / "train.py").exists()
    finally:
        os.kill(pid, 9)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2])
    assert engine.sweep_workdirs() == [f"{job['id']}-a1"] and not copy.exists()


@pytest.mark.parametrize("broker", ["disk"], indirect=True)
def test_a_restarted_broker_sweeps_what_the_one_before_left(broker, tmp_path, monkeypatch):
    client, service, engine = broker
    go = tmp_path / "go"
    digest = upload(client, code(tmp_path / "c"))
    ended = submit(client, digest)
    monkeypatch.setattr(engine, "_attempt_ended", lambda job, attempt: None)  # stopped before it removed it
    until(engine, service, ended["id"], JobState.SUCCEEDED)
    live = submit(client, digest, run=f"while [ ! -f {go} ]; do sleep 0.05; done")
    until(engine, service, live["id"], JobState.RUNNING)
    base = attempts_dir(service)
    (base / "j-0000000000-a1").mkdir()  # an attempt the store does not know (its store was replaced)
    (base / "j-0000000000-a1" / "x").write_text("x")
    half = base / ".j-1111111111-a1.tmp-0123"  # an unpack a crash cut short
    half.mkdir()
    packs = service.settings.data_dir / "workdirs" / "packs"
    old_pack = packs / ("0" * 64 + ".tar.gz")
    old_pack.write_bytes(b"a pack no launch used for hours")
    cut_fetch = packs / f"{'1' * 64}.tar.gz.tmp-{'2' * 32}"  # a fetch a crash cut short, hours ago
    cut_fetch.write_bytes(b"half a pack")
    for p in (half, old_pack, cut_fetch):
        os.utime(p, (time.time() - 7200, time.time() - 7200))
    fetching = packs / f"{'3' * 64}.tar.gz.tmp-{'4' * 32}"  # a fetch under way: written to just now
    fetching.write_bytes(b"the first blocks of a pack")
    used = packs / f"{digest[7:]}.tar.gz"
    assert used.exists()

    restarted = Engine(service.settings, service.store, service.launcher)
    restarted.tick()  # its first tick sweeps, beside the tick
    wait_for(lambda: not (base / f"{ended['id']}-a1").exists() and not (base / "j-0000000000-a1").exists()
             and not half.exists() and not old_pack.exists() and not cut_fetch.exists())
    assert (base / f"{live['id']}-a1").is_dir() and used.exists()  # running; a pack used just now
    assert fetching.exists()
    go.touch()
    until(restarted, service, live["id"], JobState.SUCCEEDED)
    wait_for(lambda: not (base / f"{live['id']}-a1").exists())


@pytest.mark.parametrize("broker", ["disk"], indirect=True)
@pytest.mark.parametrize("when", ["just after this sweep listed it", "just before this sweep renamed it"])
def test_a_sweep_counts_and_logs_only_the_workdirs_it_removed_itself(broker, monkeypatch, caplog, when):
    """Another broker on the same data dir removes one of the listed directories first: it counts that one."""
    import broker.workdir_store as ws

    client, service, engine = broker
    base = attempts_dir(service)
    for attempt_id in ("j-0000000001-a1", "j-0000000002-a1"):  # attempts the store does not know: both swept
        (base / attempt_id).mkdir(parents=True)
        (base / attempt_id / "x").write_text("x")
    theirs = base / "j-0000000001-a1"
    if when.startswith("just after"):
        listing = ws.WorkdirStore.local_attempts

        def listed_then_taken(self):
            found = listing(self)
            shutil.rmtree(theirs, ignore_errors=True)
            return found

        monkeypatch.setattr(ws.WorkdirStore, "local_attempts", listed_then_taken)
    else:
        rename = os.rename

        def taken_first(src, dst):
            if Path(src) == theirs:
                shutil.rmtree(theirs)  # the other broker's rename and removal came first
            return rename(src, dst)

        monkeypatch.setattr(ws.os, "rename", taken_first)
    with caplog.at_level(logging.INFO, logger="broker.workdirs"):
        assert engine.sweep_workdirs() == ["j-0000000002-a1"]
    assert [r.getMessage() for r in caplog.records if "removed the workdir" in r.getMessage()] == [
        "removed the workdir of 1 ended attempt: j-0000000002-a1"]
    assert os.listdir(base) == []
    caplog.clear()
    (base / "j-0000000001-a1").mkdir()  # listed again, and taken again by the other broker: nothing of this one's
    with caplog.at_level(logging.INFO, logger="broker.workdirs"):
        assert engine.sweep_workdirs() == []
    assert not [r for r in caplog.records if "removed the workdir" in r.getMessage()]
    assert os.listdir(base) == []

def test_a_large_pack_is_unpacked_beside_the_ticks_not_in_them(broker, tmp_path, monkeypatch):
    """A slow fetch and unpack holds up no tick: the job stays launching until it is ready."""
    from broker.workdir_store import WorkdirStore

    client, service, engine = broker
    release = threading.Event()
    real = WorkdirStore.attempt_dir

    def slow(self, hex_digest, attempt_id):
        release.wait(30)
        return real(self, hex_digest, attempt_id)

    monkeypatch.setattr(WorkdirStore, "attempt_dir", slow)
    job = submit(client, upload(client, code(tmp_path / "c")))
    for _ in range(5):
        started = time.monotonic()
        engine.tick()
        assert time.monotonic() - started < 5
    assert service.store.get_job(job["id"]).state is JobState.LAUNCHING
    assert service.launcher.status(f"{job['id']}-a1").phase.value == "gone"  # not launched yet
    release.set()
    until(engine, service, job["id"], JobState.SUCCEEDED)
    assert "code v1" in client.get(f"/v1/jobs/{job['id']}/logs", headers=H).json()["data"]


def test_a_pack_unpacked_within_the_tick_that_placed_its_job_is_launched_without_a_relaunch_line(broker, tmp_path,
                                                                                                   monkeypatch, caplog):
    """The tick's housekeeping reads the jobs before that tick places and launches: an unpack it started and that is
    already done (a small pack) is not forgotten as if its job had been cancelled, which made the next tick launch it
    as a broker that stopped between its record and its launch, and say so in the log."""
    from concurrent.futures import Future

    from broker.engine import reconcile

    client, service, engine = broker
    real = reconcile._background

    def unpack_at_once(fn, *args):
        if getattr(fn, "__name__", "") != "_unpack":
            return real(fn, *args)
        done = Future()
        done.set_result(fn(*args))  # done before this tick's housekeeping looks
        return done

    monkeypatch.setattr(reconcile, "_background", unpack_at_once)
    job = submit(client, upload(client, code(tmp_path / "c")))
    with caplog.at_level(logging.INFO, logger="broker.engine"):
        until(engine, service, job["id"], JobState.SUCCEEDED)
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "a broker stopped between its record and its launch" in m], said
    assert "code v1" in client.get(f"/v1/jobs/{job['id']}/logs", headers=H).json()["data"]
    assert client.get(f"/v1/jobs/{job['id']}", headers=H).json()["attempts"] == 1


# -- packs in the object store ----------------------------------------------------------------------


def test_a_pack_is_kept_while_a_job_refers_to_it_and_collected_after(broker, tmp_path):
    client, service, engine = broker
    used, spare = upload(client, code(tmp_path / "a")), upload(client, code(tmp_path / "b", "v2"))
    # uploaded, its submit not here yet: a collection within the grace period leaves it
    assert engine.collect_workdirs(time.time(), wall=time.time() + GRACE / 2).set_aside == []
    job = submit(client, used)
    later = time.time() + 2 * GRACE
    done = engine.collect_workdirs(time.time(), wall=later)
    assert done.set_aside == [spare[7:]] and stored(engine, used) == (True, False)
    assert stored(engine, spare) == (False, True)  # set aside, not yet removed
    assert client.post(f"/v1/jobs/{job['id']}/cancel", headers=H).status_code == 200
    ended = until(engine, service, job["id"], JobState.CANCELLED)
    # a cancelled job is final: within the retention period its pack is kept all the same
    done = engine.collect_workdirs(ended.updated_at + RETENTION - 60, wall=later + 2 * GRACE)
    assert done.removed == [spare[7:]] and done.set_aside == []
    assert stored(engine, spare) == (False, False) and stored(engine, used) == (True, False)
    assert client.get(f"/v1/workdirs/{spare}", headers=H).status_code == 404
    # past it, nobody refers to it: set aside, then removed
    assert engine.collect_workdirs(ended.updated_at + RETENTION + 60, wall=later + 2 * GRACE).set_aside == [used[7:]]
    assert engine.collect_workdirs(ended.updated_at + RETENTION + 60, wall=later + 4 * GRACE).removed == [used[7:]]
    assert stored(engine, used) == (False, False)


def test_a_failed_job_keeps_its_pack_through_the_retention_so_resume_runs_its_code(broker, tmp_path):
    client, service, engine = broker
    digest = upload(client, code(tmp_path / "c"))
    job = submit(client, digest, run="python train.py; exit 3")
    failed = until(engine, service, job["id"], JobState.FAILED)
    wall = time.time() + 2 * GRACE
    assert engine.collect_workdirs(failed.updated_at + RETENTION - 60, wall=wall).set_aside == []
    r = client.post(f"/v1/jobs/{job['id']}/resume?force=true", headers=H)
    assert r.status_code == 200, r.text
    failed = until(engine, service, job["id"], JobState.FAILED)
    assert "code v1" in client.get(f"/v1/jobs/{job['id']}/logs?attempt=2", headers=H).json()["data"]
    # past the retention it is set aside; a resume then puts it back, and runs the same code
    assert engine.collect_workdirs(failed.updated_at + RETENTION + 60, wall=wall).set_aside == [digest[7:]]
    assert stored(engine, digest) == (False, True)
    r = client.post(f"/v1/jobs/{job['id']}/resume?force=true", headers=H)
    assert r.status_code == 200, r.text
    assert stored(engine, digest) == (True, False)
    failed = until(engine, service, job["id"], JobState.FAILED)
    assert "code v1" in client.get(f"/v1/jobs/{job['id']}/logs?attempt=3", headers=H).json()["data"]
    # once removed, a resume is refused saying why, rather than failing at launch
    engine.collect_workdirs(failed.updated_at + RETENTION + 60, wall=wall)
    engine.collect_workdirs(failed.updated_at + RETENTION + 60, wall=wall + 2 * GRACE)
    assert stored(engine, digest) == (False, False)
    r = client.post(f"/v1/jobs/{job['id']}/resume?force=true", headers=H)
    assert r.status_code == 409 and "is no longer stored" in r.json()["detail"], r.text
    assert "workdir_retention_seconds" in r.json()["detail"]
    assert service.store.get_job(job["id"]).state is JobState.FAILED


def test_a_submit_racing_a_collection_still_runs_its_code(broker, tmp_path, monkeypatch):
    """The submit finds an old pack no job refers to; a collection sets it aside before the job is stored;
    the job still runs that code, and the next collection sees the job and puts the pack back."""
    client, service, engine = broker
    digest = upload(client, code(tmp_path / "c"))
    wall = time.time() + 2 * GRACE
    check = service._check_workdir

    def check_then_collect(d):
        check(d)
        assert engine.collect_workdirs(time.time(), wall=wall).set_aside == [digest[7:]]

    monkeypatch.setattr(service, "_check_workdir", check_then_collect)
    job = submit(client, digest)
    monkeypatch.undo()
    assert stored(engine, digest) == (False, True)
    until(engine, service, job["id"], JobState.SUCCEEDED)
    assert "code v1" in client.get(f"/v1/jobs/{job['id']}/logs", headers=H).json()["data"]
    done = engine.collect_workdirs(time.time(), wall=wall + 2 * GRACE)
    assert done.removed == [] and stored(engine, digest) == (True, False)


def test_a_submit_after_its_pack_was_removed_is_refused_not_accepted_without_its_code(broker, tmp_path):
    client, service, engine = broker
    digest = upload(client, code(tmp_path / "c"))
    engine.collect_workdirs(time.time(), wall=time.time() + 2 * GRACE)
    engine.collect_workdirs(time.time(), wall=time.time() + 4 * GRACE)
    r = client.post("/v1/jobs", json={"run": "python train.py", "broker": {"workdir": digest}}, headers=H)
    assert r.status_code == 422 and r.json()["field"] == "broker.workdir", r.text
    assert client.get("/v1/jobs", headers=H).json()["jobs"] == []
    assert upload(client, code(tmp_path / "c2")) == digest  # the CLI uploads it again: the same pack
    assert submit(client, digest)


def test_two_brokers_collecting_at_once_agree(broker, tmp_path):
    client, service, engine = broker
    other = Engine(service.settings, service.store, service.launcher)
    kept = upload(client, code(tmp_path / "k"))
    submit(client, kept)
    spare = sorted(upload(client, code(tmp_path / f"s{i}", f"spare {i}")) for i in range(4))

    def both(wall):
        gate, results = threading.Barrier(2), []

        def run(e):
            gate.wait()
            results.append(e.collect_workdirs(time.time(), wall=wall))

        threads = [threading.Thread(target=run, args=(e,)) for e in (engine, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 2 and all(r is not None for r in results)  # neither failed
        return results

    both(time.time() + 2 * GRACE)
    # whether a spare is still in the trash depends on whether the two overlapped (one collection's clock is two
    # grace periods ahead, so a broker that starts after the other has set the spares aside removes them): the
    # spares have left the store either way, and the kept pack stays
    assert [stored(engine, d)[0] for d in spare] == [False] * 4 and stored(engine, kept) == (True, False)
    both(time.time() + 4 * GRACE)
    assert [stored(engine, d) for d in spare] == [(False, False)] * 4 and stored(engine, kept) == (True, False)


def leftovers(engine) -> list[str]:
    """The names in the object store (its packs and its trash) that are not whole packs."""
    s = engine._workdir_store()
    s.fs.invalidate_cache()
    names = []
    for directory in (s._root_path, s._trash_path):
        names += [os.path.basename(n) for n in (s.fs.ls(directory, detail=False) if s.fs.exists(directory) else [])]
    return sorted(n for n in names if not n.endswith(".tar.gz"))


def kill_during_put(engine, tmp_path, directory: Path) -> None:
    """A broker process killed while it stored a pack on the local disk: written, not yet renamed."""
    p = pack(directory)
    script = (
        "import os, signal, sys, types\n"
        "from pathlib import Path\n"
        "import broker.workdir_store as ws\n"
        "ws.os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        "settings = types.SimpleNamespace(checkpoint_root=sys.argv[1], data_dir=Path(sys.argv[2]))\n"
        "ws.WorkdirStore(settings).put(sys.argv[3], Path(sys.argv[4]))\n")
    settings = engine.settings
    done = subprocess.run([sys.executable, "-c", script, settings.checkpoint_root, str(settings.data_dir),
                           p.digest[7:], str(p.path)], env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=60)
    assert done.returncode == -signal.SIGKILL


def test_what_a_write_cut_short_left_in_the_store_is_removed_once_nobody_can_be_writing_it(broker, tmp_path, request):
    client, service, engine = broker
    kept = upload(client, code(tmp_path / "k"))
    submit(client, kept)
    s = engine._workdir_store()
    if request.node.callspec.params["broker"] == "disk":
        kill_during_put(engine, tmp_path, code(tmp_path / "c", "v2"))
    else:  # an object store's PUT is whole or nothing; a name such as a local store's leftover is removed the same
        s.fs.pipe_file(f"{s._root_path}/{'a' * 64}.tar.gz.tmp-{'b' * 32}", b"half a pack")
    s.fs.makedirs(s._trash_path, exist_ok=True)
    s.fs.pipe_file(f"{s._trash_path}/{'c' * 64}.tar.gz.tmp-{'d' * 32}", b"half a copy")  # a copy to the trash, cut
    left = leftovers(engine)
    assert len(left) == 2 and all(".tar.gz.tmp-" in n for n in left)
    # within the grace period a write may still be under way: nothing is touched
    assert engine.collect_workdirs(time.time(), wall=time.time() + GRACE / 2).leftovers == []
    assert leftovers(engine) == left
    done = engine.collect_workdirs(time.time(), wall=time.time() + 2 * GRACE)
    assert sorted(done.leftovers) == left and leftovers(engine) == []
    assert stored(engine, kept) == (True, False) and done.set_aside == []
    assert client.get(f"/v1/workdirs/{kept}", headers=H).status_code == 200


def test_only_the_broker_that_took_a_step_counts_it_and_says_so(broker, tmp_path, monkeypatch, caplog):
    """Two brokers take the same step at once: the other copies the packs to the trash (later: finds them
    there), then this one sets them aside (removes them) before the other removes what it copied (found).
    The pack is counted, and logged, once: by the broker whose removal took it."""
    client, service, engine = broker
    other = Engine(service.settings, service.store, service.launcher)
    spare = sorted(upload(client, code(tmp_path / f"s{i}", f"spare {i}"))[7:] for i in range(2))
    theirs = other._workdir_store()

    def race(step: str, wall: float):
        real, first = getattr(theirs, step), []

        def step_then_overtaken(*args):
            out = real(*args)
            if not first:
                first.append(engine.collect_workdirs(time.time(), wall=wall))
            return out

        monkeypatch.setattr(theirs, step, step_then_overtaken)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="broker.workdirs"):
            late = other.collect_workdirs(time.time(), wall=wall)
        monkeypatch.setattr(theirs, step, real)
        return first[0], late, [r.getMessage() for r in caplog.records if r.getMessage().startswith("workdir packs:")]

    first, late, said = race("_copy", time.time() + 2 * GRACE)  # both copied the first pack to the trash
    assert first.set_aside == spare and late.set_aside == []
    # this broker's line alone (its wall, days ahead, also takes the other's fresh copy in the trash for an old one)
    assert len(said) == 1 and said[0].startswith("workdir packs: 2 set aside (no job refers to them)")
    first, late, said = race("_info", time.time() + 4 * GRACE)  # both found the first pack in the trash
    assert first.removed == spare and late.removed == []
    assert said == ["workdir packs: 0 set aside (no job refers to them), 2 removed, 0 put back; "
                    "0 leftovers of writes cut short removed"]
    assert [stored(engine, f"sha256:{d}") for d in spare] == [(False, False)] * 2
