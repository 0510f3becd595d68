"""A pool's jobs run as another Unix user (``pools[].run_as``): real processes, as root, with the host's `nobody`.

Without it a job on a local pool runs as the broker's user and reads what the broker reads — its
/proc/<pid>/environ, the admin token, the secrets key, the store, every run folder with its job token — so on a
host shared by teams any team's job can take the broker over. These tests need root (switching users does) and
fail without it: a skip would pass the suite with the isolation untested.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from broker.auth import Principal
from broker.config import ConfigError, Pool, load_settings
from broker.engine.launch import run_as_for
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.models import Job
from broker.runtime import open_launcher
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import RunAs

import broker_testing
from broker_testing import kill_runner_alone, wait_for

REPO = Path(__file__).resolve().parents[2]
TRAINER = Path(__file__).with_name("trainer.py")
NOBODY = pwd.getpwnam("nobody")
ADMIN_PRINCIPAL = Principal("admin", None, admin=True)


def python_nobody_runs() -> str:
    """A Python the user `nobody` can run that imports the checkpoint library (the broker's own may be under
    root's home, which others cannot pass: then the host's)."""
    path = os.pathsep.join([str(REPO), *site.getsitepackages()])
    for python in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            ok = subprocess.run([python, "-c", "import checkpoint"], user=NOBODY.pw_uid, group=NOBODY.pw_gid,
                                extra_groups=[], env={"PYTHONPATH": path}, cwd="/", capture_output=True).returncode == 0
        except OSError:
            ok = False
        if ok:
            return python
    pytest.fail("no Python that the user nobody can run imports the checkpoint library")


@pytest.fixture
def base():
    """A folder others may pass (pytest's own tmp folders are root's alone, 0700): the data dir goes in it."""
    assert os.geteuid() == 0, "run_as switches a job to another user, which needs root: run these tests as root"
    folder = Path(tempfile.mkdtemp(prefix="run-as-", dir="/tmp"))
    os.chmod(folder, 0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def pool_config(run_as: str, *, extra: str = "") -> str:
    return f"""
pools:
  - {{name: shared, slots: 1, price_per_slot_hour: "0.36", run_as: {run_as}{extra}}}
stop_grace_seconds: 5
tick_seconds: 0.05
"""


@pytest.fixture
def broker(base, make_settings):
    data = base / "data"
    settings = make_settings(config=pool_config("nobody"), BROKER_DATA_DIR=str(data))
    store = open_store(f"sqlite://{data / 'broker.db'}")  # the store in the data dir, as by default
    (data / "admin-token").write_text("admin-token-on-disk\n")  # modes of an older broker's, or an admin's copy
    (data / "secrets-key").write_text("secrets-key-on-disk\n")
    launcher = open_launcher(settings)
    yield BrokerService(settings, store, launcher), Engine(settings, store, launcher), store, launcher, data
    store.close()


def run_until(engine, store, job_id, states, timeout=30):  # a job switching users takes longer to start
    return broker_testing.run_until(engine, store, job_id, states, timeout)


PROBE = """
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME user=$USER logname=$LOGNAME"
run=$DATA/runs/$BROKER_JOB_ID-a$BROKER_ATTEMPT
for f in $DATA/admin-token $DATA/secrets-key $DATA/broker.db $run/request.json $run/output.log \
         /proc/$BROKER_PID/environ; do
  if cat "$f" > /dev/null 2>&1; then echo "READ $f"; else echo "denied $f"; fi
