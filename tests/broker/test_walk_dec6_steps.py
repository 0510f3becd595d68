"""A job that prints "step N/M" lines but reports no progress (neither the checkpoint library nor BROKER_PROGRESS_URL):
while it runs its status shows no step (``the attempt started``), and its budget stop read "Stopped at its budget at
step 36." — the broker seemed to have known a step it never showed. The step is read from the log at the end; the
stop now says so. Real broker service and engine, the local launcher, real job processes."""

from __future__ import annotations

import re
import time

from broker.auth import Principal, job_token
from broker.diagnosis import Ending, diagnose
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService
from broker.store import open_store
from broker.views import job_view, step_words

from broker_testing import CENT_A_SECOND, run_until, wait_for

ADMIN = Principal("admin", None, admin=True)
# $36/h: one cent a second, so a $0.12 budget is stopped some seconds in
CONFIG = CENT_A_SECOND
STEPS = "for i in $(seq 1 1000); do echo \"step $i/1000 loss=0.5\"; sleep 0.1; done"
NOTE = "(the last in the job's log: the job reported no progress to the broker, so none was shown while it ran)"


def _broker(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 's.db'}")
    launcher = open_launcher(settings)
    return store, launcher, BrokerService(settings, store, launcher), Engine(settings, store, launcher)


def _steps_in_log(service, job_id) -> int:
    return max(int(n) for n in re.findall(r"^step (\d+)/1000", service.logs(ADMIN, job_id)["data"], re.M))


def test_a_budget_stop_says_the_step_came_from_the_log_of_a_job_that_reported_none(make_settings, tmp_path):
    store, launcher, service, engine = _broker(make_settings, tmp_path)
    job = service.submit(ADMIN, {"name": "printer", "run": STEPS, "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "0.12"}})[0]
    try:
        wait_for(lambda: engine.tick() or "step 5/1000" in service.logs(ADMIN, job.id)["data"], timeout=20)
        running = store.get_job(job.id)
        assert running.state is JobState.RUNNING
        view = job_view(running)  # what `broker status` and Slack lead the reason with: nothing reported, no step
        assert view["progress"] is None and step_words(view["state"], view["progress"]) is None
        final = run_until(engine, store, job.id, {"stopped_budget", "failed", "succeeded"}, timeout=40)
        assert final.state is JobState.STOPPED_BUDGET, final.reason
        step = _steps_in_log(service, job.id)
        assert f"Stopped at its budget after step {step} {NOTE}." in final.reason, final.reason
        assert final.diagnosis["step"] == step and NOTE in final.diagnosis["sentence"]
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_cancel_of_a_job_that_only_prints_steps_says_where_its_step_came_from(make_settings, tmp_path):
    store, launcher, service, engine = _broker(make_settings, tmp_path)
    job = service.submit(ADMIN, {"name": "printer", "run": STEPS, "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "5"}})[0]
    try:
        wait_for(lambda: engine.tick() or "step 3/1000" in service.logs(ADMIN, job.id)["data"], timeout=20)
        service.cancel(ADMIN, job.id)
        final = run_until(engine, store, job.id, {"cancelled", "failed", "succeeded"}, timeout=30)
        assert final.state is JobState.CANCELLED, final.reason
        step = _steps_in_log(service, job.id)
        assert f"Cancelled after step {step} {NOTE}." in final.reason, final.reason
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_job_that_reported_its_step_is_stopped_at_it_without_the_note(make_settings, tmp_path):
    """The same stop where the job reported progress (as the checkpoint library's report does, through the service
    the API hands it to): its status showed the step while it ran, and the stop names it plainly."""
    store, launcher, service, engine = _broker(make_settings, tmp_path)
    job = service.submit(ADMIN, {"name": "reporter", "run": STEPS, "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "5"}})[0]
    try:
        wait_for(lambda: engine.tick() or "step 3/1000" in service.logs(ADMIN, job.id)["data"], timeout=20)
        service.report_progress(job.id, job_token(service.settings, job.id), {"step": 3, "total_steps": 1000})
        running = store.get_job(job.id)
        assert step_words(running.state.value, running.progress) == "step 3/1000"
        service.cancel(ADMIN, job.id)
        final = run_until(engine, store, job.id, {"cancelled", "failed", "succeeded"}, timeout=30)
        step = _steps_in_log(service, job.id)  # the log is ahead of the report (reports are rate-limited)
        assert f"Cancelled after step {step} (the last " in final.reason and NOTE not in final.reason, final.reason
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_failure_read_from_the_log_and_an_ending_without_the_engines_word_are_as_before():
    # a failure is diagnosed from its log anyway: no note there
    failed = diagnose(Ending("failed", exit_code=1, log_tail="step 12\nKilled\n", unreported=True))
    assert "reported no progress" not in failed.sentence
    # an Ending that does not say whether the job reported (a team's tool, older callers) reads as before
    assert diagnose(Ending("budget", log_tail="step 90")).sentence == "Stopped at its budget after step 90 (the last in the job's log)."
    assert diagnose(Ending("preempted", log_tail="step 7\n", unreported=True)).sentence == \
        f"Spot capacity was preempted after step 7 {NOTE}."


SPOT = """
pools: []
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1a, grace_seconds: 1}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
tick_seconds: 0.05
stop_grace_seconds: 1
changeover_seconds: 2
zone_cooldown_seconds: 600
"""


def test_a_preemption_of_a_job_that_only_prints_steps_says_where_its_step_came_from(make_settings, tmp_path):
    settings = make_settings(config=SPOT)
    store = open_store(f"sqlite://{tmp_path / 'p.db'}")
    launcher = open_launcher(settings)
    service, engine = BrokerService(settings, store, launcher), Engine(settings, store, launcher)
    job = service.submit(ADMIN, {"name": "printer", "run": STEPS, "resources": {"accelerators": "A10G:1"},
                                 "broker": {"budget_usd": "5"}})[0]
    try:
        wait_for(lambda: engine.tick() or "step 3/1000" in service.logs(ADMIN, job.id)["data"], timeout=20)
        first = store.attempts(job.id)[0]
        assert first.placement["zone"] == "sim-a"
        assert launcher.preempt(first.id)
        wait_for(lambda: engine.tick() or store.attempts(job.id)[0].ended_at is not None, timeout=30)
        first = store.attempts(job.id)[0]
        step = max(int(n) for n in re.findall(r"^step (\d+)/1000", launcher.logs(first.id)[0].decode(), re.M))
        assert first.reason.startswith(f"Spot capacity was preempted after step {step} {NOTE} in sim-a; "
                                       f"restarts from the beginning"), first.reason
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()
