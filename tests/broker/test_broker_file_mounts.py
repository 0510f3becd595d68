"""A task's file_mounts whose sources are paths on the submitter's machine, shipped to a broker on another
host as its workdir is: packed, uploaded once under their SHA-256, named in ``broker.file_mounts``, and
unpacked afresh for each attempt.

Real parts: ``broker serve`` and the CLI as subprocesses (``--upload-workdir``: the remote path on this
host), the HTTP API in process, the local launcher running the jobs, packs on the local disk.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.store import open_store
from broker.workdir import pack, pack_file

from broker_testing import ADMIN, DAY, WORKDIR_GRACE as GRACE, WORKDIR_RETENTION as RETENTION, start_broker, wait_for

H = {"Authorization": f"Bearer {ADMIN}"}
pytestmark = pytest.mark.usefixtures("packs_in_tmp_path")


def tokenizer(root: Path, text: str = "vocab v1") -> Path:
    root.mkdir(parents=True)
    (root / "vocab.txt").write_text(text + "\n")
    (root / ".gitignore").write_text("cache/\n")
    (root / "cache").mkdir()
    (root / "cache" / "big.bin").write_text("left out, as from a workdir")
    return root


# -- end to end: the CLI and a broker serve ------------------------------------------------------

CONFIG = """
pools: [{name: cpu, slots: 2, price_per_slot_hour: "0.05"}]
tick_seconds: 0.2
stop_grace_seconds: 2
"""

RUN = """\
echo "tokenizer: $(cat {node}/data/tokenizer/vocab.txt)"
echo "cache left out: $(test -e {node}/data/tokenizer/cache && echo no || echo yes)"
echo "config: $(cat {node}/cfg/x.yaml)"
echo "mine to change" >> {node}/data/tokenizer/vocab.txt
"""


def test_a_job_on_a_remote_broker_reads_its_local_file_mounts_and_no_path_of_the_submitter_is_stored(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'm.db'}", config=CONFIG)
    env = {**os.environ, "BROKER_URL": url, "BROKER_TOKEN": ADMIN}
    user, node = tmp_path / "user", tmp_path / "node"  # node: where the job mounts them (made by the link)
    try:
        tokenizer(user / "tokenizer")
        (user / "x.yaml").write_text("lr: 3\n")
        code = user / "proj"
        code.mkdir()
        (code / "train.py").write_text("print(1)\n")
        (code / "task.yaml").write_text(json.dumps({
            "name": "mounted", "workdir": ".", "resources": {"cpus": 1}, "run": RUN.format(node=node),
            "file_mounts": {f"{node}/data/tokenizer": "../tokenizer", f"{node}/cfg/x.yaml": "~/x.yaml",
                            f"{node}/bucket": "s3://some-bucket/data", "/ckpt": "broker:checkpoint"},
            "broker": {"budget_usd": 1}}))
        r = subprocess.run([sys.executable, "-m", "broker.cli", "submit", "task.yaml", "--upload-workdir", "--wait"],
                           env={**env, "HOME": str(user)}, cwd=code, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"file_mounts {node}/data/tokenizer ({user}/tokenizer): 2 files" in r.stderr, r.stderr
        assert f"file_mounts {node}/cfg/x.yaml (~/x.yaml): 1 file," in r.stderr, r.stderr
        assert "tokenizer: vocab v1" in r.stdout and "config: lr: 3" in r.stdout, r.stdout
        assert "cache left out: yes" in r.stdout, r.stdout  # the same ignore rules as a workdir
        assert (user / "tokenizer" / "vocab.txt").read_text() == "vocab v1\n"  # the job changed its own copy

        job = open_store(f"sqlite://{tmp_path / 'm.db'}").list_jobs(limit=10)[0]
        assert str(user) not in json.dumps(job.spec) and "~/x.yaml" not in json.dumps(job.spec), job.spec
        assert job.spec["file_mounts"] == {f"{node}/bucket": "s3://some-bucket/data", "/ckpt": "broker:checkpoint"}
        shipped = job.spec["broker"]["file_mounts"]
        assert shipped[f"{node}/data/tokenizer"] == pack(user / "tokenizer").digest
        assert shipped[f"{node}/cfg/x.yaml"] == pack_file(user / "x.yaml").digest + "/x.yaml"

        # the copies go with the attempt, and the links the local launcher made with them
        mounts = tmp_path / "data" / "workdirs" / "mounts"
        wait_for(lambda: not (mounts / f"{job.id}-a1").exists())
        assert not os.path.lexists(node / "data" / "tokenizer") and not os.path.lexists(node / "cfg" / "x.yaml")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_a_local_file_mounts_source_missing_here_is_refused_before_anything_is_sent(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'm.db'}", config=CONFIG)
    try:
        (tmp_path / "task.yaml").write_text(json.dumps({"run": "true", "file_mounts": {"/data/t": "./nowhere"}}))
        r = subprocess.run([sys.executable, "-m", "broker.cli", "submit", "task.yaml", "--upload-workdir"],
                           env={**os.environ, "BROKER_URL": url, "BROKER_TOKEN": ADMIN}, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and "file_mounts /data/t: ./nowhere: no such file or directory here" in r.stderr, \
            r.stderr
        assert open_store(f"sqlite://{tmp_path / 'm.db'}").list_jobs(limit=10) == []
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


# -- the API and the engine ------------------------------------------------------------------------


@pytest.fixture
def broker(make_settings, tmp_path):
    settings = make_settings(config="tick_seconds: 0.1\nstop_grace_seconds: 1\n")
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        service = client.app.state.service
        yield client, service, Engine(settings, service.store, service.launcher)


def upload(client, packed) -> str:
    r = client.put(f"/v1/workdirs/{packed.digest}", content=packed.path.read_bytes(), headers=H)
    assert r.status_code in (200, 201), r.text
    return packed.digest


def until(engine, service, job_id, *states):
    return wait_for(lambda: engine.tick() or ((j := service.store.get_job(job_id)).state in states and j), timeout=60)


BAD = "sha256:" + "ab" * 32


@pytest.mark.parametrize("mounts, task_mounts, field, detail", [
    pytest.param({"/data/t": BAD}, {}, "broker.file_mounts./data/t", f"no uploaded pack {BAD} on this broker",
                 id="a pack that was never uploaded"),
    pytest.param({"/data/t": BAD + "/vocab.txt"}, {}, "broker.file_mounts./data/t", "no uploaded pack",
                 id="the file of a pack that was never uploaded"),
    pytest.param({"/data/t": "./tokenizer"}, {}, "broker.file_mounts./data/t", "must be an uploaded pack",
                 id="a local path, not a pack"),
    pytest.param({"data": BAD}, {}, "broker.file_mounts.data", "absolute path", id="a relative destination"),
    pytest.param({"/": BAD}, {}, "broker.file_mounts./", "cannot be / itself", id="the root, which SkyPilot refuses"),
    pytest.param({"/data/t": BAD}, {"/data/t": "s3://b/t"}, "broker.file_mounts./data/t", "give one",
                 id="mounted twice"),
])
def test_submit_refuses_a_file_mount_pack_it_does_not_hold_naming_the_field(broker, mounts, task_mounts, field, detail):
    client, _, _ = broker
    task = {"run": "true", "broker": {"file_mounts": mounts}, **({"file_mounts": task_mounts} if task_mounts else {})}
    r = client.post("/v1/jobs", json=task, headers=H)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert detail in r.json()["detail"], r.text
    assert client.get("/v1/jobs", headers=H).json()["jobs"] == []


def test_a_mounted_pack_is_kept_while_its_job_lives_and_collected_after(broker, tmp_path):
    client, service, engine = broker
    mounted = upload(client, pack(tokenizer(tmp_path / "tok")))
    spare = upload(client, pack(tokenizer(tmp_path / "other", "vocab v2")))
    go = tmp_path / "go"
    dest = tmp_path / "node" / "tokenizer"
    r = client.post("/v1/jobs", headers=H, json={
        "run": f"cat {dest}/vocab.txt; while [ ! -f {go} ]; do sleep 0.05; done; exit 3",
        "broker": {"file_mounts": {str(dest): mounted}}})  # no workdir: file_mounts alone
    assert r.status_code == 201, r.text
    job = r.json()
    until(engine, service, job["id"], JobState.RUNNING)
    copy = service.settings.data_dir / "workdirs" / "mounts" / f"{job['id']}-a1" / "0"
    wait_for(lambda: "vocab v1" in client.get(f"/v1/jobs/{job['id']}/logs", headers=H).json()["data"])
    assert os.readlink(dest) == str(copy)
    later = time.time() + 2 * GRACE
    taken = []
    for _ in range(3):  # collections and sweeps while it runs: its pack and its copy stay; the spare goes
        done = engine.collect_workdirs(time.time(), wall=later)
        engine.sweep_workdirs()
        taken += done.set_aside + done.removed
    assert taken == [spare[7:], spare[7:]]  # set aside, then removed
    assert client.get(f"/v1/workdirs/{mounted}", headers=H).status_code == 200
    assert (copy / "vocab.txt").is_file()
    go.touch()
    ended = until(engine, service, job["id"], JobState.FAILED)  # a failed job: resumable, with its files
    wait_for(lambda: not copy.parent.exists())
    assert not os.path.lexists(dest)
    # within the retention the ended job still refers to it; past it, set aside then removed, and a resume refused
    assert mounted[7:] not in engine.collect_workdirs(ended.updated_at + RETENTION - 60, wall=later).set_aside
    assert engine.collect_workdirs(ended.updated_at + RETENTION + 60, wall=later).set_aside == [mounted[7:]]
    assert engine.collect_workdirs(ended.updated_at + RETENTION + 60, wall=later + 2 * GRACE).removed == [mounted[7:]]
    r = client.post(f"/v1/jobs/{job['id']}/resume?force=true", headers=H)
    assert r.status_code == 409, r.text
    assert f"its uploaded file_mounts {dest} {mounted} is no longer stored" in r.json()["detail"]


def test_a_mounted_file_gone_from_its_pack_fails_the_job_naming_the_mount(broker, tmp_path):
    client, service, engine = broker
    (tmp_path / "x.yaml").write_text("lr: 3\n")
    digest = upload(client, pack_file(tmp_path / "x.yaml"))
    r = client.post("/v1/jobs", headers=H, json={"run": "true",
                                                "broker": {"file_mounts": {"/cfg/y.yaml": f"{digest}/y.yaml"}}})
    assert r.status_code == 201, r.text
    failed = until(engine, service, r.json()["id"], JobState.FAILED)
    assert f"its file_mounts /cfg/y.yaml {digest}/y.yaml cannot be unpacked: holds no file 'y.yaml'" in failed.reason



def test_a_mounted_file_whose_name_has_shell_characters_reaches_the_launcher_under_a_name_of_the_brokers(
        broker, tmp_path):
    """SkyPilot rsyncs a local source through a shell, quoting it with Python's repr (a name with a quote is put
    in double quotes, where ``$(...)`` runs: tests/launchers/test_skypilot_task.py): the name of a submitter's
    file is never what the launcher is handed."""
    client, service, engine = broker
    odd = tmp_path / "up" / "vocab'$(touch pwned).json"
    odd.parent.mkdir()
    odd.write_text("v1\n")
    digest = upload(client, pack_file(odd))
    dest, go = tmp_path / "node" / "vocab.json", tmp_path / "go"
    r = client.post("/v1/jobs", headers=H, json={"run": f"cat {dest}; while [ ! -f {go} ]; do sleep 0.05; done",
                                                "broker": {"file_mounts": {str(dest): f"{digest}/{odd.name}"}}})
    assert r.status_code == 201, r.text
    job = r.json()
    until(engine, service, job["id"], JobState.RUNNING)
    wait_for(lambda: "v1" in client.get(f"/v1/jobs/{job['id']}/logs", headers=H).json()["data"])
    request = json.loads((service.settings.data_dir / "runs" / f"{job['id']}-a1" / "request.json").read_text())
    source = request["task"]["file_mounts"][str(dest)]
    assert source == str(service.settings.data_dir / "workdirs" / "mounts" / f"{job['id']}-a1" / "0.file"), source
    assert Path(source).read_text() == "v1\n"
    go.touch()
    until(engine, service, job["id"], JobState.SUCCEEDED)


def test_a_resume_of_a_job_whose_mount_a_newer_broker_wrote_in_a_form_this_one_cannot_read_is_not_a_500(broker):
    from dataclasses import replace

    from broker.store import Change

    client, service, engine = broker
    job = client.post("/v1/jobs", headers=H, json={"run": "exit 3"}).json()
    ended = until(engine, service, job["id"], JobState.FAILED)
    stored = service.store.get_job(job["id"])
    spec = {**stored.spec, "broker": {**stored.spec.get("broker", {}), "file_mounts": {"/d": "pack-v2:abc"}}}
    service.store.commit(Change(job=replace(stored, spec=spec), expected_version=stored.version))
    r = client.post(f"/v1/jobs/{ended.id}/resume?force=true", headers=H)
    assert r.status_code < 500, r.text
