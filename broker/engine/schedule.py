"""Place step: walk the queue and decide which jobs take which capacity now. Pure.

For each queued job, in queue order:

1. the offers it may use (its resources, its forced tier after a "switch to
   on-demand", not a zone blocked after a recent preemption);
2. with a deadline and an expected length, the job's spot policy picks the
   tier (or says wait) — the same policy the simulator replays;
3. :func:`pricing.placement.place` picks the offer within that tier, budget and capacity — the budget
   paying for a start and a clean stop plus what the offer is billed after its run (a cloud cluster's
   idle minutes and teardown, as the launcher says: ``after_run_seconds``) — but not a pool's slots kept
   for the pool's head, the first job ahead of it that waits for more of them than are free, unless it is
   expected to end before the head can start (:class:`_Kept`: backfill, as Slurm's; the queue's estimate,
   :func:`broker.queue.waits`, keeps the same rule);
4. a job that waits and is the first to wait for a pool becomes its head (:func:`_keep_pools`).

Decides against a snapshot (the :class:`~broker.offers.Market`), reserving
what it hands out so two jobs are never placed on the same capacity in one
cycle; the reconcile loop then persists each decision with compare-and-set, on
the job's version and on the store's count of placements read before the
snapshot (so no two engines place two jobs on one slot either).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, Decimal
from itertools import islice

from broker.config import Settings
from broker.engine import budget as budget_rules
from broker.engine.spot import decide as policy_decide
from broker.engine.spot import policy_input
from broker.lifecycle import AttemptState
from broker.models import Attempt, Job
from broker.offers import Market, after_run, matching_offers, placed_alternative, placement_record, slots_of
from broker.queue import STARVED_SECONDS, ordered, work_left_seconds
from broker.spec import parse
from broker.views import deadline_at
from pricing.money import fmt, fmt_left
from pricing.offers import JobRequest, Offer, Tier
from pricing.placement import (Blocked, NoFit, cloud_block, holds, place, start_shortfall, unblocked,
                               under_cap, why_no_offer)
from pricing.deadline import ACTION_TIER
from pricing.policy import Action, Policy


SPOT_WAIT = "waiting: the spot policy waits for spot capacity"
"""How the reason of a queued job its spot policy keeps waiting for spot begins."""


@dataclass(frozen=True)
class Place:
    job: Job
    placement: dict
    slots: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Wait:
    job: Job
    reason: str
    budget_spent: bool = False  # nothing can run within what is left: stop it rather than queue forever


def request_of(job: Job) -> JobRequest:
    """What to place for a stored job: its spec re-read (``strict=False``: see :func:`broker.spec.parse`),
    with the price cap the job keeps as a field of its own (the stored ``broker:`` section does not
    repeat it).

    Remembered by what it is made of (:data:`_REQUESTS`): each tick and each read of the queue's estimates parsed
    every queued job's spec again (at 3,000 queued, 3,000 parses each time: about 60 ms, more than the estimate's own
    work) for specs that never change. The key is a digest of the ``repr`` of all the answer depends on — the
    spec whole (``repr`` tells apart what ``==`` does not: ``1`` from ``True``, a list from a tuple, the order of a
    mapping's keys), the time it is read at (``now`` of :func:`~broker.spec.parse`, which a deadline is read
    against) and the price cap — so a remembered request is never stale, whichever broker process wrote the job and
    however long ago. A spec that fails to parse is not remembered: it fails again, as before. Requests alike to the
    letter (their ``repr``: ``2.0`` hours is not ``2``, whose words differ) are one object (:data:`_SAME`), so the
    thousands of jobs of a sweep hold one."""
    try:
        text = repr((job.spec, job.submitted_at, job.max_price_per_hour)).encode("utf-8", "backslashreplace")
    except (RecursionError, ValueError):  # nothing a stored (JSON) spec holds; read as before
        return _request_of(job)
    key = hashlib.blake2b(text, digest_size=16).digest()
    found = _REQUESTS.get(key)
    if found is None:
        found = _request_of(job)
        with _REQUESTS_LOCK:  # the engine's thread and the API's both read jobs
            if len(_REQUESTS) >= REQUESTS_KEPT:
                for old in list(islice(_REQUESTS, REQUESTS_KEPT // 2)):  # the oldest half
                    del _REQUESTS[old]
                _SAME.clear()
            found = _REQUESTS[key] = _SAME.setdefault(repr(found), found)
    return found


def _request_of(job: Job) -> JobRequest:
    return replace(parse(job.spec, now=job.submitted_at, strict=False).request,
                   max_price_per_hour=job.max_price_per_hour)


REQUESTS_KEPT = 50_000
"""How many jobs' requests :func:`request_of` remembers (a digest each, about 150 bytes, and the few distinct
requests they share): more than a queue this broker is measured at holds, so a tick and a read each find every queued
job's; past it the oldest half go."""
_REQUESTS: dict[bytes, JobRequest] = {}
_SAME: dict[str, JobRequest] = {}
_REQUESTS_LOCK = threading.Lock()


