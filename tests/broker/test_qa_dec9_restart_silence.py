"""QA, Dec 9: a broker restart killed healthy jobs as "stalled", and a second restart failed them, blaming the
job's code. With ``heartbeat_timeout_seconds`` set, ``broker serve`` stopped for longer than the timeout while a job
trained on (its reports refused: "not yet told to the broker: Connection refused"): the restarted broker stopped it
on its first tick ("it reported no progress for 35 s"), and a restart during the next attempt failed it as "stalled
again", though it had got from step 300 to 540. Here with a real engine and the local launcher's real processes:
the restarted broker is a new ``Engine`` on the same store, after a pause of its ticks longer than the timeout."""

import time

import pytest

from broker.auth import Principal, job_token
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState

from broker_testing import attempt_ended, attempt_running, local_broker

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
    task = {"name": "trains", "run": "sleep 120", "resources": {"cpus": 1}, "broker": {"budget_usd": 5}}
    return service.submit(ADMIN, task)[0]


def _restarted(service, store, launcher):
    """The broker down for longer than the timeout while its job runs on, then started again: a new engine."""
    time.sleep(TIMEOUT + 1)
    return Engine(service.settings, store, launcher)


def _first_ticks(engine):
    """The restarted broker's first ticks, well within a timeout of its start."""
    started = time.time()
    for _ in range(5):
        engine.tick()
        time.sleep(0.05)
    assert time.time() - started < TIMEOUT / 2
    return started


def test_a_restarted_broker_gives_a_running_job_a_full_timeout_before_calling_it_silent(broker):
    service, engine, store, launcher = broker
    job = _submit(service)
    token = job_token(service.settings, job.id)
    attempt_running(engine, store, job.id, 1)
    service.report_progress(job.id, token, {"step": 7})
    restarted = _restarted(service, store, launcher)
    assert time.time() - store.get_job(job.id).progress["at"] > TIMEOUT  # its last report is older than that
    started = _first_ticks(restarted)
    first = store.attempts(job.id)[0]
    assert first.stop_requested_at is None and first.stop_reason == "", \
        "the restarted broker stopped a job as silent for the time it was down itself"
    assert store.get_job(job.id).state is JobState.RUNNING
    # a job silent a full timeout on the restarted broker's watch is stopped all the same
    after = attempt_ended(restarted, store, job.id, 1)
    first = store.attempts(job.id)[0]
    assert first.stop_reason == "heartbeat" and first.stop_requested_at >= started + TIMEOUT
    assert after.diagnosis["class"] == "stalled", after.diagnosis


def test_a_job_that_told_of_a_later_checkpoint_after_a_restart_is_not_failed_as_stalled_again(broker):
    service, engine, store, launcher = broker
    job = _submit(service)
    token = job_token(service.settings, job.id)
    attempt_running(engine, store, job.id, 1)
    service.report_progress(job.id, token, {"step": 7})
    attempt_ended(engine, store, job.id, 1)  # stalled after step 7: resumed
    attempt_running(engine, store, job.id, 2)
    restarted = _restarted(service, store, launcher)  # down through attempt 2's start: none of its reports came
    _first_ticks(restarted)
    assert store.attempts(job.id)[1].stop_reason == ""
    # back, the broker is told the commit it could not take while down (the library sends the latest one again)
    service.report_progress(job.id, token, {"checkpoint": {"step": 9, "uri": f"{job.checkpoint_uri}/step-9"}})
    after = attempt_ended(restarted, store, job.id, 2)  # then it hangs: past step 7 this time, a node's, not its own
    assert store.attempts(job.id)[1].stop_reason == "heartbeat"
    assert after.state is not JobState.FAILED, after.reason
    assert after.diagnosis["class"] == "stalled", after.diagnosis


def test_a_store_outage_longer_than_the_timeout_is_no_silence_of_the_jobs_either(broker):
    """The store down longer than ``heartbeat_timeout_seconds`` (but not so long that the engine's beats counted it as
    a gap): the job's reports were refused (503) all that time, and the first tick with the store back stopped it as
    silent. The outage restarts the engine's watch, as a restart does."""
    from broker.store import StoreUnavailable

    service, engine, store, launcher = broker
    job = _submit(service)
    token = job_token(service.settings, job.id)
    attempt_running(engine, store, job.id, 1)
    service.report_progress(job.id, token, {"step": 7})
    real_tick = engine.tick

    def down():
        raise StoreUnavailable("the job store did not answer (test: down)")

    engine.tick = down
    try:
        until = time.time() + TIMEOUT + 1
        while time.time() < until:
            engine.tick_safely()
            time.sleep(0.05)
    finally:
        engine.tick = real_tick
    back = time.time()
    for _ in range(5):
        engine.tick_safely()
        time.sleep(0.05)
    assert time.time() - back < TIMEOUT / 2
    first = store.attempts(job.id)[0]
    assert first.stop_requested_at is None and first.stop_reason == "", \
        "the engine stopped a job as silent for the time the store was down"
    after = attempt_ended(engine, store, job.id, 1)  # silent a full timeout with the store up: stopped all the same
    assert store.attempts(job.id)[0].stop_reason == "heartbeat" and after.diagnosis["class"] == "stalled"
