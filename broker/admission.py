"""Submit step: turn a validated spec into a queued job, or refuse it with a sentence. Pure.

Every job gets a budget cap — its own ``broker.budget_usd`` or its team's
default — and is priced before it is accepted: if the budget cannot cover the
cheapest way to run it, the job is refused (422) with the estimate per tier. A job
of more nodes than any zone of its shape ever has is refused naming ``num_nodes``.
What a cloud cluster is billed after its run (its idle minutes before autodown
and its teardown, which its launcher keeps of the budget) is part of the price.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from broker.engine.budget import MIN_RUN_SECONDS
from broker.lifecycle import JobEvent, apply
from broker.models import Event, Job, event_for
from broker.spec import JobSpec
from pricing.money import Micros, fmt, fmt_limit, to_decimal
from pricing.offers import Offer
from pricing.placement import (candidates, least_start_budget, nodes_shortfall, start_shortfall,
                               without_local_disk)
from pricing.quote import Quote, money_text, quote, run_until_budget_stop


class Refused(Exception):
    """The job cannot be accepted; ``field`` is what to change, the message says why."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


@dataclass(frozen=True)
class Admitted:
    job: Job
    event: Event


def quote_record(q: Quote, *, stop_seconds: int = 0) -> dict:
    """The quote as stored on the job and shown to the user (money as micro-dollars and text). ``stop_seconds``: the
    clean stop the engine keeps of every budget, and per tier ``after_run_seconds``, what its billing after the run
    is for: what :func:`budget_lasts` needs to tell how long a budget runs the job."""
    return {
        "expected_hours": str(q.expected_hours) if q.expected_hours is not None else None,
        "per_hour_only": q.expected_hours is None,
        "stop_seconds": stop_seconds,
        "tiers": [
            {
                # the offer as placement names it (one instance); its price for all ``num_nodes`` of the job
                "tier": t.tier.value, "offer": t.offer.describe(), "num_nodes": t.num_nodes,
                "price_per_hour": t.price_per_hour,
                "estimate": t.estimate, "after_run": t.after_run, "after_run_seconds": t.after_run_seconds,
                "text": money_text(t),
            }
            for t in sorted(q.tiers, key=lambda t: t.price_per_hour)
        ],
    }


