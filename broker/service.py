"""The service layer: every edge (HTTP API, CLI through the API, Slack, dashboard) calls this.

It checks who may do what, parses and admits specs, and reads the store.
State changes go through :mod:`broker.lifecycle` and are committed with
compare-and-set; the engine does the rest.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from broker.admission import Admitted, Refused, admit
from broker.auth import Principal
from broker.config import Settings
from broker.lifecycle import IllegalTransition, JobEvent, JobState, apply
from broker.models import Attempt, Event, Job, event_for
from broker.offers import all_offers, usable_by
from broker.queue import positions
from broker.spec import SpecError, parse
from broker.store import Change, DuplicateJob, JobStore, VersionConflict
from launchers.base import Launcher


class NotFound(Exception):
    """No such job, or one the caller may not see (the same answer, so ids don't leak)."""


class Invalid(Exception):
    """Bad input: ``field`` and a reason."""

    def __init__(self, field: str, reason: str, status: int = 422):
        self.field = field
        self.reason = reason
        self.status = status
        super().__init__(f"{field}: {reason}")


class Conflict(Exception):
    """The request is not allowed in the job's current state."""


def new_job_id() -> str:
    return "j-" + secrets.token_hex(5)


class BrokerService:
    def __init__(self, settings: Settings, store: JobStore, launcher: Launcher | None = None, *,
                 clock: Callable[[], float] = time.time):
        self.settings = settings
        self.store = store
        self.launcher = launcher
        self.clock = clock

    # -- submit ----------------------------------------------------------------------------------

    def submit(self, principal: Principal, raw: dict[str, Any], *, idempotency_key: str | None = None) -> tuple[Job, bool]:
        """Admit a job; returns (job, created). A repeated Idempotency-Key returns the first job."""
        now = self.clock()
        try:
            spec = parse(raw, now=now)
        except SpecError as exc:
            raise Invalid(exc.field, exc.reason) from None
        team = spec.broker.team or principal.team or self.settings.default_team
        if not principal.admin and team != principal.team:
            raise Invalid("broker.team", f"you can submit only for your team ({principal.team})", status=403)
        if idempotency_key is not None:
            if not 1 <= len(idempotency_key) <= 200:
                raise Invalid("Idempotency-Key", "must be 1 to 200 characters")
            existing = self.store.find_idempotent(team, idempotency_key)
            if existing is not None:
                return existing, False
        job_id = new_job_id()
        budget = spec.broker.budget if spec.broker.budget is not None else self.settings.budget_for(team)
        checkpoint = spec.broker.checkpoint or f"{self.settings.checkpoint_root.rstrip('/')}/{job_id}"
        try:
            admitted: Admitted = admit(
                spec, job_id=job_id, team=team, budget=budget, offers=usable_by(all_offers(self.settings), spec.request), now=now,
                actor=principal.name, checkpoint_uri=checkpoint, idempotency_key=idempotency_key,
            )
        except Refused as exc:
            raise Invalid(exc.field, str(exc)) from None
        try:
            job = self.store.commit(Change(job=admitted.job, expected_version=None, events=[admitted.event]))
        except DuplicateJob as dup:
            existing = self.store.get_job(dup.existing_id)
            if existing is None:
                raise
            return existing, False
        return job, True

    # -- read ------------------------------------------------------------------------------------

    def get(self, principal: Principal, job_id: str) -> Job:
        job = self.store.get_job(job_id)
        if job is None or not principal.can_see(job.team):
            raise NotFound(job_id)
        return job

    def list(self, principal: Principal, *, state: str | None = None, team: str | None = None,
             limit: int = 200) -> list[Job]:
        if state is not None and state not in {s.value for s in JobState}:
            raise Invalid("state", f"must be one of {', '.join(s.value for s in JobState)}")
        if not principal.admin:
            if team is not None and team != principal.team:
                return []
            team = principal.team
        return self.store.list_jobs(states=[state] if state else None, team=team, limit=limit)

    def events(self, principal: Principal, job_id: str) -> list[Event]:
        self.get(principal, job_id)
        return self.store.events(job_id)

    def attempts(self, principal: Principal, job_id: str) -> list[Attempt]:
        self.get(principal, job_id)
        return self.store.attempts(job_id)

    def queue_positions(self) -> dict[str, int]:
        return positions(self.store.list_jobs(states=[JobState.QUEUED.value], limit=100_000))

    def logs(self, principal: Principal, job_id: str, *, attempt: int | None = None, offset: int = 0) -> dict:
        job = self.get(principal, job_id)
        n = attempt or job.attempts
        if n < 1 or n > job.attempts:
            if attempt is None:
                return {"attempt": None, "data": "", "offset": 0, "done": job.state.is_final}
            raise Invalid("attempt", f"must be between 1 and {job.attempts}", status=404)
        if self.launcher is None:
            raise Invalid("logs", "this broker process has no launcher to read logs from", status=503)
        data, next_offset = self.launcher.logs(f"{job.id}-a{n}", offset=offset)
        return {"attempt": n, "data": data.decode("utf-8", "replace"), "offset": next_offset,
                "done": job.state.is_final and n == job.attempts}

    # -- change ----------------------------------------------------------------------------------

    def cancel(self, principal: Principal, job_id: str, *, reason: str = "cancelled by the user") -> Job:
        for _ in range(10):
            job = self.get(principal, job_id)
            try:
                t = apply(job.state, JobEvent.CANCEL)
            except IllegalTransition as exc:
                raise Conflict(str(exc)) from None
            now = self.clock()
            new = replace(job, state=t.to_state, reason=reason, updated_at=now)
            if t.to_state is JobState.CANCELLED:
                new = replace(new, placement={}, slots=[])
            event = event_for(new, JobEvent.CANCEL, t.to_state, time=now, reason=reason, actor=principal.name,
                              from_state=job.state)
            try:
                return self.store.commit(Change(job=new, expected_version=job.version, events=[event]))
            except VersionConflict:
                continue  # the engine moved it; decide again on the fresh state
        raise Conflict("the job is changing too fast to cancel; try again")
