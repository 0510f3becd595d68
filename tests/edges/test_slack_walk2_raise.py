"""Slack walkthrough 2: the "Raise budget to $X" button proposes what a resume needs, at the budget's precision,
and only where money is the matter."""

from __future__ import annotations

from broker.lifecycle import JobState
from broker.slack import messages

from . import world
from .test_slack import command, engine_app, press, set_job, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)


def buttons_of(reply: dict) -> dict:
    return {e["text"]["text"]: e for b in reply.get("blocks", []) if b["type"] == "actions" for e in b["elements"]}


def test_a_small_budget_is_raised_at_its_own_precision_not_to_a_whole_dollar():
    assert messages.raised_budget(500, 50) == 750  # $0.0005 → $0.00075, not $1.00
    assert messages.raised_budget(12_345, 50) == 19_000  # $0.012345 → $0.019
    assert messages.raised_budget(4_000_000, 50) == 6_000_000  # whole dollars from a dollar up, as before
    assert messages.raised_budget(500, 50, at_least=3_600) == 3_600  # what a resume needs, when that is more


def test_a_budget_stopped_jobs_raise_button_proposes_what_the_resume_needs(slack, store):
    set_job(store, "j-b1", state=JobState.STOPPED_BUDGET, budget=500, spent=500,
            diagnosis={"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."})
    refused = text_of(command(slack, "resume j-b1", user="U_B").json())
    needed = messages.needed_to_resume(refused)
    assert needed is not None, refused
    labels = [label for label in buttons_of(command(slack, "status j-b1", user="U_B").json())
              if label.startswith("Raise budget to ")]
    proposed = messages.to_micros(labels[0].removeprefix("Raise budget to $"))
    assert needed <= proposed < 1_000_000, (labels, refused)  # enough to resume, not $1.00


def test_a_failure_of_the_jobs_own_offers_no_raise_budget(slack):
    # j-b1 failed out of GPU memory: more money does not help
    labels = set(buttons_of(command(slack, "status j-b1", user="U_B").json()))
    assert labels == {"Resume from step 400", "Switch to on-demand"}


def test_the_engines_budget_stop_notification_proposes_what_the_resume_needs(engine_app, stub):
    """The notification's button took its figure from the job's reason, which the engine's stop does not word as
    "at least $X": a job that ran 9 s on a $0.20/h pool on a $0.0005 budget was offered "Raise budget to $0.00075",
    which a resume then refused. It now proposes what the resume needs, as `status` does."""
    import time

    from launchers.base import AttemptStatus, Phase

    from .test_slack import pressed, running

    service, engine = engine_app.state.service, engine_app.state.engine
    running(engine_app, "j-tiny", "team-b", world.onprem(200_000), budget=500, checkpoint_step=None, last_step=None,
            started_ago=9)
    engine.tick()
    service.launcher.statuses["j-tiny-a1"] = AttemptStatus(Phase.STOPPED, exit_code=0, ended_at=time.time())
    engine.tick()
    job = service.store.get_job("j-tiny")
    assert job.state is JobState.STOPPED_BUDGET
    needed = service.resume_needs(job)
    assert needed is not None and needed > messages.raised_budget(job.budget, 50)  # a 50% raise would not do
    stopped = next(m for m in stub.wait_for("/webhook/b", 2) if "was stopped" in text_of(m))
    raise_btn = next(b for label, b in buttons_of(stopped).items() if label.startswith("Raise budget to "))
    assert messages.to_micros(raise_btn["text"]["text"].removeprefix("Raise budget to $")) >= needed
    from fastapi.testclient import TestClient

    slack = TestClient(engine_app)  # (not entered: the engine runs only when the test ticks it)
    pressed(slack, stub, raise_btn, "U_B", "raise")  # the notification offered no Resume its budget could not pay
    raised = stub.wait_for("/respond/raise")[0]
    resume = next(b for label, b in buttons_of(raised).items() if label.startswith("Resume"))
    said = pressed(slack, stub, resume, "U_B", "resume")
    assert service.store.get_job("j-tiny").state is JobState.QUEUED, said  # the raise was enough to resume