def budget_lasts(quote: Mapping | None, budget: Micros) -> dict[str, int | None] | None:
    """For a job priced per hour (no ``expected_hours``), how long ``budget`` runs it on each tier of its stored
    ``quote`` (:func:`quote_record`), cheapest tier first: seconds until its budget stop there
    (:func:`pricing.quote.run_until_budget_stop`: what is left after the tier's billing after the run and the clean
    stop), or ``None`` for a tier the budget cannot start it on at all. ``None`` for a quote of the whole run, or none.
    The one computation of the CLI's "the budget runs it for about …" and a dry run's ``budget_lasts_seconds``: they
    said the budget over the price, where the engine stops a job once what is left pays only for the clean stop."""
    if not isinstance(quote, Mapping) or not quote.get("per_hour_only") or not isinstance(budget, int):
        return None
    lasts: dict[str, int | None] = {}
    tiers = [t for t in quote.get("tiers") or [] if isinstance(t, Mapping)
             and isinstance(t.get("price_per_hour"), int) and t["price_per_hour"] > 0]
    stop = quote.get("stop_seconds") if isinstance(quote.get("stop_seconds"), int) else 0
    for t in sorted(tiers, key=lambda t: t["price_per_hour"]):
        after = t.get("after_run_seconds")
        if not isinstance(after, int):  # stored before the seconds were: from the figure, rounded up
            billed = t.get("after_run") if isinstance(t.get("after_run"), int) else 0
            after = -(-billed * 3600 // t["price_per_hour"])
        lasts.setdefault(t["tier"], run_until_budget_stop(budget, t["price_per_hour"], after_run_seconds=after,
                                                          stop_seconds=stop))
    return lasts


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
    after_run_seconds: Mapping[Offer, int] | None = None,
) -> Admitted:
    """Price the job and build its first record, or raise :class:`Refused`. ``min_run_seconds``: what a
    start must be able to pay for (the engine stops a job whose budget cannot, so it is refused here);
    ``after_run_seconds``: what each offer is billed after the run on top (:func:`broker.offers.after_run`),
    in the estimates and in what a start must pay for, as the engine counts it."""
    n = spec.request.num_nodes
    too_few = nodes_shortfall(spec.request, offers)
    if too_few is not None:  # else it waited for ever, "full right now"
        raise Refused("num_nodes", f"is {n}, but {too_few}: ask for at most that many nodes")
    # with ``ordered``, each tier on the alternative placement takes with this budget (a later one where the budget
    # cannot pay the earlier), so that the quote, its budget check and the placement tell of one offer
    q = quote(spec.request, offers, after_run_seconds=after_run_seconds, budget=budget, stop_seconds=min_run_seconds)
    if not q.tiers:
        # offers of its shape exist but all cost more than its cap: the cap is what to change
        field = "broker.max_price_per_hour" if candidates(spec.request, offers) else _resources_field(spec, offers)
        raise Refused(field, f"cannot place this job: {q.no_fit or 'no offer matches its resources'}")
    # the least budget both checks below accept, for a refusal to say what to give
    start_least = least_start_budget(spec.request, candidates(spec.request, offers), min_run_seconds=min_run_seconds,
                                     after_run_seconds=after_run_seconds)
    # Priced per hour, a refusal names what runs the job a minute, the least the engine then holds a job placed again
    # to (broker.engine.budget.rerun_seconds): "give at least $0.04" named the clean stop alone, which ran it 0 s
    # (with expected_hours the estimate asked covers the run)
    minute = least_start_budget(spec.request, candidates(spec.request, offers),
                                min_run_seconds=min_run_seconds + MIN_RUN_SECONDS,
                                after_run_seconds=after_run_seconds) if spec.request.expected_hours is None else None
    least = max(q.least_budget(stop_seconds=min_run_seconds) or 0, start_least or 0, minute or 0) or None
    if not q.fits(budget, stop_seconds=min_run_seconds):
        raise Refused("broker.budget_usd", q.refusal(budget, stop_seconds=min_run_seconds, least=least))
    give = f": give at least {fmt(least)}{' (a minute and a clean stop)' if minute else ''}" \
        if least is not None and least > budget else ""
    # only offers at or under the job's max price count: start_shortfall weighs them, as the engine does
    short = start_shortfall(spec.request, candidates(spec.request, offers), budget, min_run_seconds=min_run_seconds,
                            after_run_seconds=after_run_seconds)
    if short is not None:
        raise Refused("broker.budget_usd", f"the budget of {fmt_limit(budget)} {short}{give}")
    if start_least is not None and budget <= start_least:
        # it pays for the clean stop and not a moment more: the engine stops a job once what is left pays only for
        # that, so $0.04 given as told was taken and the job stopped at once
        raise Refused("broker.budget_usd", f"the budget of {fmt_limit(budget)} pays for a clean stop "
                                           f"({min_run_seconds} s) and no run: the broker stops a job once what is "
                                           f"left pays only for that{give}")
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
        queued_at=now,
        deadline=spec.broker.deadline,
        max_price_per_hour=spec.broker.max_price_per_hour,
        expected_hours=str(spec.broker.expected_hours) if spec.broker.expected_hours is not None else None,
        quote=quote_record(q, stop_seconds=min_run_seconds),
        checkpoint_uri=checkpoint_uri,
        idempotency_key=idempotency_key,
        submitted_by=actor,
        retry={"max_restarts_on_errors": spec.broker.retry.max_restarts_on_errors,
               "recover_on_exit_codes": list(spec.broker.retry.recover_on_exit_codes)},
        reason="waiting to be placed",
    )
    cheapest = q.cheapest()
    # the cheapest way's own figure: the tiers listed first by $/h could be another offer (an ``ordered`` job's later
    # alternative, or billing after the run that makes the lowest $/h not the lowest estimate)
    # an estimate is the whole run's, not a price: "cheapest spot at $0.0085" read as its $/h
    figure = (f", estimated {money_text(cheapest)} for the run" if cheapest and cheapest.estimate is not None else
              f" at {money_text(cheapest)}" if cheapest else "")
    note = f"budget {fmt_limit(budget)}; cheapest {cheapest.tier.value}{figure}" if cheapest else ""
    event = event_for(job, JobEvent.SUBMIT, job.state, time=now, reason=f"submitted ({note})", actor=actor,
                      from_state=None)
    return Admitted(job=job, event=event)


