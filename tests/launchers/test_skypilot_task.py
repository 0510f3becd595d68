"""Layer 1: every task the broker generates goes through the real ``sky.Task`` and back.

``sky.Task.from_yaml_config`` validates against SkyPilot's schema and builds real
``Resources`` (checked against the catalog); ``to_yaml_config`` shows what SkyPilot will run.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from skypilot_fakes import run_as_skypilot_runs_setup

from launchers.base import LaunchError, LaunchRequest
from launchers.skypilot import TaskError, attempt_config, build_task, cluster_name, validate_task
from launchers.skypilot_task import (
    BUDGET_EXIT_CODE,
    CHECKPOINT_MOUNT,
    TaskConfigError,
    budget_stop_in,
    budget_stopped_step,
    exit_code_in,
    guarded_run,
    infra,
    reporting_exit_code,
)

REPO = Path(__file__).resolve().parents[2]

SPOT_A100 = {"tier": "spot", "cloud": "aws", "region": "us-east-1", "zone": "us-east-1b",
             "instance_type": "p4d.24xlarge", "accelerator": "A100", "accelerator_count": 8, "num_nodes": 1,
             "price_per_hour": 2_465_500, "simulated": False}
ONDEMAND_T4 = {"tier": "ondemand", "cloud": "aws", "region": "us-west-2", "zone": "us-west-2a",
               "instance_type": "g4dn.xlarge", "accelerator": "T4", "accelerator_count": 1, "num_nodes": 2,
               "price_per_hour": 526_000, "simulated": False}
ONDEMAND_CPU = {"tier": "ondemand", "cloud": "aws", "region": "us-east-2", "zone": None,
                "instance_type": "m6i.2xlarge", "accelerator": None, "accelerator_count": 0, "num_nodes": 1}
ENVS = {"BROKER_JOB_ID": "j-0123456789", "BROKER_ATTEMPT": "2", "BROKER_CHECKPOINT_URI": "s3://broker-ckpt/runs/j-0123456789",
        "BROKER_PROGRESS_URL": "https://broker.example/v1/jobs/j-0123456789/progress",
        "BROKER_RESUME_FROM": "s3://broker-ckpt/runs/j-0123456789/step-400", "BROKER_JOB_TOKEN": "tok"}

GPU_TASK = {
    "name": "train-gpt",
    "resources": {"any_of": [{"accelerators": "A100:8"}, {"accelerators": {"T4": 1}, "disk_size": 100}],
                  "cpus": "4+"},
    "envs": {"EPOCHS": 3, "BROKER_ATTEMPT": "user value, overridden"},
    "setup": "pip list",
    "run": "python train.py --epochs $EPOCHS",
}


def example(name: str) -> dict:
    spec = yaml.safe_load((REPO / "examples" / name).read_text())
    spec.pop("broker", None)
    return spec


def request(task, placement, envs=ENVS, attempt_id="j-0123456789-a2"):
    return LaunchRequest(attempt_id=attempt_id, job_id="j-0123456789", attempt=2, task=task, placement=placement,
                         envs=dict(envs))


CASES = [
    ("hello example on on-demand CPU in us-east-2", example("hello.yaml"), ONDEMAND_CPU),
    ("train example on on-demand CPU in us-east-2", example("train.yaml"), ONDEMAND_CPU),
    ("any_of GPU task resolved to 8x A100 spot in us-east-1b", GPU_TASK, SPOT_A100),
    ("any_of GPU task resolved to T4 on-demand in us-west-2a on 2 nodes", GPU_TASK, ONDEMAND_T4),
]


@pytest.mark.parametrize("task, placement", [(t, p) for _, t, p in CASES], ids=[c[0] for c in CASES])
def test_generated_task_round_trips_through_skypilot_with_the_placement_pinned(sky, task, placement):
    given = copy.deepcopy(task)
    config = attempt_config(request(task, placement))
    dumped = build_task(config).to_yaml_config()

    assert task == given, "the user's task is never changed"
    resources = dumped["resources"]
    where = "/".join(p for p in (placement["cloud"], placement["region"], placement["zone"]) if p)
    assert resources["infra"] == where
    assert resources["instance_type"] == placement["instance_type"]
    assert bool(resources.get("use_spot")) is (placement["tier"] == "spot")
    if placement["accelerator"]:
        assert resources["accelerators"] == {placement["accelerator"]: placement["accelerator_count"]}
    assert dumped.get("num_nodes", 1) == placement["num_nodes"]
    given_to_job = {**dumped["envs"], **dumped.get("secrets", {})}  # SkyPilot sets both in the job's environment
    assert {k: given_to_job[k] for k in ENVS} == ENVS, "the broker's variables win over the task's"
    for key in ("setup", "name"):
        assert dumped.get(key) == task.get(key)
    assert dumped["run"] == reporting_exit_code(task["run"])  # the user's script, reporting its exit status
    assert resources["labels"] == {"broker-job": "j-0123456789", "broker-attempt": "j-0123456789-a2"}


def test_spot_on_aws_or_gcp_tells_the_checkpoint_library_to_watch_the_clouds_notice(sky):
    spot = build_task(attempt_config(request(GPU_TASK, SPOT_A100))).to_yaml_config()["envs"]
    assert spot["BROKER_PREEMPTION_METADATA"] == "aws" and spot["BROKER_PREEMPTION_GRACE_S"] == "110"
    on_demand = build_task(attempt_config(request(GPU_TASK, ONDEMAND_T4))).to_yaml_config()["envs"]
    assert "BROKER_PREEMPTION_METADATA" not in on_demand and "BROKER_PREEMPTION_GRACE_S" not in on_demand
    own = {**GPU_TASK, "envs": {"BROKER_PREEMPTION_GRACE_S": "60"}}  # a task's own grace is kept
    assert build_task(attempt_config(request(own, SPOT_A100))).to_yaml_config()["envs"]["BROKER_PREEMPTION_GRACE_S"] == "60"


@pytest.mark.parametrize("own", [None, {"WANDB_API_KEY": "w-key"}, ["secrets:HF_TOKEN"]],
                         ids=["a task without secrets", "a task with inline secrets", "a task with managed secret refs"])
def test_the_job_token_is_a_secret_skypilot_redacts_never_an_env_it_shows(sky, own):
    task = {**GPU_TASK, "envs": {**GPU_TASK["envs"], "BROKER_JOB_TOKEN": "a user's, overridden"}}
    if own is not None:
        task["secrets"] = own
    built = build_task(attempt_config(request(task, SPOT_A100)))
    assert built.envs_and_secrets["BROKER_JOB_TOKEN"].get_secret_value() == ENVS["BROKER_JOB_TOKEN"]
    assert "BROKER_JOB_TOKEN" not in built.envs
    shown = built.to_yaml_config(use_user_specified_yaml=True)  # what the API server and dashboard keep
    assert ENVS["BROKER_JOB_TOKEN"] not in yaml.safe_dump(shown)
    if isinstance(own, dict):
        assert built.secrets["WANDB_API_KEY"].get_secret_value() == "w-key", "the task's own secrets are kept"
    if isinstance(own, list):
        assert "secrets:HF_TOKEN" in yaml.safe_dump(built.to_yaml_config()), "a managed secret ref is kept"


def test_the_chosen_any_of_alternative_keeps_its_own_settings(sky):
    dumped = build_task(attempt_config(request(GPU_TASK, ONDEMAND_T4))).to_yaml_config()
    assert dumped["resources"]["disk_size"] == 100
    assert dumped["resources"]["cpus"] == "4+"
    assert "any_of" not in dumped["resources"]


def test_a_checkpoint_mount_becomes_the_bucket_mounted_and_a_folder_variable(sky, bucket):
    task = {**GPU_TASK, "file_mounts": {"/ckpt": CHECKPOINT_MOUNT}}
    dumped = build_task(attempt_config(request(task, SPOT_A100))).to_yaml_config()
    assert dumped["file_mounts"]["/ckpt"] == {"source": "s3://broker-ckpt", "mode": "MOUNT", "persistent": True}
    assert dumped["envs"]["BROKER_CHECKPOINT_DIR"] == "/ckpt/runs/j-0123456789"


def test_a_checkpoint_mount_of_a_store_that_is_no_bucket_is_refused():
    task = {**GPU_TASK, "file_mounts": {"/ckpt": CHECKPOINT_MOUNT}}
    with pytest.raises(LaunchError, match="cannot be mounted"):
        attempt_config(request(task, SPOT_A100, envs={**ENVS, "BROKER_CHECKPOINT_URI": "/var/lib/broker/ckpt"}))


def test_building_the_task_leaves_the_config_intact(sky):
    config = attempt_config(request(GPU_TASK, SPOT_A100))
    before = copy.deepcopy(config)
    build_task(config)
    assert config == before, "from_yaml_config empties the dict it is given; build_task gives it a copy"


def test_an_onprem_placement_is_not_for_skypilot():
    with pytest.raises(TaskConfigError, match="not one SkyPilot provisions"):
        infra({"tier": "onprem", "cloud": "local", "region": "lab"})


@pytest.mark.parametrize("placement, expected", [
    ({"cloud": "aws", "region": "us-east-1", "zone": "us-east-1a"}, "aws/us-east-1/us-east-1a"),
    ({"cloud": "aws", "region": "us-east-1", "zone": None}, "aws/us-east-1"),
    ({"cloud": "kubernetes", "region": "lab-gpus"}, "k8s/lab-gpus"),
], ids=["a zone pins cloud, region and zone", "no zone pins the region", "kubernetes pins the context"])
def test_infra(placement, expected):
    assert infra(placement) == expected


@pytest.mark.parametrize("attempt_id, expected", [
    ("j-0123456789-a1", "broker-j-0123456789-a1"),
    ("j-0123456789-a12", "broker-j-0123456789-a12"),
], ids=["an attempt id names its cluster", "a two-digit attempt too"])
def test_cluster_name_is_the_attempt_id(attempt_id, expected):
    assert cluster_name(attempt_id) == expected


def test_an_unusual_attempt_id_still_gives_a_valid_distinct_cluster_name():
    a, b = cluster_name("Job_A" * 10 + "-a1"), cluster_name("Job_A" * 10 + "-a2")
    assert a != b and len(a) <= 40 and a == a.lower() and a.startswith("broker-")


# --- validate_task (broker submit) ---------------------------------------------------------------

VALID = [
    ("the hello example", example("hello.yaml")),
    ("the train example", example("train.yaml")),
    ("an any_of GPU task", GPU_TASK),
    ("a task asking for the checkpoint mount", {**GPU_TASK, "file_mounts": {"/ckpt": CHECKPOINT_MOUNT}}),
    ("a task with a broker section", {**example("hello.yaml"), "broker": {"budget_usd": 3}}),
    ("an accelerator SkyPilot does not know (refused later, by the plan, not at submit)",
     {"resources": {"accelerators": "B999:8"}, "run": "x"}),
]


@pytest.mark.parametrize("task", [t for _, t in VALID], ids=[v[0] for v in VALID])
def test_valid_tasks_are_accepted_unchanged(sky, task):
    given = copy.deepcopy(task)
    validate_task(task)
    assert task == given


INVALID = [
    ("a misspelt top-level field is named", {"runn": "echo"}, "runn", "run"),
    ("a wrong type under resources names the field", {"resources": {"use_spot": "often"}, "run": "x"},
     "resources.use_spot", "often"),
    ("a misspelt resources field is named with its path", {"resources": {"acelerators": "A100"}, "run": "x"},
     "resources.acelerators", "accelerators"),
    ("an invalid variable name names envs", {"envs": {"1BAD": "x"}, "run": "x"}, "envs", "1BAD"),
    ("num_nodes that is not a number names num_nodes", {"num_nodes": "two", "run": "x"}, "num_nodes", "two"),
]


@pytest.mark.parametrize("task, field, mentions", [(t, f, m) for _, t, f, m in INVALID], ids=[i[0] for i in INVALID])
def test_invalid_tasks_are_refused_with_skypilots_message_naming_the_field(sky, task, field, mentions):
    with pytest.raises(TaskError) as caught:
        validate_task(task)
    assert caught.value.field == field
    assert mentions in caught.value.reason


@pytest.mark.parametrize("script, status", [
    pytest.param("echo hi", 0, id="a script that succeeds reports 0"),
    pytest.param("echo start\nexit 3\necho never", 3, id="its own exit ends only the subshell and is reported"),
    pytest.param("set -e\nfalse\necho never", 1, id="set -e stops the script, and the status is still reported"),
    pytest.param("sh -c 'kill -9 $$'", 137, id="a process killed by SIGKILL (the OOM killer) reports 137"),
    pytest.param("cat <<'EOF'\n)\nEOF\nexit 7", 7, id="a heredoc holding a bracket does not break the wrapper"),
    pytest.param("python3 -c 'import sys; sys.exit(42)' \\\n  && echo ok", 42, id="a trailing line continuation is closed first"),
])
def test_the_wrapped_run_reports_the_scripts_own_exit_status_in_real_bash(tmp_path, script, status):
    import subprocess

    plain = subprocess.run(["bash", "-c", script], capture_output=True, cwd=tmp_path)
    wrapped = subprocess.run(["bash", "-c", reporting_exit_code(script)], capture_output=True, cwd=tmp_path)
    as_bash_reports = plain.returncode if plain.returncode >= 0 else 128 - plain.returncode  # killed by N: 128 + N
    assert as_bash_reports == wrapped.returncode == status
    assert exit_code_in(wrapped.stdout) == status
    assert wrapped.stdout.startswith(plain.stdout)  # the script's own output is unchanged


def test_the_exit_status_is_read_from_the_logs_the_first_failing_node_wins():
    line = b"[spot-broker] run exited with status "
    assert exit_code_in(b"step 1\n" + line + b"0\n") == 0
    assert exit_code_in(b"(worker1) " + line + b"0\n" + line + b"139\n") == 139
    assert exit_code_in(b"step 1\nstep 2\n") is None  # preempted or cut: no report


# --- the budget guard, run by real bash as SkyPilot runs ``run`` (``bash -i``, no terminal) ----------------


def _bash(script: str, tmp_path, *, timeout: float = 30):
    import subprocess

    return subprocess.run(["bash", "-i", "-c", script], capture_output=True, cwd=tmp_path,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_guard_stops_the_runs_whole_process_tree_at_its_limit_with_notice_then_sigkill(tmp_path):
    import time

    # the script's own trap saves on the notice; a child that ignores SIGTERM and a grandchild in the
    # background must go too, by SIGKILL once the grace period is over
    script = ("trap 'echo saved on notice; exit 0' TERM\n"
              "bash -c 'trap \"\" TERM; sleep 120 & echo $! > grandchild; sleep 120' &\n"
              "echo $! > child\n"
              "echo training\n"
              "wait")
    started = time.time()
    # the limit 5-6 s away: time for a loaded host to start the script, its child and grandchild before the notice
    done = _bash(guarded_run(script, stop_at=int(started) + 6, grace_seconds=2), tmp_path)
    took = time.time() - started
    out = done.stdout.decode()
    assert done.returncode == BUDGET_EXIT_CODE, "never 0, even when the script exits 0 on the notice"
    assert "training" in out and "saved on notice" in out  # SIGTERM came first, and reached the script
    assert exit_code_in(done.stdout) == 0  # the script's own status, still reported
    stopped = budget_stop_in(done.stdout)
    assert stopped is not None and started + 4 <= stopped <= time.time() + 1
    assert 5 <= took < 25, "the limit, then at most the grace period before SIGKILL (and a loaded host's forks)"
    for name in ("child", "grandchild"):
        assert not _alive(int((tmp_path / name).read_text())), f"the {name} was left running"


def test_a_run_that_ends_before_its_limit_reports_its_own_status_at_once(tmp_path):
    import time

    started = time.time()
    done = _bash(guarded_run("echo hi\nexit 3", stop_at=int(started) + 600, grace_seconds=30), tmp_path)
    assert time.time() - started < 5, "the guard does not wait for the limit"
    assert done.returncode == 3 and exit_code_in(done.stdout) == 3
    assert budget_stop_in(done.stdout) is None and b"hi\n" in done.stdout


def test_a_run_whose_limit_came_during_provisioning_or_setup_is_not_started(tmp_path):
    import time

    done = _bash(guarded_run("touch started", stop_at=int(time.time()) - 1, grace_seconds=30), tmp_path)
    assert done.returncode == BUDGET_EXIT_CODE and budget_stop_in(done.stdout) is not None
    assert not (tmp_path / "started").exists()


def test_with_a_limit_the_task_skypilot_runs_is_the_guarded_run(sky):
    config = attempt_config(LaunchRequest(attempt_id="j-0123456789-a2", job_id="j-0123456789", attempt=2,
                                          task=GPU_TASK, placement=SPOT_A100, envs=dict(ENVS),
                                          stop_grace_seconds=45), stop_at=1_900_000_000)
    dumped = build_task(config).to_yaml_config()
    assert dumped["run"].startswith("broker_stop_at=1900000000\nbroker_grace=45\n")
    assert "python train.py --epochs $EPOCHS" in dumped["run"]
    # setup too, to the same limit: a hanging pip install must not keep the cluster up past the budget
    assert dumped["setup"] == guarded_run("pip list", stop_at=1_900_000_000, grace_seconds=45, step="setup")
    unlimited = attempt_config(request(GPU_TASK, SPOT_A100))
    assert "broker_stop_at" not in unlimited["run"] and unlimited["setup"] == "pip list"  # no limit, no guard


# --- the guarded setup, run as SkyPilot 0.14.1 runs a task's ``setup`` (its own script builder, bash -i) --------


def test_a_setup_still_running_at_its_limit_has_its_whole_tree_stopped_and_says_so_as_the_setups(sky, tmp_path):
    import time

    # a download that ignores SIGTERM in a child, and a grandchild in the background: SIGKILL after the grace
    setup = ("echo installing\n"
             "bash -c 'trap \"\" TERM; sleep 120 & echo $! > grandchild; sleep 120' &\n"
             "echo $! > child\n"
             "wait")
    started = time.time()
    done = run_as_skypilot_runs_setup(guarded_run(setup, stop_at=int(started) + 3, grace_seconds=2, step="setup"),
                                      tmp_path)
    took = time.time() - started
    out = done.stdout
    assert done.returncode == BUDGET_EXIT_CODE, "neither 0 nor 137: SkyPilot ends the job FAILED_SETUP, no run"
    assert b"installing" in out and b"SIGTERM to the setup" in out
    stopped = budget_stop_in(out, "setup")
    assert stopped is not None and started + 1 <= stopped <= time.time() + 1
    assert budget_stopped_step(out) == "setup" and budget_stop_in(out, "run") is None
    assert exit_code_in(out, "setup") == 143 and exit_code_in(out) is None  # killed by SIGTERM; no run reported
    assert 2 <= took < 20, "the limit, then at most the grace period before SIGKILL (and a loaded host's forks)"
    for name in ("child", "grandchild"):
        assert not _alive(int((tmp_path / "sky_workdir" / name).read_text())), f"the setup's {name} was left running"


@pytest.mark.parametrize("setup, status", [("echo ok", 0), ("echo broken; exit 3", 3)])
def test_a_setup_that_ends_before_its_limit_ends_at_once_with_its_own_status(sky, tmp_path, setup, status):
    import time

    started = time.time()
    done = run_as_skypilot_runs_setup(guarded_run(setup, stop_at=int(started) + 600, grace_seconds=30, step="setup"),
                                      tmp_path)
    assert time.time() - started < 5, "the guard does not wait for the limit"
    assert done.returncode == status and exit_code_in(done.stdout, "setup") == status
    assert budget_stop_in(done.stdout) is None and budget_stopped_step(done.stdout) is None


def test_a_setup_whose_limit_came_during_provisioning_is_not_started(sky, tmp_path):
    import time

    done = run_as_skypilot_runs_setup(guarded_run("touch started", stop_at=int(time.time()) - 1, grace_seconds=30,
                                                  step="setup"), tmp_path)
    assert done.returncode == BUDGET_EXIT_CODE and budget_stopped_step(done.stdout) == "setup"
    assert b"came before the setup started" in done.stdout
    assert not (tmp_path / "sky_workdir" / "started").exists()


def test_only_setup_and_run_are_guarded():
    with pytest.raises(ValueError, match="step must be one of setup, run"):
        guarded_run("true", stop_at=1, grace_seconds=1, step="teardown")


def test_an_uploaded_workdir_unpacked_for_the_attempt_is_the_workdir_skypilot_syncs(sky, tmp_path):
    """The engine gives each attempt its own unpacked copy of the job's workdir pack as the task's ``workdir``
    (broker.engine.launch.launch_request); SkyPilot syncs that directory to the cluster's ~/sky_workdir."""
    copy_dir = tmp_path / "workdirs" / "attempts" / "j-0123456789-a2"
    copy_dir.mkdir(parents=True)
    (copy_dir / "train.py").write_text("print(1)\n")
    task = build_task(attempt_config(request({**GPU_TASK, "workdir": str(copy_dir)}, SPOT_A100)))
    assert task.workdir == str(copy_dir)
    assert task.to_yaml_config()["workdir"] == str(copy_dir)


