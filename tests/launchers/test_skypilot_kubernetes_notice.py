"""A Kubernetes pod's deletion as a preemption notice: the broker's SkyPilot lifecycle hook writes the notice
file the checkpoint library watches (``launchers/skypilot_task.py``: :func:`notice_hook`).

What runs here is real: the task through ``sky.Task`` (SkyPilot's schema for ``config.hooks``), the grace
SkyPilot 0.14.1 gives the pod from those hooks, and the hook run by SkyPilot's own hook executor (what the
skylet runs when the pod's ``preStop`` hook sends it SIGTERM) next to a training loop using
:class:`checkpoint.Checkpointer`. What is not: a Kubernetes cluster — the kubelet running ``preStop``, the
skylet's SIGTERM handler, the pod's ``terminationGracePeriodSeconds`` being honoured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from launchers.base import LaunchRequest
from launchers.skypilot import attempt_config, build_task
from launchers.skypilot_task import K8S_NOTICE_FILE, notice_hook

REPO = Path(__file__).resolve().parents[2]
POOL = {"tier": "onprem", "cloud": "kubernetes", "region": "lab-gpus", "zone": "lab", "instance_type": "lab-2slot",
        "accelerator": "A100", "accelerator_count": 2, "num_nodes": 1}
SPOT_AWS = {"tier": "spot", "cloud": "aws", "region": "us-east-1", "zone": "us-east-1b", "instance_type": "p4d.24xlarge",
            "accelerator": "A100", "accelerator_count": 8, "num_nodes": 1}
TASK = {"run": "python train.py", "resources": {"accelerators": "A100:2"}}


def request(task, placement, grace=30):
    return LaunchRequest(attempt_id="j-k-a1", job_id="j-k", attempt=1, task=task, placement=placement,
                         envs={"BROKER_JOB_ID": "j-k"}, stop_grace_seconds=grace)


def built(task, placement, grace=30):
    return build_task(attempt_config(request(task, placement, grace)))


def test_a_kubernetes_attempt_carries_the_notice_hook_and_the_job_is_told_the_file(sky):
    task = built(TASK, POOL)
    (resources,) = task.resources
    assert resources.hooks[0] == notice_hook(K8S_NOTICE_FILE, 30)
    assert resources.hooks[0]["events"] == ["preemption"] and resources.hooks[0]["timeout"] == 30
    assert task.envs["BROKER_NOTICE_FILE"] == K8S_NOTICE_FILE
    assert task.to_yaml_config()["config"]["hooks"] == resources.hooks  # what SkyPilot sends the skylet


def test_a_cloud_attempt_has_no_hook_and_no_notice_file(sky):
    task = built(TASK, SPOT_AWS)
    (resources,) = task.resources
    assert not resources.hooks and "BROKER_NOTICE_FILE" not in task.envs


def test_the_tasks_own_config_and_hooks_are_kept_after_the_brokers(sky):
    own_hook = {"run": "echo bye", "events": ["preemption", "down"], "timeout": 20}
    task = {**TASK, "config": {"hooks": [own_hook], "kubernetes": {"provision_timeout": 900}}}
    given = json.loads(json.dumps(task))
    sky_task = built(task, POOL)
    (resources,) = sky_task.resources
    assert resources.hooks == [notice_hook(K8S_NOTICE_FILE, 30), own_hook]
    assert resources.cluster_config_overrides == {"kubernetes": {"provision_timeout": 900}}
    assert task == given, "the user's task is never changed"


def test_the_pods_grace_period_skypilot_sets_covers_the_notice_hook_and_the_tasks_own(sky):
    from sky.clouds.kubernetes import _compute_preemption_hook_timeout  # what the pod's template is given

    (alone,) = built(TASK, POOL, grace=45).resources
    assert _compute_preemption_hook_timeout(alone.hooks) == 45
    task = {**TASK, "config": {"hooks": [{"run": "echo bye", "events": ["preemption"], "timeout": 20}]}}
    (both,) = built(task, POOL, grace=45).resources
    assert _compute_preemption_hook_timeout(both.hooks) == 65
    # a stop grace beyond the pod's cap: the notice promises no more than the pod gets
    (long,) = built(TASK, POOL, grace=900).resources
    assert _compute_preemption_hook_timeout(long.hooks) == 600
    assert '"grace_seconds": %s' in long.hooks[0]["run"] and "broker_grace=595" in long.hooks[0]["run"]


TRAIN = textwrap.dedent("""
    import sys, time
    from checkpoint import Checkpointer
    ckpt = Checkpointer(sys.argv[1], every_steps=10_000)
    print("ready", flush=True)
    for step in range(10_000):
        time.sleep(0.05)
        ckpt.save(step, {"step": step})
        print("step", step, flush=True)
    print("finished without a notice", flush=True)
""")

SKYLET = textwrap.dedent("""
    import json, sys
    from sky.skylet import hook_executor
    hook_executor.run("preemption", json.loads(sys.argv[1]))
""")


def test_the_hook_run_as_the_skylet_runs_it_makes_a_training_loop_save_at_its_next_step_and_exit(sky, tmp_path):
    notice = tmp_path / "notice.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "BROKER_NOTICE_FILE": str(notice), "HOME": str(tmp_path)}
    train = subprocess.Popen([sys.executable, "-c", TRAIN, str(tmp_path / "ckpt")], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert train.stdout.readline().strip() == "ready"
        assert train.stdout.readline().startswith("step")
        hooks = [notice_hook(str(notice), 30)]
        skylet = subprocess.run([sys.executable, "-c", SKYLET, json.dumps(hooks)], env=env, timeout=60,
                                capture_output=True, text=True)
        ended = time.time()  # timed from the notice the hook wrote: the skylet's start (importing sky) is not
        out, err = train.communicate(timeout=30)
    finally:
        if train.poll() is None:
            train.kill()
    assert skylet.returncode == 0, skylet.stderr
    assert train.returncode == 143, err  # as on any preemption notice
    assert "finished without a notice" not in out
    written = json.loads(notice.read_text())
    assert written["grace_seconds"] == 25 and abs(written["at"] - time.time()) < 60
    assert "the broker announces a stop" in err and "preempted: checkpoint" in err
    saved = [p.name for p in (tmp_path / "ckpt").iterdir() if p.name.startswith("step-")]
    assert saved, "the notice's save was committed"
    # the hook's `date +%s` is whole seconds; the grace period is 25 s
    assert ended - written["at"] < 15, "the hook ends once the job has saved, not at the end of the grace period"
    hook_log = (tmp_path / ".sky" / "hooks" / "preemption.log")
    assert hook_log.exists()  # SkyPilot's executor ran it, as the skylet does


def test_with_no_listener_the_hook_writes_the_notice_and_ends_at_once(tmp_path):
    notice = tmp_path / "notice.json"
    started = time.monotonic()
    done = subprocess.run(["/bin/bash", "-c", notice_hook(str(notice), 30)["run"]], timeout=30)
    assert done.returncode == 0 and time.monotonic() - started < 5
    assert json.loads(notice.read_text())["reason"] == "the pod is being deleted"
