"""A job whose workdir is a git repository (SkyPilot's ``workdir: {url, ref}``) through the engine and the local
launcher: it runs in a fresh clone at that ref, every attempt (a resume too), the clone goes with the attempt, and a
clone that cannot be made fails the job with a reason that says so — not as an error of the job's code that a
resume would meet again, nor as a hang. A team may name only a repository it reaches over the network: one on the
broker's host (a ``file://`` URL or a path) is a host path, which only an admin's submit may name. These tests
submit as the admin, with a ``file://`` repository made in the test."""

from __future__ import annotations

import subprocess

import pytest
from gitrepos import make_repo

from broker.auth import Principal
from broker.lifecycle import JobState
from broker.service import Conflict, Invalid

from broker_testing import local_broker, run_until, wait_for

ADMIN = Principal("admin", None, admin=True)
VISION = Principal("vision", "vision")
CONFIG = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, _):
        yield service, engine, store, tmp_path / "data"


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


def submit(service, workdir, run, principal=ADMIN):
    task = {"name": "t", "workdir": workdir, "run": run, "resources": {"cpus": 1}, "broker": {"budget_usd": 5}}
    return service.submit(principal, task)[0]


def test_a_resume_runs_in_a_fresh_clone_at_the_same_ref_and_each_clone_goes_with_its_attempt(broker, repo):
    service, engine, store, data = broker
    run = ("echo at $(cat version.txt) in $(pwd); test ! -e scratch || { echo the last attempt\\'s file is here; "
           "exit 9; }; touch scratch; [ $BROKER_ATTEMPT -gt 1 ] || exit 3")
    job = submit(service, {"url": repo.url, "ref": "v1"}, run)
    failed = run_until(engine, store, job.id, {"failed", "succeeded"})
    first_log = service.logs(ADMIN, job.id)["data"]
    first = data / "workdirs" / "jobs" / f"{job.id}-a1"
    assert failed.state is JobState.FAILED and f"at v1 in {first / 'work'}\n" in first_log, first_log
    assert wait_for(lambda: not first.exists(), timeout=10)  # the clone went with its attempt
    subprocess.run(["git", "-C", str(repo.path), "-c", "user.name=t", "-c", "user.email=t@example.com", "commit",
                    "-q", "--allow-empty", "-m", "main moves on"], check=True)
    service.resume(ADMIN, job.id, force=True)
    final = run_until(engine, store, job.id, {"failed", "succeeded"})
    log = service.logs(ADMIN, job.id)["data"]
    assert final.state is JobState.SUCCEEDED and final.attempts == 2, log
    second = data / "workdirs" / "jobs" / f"{job.id}-a2"
    assert f"at v1 in {second / 'work'}\n" in log and "the last attempt's file is here" not in log
    for each in (first_log, log):
        assert f"[spot-broker] workdir: {repo.url} at v1 cloned, commit {repo.first}\n" in each
    assert wait_for(lambda: not second.exists(), timeout=10)


def test_a_ref_the_repository_lacks_fails_the_job_saying_so_and_a_resume_needs_force(broker, repo):
    service, engine, store, _ = broker
    job = submit(service, {"url": repo.url, "ref": "releases/2.0"}, "echo never")
    final = run_until(engine, store, job.id, {"failed", "succeeded"})
    why = f"the git repository {repo.url} has no branch, tag or commit named 'releases/2.0'"
    assert final.state is JobState.FAILED
    assert final.reason.startswith(f"Its workdir was not cloned, so nothing of the job ran: {why}. ")
    assert (final.diagnosis["class"], final.diagnosis["infrastructure"]) == ("workdir_clone", False)
    log = service.logs(ADMIN, job.id)["data"]
    assert f"[spot-broker] workdir not cloned, so nothing of the job runs: {why}\n" in log and "never" not in log
    # a resume would clone the same ref again: refused without force, saying why
    with pytest.raises(Conflict, match="has no branch, tag or commit named 'releases/2.0'"):
        service.resume(ADMIN, job.id)


@pytest.mark.parametrize("url", ["file:///srv/git/other-team.git", "/srv/git/other-team.git"],
                         ids=["a file:// URL", "a path"])
def test_a_team_may_not_have_the_broker_clone_a_repository_on_its_host(broker, url):
    service, *_ = broker
    with pytest.raises(Invalid) as refused:
        submit(service, {"url": url, "ref": "main"}, "true", principal=VISION)
    assert (refused.value.field, refused.value.status) == ("workdir.url", 403)
    job = submit(service, {"url": "https://github.com/org/repo.git", "ref": "main"}, "true", principal=VISION)
    assert job.state is JobState.QUEUED  # one it reaches over the network: as SkyPilot clones it


@pytest.mark.parametrize("workdir, field", [
    ({"ref": "main"}, "workdir.url"),
    ({"url": "https://github.com/org/repo.git", "branch": "main"}, "workdir.branch"),
    ({"url": "https://github.com/org/repo.git", "ref": "--upload-pack=touch /tmp/x"}, "workdir.ref"),
    ({"url": "--upload-pack=touch /tmp/x"}, "workdir.url"),
], ids=["no url", "a key SkyPilot's schema lacks", "a ref git would read as an option",
        "a url git would read as an option"])
def test_a_git_workdir_git_could_not_take_is_refused_at_submit(broker, workdir, field):
    service, *_ = broker
    with pytest.raises(Invalid) as refused:
        submit(service, workdir, "true")
    assert refused.value.field == field
