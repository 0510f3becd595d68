"""The engine's budget stop against a budget change landing in the middle of its tick, and against the engine
dying between its decision and the launcher call: the real SQLite store, the local launcher, real runner processes.

A stop is decided on the job as the tick read it; it is committed (compare-and-set on that version) before it is
sent. A raise committed in between makes the commit conflict: the engine reads the job again and decides on the
raised budget, so no stop at the old limit reaches the runner. A stop committed but never sent (the engine killed
in between) is sent by the next engine that looks.
"""

import json
import time

import pytest

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService, Invalid
from broker.store import open_store

from broker_testing import CENT_A_SECOND, run_until, wait_for

ADMIN = Principal("admin", None, admin=True)
# $36/h is one cent a second: a $1 budget holds 100 s. The budget stop is asked when what is spent and the
# reserve (the 2 s grace, two ticks and a second, the launcher's 3 s margin: 6 s) reach the budget: at 94 s
CONFIG = CENT_A_SECOND
BUDGET = 1_000_000
NEARLY_USED = 95  # seconds billed when the engine looks: $0.95 spent, the reserve no longer fits in $1


class _Launcher:
    """The real local launcher, with a hook into the engine's next status call of an attempt (the moment the
    engine has read the job and its attempts and is about to decide on them) and a count of stop calls."""

    def __init__(self, launcher, *, on_stop=None):
        self._launcher = launcher
        self._on_stop = on_stop
        self.before_status = None
        self.stops: list[tuple[str, str]] = []

    def __getattr__(self, name):
        return getattr(self._launcher, name)

    def status(self, attempt_id: str):
        hook, self.before_status = self.before_status, None
        if hook is not None:
            hook()
        return self._launcher.status(attempt_id)

    def stop(self, attempt_id: str, *, grace_seconds: float, reason: str = "stopped") -> None:
        self.stops.append((attempt_id, reason))
        if self._on_stop is not None:
            self._on_stop()
        self._launcher.stop(attempt_id, grace_seconds=grace_seconds, reason=reason)


class _Killed(BaseException):
    """The engine's process dies here (not an error a tick catches)."""


@pytest.fixture
def parts(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'stop.db'}")
    launcher = open_launcher(settings)
    now = [time.time()]  # the engine's clocks (the wall clock and the one it bills by) move when the test says
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    yield settings, store, launcher, service, now
    for run in launcher.runs_dir.glob("j*"):
        launcher.kill(run.name)
    store.close()


def _running(settings, store, launcher, service, now, engine_launcher):
    engine = Engine(settings, store, engine_launcher, clock=lambda: now[0], monotonic=lambda: now[0])
    job = service.submit(ADMIN, {"name": "t", "run": "sleep 60", "resources": {"cpus": 1},
                                 "broker": {"budget_usd": "1"}})[0]
    wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
    (attempt,) = store.attempts(job.id)
    return engine, job, attempt, launcher.runs_dir / attempt.id


@pytest.mark.parametrize("raised_to, stops", [
    (None, True),
    (10_000_000, False),
    (1_005_000, True),
], ids=[
    "no raise: the tick that finds the budget nearly used stops the job at it",
    "a raise to $10 landing after the tick read the job: the job runs on, nothing stopped, its limit moved",
    "a raise to $1.005 landing mid-tick, too small for the reserve: stopped, on the raised budget's figures",
])
def test_a_budget_raise_landing_during_the_tick_is_decided_on_before_any_stop_is_sent(parts, raised_to, stops):
    settings, store, launcher, service, now = parts
    hooked = _Launcher(launcher)
    engine, job, attempt, run_dir = _running(settings, store, launcher, service, now, hooked)
    now[0] = attempt.created_at + NEARLY_USED
    if raised_to is not None:  # committed after the tick read the job, before it decides on it
        hooked.before_status = lambda: service.raise_budget(ADMIN, job.id, raised_to)
    engine.tick()
    assert hooked.before_status is None  # the raise came in that tick
    after = store.get_job(job.id)
    (attempt,) = store.attempts(job.id)
    events = {e.event: e for e in store.events(job.id)}
    if not stops:
        assert not (run_dir / "stop.json").exists(), "stopped at the old limit: the work since its checkpoint is lost"
        assert hooked.stops == [] and launcher.status(attempt.id).phase.value == "running"
        assert after.state is JobState.RUNNING and after.budget == raised_to
        assert attempt.stop_requested_at is None and "budget_stop_requested" not in events
        # the runner's own limit follows the new budget ($10: 1,000 s, less the grace and the 3 s margin)
        assert attempt.limit_at == attempt.created_at + 1000 - settings.stop_grace_seconds - 3
        stop_at = json.loads((run_dir / "limit.json").read_text())["stop_at"]
        assert stop_at == pytest.approx(time.time() + 1000 - NEARLY_USED - 5, abs=30)
        for _ in range(3):
            engine.tick()
        assert store.get_job(job.id).state is JobState.RUNNING and len(store.attempts(job.id)) == 1
        return
    budget = raised_to or BUDGET
    assert after.state is JobState.STOPPING and after.budget == budget
    assert json.loads((run_dir / "stop.json").read_text())["reason"] == "budget"
    assert hooked.stops == [(attempt.id, "budget")]  # sent once, after the stop was recorded
    assert attempt.stop_reason == "budget" and attempt.stop_requested_at == now[0]
    stop = events["budget_stop_requested"]
    assert stop.data["budget"] == budget and stop.data["spent"] == NEARLY_USED * 10_000
    final = run_until(engine, store, job.id, {"stopped_budget", "failed", "succeeded", "queued"})
    assert final.state is JobState.STOPPED_BUDGET and final.spent <= final.budget == budget


