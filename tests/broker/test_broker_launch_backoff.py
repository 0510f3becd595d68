"""A launch refused for a reason that may pass (SkyPilot's API server down, a file that changed while it was packed):
the job is placed again after a backoff, not at the next tick, and such refusals do not use up its attempts.

Before, a job met a SkyPilot API server that was down once a tick (a second by default), and each time stored a new
attempt and three events: an hour's outage made 3,600 attempts, and the job's first preemption after it failed the
job, "already used 20 attempts". The launcher is the real local one (real processes), refusing its first launches
as a launcher whose cloud does not answer would; the engine's clock is the test's.
"""

from __future__ import annotations

from broker.auth import Principal
from broker.engine.monitor import MAX_ATTEMPTS
from broker.engine.reconcile import Engine
from broker.engine.recover import launch_backoff
from broker.lifecycle import AttemptState, JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import LaunchError, Phase
from launchers.local import LocalLauncher

ADMIN = Principal("admin", None, admin=True)
CONFIG = "pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n"
START = 1_800_000_000.0


class Refusing(LocalLauncher):
    """The local launcher, refusing its first ``refusals`` launches as a launcher whose cloud is unreachable."""

    def __init__(self, runs_dir, refusals: int):
        super().__init__(runs_dir)
        self.refusals = refusals
        self.calls = 0

    def launch(self, request):
        self.calls += 1
        if self.calls <= self.refusals:
            raise LaunchError("SkyPilot's API server did not answer")
        return super().launch(request)


def broker(make_settings, tmp_path, refusals: int):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    launcher = Refusing(settings.data_dir / "runs", refusals)
    now = [START]
    engine = Engine(settings, store, launcher, clock=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    return service, engine, store, launcher, now


def test_a_refused_launch_is_tried_again_after_a_backoff_not_at_every_tick(make_settings, tmp_path):
    service, engine, store, launcher, now = broker(make_settings, tmp_path, refusals=10**6)
    try:
        job = service.submit(ADMIN, {"run": "sleep 30", "resources": {"cpus": "1+"},
                                     "broker": {"budget_usd": "1"}})[0]
        for _ in range(30):  # 30 ticks within the first backoff: one launch, one attempt
            engine.tick()
            now[0] += 0.1
        stored = store.get_job(job.id)
        assert (launcher.calls, stored.attempts, stored.state) == (1, 1, JobState.QUEUED)
        assert stored.reason.startswith("launch failed: SkyPilot's API server did not answer; tries again at "), \
            stored.reason
        # then 5 s, 10 s, 20 s... apart, at most 5 min: an hour of a cloud that does not answer is a few attempts
        end = START + 3600
        while now[0] < end:
            engine.tick()
            now[0] += 1.0
        stored = store.get_job(job.id)
        assert launcher.calls == stored.attempts == stored.launches_failed == stored.launch_failures
        assert 10 <= stored.attempts <= 20, stored.attempts  # 5+10+…+160 = 315 s, then one every 300 s
        assert "refused in a row" in stored.reason
        assert len(store.events(job.id)) < 4 * stored.attempts
    finally:
        store.close()


def test_refused_launches_do_not_use_up_the_attempts_a_preemption_resumes_with(make_settings, tmp_path):
    """More refusals than MAX_ATTEMPTS, then a launch that runs and is lost: the job resumes, as it would have with
    no refusal before (it failed, "already used 20 attempts")."""
    refusals = MAX_ATTEMPTS + 2
    service, engine, store, launcher, now = broker(make_settings, tmp_path, refusals=refusals)
    try:
        job = service.submit(ADMIN, {"run": "sleep 60", "resources": {"cpus": "1+"},
                                     "broker": {"budget_usd": "5"}})[0]
        while launcher.calls <= refusals:
            engine.tick()
            now[0] += launch_backoff(store.get_job(job.id).launch_failures) + 0.1
        engine.tick()
        for _ in range(200):  # the attempt that was launched starts running
            stored = store.get_job(job.id)
            if stored.state is JobState.RUNNING:
                break
            engine.tick()
        assert stored.state is JobState.RUNNING, stored.reason
        assert (stored.launch_failures, stored.launch_retry_at) == (0, None), "it ran: no more backoff"
        assert stored.attempts == refusals + 1 and stored.attempts_run == 1
        attempt_id = stored.current_attempt_id
        launcher.stop(attempt_id, grace_seconds=0, reason="node lost")  # its node goes away
        for _ in range(200):
            engine.tick()
            stored = store.get_job(job.id)
            if stored.state is not JobState.RUNNING:
                break
        assert stored.state in (JobState.QUEUED, JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING), stored.reason
        assert "already used" not in stored.reason
        assert store.attempts(job.id)[refusals].state is not AttemptState.RUNNING
    finally:
        for a in store.attempts(job.id):
            if launcher.status(a.id).phase is Phase.RUNNING:
                launcher.stop(a.id, grace_seconds=0)
        store.close()


def test_the_backoff_doubles_from_5_s_to_at_most_5_min_however_long_the_outage():
    """Days of refusals (thousands in a row) still give 5 min: 5.0 * 2 ** 1100 was an OverflowError in the engine."""
    assert [launch_backoff(n) for n in (1, 2, 3, 6, 7, 8)] == [5.0, 10.0, 20.0, 160.0, 300.0, 300.0]
    assert launch_backoff(10_000) == 300.0
