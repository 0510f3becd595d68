"""Submit step: turn a validated spec into a queued job, or refuse it with a sentence. Pure.

Every job gets a budget cap — its own ``broker.budget_usd`` or its team's
default — and is priced before it is accepted: if the budget cannot cover the
cheapest way to run it, the job is refused (422) with the estimate per tier.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from broker.lifecycle import JobEvent, apply
from broker.models import Event, Job, event_for
from broker.spec import JobSpec
from pricing.money import Micros, cost_for_seconds, fmt
from pricing.offers import Offer
from pricing.placement import candidates
from pricing.quote import Quote, quote


class Refused(Exception):
    """The job cannot be accepted; ``field`` is what to change, the message says why."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Admitted:
    job: Job
    event: Event


def quote_record(q: Quote) -> dict:
    """The quote as stored on the job and shown to the user (money as micro-dollars and text)."""
    return {
        "expected_hours": str(q.expected_hours) if q.expected_hours is not None else None,
        "per_hour_only": q.expected_hours is None,
        "tiers": [
            {
                "tier": t.tier.value, "offer": t.offer.describe(), "price_per_hour": t.price_per_hour,
                "estimate": t.estimate, "text": (fmt(t.estimate) if t.estimate is not None else f"{fmt(t.price_per_hour)}/h"),
            }
            for t in sorted(q.tiers, key=lambda t: t.price_per_hour)
        ],
    }


def admit(
    spec: JobSpec,
    *,
    job_id: str,
    team: str,
    budget: Micros,
    offers: Sequence[Offer],
    now: float,
    actor: str,
    checkpoint_uri: str,
    idempotency_key: str | None,
    min_run_seconds: int = 0,
) -> Admitted:
    """Price the job and build its first record, or raise :class:`Refused`. ``min_run_seconds``: what a
    start must be able to pay for (the engine stops a job whose budget cannot, so it is refused here)."""
    q = quote(spec.request, offers)
    if not q.tiers:
        # offers of its shape exist but all cost more than its cap: the cap is what to change
        field = "broker.max_price_per_hour" if candidates(spec.request, offers) else "resources"
        raise Refused(field, f"cannot place this job: {q.no_fit or 'no offer matches its resources'}")
    if not q.fits(budget):
        raise Refused("broker.budget_usd", q.refusal(budget))
    cheapest_hour = min(t.price_per_hour for t in q.tiers)
    if budget < cost_for_seconds(cheapest_hour, min_run_seconds):
        raise Refused("broker.budget_usd", f"the budget of {fmt(budget)} cannot pay for a start and a clean stop "
                                           f"({min_run_seconds} s) at the cheapest offer's {fmt(cheapest_hour)}/h")
    transition = apply(None, JobEvent.SUBMIT)
    job = Job(
        id=job_id,
        name=spec.name,
        team=team,
        state=transition.to_state,
        spec={**spec.task, **({"broker": broker_echo(spec)} if spec.broker else {})},
        budget=budget,
        priority=spec.broker.priority,
        submitted_at=now,
        updated_at=now,
        deadline=spec.broker.deadline,
        max_price_per_hour=spec.broker.max_price_per_hour,
        expected_hours=str(spec.broker.expected_hours) if spec.broker.expected_hours is not None else None,
        quote=quote_record(q),
        checkpoint_uri=checkpoint_uri,
        idempotency_key=idempotency_key,
        submitted_by=actor,
        retry={"max_restarts_on_errors": spec.broker.retry.max_restarts_on_errors,
               "recover_on_exit_codes": list(spec.broker.retry.recover_on_exit_codes)},
        reason="waiting to be placed",
    )
    cheapest = q.cheapest()
    note = f"budget {fmt(budget)}; cheapest {cheapest.tier.value} at {quote_record(q)['tiers'][0]['text']}" if cheapest else ""
    event = event_for(job, JobEvent.SUBMIT, job.state, time=now, reason=f"submitted ({note})", actor=actor,
                      from_state=None)
    return Admitted(job=job, event=event)


def broker_echo(spec: JobSpec) -> dict:
    """The broker: section as the job keeps it (the budget and deadline are kept as fields of their own)."""
    b = spec.broker
    return {k: v for k, v in {
        "team": b.team, "priority": b.priority, "checkpoint": b.checkpoint,
        "expected_hours": str(b.expected_hours) if b.expected_hours is not None else None,
    }.items() if v is not None}
