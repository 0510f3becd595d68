"""How long a queued job has waited counts from when it last entered the queue (``Job.queued_at``): its submit, its
resume, its requeue after a run. Counted from its submit (or its last attempt's end), a job resumed days after it
failed had "waited" days, in the cost report's queue and in /metrics' ``broker_queue_oldest_seconds``."""

from __future__ import annotations

import time
from dataclasses import replace

from broker.store import Change

from broker_testing import local_broker, run_until
from test_deadline_pin import ADMIN, CONFIG


def test_a_job_s_wait_in_the_queue_counts_from_when_it_last_entered_it(make_settings, tmp_path):
    """A job resumed days after it failed was "waiting" for days, from its submit or its last attempt's end: the
    queue's waiting_seconds and /metrics' broker_queue_oldest_seconds (a stuck-queue alert fired on every resume)."""
    from broker import costs

    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        task = {"name": "own", "run": "exit 3", "resources": {"instance_type": "g5.xlarge"},
                "broker": {"budget_usd": 50}}
        job = service.submit(ADMIN, task)[0]
        assert job.queued_at == job.submitted_at
        failed = run_until(engine, store, job.id, {"failed"})
        # as if it had failed three days ago
        old = failed.submitted_at - 3 * 86_400
        store.commit(Change(job=replace(failed, submitted_at=old, queued_at=old), expected_version=failed.version))
        resumed = service.resume(ADMIN, job.id, force=True)
        assert resumed.queued_at is not None and time.time() - resumed.queued_at < 60
        win = costs.Window(old - 1, time.time() + 1, "test")
        history = costs.gather(store, team=None, win=win)  # the store's narrow read (CostJob) holds it too
        report = costs.report(history.jobs, history.attempts, win=win, now=time.time(), positions={}, team=None)
        (row,) = [r for r in report["queue"] if r["id"] == job.id]
        assert row["waiting_seconds"] < 60, row


def test_a_job_requeued_after_a_run_waits_from_then(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        task = {"name": "retry", "run": "if [ $BROKER_ATTEMPT = 1 ]; then exit 75; fi; echo second",
                "resources": {"instance_type": "g5.xlarge"},
                "broker": {"budget_usd": 50, "retry": {"recover_on_exit_codes": [75]}}}
        job = service.submit(ADMIN, task)[0]
        requeued = job
        for _ in range(200):
            requeued = store.get_job(job.id)
            if any(e.event == "recover" for e in store.events(job.id)):
                break
            engine.tick()
            time.sleep(0.05)
        (first,) = [a for a in store.attempts(job.id) if a.n == 1]
        assert requeued.queued_at is not None and requeued.queued_at >= first.ended_at > job.submitted_at, \
            (requeued.queued_at, first.ended_at, job.submitted_at)
        for a in store.attempts(job.id):
            launcher.kill(a.id)