def left_to_run(job: Job, request: JobRequest) -> JobRequest:
    """The request to price a queued job's next attempt against: a job that has run before needs only
    what is left of its ``expected_hours`` — the share of its steps after its last checkpoint, when it
    reported a step total; when it did not, the estimate is not asked of the budget again (the budget
    stop keeps the spend within it). Before, a job preempted half-way whose budget had covered the
    whole estimate at submit waited for ever: "the budget left does not cover <the whole job>"."""
    if request.expected_hours is None or not job.attempts:
        return request
    total = job.progress.get("total_steps")
    done = (job.last_checkpoint or {}).get("step") or 0
    if isinstance(total, int) and total > 0 and isinstance(done, int):
        left = request.expected_hours * Decimal(max(total - done, 0)) / Decimal(total)
        return replace(request, expected_hours=left.quantize(Decimal("0.0001"), rounding=ROUND_CEILING))
    return replace(request, expected_hours=None)


def block_causes(job: Job, attempts: Sequence[Attempt], blocked: Iterable[str]) -> dict[str, Blocked]:
    """What happened in each zone (or cloud: :func:`~pricing.placement.cloud_block`) of ``blocked`` to block it for
    ``job``, read from its ``attempts``: those on spot there that were preempted, lost their node or went silent
    (what :meth:`~broker.engine.reconcile.Engine` blocks a zone after), and those whose launch there was refused
    (failed before they ran); for a cloud, its refused launches. Counted up to when the block ends, so "after 2
    preemptions there" is every preemption of the job there, the one that blocked it last. A zone none of them
    explains (its attempts not read) maps to an empty :class:`~pricing.placement.Blocked`, said as "recent
    preemptions or refused launches" — the reason said so of every blocked zone, even after one refused launch."""
    causes: dict[str, Blocked] = {}
    for key in blocked:
        until = job.blocked_zones.get(key, float("inf"))
        counts = dict(preemptions=0, lost=0, silent=0, refused=0)
        for a in attempts:
            p = a.placement or {}
            if a.ended_at is None or a.ended_at > until:
                continue
            refused = a.state is AttemptState.FAILED and a.started_at is None
            if key.startswith("cloud:"):  # only a refused launch blocks a whole cloud
                if refused and p.get("cloud") is not None and cloud_block(str(p["cloud"])) == key:
                    counts["refused"] += 1
                continue
            if key not in (p.get("location"), p.get("zone")):
                continue
            spot = p.get("tier") == Tier.SPOT.value and a.stop_reason != "owner_silent"  # a silent broker: not the zone
            if refused:
                counts["refused"] += 1
            elif spot and a.stop_reason == "heartbeat" and a.state is not AttemptState.SUCCEEDED:
                counts["silent"] += 1
            elif spot and a.state is AttemptState.PREEMPTED:
                counts["preemptions"] += 1
            elif spot and a.state is AttemptState.LOST:
                counts["lost"] += 1
        causes[key] = Blocked(**counts)
    return causes


