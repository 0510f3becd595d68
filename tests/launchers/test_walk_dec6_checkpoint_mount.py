"""A task's ``file_mounts: {/ckpt: broker:checkpoint}`` on this host (a pool, a simulated zone): SkyPilot mounts the
checkpoint bucket there, the local launcher does not (a path at ``/`` needs root). The job ran with
BROKER_CHECKPOINT_DIR set while ``/ckpt`` did not exist, and its log's first lines — which say every other mount this
host does not apply — said nothing of it. Real launcher, real runner, a real job."""

from __future__ import annotations

import os
import sys
import time

from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher

DEST = "/ckpt-walk-dec6"  # at / as in the docs' example, and not a path this host has
RUN = f'echo "dir=$BROKER_CHECKPOINT_DIR"; test -e {DEST} && echo "{DEST} exists" || echo "{DEST} missing"'


def _run(tmp_path, checkpoint_uri: str) -> tuple[str, LocalLauncher]:
    launcher = LocalLauncher(tmp_path / "data" / "runs", python=sys.executable)
    task = {"run": RUN, "file_mounts": {DEST: "broker:checkpoint", "/data": "s3://some-bucket/data"}}
    placement = {"tier": "onprem", "cloud": "local", "region": "cpu", "zone": "cpu", "num_nodes": 1}
    launcher.launch(LaunchRequest(attempt_id="j-1-a1", job_id="j-1", attempt=1, task=task, placement=placement,
                                  envs={"BROKER_CHECKPOINT_URI": checkpoint_uri}, stop_grace_seconds=1.0))
    end = time.monotonic() + 30
    while (status := launcher.status("j-1-a1")).phase in (Phase.PENDING, Phase.RUNNING):
        assert time.monotonic() < end, "the attempt did not end"
        time.sleep(0.1)
    assert status.phase is Phase.SUCCEEDED, status
    return launcher.logs("j-1-a1")[0].decode(), launcher


def test_the_checkpoint_mount_not_made_here_is_said_with_where_the_checkpoints_are(tmp_path):
    assert not os.path.exists(DEST)
    folder = tmp_path / "ckpts" / "default" / "j-1"
    log, _ = _run(tmp_path, f"file://{folder}")
    assert f"dir={folder}\n" in log and f"{DEST} missing" in log  # the folder is given; nothing is made at /
    first = log.split("dir=", 1)[0]  # the lines before the job's own output
    assert (f"[spot-broker] file_mounts {DEST}: not mounted: broker:checkpoint is mounted by SkyPilot placements only;"
            f" on this host nothing is made at {DEST}, and the job's checkpoint folder is "
            f"BROKER_CHECKPOINT_DIR={folder} (read it from $BROKER_CHECKPOINT_DIR, not {DEST})\n") in first, log
    # the bucket mount is still named as the one SkyPilot alone mounts, and the checkpoint mount not among them
    assert "file_mounts are not mounted on this host (only SkyPilot placements mount them): /data\n" in first, log
    assert folder.is_dir() and not os.path.exists(DEST)


def test_a_checkpoint_store_that_is_a_bucket_says_no_folder_is_given(tmp_path):
    log, _ = _run(tmp_path, "s3://ckpt-bucket/default/j-1")
    assert "dir=\n" in log  # no BROKER_CHECKPOINT_DIR: the checkpoints are not on this host
    assert (f"[spot-broker] file_mounts {DEST}: not mounted: broker:checkpoint is mounted by SkyPilot placements only;"
            f" on this host nothing is made at {DEST} and BROKER_CHECKPOINT_DIR is not set, as the job's checkpoints "
            f"are in s3://ckpt-bucket/default/j-1, not on this host") in log, log
    assert "file_mounts are not mounted on this host (only SkyPilot placements mount them): /data\n" in log, log
