"""The state machine table: what may happen to a job, and what may not."""

import pytest

from broker.lifecycle import FINAL_STATES, TRANSITIONS, IllegalTransition, JobEvent, JobState, apply

S, E = JobState, JobEvent


@pytest.mark.parametrize(
    "state, event, expected",
    [
        pytest.param(None, E.SUBMIT, S.QUEUED, id="a submitted job starts queued"),
        pytest.param(S.QUEUED, E.PLACE, S.PLACED, id="a queued job that fits is placed"),
        pytest.param(S.PLACED, E.LAUNCH, S.LAUNCHING, id="a placed job is launched"),
        pytest.param(S.LAUNCHING, E.START, S.RUNNING, id="a launching job whose process started is running"),
        pytest.param(S.RUNNING, E.SUCCEED, S.SUCCEEDED, id="a running job that exits 0 succeeded"),
        pytest.param(S.RUNNING, E.FAIL, S.FAILED, id="a running job that exits non-zero failed"),
        pytest.param(S.RUNNING, E.RECOVER, S.QUEUED, id="a preempted running job goes back to the queue"),
        pytest.param(S.LAUNCHING, E.LAUNCH_FAILED, S.QUEUED, id="a launch the launcher refused requeues the job"),
        pytest.param(S.RUNNING, E.CANCEL, S.CANCELLING, id="cancelling a running job waits for its process"),
        pytest.param(S.CANCELLING, E.ENDED, S.CANCELLED, id="a cancelling job whose process ended is cancelled"),
        pytest.param(S.CANCELLING, E.SUCCEED, S.SUCCEEDED,
                     id="a cancelling job whose run had already finished on its own succeeded"),
        pytest.param(S.STOPPING, E.SUCCEED, S.SUCCEEDED,
                     id="a job whose run finished before its budget stop reached it succeeded"),
        pytest.param(S.QUEUED, E.CANCEL, S.CANCELLED, id="a queued job is cancelled at once"),
        pytest.param(S.FAILED, E.RESUME, S.QUEUED, id="a failed job can be resumed"),
        pytest.param(S.STOPPED_BUDGET, E.RESUME, S.QUEUED, id="a job stopped for budget can be resumed"),
        pytest.param(S.RUNNING, E.STOP_BUDGET, S.STOPPING, id="a running job at its budget is asked to checkpoint and stop"),
        pytest.param(S.STOPPING, E.ENDED, S.STOPPED_BUDGET, id="a job whose budget stop ended is stopped_budget"),
        pytest.param(S.QUEUED, E.STOP_BUDGET, S.STOPPED_BUDGET, id="a queued job with no budget left is stopped at once"),
    ],
)
def test_allowed_transitions(state, event, expected):
    t = apply(state, event)
    assert (t.from_state, t.to_state, t.event) == (state, expected, event)


@pytest.mark.parametrize(
    "state, event",
    [
        pytest.param(S.SUCCEEDED, E.CANCEL, id="a finished job cannot be cancelled"),
        pytest.param(S.CANCELLED, E.RESUME, id="a cancelled job cannot be resumed"),
        pytest.param(S.QUEUED, E.START, id="a queued job cannot start without a launch"),
        pytest.param(S.RUNNING, E.PLACE, id="a running job cannot be placed again"),
        pytest.param(S.SUCCEEDED, E.RESUME, id="a succeeded job cannot be resumed"),
        pytest.param(None, E.PLACE, id="nothing happens to a job that was never submitted"),
    ],
)
def test_illegal_transitions_raise(state, event):
    with pytest.raises(IllegalTransition) as info:
        apply(state, event)
    assert event.value in str(info.value)


def test_final_states_have_no_way_out_but_resume():
    for (state, event), _ in TRANSITIONS.items():
        if state in FINAL_STATES:
            assert event is E.RESUME, f"{state.value} --{event.value}--> should not exist"


def test_every_state_is_reachable_from_submit():
    reached, frontier = set(), [None]
    while frontier:
        state = frontier.pop()
        for (src, _), dst in TRANSITIONS.items():
            if src == state and dst not in reached:
                reached.add(dst)
                frontier.append(dst)
    assert reached == set(JobState)