def _blocked_note(offers: Sequence[Offer], blocked: Mapping[str, Blocked], job: Job, spot_up: frozenset[str]) -> str:
    """When spot is up in zones this job may not use for now (blocked after what happened there: its preemptions, a
    refused launch): say which, why and until when — a job that 'waits for spot' while spot is up elsewhere needs the
    reason. Not in the words of :data:`~pricing.placement.BLOCKED_WORDS`: the job waits for its spot policy, not for
    capacity (:data:`broker.queue.WAITS_FOR_CAPACITY`)."""
    zones = sorted({o.zone for o in offers if o.tier is Tier.SPOT and o.zone in blocked and o.zone in spot_up})
    if not zones:
        return ""
    until = min(job.blocked_zones[z] for z in zones)
    why = [blocked.get(z) if isinstance(blocked, Mapping) and isinstance(blocked.get(z), Blocked) else Blocked()
           for z in zones]
    after = f", after {why[0].words()}" if len(zones) == 1 else \
        f" ({', '.join(f'{z} after {w.words()}' for z, w in zip(zones, why))})"
    return (f"; spot is up in {', '.join(zones)}, which this job may not use until "
            f"{time.strftime('%H:%M:%SZ', time.gmtime(until))}{after}")


def _blocked_until(offers: Sequence[Offer], blocked: Collection[str], job: Job) -> str:
    """Until when each zone the job may not use for now is blocked for it, for a reason that says zones are
    blocked: "every matching zone is blocked for this job after recent preemptions" named neither the zones nor
    when the job may go back (what blocked each, :func:`block_causes`, the placement's sentence names)."""
    zones = sorted({o.zone for o in offers if o.zone in blocked and o.zone in job.blocked_zones}
                   | {cloud_block(o.cloud) for o in offers if cloud_block(o.cloud) in blocked
                      and cloud_block(o.cloud) in job.blocked_zones})  # a cloud a launch was refused access to
    if not zones:
        return ""
    return "; " + ", ".join(f"{z.replace('cloud:', 'the cloud ')} until "
                            f"{time.strftime('%H:%M:%SZ', time.gmtime(job.blocked_zones[z]))}" for z in zones)


def offers_for(job: Job, request: JobRequest, offers: Sequence[Offer]) -> list[Offer]:
    """The offers the job may take and that match its request (:func:`broker.offers.matching_offers`), on its
    forced tier after a "switch to on-demand"."""
    mine = matching_offers(request, offers)
    if job.force_tier:
        mine = [o for o in mine if o.tier.value == job.force_tier]
    return mine


def placeable(job: Job, request: JobRequest, offers: Sequence[Offer], *, now: float) -> list[Offer]:
    """The offers :func:`schedule` may place the job on at ``now`` when capacity and budget allow:
    :func:`offers_for`, then a location that ever has the job's ``num_nodes``, the price cap and the zones blocked
    for it, with the very functions :func:`pricing.placement.place` rules offers out by
    (:func:`~pricing.placement.holds`, :func:`~pricing.placement.under_cap`, :func:`~pricing.placement.unblocked`,
    :meth:`Job.blocked_at`). The queue's start estimates (:meth:`broker.service.BrokerService.queue_waits`) follow
    the capacity of these, so an estimate never counts on an offer the scheduler would not take: a free zone over
    the job's cap read as "starts now", tick after tick; and a job of 8 nodes waiting for a zone of 8 was told it
    waited for the jobs on a zone of 4, which can never hold it."""
    mine = [o for o in offers_for(job, request, offers) if holds(o, request.num_nodes)]
    return unblocked(under_cap(request, mine), job.blocked_at(now))


def placeable_key(job: Job, request: JobRequest, *, now: float) -> tuple:
    """All that :func:`placeable` reads of a job at ``now`` (its request, its forced tier, the zones blocked for it
    then): two jobs with the same key may be placed on the same offers. The queue's estimate works the offers out once
    per key (:meth:`broker.service.BrokerService._waits`), not once per queued job — a queue of thousands holds a few
    shapes. Whatever :func:`placeable` comes to read of the job goes here too."""
    return request, job.force_tier, job.blocked_at(now)


def schedule_now(jobs: Sequence[Job], mk: Market, settings: Settings, launcher, *, now: float,
                 policies: Mapping[str, Policy], attempts_of: Callable[[str], Sequence[Attempt]]) -> list[Place | Wait]:
    """:func:`schedule` with what the broker's settings and launcher make of its rules (the changeover, what a start
    and a start again must pay for, each offer's billing after its run): the engine's tick, and the service's dry
    run, which so decides as the next tick would."""
    grace, tick = settings.stop_grace_seconds, settings.tick_seconds
    return schedule(jobs, mk, now=now, policies=policies, attempts_of=attempts_of,
                    changeover=settings.changeover_seconds, min_run_seconds=budget_rules.reserve_seconds(grace, tick),
                    after_run_seconds=after_run(launcher, mk.every_offer) if jobs else {},
                    rerun_seconds=budget_rules.rerun_seconds(grace, tick))


