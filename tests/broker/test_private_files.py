"""The data dir's run folders and checkpoints are the broker's user's alone: ``runs/`` and ``checkpoints/`` were made
0755 (and every file in them 0644), so any user of the host could read every job's output and checkpoints wherever
the data dir let them pass — one given by BROKER_ADMIN_TOKEN was left to the secrets key to make, 0755."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from broker.auth import Principal
from broker.config import load_settings
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher, private_folders
from broker.service import BrokerService
from broker.store import open_store

from broker_testing import REPO, run_until

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.05
stop_grace_seconds: 1
"""
SAVES = f"""
cd {REPO}
python - <<'PY'
from checkpoint import Checkpointer
c = Checkpointer(every_steps=1)
c.restore()
c.save(1, {{"x": 1}}, wait=True)
c.close()
print("saved step 1")
PY
"""


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _open_to_others(top: Path) -> list[str]:
    return [f"{p} {_mode(p):04o}" for p in [top, *top.rglob("*")] if not p.is_symlink() and _mode(p) & 0o077]


def test_a_jobs_output_run_folder_and_checkpoints_are_the_brokers_users_alone(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)  # BROKER_ADMIN_TOKEN given: no token file to make the data dir with
    assert not settings.data_dir.exists()
    store = open_store(f"sqlite://{tmp_path / 's.db'}")  # not in the data dir: the launcher makes that
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    job = service.submit(ADMIN, {"run": SAVES, "broker": {"budget_usd": 1}})[0]
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    assert final.state is JobState.SUCCEEDED, (final.reason, service.logs(ADMIN, job.id)["data"])
    assert "saved step 1" in service.logs(ADMIN, job.id)["data"]
    data = settings.data_dir
    assert _mode(data) == 0o700
    for folder in ("runs", "checkpoints", "zones"):
        assert _mode(data / folder) == 0o700, folder
    run_dir = data / "runs" / f"{job.id}-a1"
    assert {"output.log", "exit.json", "runner.log", "runner.pid", "request.json"} <= {p.name for p in run_dir.iterdir()}
    # the folder and every file the launcher and its runner wrote (the job's own checkpoint library makes its notice
    # listeners' folder of pids as the job's umask has it, inside this one)
    assert [p for p in _open_to_others(run_dir) if ".listeners" not in p] == []
    assert list((data / "checkpoints" / job.id).glob("step-*")), "the job saved where it always did"
    store.close()


def test_an_open_runs_folder_and_default_checkpoint_root_an_older_broker_made_are_closed(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    for folder in ("runs", "checkpoints"):
        (settings.data_dir / folder).mkdir(parents=True)
        os.chmod(settings.data_dir / folder, 0o755)
    open_launcher(settings)
    assert _mode(settings.data_dir / "runs") == 0o700
    assert _mode(settings.data_dir / "checkpoints") == 0o700


def test_a_checkpoint_root_elsewhere_is_made_closed_and_left_as_it_is_when_it_exists(make_settings, tmp_path):
    mine = tmp_path / "elsewhere" / "ckpt"
    settings = make_settings(config=CONFIG, BROKER_CHECKPOINT_ROOT=f"file://{mine}")
    private_folders(settings)
    assert _mode(mine) == 0o700
    os.chmod(mine, 0o750)  # the operator's choice (a group that reads them)
    private_folders(settings)
    assert _mode(mine) == 0o750


@pytest.mark.skipif(os.geteuid() != 0, reason="run_as needs the broker to run as root")
def test_with_run_as_the_default_root_keeps_the_way_the_runner_opened_and_a_fresh_data_dir_starts():
    """Jobs run as other users pass the data dir and the root to their own folders (0711, launchers/run_as.py):
    closing the root at a restart would cut running jobs off their checkpoints. And a fresh data dir, made 0700
    at start, was refused as one others cannot pass to the root inside it — which the runner opens itself."""
    tmp_path = Path(tempfile.mkdtemp(prefix="run-as-", dir="/tmp"))  # pytest's own are root's alone: none may pass
    os.chmod(tmp_path, 0o711)
    try:
        _run_as_start(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _run_as_start(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text('pools:\n  - {name: cpu, slots: 1, price_per_slot_hour: "0.1", run_as: {"*": nobody}}\n')
    env = {"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": "admin-token-for-tests"}
    settings = load_settings(env, config_path=config, create_admin_token=True)
    assert _mode(settings.data_dir) == 0o700
    (settings.data_dir / "checkpoints").mkdir(mode=0o711)
    os.chmod(settings.data_dir / "checkpoints", 0o711)
    private_folders(settings)
    assert _mode(settings.data_dir / "checkpoints") == 0o711


def test_the_notice_a_job_run_as_another_user_reads_is_still_readable_by_it(tmp_path):
    from launchers.local_runner import _write_atomic

    _write_atomic(tmp_path / "notice.json", {"reason": "preempted"}, tmp=tmp_path / "notice.tmp", mode=0o644)
    _write_atomic(tmp_path / "exit.json", {"exit_code": 0})
    assert _mode(tmp_path / "notice.json") == 0o644 and json.loads((tmp_path / "notice.json").read_text())
    assert _mode(tmp_path / "exit.json") == 0o600


def test_a_data_dir_the_secrets_key_makes_is_private(tmp_path):
    """`broker worker` makes no data dir of its own before the secrets key does: it was made with the umask's mode."""
    import os
    import stat

    from broker.sealing import data_dir_key

    old = os.umask(0o022)
    try:
        assert data_dir_key(tmp_path / "fresh", create=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh").stat().st_mode) == 0o700