def test_uploaded_file_mounts_unpacked_for_the_attempt_are_local_sources_skypilot_syncs(sky, tmp_path):
    """The engine gives each attempt its own unpacked copy of each uploaded file_mounts source as the task's
    ``file_mounts[dest]`` (a directory, or the file in a single file's pack); SkyPilot takes them as the local
    sources it uploads, beside a bucket's."""
    copies = tmp_path / "workdirs" / "mounts" / "j-0123456789-a2"
    (copies / "0").mkdir(parents=True)
    (copies / "0" / "vocab.txt").write_text("v1\n")
    (copies / "1").mkdir()
    (copies / "1" / "x.yaml").write_text("lr: 3\n")
    mounts = {"/data/tokenizer": str(copies / "0"), "~/cfg/x.yaml": str(copies / "1" / "x.yaml"),
              "/data/bucket": "s3://some-bucket/data"}
    task = build_task(attempt_config(request({**GPU_TASK, "file_mounts": mounts}, SPOT_A100)))
    task.expand_and_validate_file_mounts()  # what SkyPilot checks before it syncs: each local source is here
    assert task.file_mounts == {"/data/tokenizer": str(copies / "0"), "~/cfg/x.yaml": str(copies / "1" / "x.yaml"),
                                "/data/bucket": "s3://some-bucket/data"}