@dataclass
class _Kept:
    """A pool's slots kept for the pool's head: the first job in the queue that waits for more of them than are free
    (``job_id``, which needs ``need``). Enough come free for it at ``start`` (the jobs holding them expected to end by
    then), with ``extra`` free then beyond its need. A job behind it takes that pool's free slots only where doing so
    cannot delay it — it is expected to end by ``start``, or it takes no more than ``extra`` — as a batch scheduler's
    backfill does (Slurm's, Kueue's head of line): before, a 2-slot job at the head of a 2-slot pool waited for ever
    behind a stream of 1-slot jobs that each took the slot the other left free, while its start estimate slid on tick
    after tick. ``start`` is ``inf`` when it cannot be told (a job holding the rest gives no length): then a job
    behind that gives a length still takes a free slot, as nothing tells how long keeping it would idle it, but one
    that gives none does not — it might hold the slot for ever. ``starved``: kept from every job behind, ``start``
    being now, as the head has waited :data:`STARVED_SECONDS` for slots whose start cannot be told. ``unit``: what a
    slot is, in the reasons' words."""
    job_id: str
    need: int
    start: float
    extra: int
    starved: bool = False
    unit: str = "slot"
    team: str = ""  # the head's: a job of another team held back behind it is not told its id


# How long a job may wait for a pool whose holders give no end before that pool's free slots are kept for it even from
# jobs behind that give a length (:func:`_keep_pools`): :data:`broker.queue.STARVED_SECONDS`, the one the queue's
# estimate keeps too (it is imported here, as this module imports that one).


def _keep_for(job: Job, need: int, free: int, ends: Sequence[tuple[float | None, int]]) -> _Kept | None:
    """A pool's slots kept for ``job`` (``need`` of them, ``free`` free now), timed by when the jobs holding the
    rest are expected to hand them back; ``None`` when that cannot be told (a job holding them gives no length)."""
    for end, n in sorted((e for e in ends if e[0] is not None), key=lambda e: e[0]):
        free += n
        if free >= need:
            return _Kept(job.id, need, end, free - need, team=job.team)
    return None


def _not_kept(job: Job, request: JobRequest, offers: Sequence[Offer], kept: Mapping[str, _Kept],
              now: float, free_slots: Mapping[str, Sequence[int]]) -> tuple[list[Offer], dict[str, _Kept]]:
    """``offers`` less the on-prem shapes whose slots are kept for a job ahead of ``job`` (:class:`_Kept`) and that
    it may not take without delaying that job; and those reservations, by pool, for its reason. A pool with no slot
    free (``free_slots``) keeps nothing from it: its shapes stay, for the placement to say the pool is full — held
    back, the second job waiting for a full pool was told of the next offer instead ("the cheapest match, spot …,
    over the job's max_price_per_hour"), as if the pool were not there."""
    if not kept:
        return list(offers), {}
    length = work_left_seconds(job)
    left, held_back = [], {}
    for o in offers:
        k = kept.get(o.location) if o.tier is Tier.ONPREM else None
        if k is not None and not free_slots.get(o.location):
            k = None
        if k is not None and k.job_id != job.id and not (
                (length is not None and now + length <= k.start) or slots_of(o) * request.num_nodes <= k.extra):
            held_back[o.location] = k
            continue
        left.append(o)
    return left, held_back


