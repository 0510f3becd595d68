"""A task whose workdir is a git repository (``workdir: {url, ref}``, SkyPilot's form) on this host: each attempt runs
its setup and run in a fresh clone of it at that ref, in the attempt's own folder, as a SkyPilot node runs them in
``~/sky_workdir``. The local launcher used to ignore the form: the job ran in an empty folder, without its code. A
clone that cannot be made fails the attempt before its setup, saying why, and never hangs."""

from __future__ import annotations

import json
import socket
import time

import pytest
from gitrepos import make_repo
from testports import free_port

from broker.diagnosis import Ending, diagnose
from broker.engine.reconcile import ENDED_PHASE_NAME
from launchers.base import LaunchRequest, Phase
from launchers.git_workdir import GitWorkdir, redact, ref_kind
from launchers.local import LocalLauncher

def wait_for(predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


PROBE = "pwd; cat version.txt; git rev-parse HEAD; python train.py"


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


@pytest.fixture
def launch(tmp_path):
    """Run a task as a real attempt under the local launcher: (its final status, its log, its data dir)."""
    launcher = LocalLauncher(tmp_path / "data" / "runs")
    count = iter(range(1, 100))

    def run(task: dict, wait: bool = True):
        attempt_id = f"j-git-a{next(count)}"
        launcher.launch(LaunchRequest(attempt_id, "j-git", 1, task, {}))
        if not wait:
            return launcher, attempt_id
        status = wait_for(lambda: (s := launcher.status(attempt_id)).phase.is_final and s, timeout=60)
        return status, launcher.logs(attempt_id, limit=1 << 22)[0].decode(), attempt_id

    return run


@pytest.mark.parametrize("ref, version, commit", [
    ("feature", "feature", "feature"),
    ("v1", "v1", "first"),
    ("<first>", "v1", "first"),
    ("<first:10>", "v1", "first"),
    (None, "v2", "main"),
], ids=["a branch → its tip", "a tag → the commit it names", "a commit hash → that commit",
        "a short commit hash → that commit", "no ref → the default branch's tip"])
def test_the_run_sees_the_repositorys_files_at_its_ref_in_a_clone_of_its_own(repo, launch, tmp_path, ref, version,
                                                                             commit):
    ref = {"<first>": repo.first, "<first:10>": repo.first[:10]}.get(ref, ref)
    workdir = {"url": repo.url, **({"ref": ref} if ref else {})}
    status, log, attempt = launch({"workdir": workdir, "setup": "test -f train.py && echo setup in the clone",
                                   "run": PROBE})
    assert status.phase is Phase.SUCCEEDED, log
    folder = tmp_path / "data" / "workdirs" / "jobs" / attempt / "work"
    assert f"setup in the clone\n{folder}\n{version}\n{getattr(repo, commit)}\ntrained at {version}\n" in log
    assert (folder / ".git").is_dir()
    assert repo.path.joinpath("version.txt").read_text() == "v2\n"  # the repository itself untouched


def test_each_attempt_clones_afresh_what_one_wrote_in_its_clone_never_reaches_the_next(repo, launch, tmp_path):
    task = {"workdir": {"url": repo.url, "ref": "v1"},
            "run": "test ! -e scratch || { echo found the last attempt\\'s file; exit 9; }; touch scratch; "
                   "cat version.txt; echo dirty > version.txt; pwd"}
    first, log1, a1 = launch(task)
    second, log2, a2 = launch(task)
    assert (first.phase, second.phase) == (Phase.SUCCEEDED, Phase.SUCCEEDED), log1 + log2
    jobs = tmp_path / "data" / "workdirs" / "jobs"
    assert f"v1\n{jobs / a1 / 'work'}\n" in log1 and f"v1\n{jobs / a2 / 'work'}\n" in log2
    assert (jobs / a2 / "work" / "scratch").exists()


@pytest.mark.parametrize("workdir, reason", [
    ({"url": "<repo>", "ref": "no-such-branch"},
     "the git repository <repo> has no branch, tag or commit named 'no-such-branch'"),
    ({"url": "<repo>", "ref": "abcdef1234"}, "the git repository <repo> has no commit abcdef1234"),
    ({"url": "<missing>", "ref": "main"},
     "the git repository <missing> cannot be read (no such repository, no access to it, or no network): "
     "'<missing-path>' does not appear to be a git repository"),
], ids=["a branch it lacks", "a commit it lacks", "no such repository"])
def test_a_clone_that_cannot_be_made_fails_before_the_setup_and_says_why(repo, launch, tmp_path, workdir, reason):
    missing = tmp_path / "no-such-repo"
    names = {"<repo>": repo.url, "<missing>": f"file://{missing}", "<missing-path>": str(missing)}
    for name, value in names.items():
        reason = reason.replace(name, value)
    marker = tmp_path / "ran"
    task = {"workdir": {k: names.get(v, v) for k, v in workdir.items()}, "setup": f"touch {marker}",
            "run": f"touch {marker}"}
    status, log, _ = launch(task)
    assert (status.phase, status.step, status.exit_code, status.reason) == (Phase.FAILED, "workdir", None, reason)
    assert not marker.exists()
    assert f"[spot-broker] workdir not cloned, so nothing of the job runs: {reason}\n" in log
    d = diagnose(Ending(ENDED_PHASE_NAME.get(status.phase, status.phase.value), status.exit_code, status.signal,
                        status.reason, log, command=status.step))
    assert d.cls == "workdir_clone" and not d.infrastructure
    assert d.sentence == f"Its workdir was not cloned, so nothing of the job ran: {reason}."
    assert "submit again" in d.hint and "Fix the error in the code" not in d.text


def test_a_token_in_the_url_or_in_git_token_never_reaches_the_log(launch):
    port = free_port()  # nothing listens there: the clone fails at once
    url = f"https://clone-user:url-password-123@127.0.0.1:{port}/org/repo.git"
    task = {"workdir": {"url": url, "ref": "main"}, "secrets": {"GIT_TOKEN": "ghp_token_456"}, "run": "true"}
    status, log, _ = launch(task)
    shown = f"https://***@127.0.0.1:{port}/org/repo.git"
    assert status.phase is Phase.FAILED and status.reason.startswith(f"the git repository {shown} cannot be read")
    assert f"cloning {shown} at main" in log
    assert "url-password-123" not in log + status.reason and "ghp_token_456" not in log + status.reason
    assert "clone-user" not in log + status.reason


def test_a_server_that_never_answers_is_given_up_on_at_the_clones_time_bound(tmp_path, monkeypatch):
    import launchers.local_runner as runner

    monkeypatch.setattr(runner, "CLONE_TIMEOUT_S", 1.0)
    with socket.socket() as server:  # accepts the connection, then says nothing
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"https://127.0.0.1:{server.getsockname()[1]}/org/repo.git"
        run_dir = tmp_path / "runs" / "j-1-a1"
        run_dir.mkdir(parents=True)
        (run_dir / "request.json").write_text(json.dumps({
            "attempt_id": "j-1-a1", "data_dir": str(tmp_path), "placement": {},
            "task": {"workdir": {"url": url}, "run": f"touch {tmp_path / 'ran'}"}}))
        result = runner.Runner(run_dir).run()
    assert (result["exit_code"], result["step"], result["stopped"]) == (None, "workdir", False)
    assert result["reason"] == (f"the git repository {url} could not be cloned: it took longer than 1 s and was "
                                "stopped (a host without network, or a server that does not answer)")
    assert result["ended_at"] - result["started_at"] < 10 and not (tmp_path / "ran").exists()


def test_a_stop_during_the_clone_stops_it_and_the_attempt_reads_as_stopped_not_failed(launch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        launcher, attempt = launch({"workdir": {"url": f"https://127.0.0.1:{server.getsockname()[1]}/o/r.git"},
                                    "run": "true"}, wait=False)
        assert wait_for(lambda: "cloning" in launcher.logs(attempt)[0].decode(), timeout=30)
        launcher.stop(attempt, grace_seconds=30, reason="cancelled")
        status = wait_for(lambda: (s := launcher.status(attempt)).phase.is_final and s, timeout=15)
    assert (status.phase, status.reason) == (Phase.STOPPED, "cancelled")


LISTING = "1111111\tHEAD\n1111111\trefs/heads/main\n2222222\trefs/heads/release/1.0\n3333333\trefs/tags/v1\n" \
          "3333333\trefs/tags/v1^{}\n"


@pytest.mark.parametrize("ref, kind", [
    ("main", "branch"), ("release/1.0", "branch"), ("v1", "tag"), ("abcd", "commit"),
    ("0123456789abcdef0123456789abcdef01234567", "commit"), ("abc", None), ("no-such-ref", None), ("refs/heads/main", None),
], ids=["a branch", "a branch with a slash", "a tag", "4 hex digits read as a commit", "a whole commit hash",
        "3 hex digits are too few to be a commit", "a name the repository lacks", "a full ref name is not a short one"])
def test_what_a_ref_is_read_from_the_repositorys_listing_as_skypilot_reads_it(ref, kind):
    assert ref_kind(LISTING, ref) == kind


@pytest.mark.parametrize("url, shown", [
    ("https://ghp_abcdefgh123@github.com/org/repo.git", "https://***@github.com/org/repo.git"),
    ("https://me:secret@gitlab.example.com/org/repo.git", "https://***@gitlab.example.com/org/repo.git"),
    ("https://github.com/org/repo.git", "https://github.com/org/repo.git"),
    ("git@github.com:org/repo.git", "git@github.com:org/repo.git"),
    ("ssh://git@github.com/org/repo.git", "ssh://git@github.com/org/repo.git"),
], ids=["a token as the user → hidden", "a password → hidden", "no credentials → as written",
        "scp-like ssh → as written", "ssh's user → as written"])
def test_a_url_is_shown_without_its_credentials(url, shown):
    repo = GitWorkdir.of({"url": url})
    assert repo.shown == shown
    assert redact(f"fatal: unable to access '{url}': denied", repo.secrets) == f"fatal: unable to access '{shown}': denied"
