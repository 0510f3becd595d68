"""A live job whose launcher cannot look at its attempt — SkyPilot's API server refusing the broker's token, or down —
says so in its reason while it lasts, and the reason it had comes back once the launcher can look again.

Before, the launcher kept the attempt's last phase (rightly: never read gone, never launched twice) and the engine
ignored the reason that came with it, so `broker status` showed a running job as fine while nothing watched it: not
its end, not a preemption, not its budget. The launcher here is the real local one (real processes), blind on
request as a launcher whose API server refuses it would be; the engine's clock is the test's.
"""

from __future__ import annotations

import time

from broker.auth import Principal
from broker.engine.monitor import UNSEEN
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.service import BrokerService
from broker.store import open_store
from launchers.base import AttemptStatus, Phase
from launchers.local import LocalLauncher

ADMIN = Principal("admin", None, admin=True)
CONFIG = "pools: [{name: cpu, slots: 1, price_per_slot_hour: '0.20'}]\n"
START = 1_800_000_000.0
REFUSED = "SkyPilot's API server refused the broker's credentials (HTTP 401 Unauthorized): give the broker a valid token"


class Blind(LocalLauncher):
    """The local launcher, answering with the last phase it saw and why it cannot look while ``blind`` is set."""

    def __init__(self, runs_dir):
        super().__init__(runs_dir)
        self.blind: str | None = None
        self.seen: dict[str, Phase] = {}

    def status(self, attempt_id: str) -> AttemptStatus:
        if self.blind is not None:
            return AttemptStatus(self.seen.get(attempt_id, Phase.PENDING), reason=self.blind, unseen=True)
        status = super().status(attempt_id)
        self.seen[attempt_id] = status.phase
        return status


def _events(store, job_id: str) -> list[tuple[str, str]]:
    return [(e.event, e.reason) for e in store.events(job_id) if e.event in ("attempt_unseen", "attempt_seen")]


def test_a_running_job_says_while_its_launcher_cannot_see_it_and_says_it_once(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    launcher = Blind(settings.data_dir / "runs")
    now = [START]
    engine = Engine(settings, store, launcher, clock=lambda: now[0])
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    job = service.submit(ADMIN, {"run": "sleep 60", "resources": {"cpus": "1+"}, "broker": {"budget_usd": "1"}})[0]
    try:
        deadline = time.monotonic() + 30  # the process starts in real time: 50 ticks at once were too few on a
        while time.monotonic() < deadline:  # loaded machine (a CI run failed "launching")
            now[0] += 1
            engine.tick()
            if store.get_job(job.id).state is JobState.RUNNING:
                break
            time.sleep(0.02)
        running = store.get_job(job.id)
        assert running.state is JobState.RUNNING, (running.state, running.reason)
        before = running.reason

        launcher.blind = REFUSED
        for _ in range(3):
            now[0] += 5
            engine.tick()
        unseen = store.get_job(job.id)
        assert unseen.state is JobState.RUNNING and unseen.attempts == 1
        assert unseen.reason == before + UNSEEN + REFUSED, unseen.reason
        assert _events(store, job.id) == [("attempt_unseen", REFUSED)], "said once, not at every tick"

        launcher.blind = "SkyPilot unreachable: connection refused"
        now[0] += 5
        engine.tick()
        assert store.get_job(job.id).reason == before + UNSEEN + "SkyPilot unreachable: connection refused"

        launcher.blind = None
        now[0] += 5
        engine.tick()
        seen = store.get_job(job.id)
        assert seen.state is JobState.RUNNING and seen.reason == before, seen.reason
        assert [name for name, _ in _events(store, job.id)] == ["attempt_unseen", "attempt_unseen", "attempt_seen"]
    finally:
        for a in store.attempts(job.id):
            launcher.stop(a.id, grace_seconds=0)
        store.close()