def schedule(jobs: Iterable[Job], mk: Market, *, now: float,
             policies: Mapping[str, Policy] | None = None,
             attempts_of: Callable[[str], Sequence[Attempt]] = lambda _id: (),
             changeover: float = 120.0, min_run_seconds: int = 60,
             after_run_seconds: Mapping[Offer, int] | None = None,
             rerun_seconds: int | None = None) -> list[Place | Wait]:
    """One decision per queued job, in queue order. A job whose budget left cannot buy
    ``min_run_seconds`` on any of its offers at or under its ``max_price_per_hour`` (it would be stopped at
    once, or wait for ever for an offer it may not take) is stopped, not queued;
    ``after_run_seconds[offer]`` (:func:`broker.offers.after_run`) is what that offer is billed after
    the run on top, which the budget left must pay for as well (a cloud cluster's idle minutes and
    teardown: its launcher stops the run that much before the budget runs out).

    ``rerun_seconds`` (:func:`broker.engine.budget.rerun_seconds`): what a job that has run before — placed again
    after a preemption, a lost node, a resume — must pay for instead, a minute's run and a clean stop, as a manual
    resume is held to: an offer its budget left cannot pay that on is not taken (it waits for one it can pay, busy
    now, or is stopped at its budget when there is none). A preempted job with $0.02 left was placed on a $7.20/h
    on-demand zone for the 2 s its budget paid there."""
    after = after_run_seconds or {}
    free_slots = {k: list(v) for k, v in mk.free_slots.items()}
    capacity = dict(mk.free_capacity)
    offers = list(mk.offers)
    policies = policies or {}
    decisions: list[Place | Wait] = []
    ends = {pool: list(held) for pool, held in mk.slot_ends.items()}  # and those placed by this pass, as it goes
    kept: dict[str, _Kept] = {}
    #: :func:`offers_for` per shape (the request, the forced tier: all it reads of a job), on the offers open now
    #: (``open_``, emptied whenever they change) and on every offer (``every``): worked out for each of 3,000 queued
    #: jobs it was a sixth of a tick, for the few shapes they come in. Each list is only read (``_not_kept`` copies).
    open_: dict[tuple, list[Offer]] = {}
    every: dict[tuple, list[Offer]] = {}
    shortfalls: dict[tuple, str | None] = {}  # start_shortfall per shape and budget left: a sweep's jobs share both
    pools = {o.location for o in mk.every_offer or mk.offers if o.tier is Tier.ONPREM}  # none left to keep: skipped
    for job in ordered(jobs):  # the queue position is the job's own field; a reason that named it would go stale
        if job.launch_retry_at is not None and now < job.launch_retry_at:
            # its last launch was refused for a reason that may pass: not placed again before its backoff ends (its
            # reason says why, and when), and what it would have taken is left to the jobs behind it
            decisions.append(Wait(job, job.reason))
            continue
        request = left_to_run(job, request_of(job))
        # placed again, a minute's run and its stop, or the expected run left where that is shorter
        need = budget_rules.rerun_for(rerun_seconds, min_run_seconds, request.expected_hours) \
            if rerun_seconds is not None and job.attempts else min_run_seconds
        again = need > min_run_seconds  # held to a minute's run, which pricing's sentences then name
        shape = (request, job.force_tier)
        if (fit := open_.get(shape)) is None:
            fit = open_[shape] = offers_for(job, request, offers)
        mine, held_back = _not_kept(job, request, fit, kept, now, free_slots)
        # the zones blocked for it, each with what happened there, for the sentence of a job that waits for them
        blocked = job.blocked_at(now)
        blocked = block_causes(job, attempts_of(job.id), blocked) if blocked else blocked
        policy = policies.get(job.id)
        note = ""
        if policy is not None and not job.force_tier:
            # past its deadline there is none left to keep: placed as a job without one is, on the cheapest offer
            # that fits now. The safety net sent it to the reliable tier at its price, "anything else could miss the
            # deadline", missed already (and a job that may run only on spot was placed there anyway)
            past = job.deadline is not None and now >= job.deadline
            inp = None if past else policy_input(job, attempts_of(job.id), mine, capacity, mk.spot_available,
                                                 now=now, changeover=changeover, num_nodes=request.num_nodes)
            if past:
                note = f" ({deadline_passed_note(job.deadline)})"
            if inp is not None:
                d = policy_decide(policy, inp)
                note = f" ({d.reason})" if d.reason else ""
                if d.action is Action.WAIT:
                    decisions.append(Wait(job, f"{SPOT_WAIT}{note}"
                                               f"{_blocked_note(mine, blocked, job, mk.spot_available)}"))
                    continue
                tier = ACTION_TIER[d.action]
                chosen_tier = [o for o in mine if o.tier is tier and (d.action is not Action.SPOT or d.zone is None
                                                                      or o.zone == d.zone)]
                planned = place(request, chosen_tier, free_capacity=capacity, blocked_zones=blocked,
                                budget_left=job.budget - job.spent, min_run_seconds=need,
                                after_run_seconds=after, placed_again=again)
                if not isinstance(planned, NoFit):
                    mine = chosen_tier
                else:  # the cheapest placement that fits at all, saying so: the plan's words alone named a tier
                    # it was not placed on ("placed on ondemand ... (plan: spot in sim-a ... is cheapest)")
                    note = f" (its spot policy chose {_plan_words(d)}, which cannot take it now: " \
                           f"{planned.reason}; so the cheapest offer that fits now{_plan_reason(d)})"
        # weighed on every offer the job may take, a pool's busy shapes too: slots come free, a budget does not grow
        if (fit := every.get(shape)) is None:
            fit = every[shape] = offers_for(job, request, mk.every_offer or mk.offers)
        weighed = (shape, job.budget - job.spent, need, again)  # all it depends on, the pass's after_run aside
        if weighed in shortfalls:
            short = shortfalls[weighed]
        else:
            short = shortfalls[weighed] = start_shortfall(request, fit, job.budget - job.spent, min_run_seconds=need,
                                                          after_run_seconds=after, placed_again=again)
        if short is not None:
            # the cheapest offer it names may be the zone that just preempted it, blocked for it: said, with the
            # cheapest it may use now (what a resume is then priced at first: BrokerService._minute_shortfall)
            short += budget_rules.blocked_cheapest(request, fit, blocked_until=job.blocked_zones, now=now,
                                                   causes=blocked if isinstance(blocked, Mapping) else None)
            decisions.append(Wait(job, f"the budget left, {fmt_left(job.budget - job.spent, budget=job.budget)}, {short}", budget_spent=True))
            continue
        chosen = place(request, mine, free_capacity=capacity, blocked_zones=blocked,
                       budget_left=job.budget - job.spent, min_run_seconds=need, after_run_seconds=after,
                       placed_again=again)
        if isinstance(chosen, NoFit):
            said = (_kept_words(held_back, free_slots, now, job.team, work_left_seconds(job) is None)
                    if held_back else None) or \
                _pools_busy(job, request, mk, free_slots, mine) or (None if mine else _gone(job, request, mk)) or \
                chosen.reason
            if said is chosen.reason and said.startswith("the budget left") and blocked:
                # what it may use now it cannot pay for, but a zone blocked for it it can: said, with from when
                said += budget_rules.pays_once_free(
                    request, mine, blocked_until=job.blocked_zones, now=now, budget_left=job.budget - job.spent,
                    min_run_seconds=need, after_run_seconds=after, placed_again=again,
                    causes=blocked if isinstance(blocked, Mapping) else None)
            decisions.append(Wait(job, f"waiting: {said}{_blocked_until(mine, blocked, job) if 'blocked' in said else ''}"))
            if job.launch_retry_at is None and not kept.keys() >= pools:
                _keep_pools(job, request, mk, free_slots, ends, kept, now)
                head = next(((pool, k) for pool, k in kept.items() if k.job_id == job.id), None)
                if head is not None and (free := len(free_slots.get(head[0], ()))):
                    # the head is told too: its reason said only "full", and its user could not tell that the GPUs
                    # free meanwhile were being kept for it rather than given to the jobs behind — from all of
                    # them, or, while its start cannot be told, from those that give no length
                    unit = f"{head[1].unit}{'s' if free != 1 else ''}"
                    whom = "" if head[1].starved or head[1].start < float("inf") else \
                        " from the jobs behind that give no expected_hours"
                    decisions[-1] = replace(decisions[-1], reason=f"{decisions[-1].reason}; the {free} free {unit} "
                                                                  f"of pool {head[0]} {'are' if free != 1 else 'is'} "
                                                                  f"kept for it{whom} meanwhile")
            continue
        offer = chosen.offer
        slots: tuple[int, ...] = ()
        if offer.tier is Tier.ONPREM:
            pool = offer.location
            k = slots_of(offer) * chosen.num_nodes
            slots = tuple(free_slots[pool][:k])
            free_slots[pool] = free_slots[pool][k:]
            length = work_left_seconds(job)
            ends.setdefault(pool, []).append((now + length if length is not None else None, k))
            if pool in kept and kept[pool].job_id != job.id and not (length is not None
                                                                      and now + length <= kept[pool].start):
                kept[pool] = replace(kept[pool], extra=kept[pool].extra - k)  # it took slots beyond the kept job's
            # shapes that no longer fit leave the market; a pool with none left is full
            offers = [o for o in offers if o.tier is not Tier.ONPREM or o.location != pool
                      or slots_of(o) <= len(free_slots[pool])]
            if not any(o.tier is Tier.ONPREM and o.location == pool for o in offers):
                offers.extend(x for x in mk.offers if x.tier is Tier.ONPREM and x.location == pool)
                capacity[pool] = 0
            open_.clear()
        else:
            capacity[offer.location] = capacity.get(offer.location, chosen.num_nodes) - chosen.num_nodes
        record = placement_record(offer, chosen.num_nodes, mk.offers,
                                  alternative=placed_alternative(job.spec, request, offer))
        decisions.append(Place(job, record, slots,
                               f"placed on {offer.describe()}{_nodes(chosen.num_nodes, record)}{note}"
                               f"{chosen.note}"))
    return decisions


