"""Queue order and positions. Pure.

Order: higher ``priority`` first, then earlier submit time, or resume by a
user (:func:`order_key`; then id, for a total order). The scheduler walks the queue in this order and lets a later job
start when an earlier one does not fit (best-effort FIFO, as Kueue's default),
with one exception, as Slurm's backfill makes: the first job waiting for more of
a pool's slots than are free (the pool's head) has them kept for it until its
estimated start, and a later job takes them only if it is expected to end by
then (:class:`broker.engine.schedule._Kept`). Else a stream of 1-slot jobs took
each slot as it came free, and a 2-slot job at the head never started. The
start estimates here (:func:`waits`) follow the same rule, so they are the starts
the scheduler keeps to.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from broker.lifecycle import JobState
from broker.models import Job
from pricing.placement import BLOCKED_WORDS


def order_key(job: Job) -> tuple:
    """Higher priority first, then the earlier to have joined the queue: when it was submitted, or when a user last
    resumed it (``resumed_at``) — a job that failed or was stopped at its budget had left the queue, and resumed
    hours later it went ahead of every job submitted since, a pool's head that had waited included (it took the
    GPU kept for it). The broker's own requeues (a preemption, a lost node, a retry) keep the job's place."""
    return (-job.priority, job.resumed_at or job.submitted_at, job.id)


def ordered(jobs: Iterable[Job]) -> list[Job]:
    """Queued jobs in the order the scheduler considers them."""
    return sorted((j for j in jobs if j.state is JobState.QUEUED), key=order_key)


def positions(jobs: Iterable[Job]) -> dict[str, int]:
    """1-based position of each queued job (1 = next to be considered)."""
    return {job.id: i for i, job in enumerate(ordered(jobs), start=1)}


def expected_end(job: Job, now: float, grace_seconds: float = 0.0, stop_asked_at: float | None = None) -> float | None:
    """When a running job should finish: from its reported step rate, else from ``expected_hours``; a job
    placed or launching (it holds its capacity already) from ``expected_hours`` counted from now; a job
    being cancelled or stopped when its stop's grace period ends (counted from ``stop_asked_at``, when its
    attempt was asked to stop, else from its last change, the cancel itself; no earlier than now). ``None``
    when it cannot be told: no rate and no length, or a job running past its ``expected_hours`` by more than
    :func:`overdue_grace` (overdue: it may end any moment or in hours, and "now" would be a guess that is wrong tick
    after tick). An end told so is never later than its budget stop (:func:`budget_end`): a 2-node job with $0.02,
    stopped at its budget a minute later, was read as ending hours later at its step rate, and the 4-node job
    waiting for its zone was told it would start after its deadline."""
    if job.state in (JobState.CANCELLING, JobState.STOPPING):
        return max((stop_asked_at if stop_asked_at is not None else job.updated_at) + grace_seconds, now)
    end = _end_of_run(job, now)
    if end is None:
        return None
    stop = budget_end(job, now)
    return end if stop is None else max(min(end, stop), now)


def budget_end(job: Job, now: float) -> float | None:
    """When a job holding capacity is stopped at its budget at the latest: the budget left (budget less what it has
    spent) at its placement's price (all its nodes), from now — what "the budget left runs it about N more" says
    (:func:`broker.costs.burn`'s ``hours_left``); the engine's stop comes a clean stop before it. ``None`` for a
    placement that costs nothing (never stopped at its budget)."""
    price = job.placement.get("price_per_hour") if isinstance(job.placement, dict) else None
    if not isinstance(price, int) or isinstance(price, bool) or price <= 0:
        return None
    return now + max(job.budget - job.spent, 0) * 3600 / price


def _end_of_run(job: Job, now: float) -> float | None:
    """:func:`expected_end` of a job placed, launching or running, before its budget stop caps it."""
    if job.state in (JobState.PLACED, JobState.LAUNCHING):
        return now + float(Decimal(job.expected_hours) * 3600) if job.expected_hours else None
    if job.state is not JobState.RUNNING or job.running_since is None:
        return None
    elapsed = max(now - job.running_since, 0.0)
    p = job.progress
    step, total, first = p.get("step"), p.get("total_steps"), p.get("first_step", 0)
    first_at, at = p.get("first_at"), p.get("at")
    if step and total and first_at is not None and at is not None and at > first_at and step > (first or 0):
        # the steps since the first report over the time since it: counted from the start instead, a fresh run
        # first reporting at step 50 showed half its rate, and ended twice as late as it would
        return now + max(total - step, 0) / ((step - (first or 0)) / (at - first_at))
    if step and total and elapsed > 0 and step > (first or 0):
        rate = (step - (first or 0)) / elapsed
        return now + max(total - step, 0) / rate
    if job.expected_hours:
        length = float(Decimal(job.expected_hours) * 3600)
        end = job.running_since + length
        # a run a little past its length (a process's start and exit, the tick that sees it end) is read as ending
        # now: dropped at once, every job behind lost its estimate, or had it pushed back by hours, for a second
        # at nearly every end
        return max(end, now) if now - end <= overdue_grace(length) else None
    return None


def overdue_grace(length: float) -> float:
    """How long past its ``expected_hours`` (``length`` seconds) a running job is still read as ending now: a
    twentieth of its length, at least 15 s and at most half an hour."""
    return min(max(15.0, length / 20), 1800.0)


def held(job: Job) -> int:
    """The capacity a job holds: its pool slots, else its nodes."""
    return len(job.slots) or int(job.placement.get("num_nodes") or 1)


STARVED_SECONDS = 1800.0
"""How long a job may wait for a pool whose holders give no end before that pool's free slots are kept for it even
from jobs behind that give a length (:func:`broker.engine.schedule._keep_pools`): until then they take them, as nothing
tells how long keeping them would idle them; after, it no longer waits behind a stream of smaller jobs for ever. The
queue's estimate (:func:`waits`) keeps the same rule."""


WAITS_FOR_CAPACITY = ("full", *BLOCKED_WORDS)
"""Words of a queued job's reason that say it waits for capacity (the scheduler's and placement's): a pool or zone
full for it, or every zone it may use blocked for it (after a preemption or a refused launch there: placement's own
:data:`~pricing.placement.BLOCKED_WORDS`, whatever cause its sentence names — and those of a broker of an earlier
version, "… is blocked for this job after recent preemptions"), until a time its reason names. Such a job gets a start
estimate; one waiting for anything else (the spot policy, its budget) does not."""


@dataclass(frozen=True)
class Holder:
    """A job holding capacity a queued job needs, whose end cannot be told: ``overdue``, seconds it has run past
    its ``expected_hours`` (given as ``expected_hours``); else it gave no length (nor a step total) to follow —
    ``ahead`` when it is itself queued ahead of the waiting job, taking what comes free first."""
    job_id: str
    location: str | None
    overdue: float | None = None
    expected_hours: str | None = None
    ahead: bool = False
    #: the holding job's team: a viewer of another team is told "a job of another team", never its id
    team: str | None = field(default=None, compare=False)
    #: a pool's head (queued ahead) whose start cannot be told, which keeps the pool ``location`` from the waiting job
    #: (:func:`waits`): it gives no length, or the head is ``starved`` (kept from every job behind)
    head: bool = False
    starved: bool = False


@dataclass(frozen=True)
class Waits:
    """:func:`waits`' answer: ``starts``, each queued job's rough start (epoch seconds), and for a job waiting for
    capacity that gets none, ``holders``: the jobs holding what it needs whose ends cannot be told. Jobs that wait for
    the same holders share one list of them (to be read, never changed): thousands of jobs behind a job with no
    length would otherwise each have a copy, and each be put in words again
    (:meth:`broker.service.BrokerService.queue_waits` words each list once)."""
    starts: dict[str, float] = field(default_factory=dict)
    holders: dict[str, list[Holder]] = field(default_factory=dict)


def waits_for_capacity(job: Job) -> bool:
    """Whether a queued job's reason says it waits for capacity (:data:`WAITS_FOR_CAPACITY`)."""
    return any(words in job.reason for words in WAITS_FOR_CAPACITY)


def backoff_until(job: Job, now: float) -> float | None:
    """When a queued job waiting out a backoff may be placed again (``launch_retry_at``: its launch was refused for a
    reason that may pass, or its run failed and is retried), while that is still to come; ``None`` otherwise. The
    scheduler does not place it before (:func:`broker.engine.schedule.schedule`), so no estimate says it starts
    earlier."""
    until = job.launch_retry_at
    return until if until is not None and until > now else None


def estimated_starts(jobs: Iterable[Job], now: float, usable: Callable[[Job], Mapping[str, int]] | None = None,
                     free: Mapping[str, int] | None = None, grace_seconds: float = 0.0,
                     stops_asked: Mapping[str, float] | None = None,
                     not_before: Callable[[Job], Mapping[str, float]] | None = None,
                     kept_in: Collection[str] = ()) -> dict[str, float]:
    """Roughly when each queued job waiting for capacity starts: :func:`waits`' ``starts``."""
    return waits(jobs, now, usable, free, grace_seconds, stops_asked, not_before, kept_in).starts


def waits(jobs: Iterable[Job], now: float, usable: Callable[[Job], Mapping[str, int]] | None = None,
          free: Mapping[str, int] | None = None, grace_seconds: float = 0.0,
          stops_asked: Mapping[str, float] | None = None,
          not_before: Callable[[Job], Mapping[str, float]] | None = None,
          kept_in: Collection[str] = ()) -> Waits:
    """Roughly when each queued job waiting for capacity starts. Capacity is counted in units, a pool's
    slots or a zone's nodes: ``free`` now per pool or zone, and those that running, launching and placed
    jobs hold, handed back at their expected ends (a job being cancelled or stopped at the end of its stop's
    ``grace_seconds`` from ``stops_asked[job id]``, when its attempt was asked to stop: its slots are not free
    until its process is gone). In queue order, each job takes the units it needs
    (``usable(job)``: per pool or zone it may run in, how many; absent: any, one) where they come free
    earliest, and starts when the last of them does — in a zone blocked for it after its preemptions there
    no earlier than the block ends (``not_before(job)``: per pool or zone, from when it may take it), when the
    scheduler may place it there again; a job of 4 slots waits for as many slots as that to
    come free, not for one job to end. A queued job that says how long it runs (``expected_hours``) hands
    its units back at its own expected end, so jobs further back get an estimate too. A job gets no
    estimate when it waits for another reason (the spot policy, its budget: :func:`waits_for_capacity`), or when
    the units it needs come free only at ends nobody can tell: a job running past its ``expected_hours`` has no
    end to follow, and neither has one that gives neither a length nor a step total; those are its
    ``holders``, so that it can be told what it waits for rather than losing its estimate unsaid.

    A job waiting out a launch backoff (:func:`backoff_until`) starts no earlier than its backoff ends, wherever it
    may run, and gets an estimate whatever its reason says (that its launch failed, and when it tries again): then
    it waits for capacity like any other. Like a blocked zone, the backoff keeps its place in the queue here, while
    the scheduler hands capacity that comes free before the backoff ends to the jobs behind it: the estimates of
    those are rough the same way.

    In each of ``kept_in`` (the pools: :class:`broker.engine.schedule._Kept`) the first job that has to wait there is
    its head, and the units it will take are kept for it from now to its start. A job behind it starts on them before
    then only if its own expected length (:func:`work_left_seconds`) ends by that start — the one rule the scheduler
    lets it take them by — and hands them back as it ends: counted in strict order instead, such a job was estimated
    to start after the head, hours late, and told it would miss its deadline when it started at the next end.

    A head whose start cannot be told (the units it waits for are held until ends nobody can tell) keeps its pool as
    the scheduler keeps it: from the jobs behind that give no length — they get no start there, and its ``holders``
    name the head (``Holder.head``) — while a job behind that gives a length takes what comes free there; and from
    every job behind once the head has waited :data:`STARVED_SECONDS`. While the pool was full the scheduler's reason
    said only "full", and a job of no length behind such a head was estimated to start at the next end, which the
    scheduler would never let it take (and a job of a length behind it lost its estimate to it)."""
    jobs = list(jobs)
    held_ends: list[tuple[float, str | None, int]] = [(now, where, n) for where, n in (free or {}).items() if n > 0]
    unknown: list[Holder] = []  # capacity held until ends nobody can tell
    for j in jobs:
        if j.state is JobState.QUEUED:
            continue
        e = expected_end(j, now, grace_seconds, (stops_asked or {}).get(j.id))
        if e is not None:
            held_ends.append((e, j.placement.get("location"), held(j)))
        elif j.state in (JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING):
            unknown.append(_holder(j, now))
    held_ends.sort(key=lambda end: end[0])
    #: per pool or zone, the units that come free there: (from when, how many), earliest first (a tie in the order
    #: they were counted). One list for every location was scanned whole for each location of each queued job, and
    #: rebuilt whole at each take: O(queued x (running + queued)), on every read of a queued job
    ends: dict[str | None, list[tuple[float, int]]] = {}
    for end, where, n in held_ends:
        ends.setdefault(where, []).append((end, n))
    out = Waits()
    #: per pool with a head: (the head's start, the units it takes then: (free from, how many)), which a job behind
    #: may use until that start
    heads: dict[str, tuple[float, list[tuple[float, int]]]] = {}
    #: per set of locations (``None``: any), how many of ``unknown`` were looked at and those in them
    holders_in: dict[frozenset[str] | None, tuple[int, list[Holder]]] = {}
    #: per pool whose head's start cannot be told: the head (``Holder.head``), which keeps the pool from the jobs
    #: behind that give no length, and from every one once it is ``starved`` (:class:`broker.engine.schedule._Kept`)
    untold: dict[str, Holder] = {}
    #: the holders of a job kept off pools by their heads, per (locations, pools kept from it): shared as ``holders_in``
    kept_from: dict[tuple, tuple[int, list[Holder]]] = {}
    for job in ordered(jobs):
        retry = backoff_until(job, now)
        if retry is None and not waits_for_capacity(job):
            continue
        need = usable(job) if usable is not None else None
        after = not_before(job) if not_before is not None else {}
        if retry is not None:
            after = {where: max(retry, at) for where, at in after.items()}
        length = work_left_seconds(job)
        barred = sorted(where for where, head in untold.items()
                        if (length is None or head.starved) and (need is None or where in need))
        best: tuple[float, str | None, int] | None = None  # (start, where, units needed)
        told: set[str | None] = set()  # the locations where it gets a start
        for where in sorted(ends if need is None else need, key=str):
            if barred and where in barred:
                continue
            want, got = (1 if need is None else need[where]), 0
            for end, n in ends.get(where, ()):
                got += n
                if got >= want:
                    start = max(end, after.get(where, retry or now))
                    told.add(where)
                    if best is None or start < best[0]:
                        best = (start, where, want)
                    break
        if retry is None and (best is None or (best[0] > now and best[1] not in kept_in)):
            _head_untold(job, need, kept_in, heads, untold, told, ends, now)
        gap = _before_head(heads, need, after, retry or now, length) if length is not None else None
        if gap is not None and (best is None or gap[0] < best[0]):
            start, where, want = gap
            out.starts[job.id] = max(start, now)
            units = heads[where][1]
            _take(units, want, start)
            bisect.insort(units, (start + length, want))
            continue
        if best is None:
            # the holders in the locations it may use, kept per set of them as ``unknown`` grows: worked out anew for
            # each job without an estimate, it was a scan of every holder for each (queued x holders), and as many
            # lists, each then put in words
            where_ = None if need is None else frozenset(need)
            counted, mine = holders_in.get(where_, (0, []))
            if counted < len(unknown):
                new = [h for h in unknown[counted:] if need is None or h.location in need]
                holders_in[where_] = (len(unknown), mine + new if new else mine)
                mine = holders_in[where_][1]
            if barred:
                # the heads that keep their pools from it, then what holds the locations it may use
                key = (where_, tuple(barred))
                counted, listed = kept_from.get(key, (-1, []))
                if counted != len(unknown):
                    listed = [*(untold[where] for where in barred), *mine]
                    kept_from[key] = (len(unknown), listed)
                mine = listed
            if mine:
                out.holders[job.id] = mine
            continue
        start, where, want = best
        out.starts[job.id] = max(start, now)
        taken = _take(ends[where], want, start)
        if where in kept_in and where not in heads and where not in untold and start > now and retry is None:
            heads[where] = (start, sorted(taken))
        if job.expected_hours:
            bisect.insort(ends.setdefault(where, []), (start + float(Decimal(job.expected_hours) * 3600), want),
                          key=lambda e: e[0])
        else:
            unknown.append(Holder(job.id, where, ahead=True, team=job.team))
    return out


def _head_untold(job: Job, need: Mapping[str, int] | None, kept_in: Collection[str], heads: Mapping[str, object],
                 untold: dict[str, Holder], told: Collection[str | None],
                 ends: Mapping[str | None, list[tuple[float, int]]], now: float) -> None:
    """Make ``job``, which waits, the head of a kept pool it gets no start in (:func:`waits`), as the scheduler makes it
    (:func:`broker.engine.schedule._keep_pools`): of the pools it may use that have no head yet, the one with the most
    units free now (the earlier name on a tie), kept from every job behind once it has waited
    :data:`STARVED_SECONDS`. None where such a pool gives it a start (the scheduler keeps that one, by its start)."""
    pools = [p for p in (sorted(kept_in) if need is None else need)
             if p in kept_in and p not in heads and p not in untold]
    if not pools or any(p in told for p in pools):
        return

    def free(pool: str) -> int:
        n = 0
        for at, units in ends.get(pool, ()):
            if at > now:
                break
            n += units
        return n

    pool = min(pools, key=lambda p: (-free(p), p))
    starved = now - (job.queued_at or job.submitted_at) >= STARVED_SECONDS
    untold[pool] = Holder(job.id, pool, team=job.team, head=True, starved=starved)


def _before_head(heads: Mapping[str, tuple[float, list[tuple[float, int]]]], need: Mapping[str, int] | None,
                 after: Mapping[str, float], earliest: float, length: float) -> tuple[float, str, int] | None:
    """The earliest start (start, pool, units) a job of ``length`` seconds gets on the units kept for a pool's head
    before the head starts, ending by then (:func:`waits`); ``None`` where it gets none."""
    best = None
    for where in sorted(heads if need is None else heads.keys() & need.keys()):
        head_start, units = heads[where]
        want, got = (1 if need is None else need[where]), 0
        for at, n in units:
            got += n
            if got >= want:
                start = max(at, after.get(where, earliest))
                if start + length <= head_start and (best is None or start < best[0]):
                    best = (start, where, want)
                break
    return best


def _holder(job: Job, now: float) -> Holder:
    """A job holding capacity with no end to follow (:func:`expected_end` gives none): how far past its expected
    length it runs, when it runs past one."""
    where = job.placement.get("location")
    if job.state is JobState.RUNNING and job.running_since is not None and job.expected_hours:
        past = now - (job.running_since + float(Decimal(job.expected_hours) * 3600))
        if past >= 0:
            return Holder(job.id, where, overdue=past, expected_hours=job.expected_hours, team=job.team)
    return Holder(job.id, where, team=job.team)


def work_left_seconds(job: Job) -> float | None:
    """How long a queued job is expected to run once it starts: its ``expected_hours``, or for a job that has run
    before and reported a step total, the share of them after its last checkpoint (as the scheduler prices its
    next attempt, :func:`broker.engine.schedule.left_to_run`); ``None`` when it gives no length. A job that ran
    before with no step total (most jobs that do not report steps) is given its whole length, the most it has
    left: read as having no length, a resumed job of 36 s was kept off a pool's free GPU for a head starting
    minutes later, told "a job expected to end before then may still take it", while its end was counted at its
    whole length all the same (:func:`waits`)."""
    if not job.expected_hours:
        return None
    hours = Decimal(job.expected_hours)
    if not job.attempts:
        return float(hours * 3600)
    total = job.progress.get("total_steps")
    done = (job.last_checkpoint or {}).get("step") or 0
    if isinstance(total, int) and not isinstance(total, bool) and total > 0 and isinstance(done, int):
        return float(hours * 3600 * Decimal(max(total - done, 0)) / Decimal(total))
    return float(hours * 3600)


def _take(units: list[tuple[float, int]], want: int, start: float) -> list[tuple[float, int]]:
    """Take ``want`` units from one location's ``units`` (from when, how many; earliest first) at ``start``, the
    earliest first, in place: what the last end taken hands back beyond them stays, free from that end on. Those
    taken: (free from, how many). Only a prefix is touched — every unit free by ``start`` comes before any that is
    not — so a take costs what it takes, not the length of the list (rebuilt whole, it did, for every job)."""
    taken_: list[tuple[float, int]] = []
    i, rest = 0, None
    while want > 0 and i < len(units) and units[i][0] <= start:
        end, n = units[i]
        taken = min(n, want)
        want -= taken
        taken_.append((end, taken))
        rest = (end, n - taken) if n > taken else None
        i += 1
    units[:i] = [rest] if rest is not None else []
    return taken_
