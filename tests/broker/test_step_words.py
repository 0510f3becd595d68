"""How far a running job has got, where jobs are listed (`broker status`, Slack's lists): the step it last reported
leads its reason, which is its last change of state ("the attempt started"), hours old in a long run."""

from __future__ import annotations

import pytest

from broker.lifecycle import JobState
from broker.models import Job
from broker.slack.blocks import job_line
from broker.views import step_words


def _job(state: JobState, progress: dict) -> Job:
    return Job(id="j-1", name="train", team="t", spec={}, budget=1_000_000, priority=0, state=state, submitted_at=0.0,
               updated_at=0.0, progress=progress, reason="the attempt started")


@pytest.mark.parametrize("state, progress, said", [
    pytest.param(JobState.RUNNING, {"step": 150, "total_steps": 300}, "step 150/300", id="running with a total"),
    pytest.param(JobState.RUNNING, {"step": 150}, "step 150", id="running with no total says the step alone"),
    pytest.param(JobState.RUNNING, {"step": 0, "total_steps": 300}, "step 0/300", id="step 0 is a step"),
    pytest.param(JobState.RUNNING, {"step": 5, "total_steps": 0}, "step 5", id="a total of 0 is no total"),
    pytest.param(JobState.RUNNING, {}, None, id="running with nothing reported says nothing"),
    pytest.param(JobState.RUNNING, {"step": True}, None, id="a step that is no whole number says nothing"),
    pytest.param(JobState.QUEUED, {"step": 150, "total_steps": 300}, None,
                 id="a queued job that ran before is not said to be at a step"),
    pytest.param(JobState.SUCCEEDED, {"step": 300, "total_steps": 300}, None, id="an ended job is its reason alone"),
])
def test_a_listed_job_says_the_step_it_reached_only_while_it_runs(state, progress, said):
    assert step_words(state.value, progress) == said
    line = job_line(_job(state, progress))
    assert (f" · {said} · spent " in line) if said else (" · step " not in line), line


def test_the_cli_table_leads_a_running_jobs_reason_with_its_step():
    from broker.cli import _reason_cell

    view = {"state": "running", "progress": {"step": 7, "total_steps": 20}, "reason": "the attempt started"}
    assert _reason_cell(view) == "step 7/20 · the attempt started"
    assert _reason_cell({**view, "reason": ""}) == "step 7/20"
    assert _reason_cell({**view, "state": "stopping"}) == "the attempt started"