def _plan_words(d) -> str:
    """The tier (and zone) a spot policy's decision names: ``spot in sim-a``, ``on-demand``, ``on-prem``."""
    if d.action is Action.SPOT:
        return f"spot in {d.zone}" if d.zone else "spot"
    return {Action.ONPREM: "on-prem"}.get(d.action, "on-demand")


def _plan_reason(d) -> str:
    """``; its plan: …`` after a fallback from the policy's choice, its own reason kept for what it weighed."""
    if not d.reason:
        return ""
    return f"; its {d.reason}" if d.reason.startswith("plan: ") else f"; as it weighed: {d.reason}"


def deadline_passed_note(deadline: float) -> str:
    """What a placement after the job's deadline says of it, in place of its spot policy's reason, which after the
    deadline is the safety net's "anything else could miss the deadline": it has passed, and the job runs late."""
    return f"its deadline at {deadline_at(deadline)} has passed: it runs now, late"


def _nodes(n: int, record: dict) -> str:
    """``, 2 nodes, $0.8492/h for both`` after a placement of several nodes: its price is all of them, and "placed on
    spot 1x A10G g5.xlarge" beside a price twice the instance's read as one node's."""
    if n <= 1:
        return ""
    price = record.get("price_per_hour")
    return f", {n} nodes" + (f", {fmt(price)}/h for {'both' if n == 2 else f'all {n}'}" if isinstance(price, int) else "")


