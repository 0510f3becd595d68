"""The reconcile loop: monitor → schedule → launch, once per tick.

Each step decides with a pure function (:mod:`.monitor`, :mod:`.schedule`)
and then applies its decision through :meth:`Engine._commit`, which writes the
job, its attempt and the event together with compare-and-set on the job's
version. If another broker process changed the job first the write fails with
:class:`~broker.store.VersionConflict` and this process simply moves on: the
job is re-read next tick. Only the process whose ``placed → launching`` write
won calls the launcher, and launching is idempotent per attempt id, so an
attempt never runs twice.

On start, nothing special is needed to re-adopt work: attempts that were
``launching`` are launched again (a no-op if they had started) and attempts
that were ``running`` are monitored as usual.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from broker.config import Settings
from broker.engine import monitor
from broker.engine.billing import accrue
from broker.engine.launch import launch_request
from broker.engine.schedule import Place, Wait, schedule
from broker.lifecycle import AttemptState, JobEvent, JobState, apply
from broker.models import Attempt, Job, attempt_id, event_for
from broker.offers import market
from broker.store import Change, JobStore, VersionConflict
from launchers.base import LaunchError, Launcher, Phase

log = logging.getLogger("broker.engine")

ENGINE_STATES = [s.value for s in (JobState.QUEUED, JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING,
                                   JobState.CANCELLING)]


class Engine:
    """Drives jobs through their states. ``tick`` is one cycle; ``run`` loops until stopped."""

    def __init__(self, settings: Settings, store: JobStore, launcher: Launcher, *,
                 clock: Callable[[], float] = time.time, actor: str = "engine"):
        self.settings = settings
        self.store = store
        self.launcher = launcher
        self.clock = clock
        self.actor = actor
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_tick_seconds = 0.0

    # -- the cycle -----------------------------------------------------------------------------

    def tick(self) -> None:
        started = time.perf_counter()
        now = self.clock()
        jobs = self.store.list_jobs(states=ENGINE_STATES, limit=100_000)
        for job in jobs:  # 1. monitor what runs
            if job.state in (JobState.LAUNCHING, JobState.RUNNING, JobState.CANCELLING):
                self._guard(self._monitor, job, now)
        jobs = self.store.list_jobs(states=ENGINE_STATES, limit=100_000)
        active = [j for j in jobs if j.state.is_active]
        for decision in schedule(jobs, market(self.settings, active), now=now):  # 2. place the queue
            self._guard(self._apply_schedule, decision, now)
        for job in self.store.list_jobs(states=[JobState.PLACED.value], limit=100_000):  # 3. launch
            self._guard(self._launch, job, now)
        self.last_tick_seconds = time.perf_counter() - started

    def run_until_idle(self, *, timeout: float = 60.0, interval: float = 0.1) -> None:
        """Tick until no job is in an engine state (tests, ``broker worker --burst``)."""
        deadline = time.monotonic() + timeout
        while True:
            self.tick()
            if not self.store.list_jobs(states=ENGINE_STATES, limit=1):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("jobs still active after the timeout")
            time.sleep(interval)

    def _guard(self, step: Callable, *args) -> None:
        try:
            step(*args)
        except VersionConflict:
            log.debug("another writer changed the job first; will look again next tick")
        except Exception:  # one bad job must not stop the loop for everyone
            log.exception("engine step %s failed", getattr(step, "__name__", step))

    # -- apply ---------------------------------------------------------------------------------

    def _commit(self, job: Job, event: JobEvent | None, reason: str, now: float, *,
                attempts: tuple[Attempt, ...] = (), data: dict | None = None, **fields) -> Job:
        events = []
        new = replace(job, updated_at=now, **fields)
        if event is not None:
            t = apply(job.state, event)
            new = replace(new, state=t.to_state, reason=reason)
            events.append(event_for(new, event, t.to_state, time=now, reason=reason, actor=self.actor,
                                    from_state=job.state, data=data))
        return self.store.commit(Change(job=new, expected_version=job.version, events=events, attempts=attempts))

    def _apply_schedule(self, decision: Place | Wait, now: float) -> None:
        job = decision.job
        if isinstance(decision, Wait):
            if job.reason != decision.reason:
                self.store.commit(Change(job=replace(job, reason=decision.reason, updated_at=now),
                                         expected_version=job.version))
            return
        self._commit(job, JobEvent.PLACE, decision.reason, now, placement=decision.placement,
                     slots=list(decision.slots), data={"placement": decision.placement})

    def _launch(self, job: Job, now: float) -> None:
        n = job.attempts + 1
        attempt = Attempt(
            id=attempt_id(job.id, n), job_id=job.id, n=n, state=AttemptState.LAUNCHING,
            launcher=self.launcher.name, placement=dict(job.placement),
            price_per_hour=int(job.placement.get("price_per_hour", 0)), created_at=now, slots=list(job.slots),
        )
        job = self._commit_launch(job, attempt, now)
        self._start(job, attempt, now)

    def _commit_launch(self, job: Job, attempt: Attempt, now: float) -> Job:
        where = job.placement.get("instance_type", "?")
        t = apply(job.state, JobEvent.LAUNCH)
        reason = f"launching attempt {attempt.n} on {where}"
        new = replace(job, state=t.to_state, reason=reason, attempts=attempt.n, updated_at=now)
        event = event_for(new, JobEvent.LAUNCH, t.to_state, time=now, reason=reason, actor=self.actor,
                          from_state=job.state, data={"attempt_id": attempt.id})
        return self.store.commit(Change(job=new, expected_version=job.version, events=[event], attempts=[attempt]))

    def _start(self, job: Job, attempt: Attempt, now: float) -> None:
        request = launch_request(job, attempt, public_url=self.settings.public_url,
                                 stop_grace_seconds=self.settings.stop_grace_seconds)
        try:
            self.launcher.launch(request)
        except LaunchError as exc:
            failed = replace(attempt, state=AttemptState.FAILED, ended_at=now, reason=str(exc))
            self._commit(job, JobEvent.LAUNCH_FAILED, f"launch failed: {exc}", now, attempts=(failed,),
                         placement={}, slots=[])

    def _monitor(self, job: Job, now: float) -> None:
        attempts = self.store.attempts(job.id)
        if not attempts:
            return
        attempt = attempts[-1]
        status = self.launcher.status(attempt.id)
        if status.phase is Phase.GONE and job.state is JobState.LAUNCHING:
            self._start(job, attempt, now)  # re-adopt: the broker stopped between commit and launch
            return
        if job.state is JobState.CANCELLING and attempt.stop_requested_at is None and not status.phase.is_final:
            self.launcher.stop(attempt.id, grace_seconds=self.settings.stop_grace_seconds, reason="cancelled")
            attempt = replace(attempt, stop_requested_at=now, stop_reason="cancelled")
        outcome = monitor.decide(job, attempt, status)
        if outcome.event is JobEvent.START:
            attempt = replace(attempt, state=AttemptState.RUNNING, started_at=status.started_at or now)
        elif outcome.attempt_state is not None:
            ended = status.ended_at or now
            attempt = replace(attempt, state=outcome.attempt_state, ended_at=ended, exit_code=status.exit_code,
                              reason=outcome.reason, started_at=attempt.started_at or status.started_at)
        attempt = accrue(attempt, now)
        others = sum(a.cost for a in attempts[:-1])
        fields: dict = {"spent": others + attempt.cost}
        if outcome.event in (JobEvent.RECOVER, JobEvent.LAUNCH_FAILED, JobEvent.SUCCEED, JobEvent.FAIL,
                             JobEvent.ENDED):
            fields.update(placement={} if outcome.event is JobEvent.RECOVER else job.placement, slots=[])
        if outcome.retried_error:
            fields["errors_retried"] = job.errors_retried + 1
        if outcome.event is None and fields["spent"] == job.spent and attempt == attempts[-1]:
            return
        self._commit(job, outcome.event, outcome.reason or job.reason, now, attempts=(attempt,),
                     data={"attempt_id": attempt.id, "exit_code": status.exit_code} if outcome.event else None,
                     **fields)

    # -- running in the background ---------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="broker-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("engine tick failed")
            self._stop.wait(self.settings.tick_seconds)