def test_skypilot_rsyncs_a_path_the_broker_accepts_as_written_and_runs_what_one_it_refuses_holds(sky, tmp_path,
                                                                                                   monkeypatch):
    """Why broker/spec.py refuses some paths and the engine names a mounted file itself: SkyPilot runs rsync through
    a shell, each path quoted with Python's repr — a path holding a quote goes in double quotes, where ``$(...)``
    runs on the host that syncs (the broker's)."""
    from sky.utils.command_runner import LocalProcessCommandRunner

    from broker.spec import SpecError, parse

    monkeypatch.chdir(tmp_path)
    for name in ("o'brien's data", "my $HOME (1)", 'say "hi"'):
        source = tmp_path / name
        source.write_text(name)
        parse({"run": "x", "file_mounts": {f"/data/{name}": str(source)}}, now=0)
        LocalProcessCommandRunner().rsync(str(source), str(tmp_path / "out"), up=True, stream_logs=False)
        assert (tmp_path / "out").read_text() == name
    name = "a'$(touch pwned)"
    with pytest.raises(SpecError, match="cannot be handed to a shell"):
        parse({"run": "x", "file_mounts": {f"/data/{name}": str(tmp_path / name)}}, now=0)
    (tmp_path / "a'").write_text("what the shell made of the name")
    LocalProcessCommandRunner().rsync(str(tmp_path / name), str(tmp_path / "out"), up=True, stream_logs=False)
    assert (tmp_path / "pwned").exists()  # what the refusal keeps from the broker's host
