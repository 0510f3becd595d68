"""A refused resume says how to go on once, and says "from its last checkpoint" only of a job that saved one.

QA walkthrough (Dec 8): the refusal of an out-of-memory job's resume was some 900 characters: the diagnosis's hint
(already ending "…then resume with --force; where an env sets it, resume with --env NAME=value instead") and then a
second, generic paragraph saying much the same, ending "Forced with nothing changed, it fails the same way" with no
full stop; and a job that saved no checkpoint was told "it goes on from its last checkpoint".
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.auth import Principal
from broker.diagnosis import Ending, diagnose
from broker.lifecycle import JobState
from broker.service import Conflict
from broker_testing import local_broker, stored_job

ADMIN = Principal("admin", None, admin=True)
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
OWN = "ValueError: bad label\n"
POOL = "pools: [{name: cpu, slots: 1, price_per_slot_hour: \"0.36\"}]\n"


def failed(store, log: str, checkpoint: dict):
    from broker.store import Change

    d = diagnose(Ending(phase="failed", exit_code=1, log_tail=log, reason="exit 1"))
    job = stored_job(store, "j-0123456789", state=JobState.RUNNING)
    return store.commit(Change(job=replace(job, state=JobState.FAILED, diagnosis=d.to_dict(), reason=d.text,
                                           last_checkpoint=checkpoint), expected_version=job.version))


@pytest.mark.parametrize("checkpoint, goes_on", [
    pytest.param({"step": 1200, "uri": "file:///c/step-1200"}, "it goes on from its last checkpoint (step 1200)",
                 id="a checkpoint saved → from it, by step"),
    pytest.param({}, "it starts over (it saved no checkpoint)", id="none saved → it starts over"),
])
def test_an_out_of_memory_jobs_refusal_says_the_hint_once_and_where_a_forced_resume_goes_on(
        make_settings, tmp_path, checkpoint, goes_on):
    with local_broker(make_settings, tmp_path, POOL) as (service, _, store, _):
        job = failed(store, OOM, checkpoint)
        with pytest.raises(Conflict) as refused:
            service.resume(ADMIN, job.id)
    said = str(refused.value)
    assert said.startswith("not resumed: the job failed for a reason of its own"), said
    assert said.count("--force") == 2 and "Change what made it fail" not in said, said  # the hint's, and the close
    assert said.endswith(f"Resumed with --force, {goes_on}; forced with nothing changed, it fails the same way."), said


def test_a_failure_whose_hint_says_nothing_of_force_gets_the_whole_way_and_a_full_stop(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, POOL) as (service, _, store, _):
        job = failed(store, OWN, {})
        with pytest.raises(Conflict) as refused:
            service.resume(ADMIN, job.id)
    said = str(refused.value)
    assert "Change what made it fail, then resume it with --force: it starts over (it saved no checkpoint) with the " \
           "code as it is then" in said, said
    assert said.endswith("Forced with nothing changed, it fails the same way."), said