done
ls "$DATA" > /dev/null 2>&1 && echo "LISTED the data dir" || echo "denied listing the data dir"
echo mine > ./made-here && echo "wrote its cwd $(pwd)"
ckpt=${BROKER_CHECKPOINT_URI#file://}
echo mine > "$ckpt/made-here" && echo "wrote its checkpoint folder"
"""


def test_a_pool_job_run_as_nobody_runs_as_that_user_and_reaches_none_of_the_brokers_files(broker):
    service, engine, store, _, data = broker
    task = {"name": "probe", "run": PROBE, "resources": {"cpus": 1}, "broker": {"budget_usd": 5},
            "envs": {"DATA": str(data), "BROKER_PID": str(os.getpid())}}
    job = service.submit(ADMIN_PRINCIPAL, task)[0]
    final = run_until(engine, store, job.id, {"succeeded", "failed"})
    log = service.logs(ADMIN_PRINCIPAL, job.id)["data"]
    assert final.state is JobState.SUCCEEDED, log
    assert f"uid={NOBODY.pw_uid} gid={NOBODY.pw_gid} groups={NOBODY.pw_gid} home={NOBODY.pw_dir} user=nobody " \
           "logname=nobody" in log
    assert "READ" not in log and "LISTED" not in log, log
    assert log.count("denied ") == 7  # the six files and the data dir's listing
    assert "wrote its checkpoint folder" in log
    cwd = re.search(r"wrote its cwd (\S+)", log).group(1)
    assert Path(cwd) == data / "workdirs" / "jobs" / f"{job.id}-a1" / "work"  # a folder of its own, not the run folder
    request = json.loads((data / "runs" / f"{job.id}-a1" / "request.json").read_text())
    assert request["run_as"]["user"] == "nobody"
    assert (data / "runs").stat().st_mode & 0o777 == 0o700
    # what it was given, and what it wrote there, goes with the attempt, as its workdir copy would
    assert wait_for(lambda: not Path(cwd).parent.exists(), timeout=10)


def test_a_pool_job_run_as_nobody_saves_on_the_notice_when_preempted_and_resumes_there(broker):
    """The checkpoint library's notice file and listener folder work for the job's user: the runner holds the
    group's SIGTERM back while it listens, the notice's save keeps every step trained, attempt 2 resumes it."""
    service, engine, store, launcher, data = broker
    python = python_nobody_runs()
    task = {"name": "trainer", "resources": {"cpus": 1}, "broker": {"budget_usd": 5},
            "envs": {"BROKER_PROGRESS_INTERVAL_S": "0.1",
                     "PYTHONPATH": os.pathsep.join([str(REPO), *site.getsitepackages()])},
            "run": f"{python} {TRAINER} 400 0.05 1000"}  # saves only on the notice (and at its end)
    job = service.submit(ADMIN_PRINCIPAL, task)[0]
    first = f"{job.id}-a1"
    listeners = data / "workdirs" / "jobs" / first / "notice.json.listeners"

    def registered():
        engine.tick()
        return any(listeners.iterdir()) if listeners.is_dir() else False

    wait_for(registered, timeout=20)
    wait_for(lambda: engine.tick() or "step 20\n" in service.logs(ADMIN_PRINCIPAL, job.id)["data"], timeout=20)
    assert launcher.preempt(first, grace_seconds=8)
    final = run_until(engine, store, job.id, {"succeeded", "failed"}, timeout=90)
    assert final.state is JobState.SUCCEEDED, final.reason
    attempts = store.attempts(job.id)
    assert [a.state.value for a in attempts] == ["preempted", "succeeded"]
    log1 = service.logs(ADMIN_PRINCIPAL, job.id, attempt=1)["data"]
    log2 = service.logs(ADMIN_PRINCIPAL, job.id, attempt=2)["data"]
    assert "the broker announces a stop" in log1, log1  # the notice file reached the job's user
    last = max(int(s) for s in re.findall(r"^step (\d+)$", log1, re.M))
    assert re.search(r"^start (\d+)$", log2, re.M).group(1) == str(last), "the notice's save keeps every step"
    folder = Path(final.checkpoint_uri.removeprefix("file://"))
    assert folder.stat().st_uid == NOBODY.pw_uid and folder.stat().st_mode & 0o777 == 0o700


# -- which user: a pure decision -------------------------------------------------------------------------

def _job(team: str, placement: dict, checkpoint_uri: str = "file:///data/checkpoints/j-1") -> Job:
    return Job(id="j-1", name="t", team=team, state=JobState.PLACED, spec={}, budget=1, priority=0, submitted_at=0,
               updated_at=0, checkpoint_uri=checkpoint_uri, placement=placement)


POOL = Pool(name="shared", slots=1, accelerator=None, price_per_slot_hour=1,
            run_as=(("*", "daemon"), ("vision", "nobody")))
ON_POOL = {"tier": "onprem", "cloud": "local", "zone": "shared"}


@pytest.mark.parametrize("job, pools, expected", [
    pytest.param(_job("vision", ON_POOL), [POOL], RunAs("nobody", ("/data/checkpoints/j-1",)),
                 id="a team named in the pool's mapping runs as its user, given its checkpoint folder"),
    pytest.param(_job("nlp", ON_POOL), [POOL], RunAs("daemon", ("/data/checkpoints/j-1",)),
                 id="a team not named runs as the user of '*'"),
    pytest.param(_job("vision", ON_POOL, "file:///etc"), [POOL], RunAs("nobody", ()),
                 id="a checkpoint folder the team chose is not given to the user"),
    pytest.param(_job("vision", ON_POOL), [Pool(name="shared", slots=1, accelerator=None, price_per_slot_hour=1)],
                 None, id="a pool without run_as runs as the broker's user"),
    pytest.param(_job("vision", {"tier": "spot", "cloud": "aws", "zone": "shared"}), [POOL], None,
                 id="a cloud zone of the same name is not the pool"),
])
def test_which_user_a_job_runs_as(job, pools, expected):
    assert run_as_for(job, pools, "file:///data/checkpoints") == expected


# -- config errors, each naming the key ------------------------------------------------------------------

@pytest.mark.parametrize("run_as, extra, error", [
    pytest.param("no-such-user-here", "", "pools[0].run_as: there is no user 'no-such-user-here'",
                 id="a user that does not exist"),
    pytest.param("root", "", "pools[0].run_as: 'root' is root (uid 0)", id="root"),
    pytest.param("{vision: nobody}", "", "pools[0].run_as: name the user of every other team with '*'",
                 id="a mapping without '*'"),
    pytest.param("{vision: nobody, '*': no-such-user-here}", "", "pools[0].run_as.*: there is no user",
                 id="a mapping naming a user that does not exist"),
    pytest.param("[nobody]", "", "pools[0].run_as: must be a user name, or a mapping", id="a list"),
    pytest.param("nobody", ", kubernetes_context: lab", "pools[0].run_as: a Kubernetes pool's jobs run in pods",
                 id="a Kubernetes pool"),
])
def test_a_bad_run_as_is_refused_naming_the_key(base, make_settings, run_as, extra, error):
    with pytest.raises(ConfigError) as caught:
        make_settings(config=pool_config(run_as, extra=extra), BROKER_DATA_DIR=str(base / "data"))
    assert str(caught.value).startswith(error), caught.value


def test_a_data_dir_other_users_cannot_reach_is_refused(make_settings, tmp_path):
    assert os.geteuid() == 0, "needs root"
    os.chmod(tmp_path, 0o700)
    with pytest.raises(ConfigError, match=r"pools\[0\]\.run_as: a job run as another user cannot reach data_dir "
                                          rf"{tmp_path / 'data'}: {tmp_path} does not let other users pass"):
        make_settings(config=pool_config("nobody"))


@pytest.mark.parametrize("run_as, error", [
    pytest.param("daemon", "pools[0].run_as: switching a job to another user needs root", id="a broker not root"),
    pytest.param("nobody", "pools[0].run_as: 'nobody' is the broker's own user", id="the broker's own user"),
])
def test_run_as_needs_a_broker_running_as_root(base, run_as, error):
    """Loaded by a broker running as nobody: a real process of that user, not a patched geteuid."""
    config = base / "config.yaml"
    config.write_text(pool_config(run_as))
    os.chmod(config, 0o644)
    code = ("from broker.config import load_settings, ConfigError\n"
            "try:\n load_settings({'BROKER_DATA_DIR': %r}, config_path=%r)\n"
            "except ConfigError as exc:\n print(exc)\n" % (str(base / "data"), str(config)))
    out = subprocess.run([python_nobody_runs(), "-c", code], user=NOBODY.pw_uid, group=NOBODY.pw_gid,
                         extra_groups=[], cwd="/", capture_output=True, text=True,
                         env={"PYTHONPATH": os.pathsep.join([str(REPO), *site.getsitepackages()])})
    assert out.stdout.startswith(error), out.stdout + out.stderr


def test_without_run_as_a_pool_job_runs_as_the_brokers_user_as_before(base, make_settings):
    settings = make_settings(config=pool_config("nobody").replace(", run_as: nobody", ""),
                             BROKER_DATA_DIR=str(base / "data"))
    store = open_store(f"sqlite://{base / 'data' / 'broker.db'}")
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    try:
        job = service.submit(ADMIN_PRINCIPAL, {"name": "t", "run": "id -u; pwd", "resources": {"cpus": 1},
                                               "broker": {"budget_usd": 5}})[0]
        final = run_until(engine, store, job.id, {"succeeded", "failed"})
        assert final.state is JobState.SUCCEEDED
        run = base / "data" / "runs" / f"{job.id}-a1"
        work = base / "data" / "workdirs" / "jobs" / f"{job.id}-a1" / "work"  # a folder of its own, not the run folder
        assert service.logs(ADMIN_PRINCIPAL, job.id)["data"].splitlines()[:2] == [str(os.geteuid()), str(work)]
        assert "run_as" not in json.loads((run / "request.json").read_text())
        assert work.stat().st_uid == os.geteuid()  # nothing given to another user
    finally:
        store.close()


# -- the runner itself -----------------------------------------------------------------------------------

def _runner_request(data: Path, run: str, user: str, workdir: str | None = None, mounts: dict | None = None) -> Path:
    run_dir = data / "runs" / "j-1-a1"
    run_dir.mkdir(parents=True)
    task = {"run": run, **({"workdir": workdir} if workdir else {}), **({"file_mounts": mounts} if mounts else {})}
    request = {"attempt_id": "j-1-a1", "task": task, "placement": {}, "envs": {},
               "run_as": {"user": user, "folders": [], "data_dir": str(data)}}
    (run_dir / "request.json").write_text(json.dumps(request))
    return run_dir


def test_the_attempts_workdir_and_mount_copies_are_given_to_the_user_and_its_cwd_is_the_workdir(base):
    from launchers.local_runner import Runner

    data = base / "data"
    workdir = data / "workdirs" / "attempts" / "j-1-a1"
    (workdir / "src").mkdir(parents=True)
    (workdir / "src" / "train.py").write_text("print('hi')\n")
    mount = data / "workdirs" / "mounts" / "j-1-a1" / "0"
    mount.mkdir(parents=True)
    (mount / "data.csv").write_text("a,b\n")
    other = data / "workdirs" / "attempts" / "j-2-a1"  # another attempt's copy, as unpacked: readable by others
    other.mkdir(parents=True)
    (other / "theirs.py").write_text("secret\n")
    os.chmod(other, 0o755)
    (base / "users").mkdir()  # the link is made as the job's user: where it may write
    os.chown(base / "users", NOBODY.pw_uid, NOBODY.pw_gid)
    dest = base / "users" / "mounted"
    run = (f"id -u; pwd; cat src/train.py; echo new > src/made; cat {dest}/data.csv; "
           f"cat {other}/theirs.py 2>/dev/null || echo denied the other copy")
    run_dir = _runner_request(data, run, "nobody", workdir=str(workdir), mounts={str(dest): str(mount)})
    result = Runner(run_dir).run()
    out = (run_dir / "output.log").read_text()
    assert result["exit_code"] == 0, out
    assert f"{NOBODY.pw_uid}\n{workdir}\nprint('hi')\na,b\ndenied the other copy" in out
    assert (workdir / "src" / "made").stat().st_uid == NOBODY.pw_uid


def test_a_runner_whose_user_is_gone_runs_nothing_rather_than_run_as_the_broker(base):
    from launchers.local_runner import Runner

    data = base / "data"
    run_dir = _runner_request(data, f"touch {base}/ran", "no-such-user-here")
    result = Runner(run_dir).run()
    assert (result["exit_code"], result["step"]) == (1, "setup")
    assert not (base / "ran").exists()
    assert "not run: its pool runs it as user 'no-such-user-here', and there is no such user on this host" in \
        (run_dir / "output.log").read_text()


def test_a_job_run_as_nobody_whose_runner_is_killed_alone_goes_with_it_before_the_job_resumes(broker, base):
    # the runner finds a job left behind by the notice file in its environment: for a job run as another user
    # that file is in the folder the job was given, not the run folder, and the job ran on beside attempt 2
    service, engine, store, launcher, data = broker
    marks = base / "marks"
    marks.touch()
    os.chmod(marks, 0o666)
    final, lines = kill_runner_alone(service, engine, store, launcher, ADMIN_PRINCIPAL, marks)
    assert final.state is JobState.SUCCEEDED and final.attempts == 2
    assert lines == ["start 1", "start 2", "end 2"]



def test_a_file_mount_of_a_job_run_as_another_user_is_linked_as_that_user_never_as_root(base):
    # the runner is root: a link it made at any destination a team names (/etc/ld.so.preload, /etc/profile.d/x.sh)
    # to the team's uploaded copy, which is the job user's, would hand that user the host; made as the job user,
    # a link goes only where that user may write
    from launchers.local_runner import Runner

    data = base / "data"
    mount = data / "workdirs" / "mounts" / "j-1-a1" / "0"
    mount.mkdir(parents=True)
    (mount / "data.csv").write_text("a,b\n")
    roots = base / "roots-only"  # a folder of the host's that others may read but not write, as /etc
    roots.mkdir(mode=0o755)
    theirs = base / "the-users"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    run_dir = _runner_request(data, "true", "nobody",
                              mounts={str(roots / "preload"): str(mount), str(theirs / "data"): str(mount)})
    result = Runner(run_dir).run()
    out = (run_dir / "output.log").read_text()
    assert result["exit_code"] == 0, out
    assert not os.path.lexists(roots / "preload"), "root made a link where the job's user may not"
    assert f"file_mounts {roots / 'preload'}: not mounted: it cannot be made on this host (Permission denied)" in out
    assert f"file_mounts {theirs / 'data'}: a link to {mount} on this host" in out
    assert not os.path.lexists(theirs / "data")  # removed when the attempt ended


def test_a_file_mount_under_home_of_a_job_run_as_another_user_is_in_that_users_home(base, monkeypatch):
    from launchers.local_runner import link_mounts

    home = base / "home-of-nobody"
    monkeypatch.setenv("HOME", "/root")
    links, _ = link_mounts({"file_mounts": {"~/data": str(base)}}, home=str(home))
    assert [link for _, link, *_ in links] == [str(home / "data")]


def test_a_checkpoint_folder_the_team_chose_is_made_as_the_jobs_user_never_as_root(base):
    # a broker.checkpoint of the team's (file://...) is "reached as its user may": made by the root runner, any
    # team could have folders made wherever it liked on the host
    from launchers.local_runner import Runner

    data = base / "data"
    roots = base / "roots-only"
    roots.mkdir(mode=0o755)
    run_dir = _runner_request(data, 'echo "dir=$BROKER_CHECKPOINT_DIR"', "nobody",
                              mounts={"/checkpoints": "broker:checkpoint"})
    request = json.loads((run_dir / "request.json").read_text())
    request["envs"] = {"BROKER_CHECKPOINT_URI": f"file://{roots}/theirs/j-1"}
    (run_dir / "request.json").write_text(json.dumps(request))
    result = Runner(run_dir).run()
    out = (run_dir / "output.log").read_text()
    assert result["exit_code"] == 0, out
    assert not (roots / "theirs").exists(), "root made a folder where the job's user may not"
    assert f"dir={roots}/theirs/j-1" in out


@pytest.mark.parametrize("mode", [0o1777, 0o777], ids=["sticky and world-writable, as /tmp", "world-writable"])
def test_a_checkpoint_root_others_write_in_is_refused_with_run_as(base, make_settings, mode):
    # a job run as another user is given <root>/<job id>: the runner makes the root 0711 and closes to others all
    # else in it; a shared folder such as /tmp would lose its sticky bit and world-write, and everyone's files in it
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    with pytest.raises(ConfigError, match=rf"pools\[0\]\.run_as: checkpoint_root {shared} is a folder other users "
                                          r"write in"):
        make_settings(config=pool_config("nobody"), BROKER_DATA_DIR=str(base / "data"),
                      BROKER_CHECKPOINT_ROOT=shared.as_uri())
    assert stat.S_IMODE(shared.stat().st_mode) == mode


def test_a_job_run_as_another_user_is_not_handed_the_brokers_environment(base, monkeypatch):
    # the broker's own secrets were left out, but the rest of its environment was the job's: a cloud key, a
    # kubeconfig or an agent socket of the broker's, read by a job its pool runs as another user to keep it out
    from launchers.local_runner import Runner

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-brokers-cloud-key")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/root/.ssh/agent.sock")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    data = base / "data"
    run_dir = _runner_request(data, "env", "nobody")
    request = json.loads((run_dir / "request.json").read_text())
    request["task"]["envs"] = {"MINE": "kept"}
    (run_dir / "request.json").write_text(json.dumps(request))
    result = Runner(run_dir).run()
    out = (run_dir / "output.log").read_text()
    assert result["exit_code"] == 0, out
    assert "the-brokers-cloud-key" not in out and "agent.sock" not in out, out
    for kept in ("MINE=kept", "LC_ALL=C.UTF-8", f"HOME={NOBODY.pw_dir}", "PATH=", "BROKER_NOTICE_FILE="):
        assert kept in out, out


def test_a_git_workdir_of_a_job_run_as_another_user_is_cloned_as_that_user_in_its_own_folder(base):
    # the clone is the job's working directory: made by root, the job could not write in it (nor remove what it
    # made there), and git run as root would read what the job's user may not
    from gitrepos import make_repo

    from launchers.local_runner import Runner

    repo = make_repo(base / "repo")  # under a folder others may pass
    # the user's own: git run as one user reads a repository on this host owned by another only where the host's
    # git config says it is safe (safe.directory), and the runner does not say so in the host's stead
    subprocess.run(["chown", "-R", f"{NOBODY.pw_uid}:{NOBODY.pw_gid}", str(repo.path)], check=True)
    data = base / "data"
    run_dir = _runner_request(data, "id -u; pwd; cat version.txt; echo mine > made-here", "nobody")
    request = json.loads((run_dir / "request.json").read_text())
    request["task"]["workdir"] = {"url": repo.url, "ref": "feature"}
    (run_dir / "request.json").write_text(json.dumps(request))
    result = Runner(run_dir).run()
    out = (run_dir / "output.log").read_text()
    work = data / "workdirs" / "jobs" / "j-1-a1" / "work"
    assert result["exit_code"] == 0, out
    assert f"{NOBODY.pw_uid}\n{work}\nfeature\n" in out
    owners = {p.stat().st_uid for p in [work, *work.rglob("*")]}
    assert owners == {NOBODY.pw_uid}  # .git and every file of the clone too
