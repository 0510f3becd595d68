"""A failure whose fix is in the task itself (its run command's arguments, its setup's packages, a script it names):
the diagnosis says to submit the task again, but `broker status`'s `next:` line and a refused `broker resume` sent the
user to `broker resume --force`, which runs the task as it was submitted and fails the same way. Both now say a new
submit, with `--force` only for a fix in a workdir on the broker's host. Real parts: the shipped diagnosis rules, a
SQLite store behind the service, and the CLI's own `next:` words."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.auth import Principal
from broker.cli import _next_step
from broker.diagnosis import Ending, diagnose
from broker.lifecycle import JobState
from broker.service import Conflict
from broker.views import job_view
from broker_testing import local_broker, stored_job

ADMIN = Principal("admin", None, admin=True)
POOL = "pools: [{name: cpu, slots: 1, price_per_slot_hour: \"0.36\"}]\n"
ARGS = "usage: train.py [-h] [--steps STEPS]\ntrain.py: error: unrecognized arguments: --epochs 3\n"
PIP = "ERROR: Could not find a version that satisfies the requirement xgboostt\n" \
      "ERROR: No matching distribution found for xgboostt\n"
SCRIPT = "python3: can't open file '/work/trian.py': [Errno 2] No such file or directory\n"
OWN = "ValueError: bad label\n"


def failed(store, log: str, checkpoint: dict, command: str = "run", code: int = 2):
    from broker.store import Change

    d = diagnose(Ending(phase="failed", exit_code=code, log_tail=log, reason=f"exit {code}", command=command))
    job = stored_job(store, "j-0123456789", state=JobState.RUNNING)
    return store.commit(Change(job=replace(job, state=JobState.FAILED, diagnosis=d.to_dict(), reason=d.text,
                                           last_checkpoint=checkpoint, checkpoint_uri="file:///c/run"),
                               expected_version=job.version))


@pytest.mark.parametrize("log, command, cls", [
    pytest.param(ARGS, "run", "bad_arguments", id="arguments the script does not take"),
    pytest.param(PIP, "setup", "dependency_missing", id="a package pip cannot find"),
    pytest.param(SCRIPT, "run", "script_not_found", id="a script that is not there"),
])
@pytest.mark.parametrize("checkpoint", [{}, {"step": 300, "uri": "file:///c/run/step-300"}], ids=["none", "step 300"])
def test_a_failure_fixed_in_the_task_is_sent_to_a_new_submit(make_settings, tmp_path, log, command, cls, checkpoint):
    with local_broker(make_settings, tmp_path, POOL) as (service, _, store, _):
        job = failed(store, log, checkpoint, command)
        assert job.diagnosis["class"] == cls, job.diagnosis
        with pytest.raises(Conflict) as refused:
            service.resume(ADMIN, job.id)
        said = _next_step(job_view(job))
    text = str(refused.value)
    for words in (text, said):
        assert "which a resume runs as it was submitted: fix it and submit the task again" in words, words
        assert "Change what made it fail, then resume it with --force" not in words, words
        assert f"only where the fix is in the files of a workdir on the broker's host (read anew at each attempt) does " \
               f"`broker resume {job.id} --force` continue it" in words, words
        if checkpoint:
            assert "(with broker.checkpoint: file:///c/run to continue from step 300)" in words, words
        else:
            assert "from the start (it saved no checkpoint)" in words and "broker.checkpoint" not in words, words


def test_a_failure_of_the_code_still_says_fix_it_and_resume_with_force(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, POOL) as (service, _, store, _):
        job = failed(store, OWN, {}, code=1)
        with pytest.raises(Conflict) as refused:
            service.resume(ADMIN, job.id)
        said = _next_step(job_view(job))
    assert "then resume it with --force" in str(refused.value) and "which a resume runs as" not in str(refused.value)
    assert said.startswith("a failure of the job's own: fix what made it fail, then `broker resume"), said