def _gone(job: Job, request: JobRequest, mk: Market) -> str | None:
    """Why a job accepted at its submit waits when nothing the broker offers now has its shape at all: its config or
    price table changed since (a pool removed or renamed, a zone dropped). Its reason said "no offers are configured"
    of a broker with a pool and a zone, tick after tick, and nothing said it would never start as things are."""
    every = mk.every_offer or mk.offers
    if job.force_tier or offers_for(job, request, every):
        return None
    return (f"{why_no_offer(request, every)}. Nothing this broker offers now has what it asks, though an offer did "
            f"when it was accepted (the broker's config or price table changed since): it waits until one does; "
            f"cancel it, or have a pool or zone with it added")


def _keep_pools(job: Job, request: JobRequest, mk: Market, free_slots: Mapping[str, list[int]],
                ends: Mapping[str, Sequence[tuple[float | None, int]]], kept: dict[str, _Kept], now: float) -> None:
    """Make ``job``, which waits, the head of one pool (:class:`_Kept`): of the pools it may run in that have no head
    yet and fewer slots free than it needs, the one where it can start earliest (the earlier name on a tie), as the
    queue's estimate picks (:func:`broker.queue.waits`). One pool, not each it may use: it starts in one, and slots kept
    in the others idled them for nothing, while the estimate of a job behind it said "now" of a slot kept from it.
    Where no start can be told, the pool with the most slots free — kept from the jobs behind that give no length,
    and from every job behind once it has waited :data:`STARVED_SECONDS`."""
    shapes = [o for o in placeable(job, request, mk.every_offer or mk.offers, now=now) if o.tier is Tier.ONPREM]
    found: list[tuple[float, int, str, _Kept]] = []
    for pool in sorted({o.location for o in shapes} - kept.keys()):
        need = min(slots_of(o) for o in shapes if o.location == pool) * request.num_nodes
        free = len(free_slots.get(pool, ()))
        if free >= need:
            continue
        unit = "GPU" if any(o.accelerator for o in shapes if o.location == pool) else "slot"
        k = _keep_for(job, need, free, ends.get(pool, ()))
        if k is None:
            starved = now - (job.queued_at or job.submitted_at) >= STARVED_SECONDS
            k = _Kept(job.id, need, now if starved else float("inf"), 0, starved=starved, team=job.team)
        found.append((float("inf") if k.starved else k.start, -free, pool, replace(k, unit=unit)))  # known first
    if found:
        _, _, pool, k = min(found)
        kept[pool] = k


