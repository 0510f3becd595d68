"""A resume whose checkpoint is gone is said, not passed off as "resumed from step S".

QA walkthrough (Dec 7): the store lost a job's checkpoints after its step-100 commit; `broker resume` said "resumed by
admin from step 100", the launch "resuming from step 100", the run's log warned that BROKER_RESUME_FROM's checkpoint
did not exist and trained from step 0, and `broker status` went from step 450 back to 50 with no event about it. Now
the attempt's first report (or first commit) below the step it was launched to resume from notes, once an attempt,
a ``resume_not_restored`` event saying so in plain words; a script that reports step S itself after restoring it, or
a later step, is not noted.

End to end against a real ``broker serve`` (local launcher, two simulated spot zones) and a real training loop with
the checkpoint library; the store's loss is the attempt's own first command (it deletes the job's checkpoint folder).
The boundaries (step S itself, a first commit below S, once an attempt) against the service and a store.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from broker_testing import ADMIN, start_broker, stop_broker, wait_for

TRAINER = Path(__file__).with_name("trainer.py")
H = {"Authorization": f"Bearer {ADMIN}"}
CONFIG = """
pools: []
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1a, grace_seconds: 4}
  - {name: sim-b, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1f, grace_seconds: 4}
tick_seconds: 0.2
stop_grace_seconds: 4
zone_cooldown_seconds: 600
"""



@pytest.fixture
def client(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'r.db'}", config=CONFIG)
    with httpx.Client(base_url=url, headers=H, timeout=10) as c:
        yield c
    stop_broker(proc, url, wait_runs=False)


def _job(client, job_id):
    return client.get(f"/v1/jobs/{job_id}").json()


def _notes(client, job_id):
    return [e for e in client.get(f"/v1/jobs/{job_id}/events").json()["events"] if e["event"] == "resume_not_restored"]


def test_a_resume_whose_checkpoint_is_gone_from_the_store_is_said_in_an_event(client):
    # attempt 2 finds the store empty: its checkpoint folder is deleted before the trainer restores
    run = (f'if [ "$BROKER_ATTEMPT" = 2 ]; then rm -rf "${{BROKER_CHECKPOINT_URI#file://}}"; fi; '
           f"python {TRAINER} 100000 0.05 10")
    job = client.post("/v1/jobs", json={"name": "lost-store", "resources": {"accelerators": "A10G:1"},
                                        "envs": {"BROKER_PROGRESS_INTERVAL_S": "0.1"}, "run": run,
                                        "broker": {"budget_usd": 5}}).json()
    wait_for(lambda: (_job(client, job["id"])["last_checkpoint"] or {}).get("step", 0) >= 30, timeout=90)
    assert client.post("/v1/admin/faults", json={"kind": "preempt", "job_id": job["id"]}).status_code == 200
    # attempt 2 is launched to resume from attempt 1's last checkpoint, and reports its steps
    view = wait_for(lambda: (v := _job(client, job["id"]))["attempts"] == 2 and v["progress"]
                    and v["progress"].get("attempt") == 2 and v, timeout=90)
    a1, a2 = view["attempt_list"][:2]
    resumed = a1["checkpoint"]["step"]
    assert a2["resume_from"] == a1["checkpoint"]["uri"] and resumed >= 30, view
    launch = [e for e in client.get(f"/v1/jobs/{job['id']}/events").json()["events"] if e["event"] == "launch"][-1]
    assert f"resuming from step {resumed}" in launch["reason"]  # what the broker said, as before
    log = client.get(f"/v1/jobs/{job['id']}/logs", params={"attempt": 2}).json()["data"]
    assert "start 0" in log and "does not exist" in log, log  # the run began again, as its log warns

    notes = wait_for(lambda: _notes(client, job["id"]), timeout=30)
    assert len(notes) == 1 and notes[0]["attempt"] == 2, notes
    said = notes[0]["reason"]
    assert said.startswith(f"attempt 2 did not restore the checkpoint of step {resumed} it was launched to resume "
                           f"from ({a2['resume_from']}): its first report was of step 1, so it trained again from "
                           f"step 1 or before, and at least {resumed - 1} steps are trained again"), said
    assert f"broker logs {job['id']} --attempt 2" in said and "not have been found in the store" in said, said
    assert notes[0]["data"] == {"resume_step": resumed, "first_step": 1, "steps_again": resumed - 1,
                                "uri": a2["resume_from"]}
    # said once an attempt, however many reports and commits below that step follow
    wait_for(lambda: (_job(client, job["id"])["last_checkpoint"] or {}).get("attempt") == 2, timeout=60)
    assert len(_notes(client, job["id"])) == 1


def test_a_resume_that_restores_its_checkpoint_is_not_noted(client):
    job = client.post("/v1/jobs", json={"name": "kept", "resources": {"accelerators": "A10G:1"},
                                        "envs": {"BROKER_PROGRESS_INTERVAL_S": "0.1"},
                                        "run": f"python {TRAINER} 100000 0.05 10",
                                        "broker": {"budget_usd": 5}}).json()
    wait_for(lambda: (_job(client, job["id"])["last_checkpoint"] or {}).get("step", 0) >= 20, timeout=90)
    assert client.post("/v1/admin/faults", json={"kind": "preempt", "job_id": job["id"]}).status_code == 200
    wait_for(lambda: (v := _job(client, job["id"]))["attempts"] == 2
             and (v["last_checkpoint"] or {}).get("attempt") == 2, timeout=90)
    assert _notes(client, job["id"]) == []


# -- the boundaries, against the service and a store -------------------------------------------------------------

ONE_POOL = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
"""