def test_a_budget_stop_recorded_by_an_engine_killed_before_it_sent_it_is_sent_by_the_next_engine(parts):
    settings, store, launcher, service, now = parts

    def die():
        raise _Killed()

    doomed = _Launcher(launcher, on_stop=die)
    engine, job, attempt, run_dir = _running(settings, store, launcher, service, now, doomed)
    now[0] = attempt.created_at + NEARLY_USED
    with pytest.raises(_Killed):
        engine.tick()
    # the decision is in the store before anything reached the runner
    (recorded,) = store.attempts(job.id)
    assert store.get_job(job.id).state is JobState.STOPPING
    assert recorded.stop_reason == "budget" and recorded.stop_requested_at == now[0]
    assert not (run_dir / "stop.json").exists() and launcher.status(attempt.id).phase.value == "running"
    # the next engine (a broker started again) sends the stop it finds recorded, once, and sees the job end
    watching = _Launcher(launcher)
    later = Engine(settings, store, watching, clock=lambda: now[0], monotonic=lambda: now[0])
    later.tick()
    assert json.loads((run_dir / "stop.json").read_text())["reason"] == "budget"
    assert watching.stops == [(attempt.id, "budget")]
    final = run_until(later, store, job.id, {"stopped_budget", "failed", "succeeded", "queued"})
    assert final.state is JobState.STOPPED_BUDGET and final.spent <= final.budget
    assert watching.stops == [(attempt.id, "budget")]  # not again on every tick while it stopped
    assert [e.event for e in store.events(job.id)][-2:] == ["stop_budget", "ended"]


def test_a_progress_report_landing_during_the_tick_that_read_the_job_as_silent_keeps_it_running(
        make_settings, tmp_path):
    # the same ordering for the other stops: the tick read the job's last report as older than the heartbeat
    # timeout, and a report came in before it decided; without it the attempt would be killed (no grace: a
    # silent node is taken for lost) and the job resumed from its checkpoint
    from broker.auth import job_token

    settings = make_settings(config=CONFIG + "heartbeat_timeout_seconds: 30\n")
    store = open_store(f"sqlite://{tmp_path / 'silent.db'}")
    launcher = open_launcher(settings)
    now = [time.time()]
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    hooked = _Launcher(launcher)
    try:
        engine, job, attempt, run_dir = _running(settings, store, launcher, service, now, hooked)
        token = job_token(settings, job.id)
        service.report_progress(job.id, token, {"step": 10})
        now[0] += 40  # silent for longer than the timeout, as the tick reads the job
        hooked.before_status = lambda: service.report_progress(job.id, token, {"step": 11})
        engine.tick()
        assert hooked.before_status is None
        assert not (run_dir / "stop.json").exists() and hooked.stops == []
        assert store.get_job(job.id).state is JobState.RUNNING and store.get_job(job.id).progress["step"] == 11
        (attempt,) = store.attempts(job.id)
        assert attempt.stop_requested_at is None and attempt.last_step == 11
    finally:
        for run in launcher.runs_dir.glob("j*"):
            launcher.kill(run.name)
        store.close()


def test_a_running_jobs_budget_lowered_keeps_what_its_clean_stop_costs(parts):
    """A running job's budget lowered to what it had spent (plus a micro-dollar) was taken: the job then ran on through
    its stop — its grace period, the ticks to notice — billed beyond the budget and counted nowhere, so a team's
    monthly cap could pass unseen. A lowered budget keeps what a budget stop keeps."""
    settings, store, launcher, service, now = parts
    engine, job, attempt, _ = _running(settings, store, launcher, service, now, launcher)
    now[0] = attempt.created_at + 30
    engine.tick()
    job = store.get_job(job.id)
    assert job.spent >= 300_000  # 30 s at a cent a second
    # the reserve: the 2 s grace, two 0.05 s ticks and a second (3 s, rounded as budget.reserve_seconds does), the
    # launcher's 3 s margin: 6 s, six cents at $36/h
    least = job.spent + 60_000
    with pytest.raises(Invalid) as refused:
        service.raise_budget(ADMIN, job.id, job.spent + 1)
    assert refused.value.field == "budget_usd"
    assert f"lower it to no less than ${least / 1_000_000:.2f}" in str(refused.value), refused.value
    assert store.get_job(job.id).budget == 1_000_000  # nothing changed
    assert service.raise_budget(ADMIN, job.id, least).budget == least