def _kept_words(held_back: Mapping[str, _Kept], free_slots: Mapping[str, list[int]], now: float, team: str,
                no_length: bool = False) -> str:
    """Why a job of ``team`` waits while a pool has free slots it could use: they are kept for the pool's head, ahead
    of it. A head whose start is known makes the pool "full" for the job until then — the words the queue's estimate
    follows (:data:`broker.queue.WAITS_FOR_CAPACITY`); one whose start cannot be told gives the job no estimate
    either. A head of another team is "a job of another team", as the queue's holders are said
    (:func:`broker.views.holders_words`): the reason is stored and shown to the job's team, which cannot look that
    job up. A job that gives no length (``no_length``) is told what would let it take them: "may still take it"
    left its user to guess why this one did not."""
    said = []
    hint = ", and this one gives no `broker: expected_hours`" if no_length else ""
    for pool, k in sorted(held_back.items()):
        free = len(free_slots.get(pool, ()))  # never 0: a full pool keeps nothing from a job (:func:`_not_kept`)
        them = f"its {free} free {k.unit}{'s' if free != 1 else ''}"
        head = k.job_id if k.team == team else "a job of another team"
        behind = f"behind {head}, which needs {k.need} {k.unit}{'s' if k.need != 1 else ''} of pool {pool}"
        if not k.starved and k.start < float("inf"):  # (a start of now: the holder is read as ending now)
            said.append(f"{behind}: the pool is full for this job until that one starts ({them} kept for it; a job "
                        f"expected to end before then may still take {'them' if free != 1 else 'it'}{hint})")
        elif not k.starved:  # when the head starts cannot be told: no "full", so no estimate of this job's start
            # (only a job of no length is held back then: one that gives a length takes the free ones)
            said.append(f"{behind} and whose start cannot be told (a job holding the rest gives no length, or runs "
                        f"past it): {them} kept for it from the jobs that give no `broker: expected_hours`, as this "
                        f"one gives none")
        else:  # kept for a job starved of them, until it starts: no "full" either
            said.append(f"{behind} and has waited more than {STARVED_SECONDS / 60:.0f} min for them: {them} kept "
                        f"for it, and this job starts after it")
    return "; ".join(said)


def _pools_busy(job: Job, request: JobRequest, mk: Market, free_slots: Mapping[str, list[int]],
                mine: Sequence[Offer]) -> str | None:
    """Why a job whose shape a pool has waits when no offer now open to it has that shape: the pool's shapes too
    large for its free slots are out of the market until they free up, and the placement, finding no offer of that
    shape, said "no offer has 4x A100 (no offers are configured)" of a pool with 3 of its 4 slots free."""
    if mine:
        return None
    busy = [o for o in offers_for(job, request, mk.every_offer or ()) if o.tier is Tier.ONPREM]
    if not busy:
        return None
    said = []
    for pool in sorted({o.location for o in busy}):
        need = min(slots_of(o) for o in busy if o.location == pool) * request.num_nodes
        free = len(free_slots.get(pool, ()))
        said.append(f"pool {pool} is full for it right now ({free} slot{'s' if free != 1 else ''} free, the job "
                    f"needs {need})")  # "full": what the queue's start estimate follows (broker.queue)
    return "; ".join(said)