@pytest.fixture
def launched_again(make_settings, tmp_path):
    """A job whose attempt 2 was launched to resume from attempt 1's checkpoint of step 100 (as the engine records
    it); gives (service, store, job id, report(body))."""
    from broker.auth import Principal, job_token
    from broker.lifecycle import AttemptState
    from broker.models import Attempt
    from broker.service import BrokerService
    from broker.store import Change, open_store

    settings = make_settings(config=ONE_POOL)
    store = open_store(f"sqlite://{tmp_path / 's.db'}")
    service = BrokerService(settings, store)
    admin = Principal(name="admin", team=None, admin=True)
    job = service.submit(admin, {"name": "t", "resources": {"cpus": 1}, "run": "true",
                                 "broker": {"budget_usd": 1}})[0]
    uri = f"{job.checkpoint_uri}/step-000000000100"
    a1 = Attempt(id=f"{job.id}-a1", job_id=job.id, n=1, state=AttemptState.PREEMPTED, launcher="local",
                 placement={}, price_per_hour=0, created_at=1.0, ended_at=2.0, first_step=1, last_step=130,
                 checkpoint={"step": 100, "uri": uri, "at": 2.0, "attempt": 1})
    a2 = Attempt(id=f"{job.id}-a2", job_id=job.id, n=2, state=AttemptState.RUNNING, launcher="local",
                 placement={}, price_per_hour=0, created_at=3.0, resume_from=uri)
    store.commit(Change(job=replace(job, attempts=2, last_checkpoint={"step": 100, "uri": uri, "at": 2.0,
                                                                      "attempt": 1},
                                    progress={"step": 130, "attempt": 1, "at": 2.0, "metrics": {}}),
                        expected_version=job.version, attempts=[a1, a2]))
    token = job_token(settings, job.id)

    def report(body):
        return service.report_progress(job.id, token, {**body, "attempt": 2})

    yield service, store, job.id, report
    store.close()


def _noted(store, job_id):
    return [e for e in store.events(job_id) if e.event == "resume_not_restored"]


def test_a_script_that_reports_the_restored_step_itself_is_not_noted_and_one_below_it_is_once(launched_again):
    service, store, job_id, report = launched_again
    report({"step": 100})  # restored step 100 and said so at once
    report({"step": 40})  # not its first report: nothing to say of the restore
    assert _noted(store, job_id) == []


def test_a_first_report_one_step_below_the_checkpoint_is_noted_once(launched_again):
    service, store, job_id, report = launched_again
    report({"step": 99})
    report({"step": 3})
    report({"checkpoint": {"step": 10, "uri": f"{store.get_job(job_id).checkpoint_uri}/step-000000000010"}})
    notes = _noted(store, job_id)
    assert len(notes) == 1 and notes[0].attempt == 2 and notes[0].data["steps_again"] == 1, notes
    assert "did not restore the checkpoint of step 100" in notes[0].reason


def test_a_first_commit_below_the_checkpoint_is_noted_when_it_comes_before_any_step(launched_again):
    service, store, job_id, report = launched_again
    base = store.get_job(job_id).checkpoint_uri
    report({"checkpoint": {"step": 20, "uri": f"{base}/step-000000000020"}})
    notes = _noted(store, job_id)
    assert len(notes) == 1 and "its first checkpoint was of step 20" in notes[0].reason, notes
    assert "at least 80 steps are trained again" in notes[0].reason
    report({"step": 21})
    assert len(_noted(store, job_id)) == 1


def test_slack_tells_a_team_that_asked_for_it(launched_again):
    """Opt-in in `notifications.events`, as `deadline_passed`: the event's words, with a Cancel button; and many at
    once fold into one summary."""
    from broker.slack.config import DEFAULT_EVENTS, EVENTS
    from broker.slack.messages import SUMMARY_HEADS, notice_kind, notification

    service, store, job_id, report = launched_again
    report({"step": 7})
    (event,) = _noted(store, job_id)
    assert "resume_not_restored" in EVENTS and "resume_not_restored" not in DEFAULT_EVENTS
    reply = notification(event, store.get_job(job_id), store.attempts(job_id), [], dashboard_url="http://127.0.0.1:1/")
    assert reply is not None and reply.text.startswith(":warning: "), reply
    assert "did not restore the checkpoint of step 100" in reply.text and "93 steps are trained again" in reply.text
    assert any(e["action_id"] == "broker_cancel" for b in reply.blocks if b["type"] == "actions"
               for e in b["elements"]), reply.blocks
    assert notice_kind(event) in SUMMARY_HEADS