def test_a_budget_lowered_under_a_spend_no_engine_has_recorded_yet_keeps_the_spend_to_now(parts):
    """The stored spend moves only when an engine looks. With none watching (the API with its engine off, the worker
    down) a budget was lowered under a spend 24 s stale: the run was stopped at once, and the seconds it had run under
    the old budget were counted nowhere, in its spend or in its team's monthly cap. The floor counts the live attempt
    to now, as the engine bills it."""
    settings, store, launcher, service, now = parts
    engine, job, attempt, _ = _running(settings, store, launcher, service, now, launcher)
    now[0] = attempt.created_at + 10
    engine.tick()
    recorded = store.get_job(job.id).spent
    assert 100_000 <= recorded < 120_000  # 10 s at a cent a second
    now[0] = attempt.created_at + 40  # 30 s more, no engine looks
    assert service.raise_budget(ADMIN, job.id, 900_000).budget == 900_000  # lowered, far above its spend
    with pytest.raises(Invalid) as refused:
        service.raise_budget(ADMIN, job.id, 410_000)  # above what the stale spend and its clean stop would ask
    assert refused.value.field == "budget_usd"
    assert "it has spent $0.40" in str(refused.value) and "lower it to no less than $0.46" in str(refused.value), \
        refused.value
    with pytest.raises(Invalid) as below:
        service.raise_budget(ADMIN, job.id, 300_000)
    assert "is below what the job already spent ($0.40)" in str(below.value), below.value
    assert store.get_job(job.id).budget == 900_000  # nothing changed
    assert service.raise_budget(ADMIN, job.id, 460_000).budget == 460_000


@pytest.mark.parametrize("stop", ["cancel", "budget stop"])
def test_a_job_being_stopped_keeps_what_its_stop_costs_when_its_budget_is_lowered(parts, stop):
    """A job being cancelled (or stopped at its budget) still runs through its grace period; its budget lowered to its
    spend and a cent was taken, and the grace period it then ran, billed beyond the budget, was counted nowhere."""
    settings, store, launcher, service, now = parts
    engine, job, attempt, _ = _running(settings, store, launcher, service, now, launcher)
    now[0] = attempt.created_at + (20 if stop == "cancel" else NEARLY_USED)
    engine.tick()
    if stop == "cancel":
        service.cancel(ADMIN, job.id)
        engine.tick()
    job = store.get_job(job.id)
    assert job.state is (JobState.CANCELLING if stop == "cancel" else JobState.STOPPING), job.state
    with pytest.raises(Invalid) as refused:
        service.raise_budget(ADMIN, job.id, job.spent + 10_000)
    assert refused.value.field == "budget_usd" and "clean stop" in str(refused.value), refused.value
    assert store.get_job(job.id).budget == BUDGET


def test_a_stop_that_ran_past_the_budget_says_by_how_much_rather_than_capping_it_unsaid(parts):
    """The recorded spend stops at the budget; a cancel whose stop ran on past it (here its end comes 20 s past the
    budget, as with a grace period longer than what was left) was capped without a word, where a run past its
    budget is said everywhere else."""
    from launchers.base import AttemptStatus, Phase

    settings, store, launcher, service, now = parts
    hooked = _Launcher(launcher)
    engine, job, attempt, _ = _running(settings, store, launcher, service, now, hooked)
    now[0] = attempt.created_at + 90
    engine.tick()
    service.cancel(ADMIN, job.id)
    engine.tick()
    assert store.get_job(job.id).state is JobState.CANCELLING
    ended = AttemptStatus(Phase.STOPPED, reason="cancelled", started_at=attempt.created_at,
                          ended_at=attempt.created_at + 120)
    hooked.status = lambda attempt_id: ended  # the run ended 120 s in: $1.20 at a cent a second, of a $1 budget
    now[0] = attempt.created_at + 121
    engine.tick()
    job = store.get_job(job.id)
    assert job.state is JobState.CANCELLED and job.spent == BUDGET  # the recorded spend stops at the budget
    (note,) = [e for e in store.events(job.id) if e.event == "beyond_budget"]
    assert note.data["beyond_budget"] == 200_000, note.data
    assert note.reason == ("its stop ran past the budget: $0.20 more at $36.00/h is beyond the budget of $1.00, "
                           "said here and not counted in its spend")