def _resources_field(spec: JobSpec, offers: Sequence[Offer]) -> str:
    """The field to blame when no offer has the job's shape: its ``local_disk`` when the shape is there but not with
    that disk (where it is written: ``resources.local_disk``, or the one ``any_of`` / ``ordered`` entry asking it),
    its ``accelerators`` when no offer has any accelerator it asks (``A1000:1`` blamed ``resources``), else
    ``resources``."""
    alternatives = spec.request.alternatives
    accelerators = _accelerators_field(spec, offers)
    if accelerators:
        return accelerators
    if not any(alt.local_disk for alt in alternatives) or not candidates(without_local_disk(spec.request), offers):
        return "resources"
    resources = spec.task.get("resources")
    resources = resources if isinstance(resources, dict) else {}
    if "local_disk" in resources:
        return "resources.local_disk"
    asking = {src for alt, src in zip(alternatives, spec.sources) if alt.local_disk is not None}
    listed = "any_of" if "any_of" in resources else "ordered"
    return f"resources.{listed}[{asking.pop()}].local_disk" if len(asking) == 1 and None not in asking else "resources"


def _accelerators_field(spec: JobSpec, offers: Sequence[Offer]) -> str | None:
    """Where the accelerators are written (``resources.accelerators``, or the one ``any_of`` / ``ordered`` entry's),
    when every alternative asks an accelerator (name and count) that no offer has — at any count (a name mistyped:
    ``A1000``), or at its count where it pins no cloud, region, zone or instance type; else ``None``. An alternative
    pinned to a place is refused for the place as much (``cloud: gcp`` on a broker that prices no GCP offer asked
    ``V100:1`` that only AWS had at another count), and ``resources`` is named."""
    def offered(alt) -> bool:
        pinned = alt.cloud or alt.region or alt.zone or alt.instance_type
        return any(o.accelerator and o.accelerator.lower() == alt.accelerator.lower()
                   and (pinned or o.accelerator_count == max(alt.accelerator_count, 1)) for o in offers)

    alternatives = spec.request.alternatives
    if not alternatives or not all(a.accelerator and not offered(a) for a in alternatives):
        return None
    resources = spec.task.get("resources")
    resources = resources if isinstance(resources, dict) else {}
    listed = "any_of" if "any_of" in resources else "ordered"
    variants = resources.get(listed) if isinstance(resources.get(listed), list) else []
    wheres = {f"resources.{listed}[{i}].accelerators"
              if i is not None and i < len(variants) and isinstance(variants[i], dict) and "accelerators" in variants[i]
              else "resources.accelerators" for i in (spec.sources or (None,) * len(alternatives))}
    return wheres.pop() if len(wheres) == 1 else None


def broker_echo(spec: JobSpec) -> dict:
    """The broker: section as the job keeps it (the budget and deadline are kept as fields of their own, which a
    budget change moves; ``budget_usd`` here is the budget the submit gave, in dollars, so that a retry under its
    Idempotency-Key is compared with it: :func:`broker.service._same_submit`)."""
    b = spec.broker
    return {k: v for k, v in {
        "team": b.team, "priority": b.priority, "checkpoint": b.checkpoint,
        "expected_hours": str(b.expected_hours) if b.expected_hours is not None else None, "workdir": b.workdir,
        "file_mounts": b.file_mounts, "budget_usd": str(to_decimal(b.budget)) if b.budget is not None else None,
    }.items() if v is not None}
