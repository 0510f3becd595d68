"""A job that falls silent (``heartbeat_timeout_seconds``), with the local launcher's real processes: stopped and
said to have stalled (not "the node was lost"), resumed once; stalled again with no step gained between, failed
rather than resumed without end; and a resumed attempt is not taken for silent on the attempt before it's report."""

import time

import pytest

from broker.auth import Principal, job_token
from broker.lifecycle import JobState
from broker.service import Conflict

from broker_testing import attempt_ended, attempt_running, local_broker, wait_for

ADMIN = Principal("admin", None, admin=True)
TIMEOUT = 2.0
CONFIG = f"""
pools:
  - {{name: cpu, slots: 1, price_per_slot_hour: "0.36"}}
stop_grace_seconds: 1
tick_seconds: 0.05
heartbeat_timeout_seconds: {TIMEOUT}
"""


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as parts:
        service, engine, store, launcher = parts
        try:
            yield parts
        finally:
            for run in launcher.runs_dir.glob("j*"):
                launcher.kill(run.name)


def _submit(service):
    task = {"name": "hangs", "run": "sleep 120", "resources": {"cpus": 1}, "broker": {"budget_usd": 5}}
    return service.submit(ADMIN, task)[0]


def _stalled_at_7_then_reporting(service, engine, store, step):
    """A job that reported step 7 and stalled, resumed, whose second attempt reports ``step``: its id."""
    job = _submit(service)
    token = job_token(service.settings, job.id)
    attempt_running(engine, store, job.id, 1)
    service.report_progress(job.id, token, {"step": 7})
    attempt_ended(engine, store, job.id, 1)
    attempt_running(engine, store, job.id, 2)
    service.report_progress(job.id, token, {"step": step})
    return job.id


def test_a_silent_job_is_said_to_have_stalled_and_is_resumed_once(broker):
    service, engine, store, launcher = broker
    job = _submit(service)
    token = job_token(service.settings, job.id)
    attempt_running(engine, store, job.id, 1)
    point = {"step": 5, "uri": f"{job.checkpoint_uri}/step-5"}  # in the job's own base: kept as its last
    service.report_progress(job.id, token, {"step": 7, "checkpoint": point})
    after = attempt_ended(engine, store, job.id, 1)
    first = store.attempts(job.id)[0]
    assert first.stop_reason == "heartbeat"
    assert after.state in (JobState.QUEUED, JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING), after.reason
    assert after.diagnosis["class"] == "stalled" and after.diagnosis["infrastructure"] is True, after.diagnosis
    text = after.diagnosis["text"]
    assert text.startswith("The job stalled after step 7 (the last the job reported): it reported no progress for ") and "was lost" not in text
    assert "so the broker stopped it" in text
    (recover,) = [e for e in store.events(job.id) if e.event == "recover"]
    assert recover.reason.startswith("The job stalled after step 7 (the last the job reported)") and "resumes from step 5" in recover.reason
    assert recover.data["diagnosis_class"] == "stalled"


def test_stalled_again_with_no_step_gained_is_failed_and_needs_force_to_resume(broker):
    service, engine, store, launcher = broker
    job_id = _stalled_at_7_then_reporting(service, engine, store, 7)  # restored, and stuck at the same place
    final = wait_for(lambda: engine.tick() or (j := store.get_job(job_id)).state.is_final and j, timeout=30)
    assert final.state is JobState.FAILED, final.reason
    assert final.attempts == 2
    assert final.diagnosis["class"] == "stalled_again" and final.diagnosis["infrastructure"] is False
    assert final.reason.startswith("The job stalled again after step 7 (the last the job reported), with no progress since it last stalled")
    assert "resume with --force" in final.reason
    with pytest.raises(Conflict):
        service.resume(ADMIN, job_id)  # its own hang: not resumed with one click
    resumed = service.resume(ADMIN, job_id, force=True)
    assert resumed.state is JobState.QUEUED


def test_a_job_that_got_past_the_step_it_stalled_at_is_resumed_again(broker):
    service, engine, store, launcher = broker
    job_id = _stalled_at_7_then_reporting(service, engine, store, 9)  # further this time: a node that hung
    after = attempt_ended(engine, store, job_id, 2)
    assert after.state is not JobState.FAILED, after.reason
    assert after.diagnosis["class"] == "stalled" and after.diagnosis["text"].startswith("The job stalled after step 9 (the last the job reported)")


def test_a_resumed_attempt_is_not_taken_for_silent_on_the_report_of_the_one_before(broker):
    service, engine, store, launcher = broker
    job = _submit(service)
    token = job_token(service.settings, job.id)
    attempt_running(engine, store, job.id, 1)
    service.report_progress(job.id, token, {"step": 3})
    # a job ahead of it in the queue takes the pool's one slot once the node is lost, for longer than the timeout
    ahead = service.submit(ADMIN, {"name": "ahead", "run": f"sleep {TIMEOUT + 1.5}", "resources": {"cpus": 1},
                                   "broker": {"budget_usd": 5, "priority": 10}})[0]
    launcher.kill(store.attempts(job.id)[0].id)  # no exit recorded: the node is lost, and the job requeued
    lost = attempt_ended(engine, store, job.id, 1)
    assert lost.diagnosis["class"] == "node_lost", lost.diagnosis
    wait_for(lambda: engine.tick() or store.get_job(ahead.id).state is JobState.SUCCEEDED, timeout=30)
    attempt_running(engine, store, job.id, 2)
    assert time.time() - store.get_job(job.id).progress["at"] > TIMEOUT  # its last report is older than that
    for _ in range(5):
        engine.tick()
    second = store.attempts(job.id)[1]
    assert second.stop_reason == "", "the new attempt was stopped as silent on its first ticks"
    # and it is watched all the same: silent from its start, it is stopped as stalled
    after = attempt_ended(engine, store, job.id, 2)
    assert store.attempts(job.id)[1].stop_reason == "heartbeat"
    assert after.diagnosis["class"] == "stalled", after.diagnosis
