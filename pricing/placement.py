"""Placement: pick the offer a job should run on now, or say in a sentence why none fits.

Pure: takes the request, the offers, free capacity, the budget left, blocked
zones and per-zone preemption risk, returns a :class:`Placement` or
:class:`NoFit`. The live broker's admission quote and its scheduler call this,
and so does the simulator.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from fnmatch import fnmatchcase
from decimal import ROUND_CEILING, Decimal

from pricing.catalog import GCP_N1_MEMORY_PER_CPU, LOCAL_DISK_CLOUDS, PRICED_CLOUDS
from pricing.money import Micros, cost_for_seconds, fmt, fmt_left, fmt_limit, fmt_rate
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier


@dataclass(frozen=True)
class Placement:
    """The chosen offer; ``price_per_hour`` covers all ``num_nodes``."""

    offer: Offer
    num_nodes: int = 1
    #: with ``ordered`` alternatives, the clause naming the cheapest offer of a later alternative that placement
    #: passed over for ``offer`` though it fit (:func:`_passed_over`), else empty: a placement that says only where it
    #: went never told a user who listed the alternatives in the wrong order
    note: str = ""

    @property
    def tier(self) -> Tier:
        return self.offer.tier

    @property
    def price_per_hour(self) -> Micros:
        return self.offer.price_per_hour * self.num_nodes


@dataclass(frozen=True)
class NoFit:
    """Nothing fits; ``reason`` is one sentence for a person."""

    reason: str


@dataclass(frozen=True)
class Limits:
    """Where this deployment may launch cloud instances, as its cloud role allows (the broker's ``instance_types`` and
    ``launch_regions`` settings): ``instance_types``, patterns an instance type must match (``fnmatchcase``, ``g5.*``;
    a GCP GPU offer, ``<host VM>+<GPU>:<count>``, by its whole name or its VM's), and ``launch_regions``, the regions it
    may launch in; empty: no limit. Both match case-sensitively, as the IAM ``StringLike`` conditions they mirror
    (``ec2:InstanceType``, ``aws:RequestedRegion``) do: ``G5.*`` allows no ``g5.xlarge`` there, so it must not here.
    Only cloud offers are held to them: a pool (on this host or a Kubernetes one) and a simulated zone (a process on
    this host) launch no cloud instance."""

    instance_types: tuple[str, ...] = ()
    launch_regions: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.instance_types or self.launch_regions)

    def type_allowed(self, instance_type: str) -> bool:
        """Whether ``instance_type`` matches one of :attr:`instance_types` (any, when none is given)."""
        if not self.instance_types:
            return True
        names = {instance_type, instance_type.split("+", 1)[0]}
        return any(fnmatchcase(name, pattern) for name in names for pattern in self.instance_types)

    def region_allowed(self, region: str) -> bool:
        """Whether ``region`` is one of :attr:`launch_regions`, exactly (any, when none is given)."""
        return not self.launch_regions or region in self.launch_regions

    def allows(self, offer: Offer) -> bool:
        """Whether ``offer`` is within the limits: a cloud offer whose instance type and region they allow, or an
        offer that is no cloud instance (a pool, a simulated zone)."""
        if offer.tier is Tier.ONPREM or offer.simulated:
            return True
        return self.type_allowed(offer.instance_type) and self.region_allowed(offer.region)


@dataclass(frozen=True)
class Barred(Offer):
    """A cloud offer of the price table outside the broker's :class:`Limits`, which its cloud role may not launch:
    never matched (:func:`matches`), so never quoted nor placed, but kept among the offers so that a job only such
    offers would fit is told which limit rules them out (:func:`_no_match`), not "no offer has ..."; placed there,
    its launch was refused by the cloud and the job requeued with zone cooldowns, tick after tick."""

    limits: Limits = Limits()


_OFFER_FIELDS = tuple(f.name for f in fields(Offer))


def barred(offer: Offer, limits: Limits) -> Barred:
    """``offer`` marked as outside ``limits`` (:class:`Barred`)."""
    return Barred(**{name: getattr(offer, name) for name in _OFFER_FIELDS}, limits=limits)


def within_limits(offers: Sequence[Offer], limits: Limits) -> tuple[Offer, ...]:
    """``offers``, each one ``limits`` do not allow marked :class:`Barred`; ``offers`` as they are without limits."""
    if not limits:
        return tuple(offers)
    return tuple(o if isinstance(o, Barred) or limits.allows(o) else barred(o, limits) for o in offers)


def sized_exactly(offer: Offer) -> bool:
    """Whether an exact size (``cpus: 16``, ``memory: 64``: no '+') holds ``offer`` to exactly that size: a cloud
    instance type, which the SkyPilot launcher pins and SkyPilot refuses when its vCPUs or memory differ from an
    exact size (``sky.Resources._try_validate_cpus_mem``). A pool (on this host or a Kubernetes one) is a share of
    a host, and a simulated zone a process on this host: neither is an instance type SkyPilot sizes, so a size
    is at least there, as it always was."""
    return offer.tier is not Tier.ONPREM and not offer.simulated


def _size_fits(have: Decimal | None, want: Decimal | None, exact: bool) -> bool:
    """An offer's vCPUs or memory against the size asked: unknown or not asked fits; else at least, or exactly."""
    if want is None or have is None:
        return True
    return have == want if exact else have >= want


def _gcp_host_fits(offer: Offer, want: ResourceRequest) -> bool:
    """A GCP GPU's ``n1-`` host (an offer with ``default_host_cpus``) against the task's sizes, as SkyPilot picks
    that host (``sky/catalog/gcp_catalog.py``, ``get_instance_type_for_accelerator``): neither ``cpus`` nor
    ``memory`` asked is at least the default vCPUs with 4 GiB each; ``cpus`` alone adds at least 4 GiB per vCPU
    asked; ``memory`` alone leaves the vCPUs free; both are taken as written."""
    cpus, memory = want.cpus, want.memory_gib
    if cpus is None and memory is None:
        least = Decimal(offer.default_host_cpus or 0)
        return (_size_fits(offer.vcpus, least, False)
                and _size_fits(offer.memory_gib, least * GCP_N1_MEMORY_PER_CPU, False))
    exact = sized_exactly(offer)
    if not _size_fits(offer.vcpus, cpus, exact and want.cpus_exact):
        return False
    if memory is None and cpus is not None:
        return _size_fits(offer.memory_gib, cpus * GCP_N1_MEMORY_PER_CPU, False)
    return _size_fits(offer.memory_gib, memory, exact and want.memory_exact)


def local_disk_fits(offer: Offer, want: ResourceRequest) -> bool:
    """Whether ``offer`` gives the local disk the shape asks (none asked: any). Only a cloud instance type whose
    local disk the price table knows can (:attr:`Offer.local_disk`), on a cloud where SkyPilot selects one
    (:data:`pricing.catalog.LOCAL_DISK_CLOUDS`), as SkyPilot checks the type the launcher pins
    (``sky.Resources._try_validate_local_disk``): one of unknown disk was placed, and its launch failed with
    "Specified instance type ... does not have specified local disk" after the job had waited its turn. A pool or a
    simulated zone is no instance type SkyPilot checks, and has no disk it can promise."""
    if want.local_disk is None:
        return True
    if offer.tier is Tier.ONPREM or offer.simulated or offer.cloud.lower() not in LOCAL_DISK_CLOUDS:
        return False
    return offer.local_disk is not None and offer.local_disk.satisfies(want.local_disk)


def matches(offer: Offer, want: ResourceRequest) -> bool:
    """Whether ``offer`` satisfies one resource shape. ``cpus`` and ``memory`` are at least, or exactly that size
    when the task wrote them without '+' and the offer is an instance type (:func:`sized_exactly`), as SkyPilot's
    catalog filters them: ``vCPUs == 16`` for ``cpus: 16``, ``>= 16`` for ``cpus: 16+``. A GCP GPU on an ``n1-``
    host is held to SkyPilot's rule for that host (:func:`_gcp_host_fits`) unless the task names the VM, which
    SkyPilot then takes as named (``sky.Resources._try_validate_cpus_mem``).

    A shape with no accelerator takes only cloud instance types that carry none: SkyPilot
    launches such a task on a CPU type of its default families, never on a GPU type that happens to have the size
    (``sky/clouds/aws.py``, ``_get_feasible_launchable_resources``: ``get_default_instance_type``), so a GPU type
    was a placement that paid for a GPU the job never asked for (``cpus: 4, memory: 16`` on the shipped AWS
    price table: a spot ``g4dn.xlarge`` and its T4). An instance type the task names is taken as named; a CPU job
    never takes a pool's GPU slot (here, so that the sentence of a job no offer fits sees the pool, and says why:
    :func:`_gpu_pools_text`); a simulated zone (a process on this host) takes any job. A ``local_disk`` asked is
    given only by an instance type known to have it (:func:`local_disk_fits`). An offer outside the broker's limits
    (:class:`Barred`) matches nothing."""
    return not isinstance(offer, Barred) and _shape_fits(offer, want)


def _shape_fits(offer: Offer, want: ResourceRequest) -> bool:
    """Whether ``offer`` has the shape ``want`` asks, whatever the broker's limits (:func:`matches`)."""
    if want.accelerator is not None:
        if offer.accelerator is None or offer.accelerator.lower() != want.accelerator.lower():
            return False
        if offer.accelerator_count != max(want.accelerator_count, 1):
            return False  # exactly the count asked, as SkyPilot's catalog lookup matches it: A100:1 is not 8 A100s
    elif offer.accelerator is not None and (offer.tier is Tier.ONPREM or want.instance_type is None
                                            and sized_exactly(offer)):
        return False  # no GPU asked: never a pool's GPU slot, nor an instance type that carries one
    if offer.default_host_cpus is not None and want.instance_type is None:
        if not _gcp_host_fits(offer, want):
            return False
    elif want.cpus_exact or want.memory_exact:
        exact = sized_exactly(offer)
        if not _size_fits(offer.vcpus, want.cpus, exact and want.cpus_exact):
            return False
        if not _size_fits(offer.memory_gib, want.memory_gib, exact and want.memory_exact):
            return False
    else:  # at least, or no size: two comparisons, as every offer of the table goes through here
        if want.cpus is not None and offer.vcpus is not None and offer.vcpus < want.cpus:
            return False
        if want.memory_gib is not None and offer.memory_gib is not None and offer.memory_gib < want.memory_gib:
            return False
    if want.use_spot is True and offer.tier is not Tier.SPOT:
        return False
    if want.use_spot is False and offer.tier is Tier.SPOT:
        return False
    if want.cloud is not None or want.region is not None or want.zone is not None:
        for attr in ("cloud", "region", "zone"):
            wanted = getattr(want, attr)
            if wanted is not None and str(getattr(offer, attr)).lower() != str(wanted).lower():
                return False
    if want.instance_type is not None:
        # a GCP GPU offer is named <host VM>+<GPU>:<count>: a task names the VM, as SkyPilot takes it
        names = {offer.instance_type.lower(), offer.instance_type.split("+", 1)[0].lower()}
        if want.instance_type.lower() not in names:
            return False
    return want.local_disk is None or local_disk_fits(offer, want)


def candidates(request: JobRequest, offers: Sequence[Offer]) -> list[Offer]:
    """Offers matching any alternative of the request and its allowed tiers."""
    tiers, alternatives = request.allowed_tiers, request.alternatives
    if len(alternatives) == 1:  # the common case, without a generator per offer
        alt, = alternatives
        return [o for o in offers if o.tier in tiers and matches(o, alt)]
    return [o for o in offers if o.tier in tiers and any(matches(o, alt) for alt in alternatives)]


def under_cap(request: JobRequest, offers: Sequence[Offer]) -> list[Offer]:
    """The offers at or under the job's ``max_price_per_hour``, for all its nodes (every one without a cap)."""
    cap, n = request.max_price_per_hour, request.num_nodes
    return [o for o in offers if cap is None or o.price_per_hour * n <= cap]


def _for_all(n: int) -> str:
    """`` for both`` / `` for all 3`` after a price of several nodes' (a placement's words)."""
    return "" if n <= 1 else " for both" if n == 2 else f" for all {n}"


def cap_for_all(n: int) -> str:
    """What a job of several nodes is told of its ``max_price_per_hour``: a cap on all of its nodes together, not on
    each (a 2-node job capped at $0.50, told a $0.4246/h instance "costs $0.8492/h, over" it, could not tell why)."""
    return "" if n <= 1 else f", a cap on {'both' if n == 2 else f'all {n}'} nodes together"


def holds(offer: Offer, num_nodes: int) -> bool:
    """Whether ``offer``'s location ever has ``num_nodes`` nodes: a simulated zone has its ``nodes`` and no more
    (:attr:`Offer.max_nodes`); a cloud region has no known limit. A job of more nodes than a zone has waited there
    for ever, "full right now"."""
    return offer.max_nodes is None or offer.max_nodes >= num_nodes


def nodes_shortfall(request: JobRequest, offers: Sequence[Offer]) -> str | None:
    """Why no offer of the job's shape can ever hold its ``num_nodes``: ``the largest zone it may use, sim-a, has
    4 nodes``; ``None`` when one can, or when none has its shape (that is :func:`place`'s to say)."""
    matching = candidates(request, offers)
    if not matching or any(holds(o, request.num_nodes) for o in matching):
        return None
    largest = min(matching, key=lambda o: (-(o.max_nodes or 0), o.location))  # only zones have a limit
    which = "the only zone it may use" if len({o.location for o in matching}) == 1 else "the largest zone it may use"
    most = largest.max_nodes or 0
    return f"{which}, {largest.location}, has {most} node{'s' if most != 1 else ''}"


def cloud_block(cloud: str) -> str:
    """The entry of a job's blocked zones that blocks a whole cloud (``cloud:aws``): a launch there was refused for want
    of access to it (or of SkyPilot's support for it), which another zone of it would meet as well."""
    return f"cloud:{cloud}"


@dataclass(frozen=True)
class Blocked:
    """What happened in a zone (or pool, or a cloud: :func:`cloud_block`) that is blocked for a job, as far as is
    known: how many of its runs there were preempted, lost their node or went silent, and how many of its launches
    there were refused. All 0: not known (only the zone's name was given), said as :data:`UNKNOWN_CAUSE`."""

    preemptions: int = 0
    lost: int = 0
    silent: int = 0
    refused: int = 0

    @property
    def known(self) -> bool:
        """Whether anything is known of why the zone is blocked."""
        return any((self.preemptions, self.lost, self.silent, self.refused))

    def words(self, where: str = "there") -> str:
        """``a preemption there``, ``2 preemptions and a refused launch in each``; :data:`UNKNOWN_CAUSE` when
        nothing is known."""
        said = [_counted(self.preemptions, "preemption"), _counted(self.lost, "lost node"),
                _counted(self.silent, "run that went silent", "runs that went silent"),
                _counted(self.refused, "refused launch", "refused launches")]
        return f"{_series(said)} {where}" if self.known else UNKNOWN_CAUSE


UNKNOWN_CAUSE = "recent preemptions or refused launches"
"""What blocked a zone, where :class:`Blocked` does not say: the only ways a zone gets blocked for a job."""

BLOCKED_WORDS = ("is blocked for this job", "are blocked for this job")
"""Every sentence :func:`place` says of zones blocked for the job holds one of these (and nothing else it says
does): what tells a job waiting for a block to end, which gets a start estimate (``broker.queue.WAITS_FOR_CAPACITY``),
from one waiting for anything else, whatever the cause the sentence names."""


def _counted(n: int, one: str, many: str | None = None) -> str:
    """``a preemption``, ``2 preemptions``; empty for 0."""
    if n <= 0:
        return ""
    return f"{'an' if one[0] in 'aeiou' else 'a'} {one}" if n == 1 else f"{n} {many or one + 's'}"


def block_of(offer: Offer, blocked_zones: Collection[str] | Mapping[str, Blocked]) -> tuple[str, Blocked] | None:
    """The entry of ``blocked_zones`` that blocks ``offer`` — its location's, else its cloud's (:func:`cloud_block`) —
    and what is known of why (an empty :class:`Blocked` where only the names are given); ``None``: not blocked."""
    for key in (offer.location, cloud_block(offer.cloud)):
        if key in blocked_zones:
            cause = blocked_zones.get(key) if isinstance(blocked_zones, Mapping) else None
            return key, cause if isinstance(cause, Blocked) else Blocked()
    return None


def blocked_words(offers: Sequence[Offer], blocked_zones: Collection[str] | Mapping[str, Blocked],
                  *, verb: bool = True) -> str:
    """The zones (and pools) of ``offers`` that ``blocked_zones`` blocks, each with what happened there:
    ``zone us-east-1a is blocked for this job after a preemption there, zones us-east-1b and us-east-1c after a
    refused launch in each``; zones blocked with their whole cloud, ``… after a refused launch in aws``; where the
    cause is not known, :data:`UNKNOWN_CAUSE`. Without ``verb``, the places and causes only (``zone us-east-1a after a
    preemption there``), for a sentence that says they are blocked itself."""
    groups: dict[tuple[str, Blocked], list[Offer]] = {}
    for o in offers:
        found = block_of(o, blocked_zones)
        if found is not None:
            key, cause = found
            groups.setdefault((key if key == cloud_block(o.cloud) else "", cause), []).append(o)
    said = []
    for (cloud, cause), group in sorted(groups.items(), key=lambda g: (not g[0][1].known,
                                                                         min(o.location for o in g[1]))):
        many = len({o.location for o in group}) > 1
        where = f"in {cloud.removeprefix('cloud:')}" if cloud else "in each" if many else "there"
        places = _places(group) if verb and not said else _places(group, verb=False)
        said.append(f"{places}{' blocked for this job' if verb and not said else ''} after {cause.words(where)}")
    return ", ".join(said)


def unblocked(offers: Sequence[Offer], blocked_zones: Collection[str] | Mapping[str, Blocked]) -> list[Offer]:
    """The offers not in a zone (or pool: an offer's ``location``) blocked for the job after a preemption there (or a
    launch refused there for want of capacity), nor in a cloud blocked for it (:func:`cloud_block`)."""
    return [o for o in offers if o.location not in blocked_zones and cloud_block(o.cloud) not in blocked_zones]


TIER_ORDER = {Tier.ONPREM: 0, Tier.ONDEMAND: 1, Tier.SPOT: 2}
"""Tie-break among equal effective prices: the more reliable tier first."""


def effective_price(offer: Offer, num_nodes: int, preemption_risk: Mapping[str, Decimal]) -> Decimal:
    """$/h for all nodes, a spot offer's raised by its zone's preemption risk.

    ``preemption_risk[zone]`` is the expected fraction of extra time a spot run
    there loses to preemptions (changeovers and lost work): 0.1 makes a $1/h
    spot offer rank as $1.10/h. Reliable tiers carry no risk.
    """
    hourly = Decimal(offer.price_per_hour * num_nodes)
    if offer.tier is Tier.SPOT:
        hourly *= 1 + max(preemption_risk.get(offer.location, Decimal(0)), Decimal(0))
    return hourly


def place(
    request: JobRequest,
    offers: Sequence[Offer],
    *,
    free_capacity: Mapping[str, int] | None = None,
    budget_left: Micros | None = None,
    blocked_zones: Collection[str] | Mapping[str, Blocked] = frozenset(),
    preemption_risk: Mapping[str, Decimal] | None = None,
    min_run_seconds: int = 0,
    after_run_seconds: Mapping[Offer, int] | None = None,
    placed_again: bool = False,
) -> Placement | NoFit:
    """Choose where the job runs now.

    ``min_run_seconds``: what a start must be able to pay for (the broker's clean stop: the grace
    period and the ticks to see the end); with ``placed_again``, what a job that has run before must pay
    for instead, a minute's run and a clean stop, as the sentence of a budget short of it says
    (:func:`start_words`). ``after_run_seconds[offer]``: what an attempt on that offer
    is billed after its run ends — a cloud cluster's idle minutes before autodown and its teardown —
    which its launcher keeps out of the budget before the run may start (an offer missing from it is
    billed nothing after its run: a pool or simulated zone on this host).

    Steps, each of which may end in a :class:`NoFit` naming why:

    1. offers of the requested shape (any ``any_of`` alternative, explicit
       cloud/region/zone/instance type) on an allowed tier, in a location that ever has
       ``num_nodes`` nodes (:func:`holds`);
    2. at or under ``max_price_per_hour`` (all nodes);
    3. not in a zone (or pool) blocked for this job after a preemption or a refused launch there — ``blocked_zones``,
       the names, or a mapping of each to what is known of why (:class:`Blocked`), which the sentence then says
       (:func:`blocked_words`: "after 2 preemptions there", "after a refused launch there");
    4. capacity the job can actually get now: ``free_capacity`` maps an offer's
       ``location`` to free nodes (a full on-prem pool is not a choice); a
       location missing from it is taken as unconstrained (a cloud region);
    5. within ``budget_left``: spent means nothing fits; the budget must pay for ``min_run_seconds``
       (with ``expected_hours``, the offer's estimate) *plus* the offer's ``after_run_seconds`` — else
       a cloud offer whose after-run billing eats the budget would be chosen over a pool that can
       run, and its launcher would stop it before it starts;
    6. with ``ordered`` alternatives (SkyPilot's ``resources.ordered``), the earliest alternative that
       still has an offer after steps 1–5; then the lowest :func:`effective_price` — with
       ``expected_hours``, the lowest estimate for the whole run: that price for the hours plus the
       offer's billing after its run —, then the more reliable tier, then name; a cheaper offer of a later
       ``ordered`` alternative that fit is named in :attr:`Placement.note`.
    """
    free_capacity = free_capacity or {}
    preemption_risk = preemption_risk or {}
    n = request.num_nodes
    matching = candidates(request, offers)
    if not matching:
        return NoFit(_no_match(request, offers))
    too_few = nodes_shortfall(request, matching)
    if too_few is not None:
        return NoFit(f"it asks for {n} nodes, but {too_few}")
    matching = [o for o in matching if holds(o, n)]
    priced = under_cap(request, matching)
    if not priced:
        cheapest = min(matching, key=lambda o: o.price_per_hour)
        return NoFit(
            f"the cheapest match, {cheapest.describe()}{f', {n} nodes' if n > 1 else ''}, costs "
            f"{_price_over(cheapest.price_per_hour * n, request.max_price_per_hour or 0)}/h{_for_all(n)}, "
            f"over the job's max_price_per_hour of {fmt_limit(request.max_price_per_hour or 0)}{cap_for_all(n)}"
        )
    allowed = unblocked(priced, blocked_zones)
    over = (f"the rest are over the job's max_price_per_hour of {fmt_limit(request.max_price_per_hour or 0)}"
            if len(priced) < len(matching) else "")
    if not allowed:
        if over:
            return NoFit(f"{blocked_words(priced, blocked_zones)} and {over}")
        if not any(block_of(o, blocked_zones)[1].known for o in priced):  # nothing known of why any is blocked
            return NoFit(f"every matching zone is blocked for this job after {UNKNOWN_CAUSE}")
        return NoFit(f"every matching zone is blocked for this job: {blocked_words(priced, blocked_zones, verb=False)}")
    available = [o for o in allowed if free_capacity.get(o.location, n) >= n]
    if not available:
        blocked = [o for o in priced if o not in allowed]
        return NoFit(_series([f"{_places(allowed)} full right now",
                              blocked_words(blocked, blocked_zones) if blocked else "", over]))
    if budget_left is not None:
        if budget_left <= 0:
            return NoFit(f"the budget left, {fmt_left(budget_left)}, is spent")
        affordable = _affordable(request, available, budget_left, min_run_seconds, after_run_seconds or {},
                                 placed_again=placed_again)
        if isinstance(affordable, NoFit):
            # a full pool (or zone) the budget covers is what the job waits for: told only that the free offers
            # were over its budget, its user was pushed to raise a budget that sufficed
            full = [o for o in allowed if o not in available]
            covered = _affordable(request, full, budget_left, min_run_seconds, after_run_seconds or {},
                                  placed_again=placed_again) if full else []
            if not isinstance(covered, NoFit) and covered:
                return NoFit(_full_within_budget(covered, affordable))
            return affordable
        available = affordable
    def preference(o: Offer) -> int:
        return alternative_rank(request, o)

    after = after_run_seconds or {}

    def cost(o: Offer) -> Decimal:
        # with the job's length known, what the whole run costs: a cloud cluster's billing after its
        # run can make a cheaper $/h the dearer choice (a 1 h job: $1.00/h + 15 min idle > a $1.20/h pool)
        hourly = effective_price(o, n, preemption_risk)
        if request.expected_hours is None:
            return hourly
        return hourly * request.expected_hours + Decimal(o.price_per_hour * n * after.get(o, 0)) / 3600

    def rank(o: Offer) -> tuple:
        return cost(o), TIER_ORDER[o.tier], o.cloud, o.location, o.instance_type

    best = min(available, key=lambda o: (preference(o), *rank(o)))
    # with ``ordered``, the cheapest offer of a later alternative that fits, by placement's own measure
    cheaper = min((o for o in available if preference(o) > preference(best) and cost(o) < cost(best)),
                  key=rank, default=None)
    return Placement(offer=best, num_nodes=n,
                     note=_passed_over(cheaper, request, cost(cheaper)) if cheaper is not None else "")


def _full_within_budget(covered: Sequence[Offer], free: NoFit) -> str:
    """Why a job waits whose budget covers only offers that have no room now (``covered``), where ``free`` says why it
    covers none of the free ones: ``the pool dgx is busy right now, and it is what the budget covers: the budget left,
    $0.0060, does not cover 0.01 h and a clean stop (10 s) on the cheapest free match, ondemand …``. Not "full", the
    word the queue gives a start estimate by (``broker.queue.WAITS_FOR_CAPACITY``): that estimate counts every offer
    the job may take whatever its budget, the free one over it too, and said "starts now", tick after tick."""
    one = len({o.location for o in covered}) == 1
    return (f"{_places(covered)} busy right now, and {'it is' if one else 'they are'} what the budget covers: "
            f"{free.reason}")


def _passed_over(offer: Offer, request: JobRequest, cost: Decimal) -> str:
    """The clause a placement of ``ordered`` alternatives adds when ``offer``, of a later alternative, fit and cost
    less (``cost``: placement's measure, the whole run's estimate with ``expected_hours``): ``; spot 1x A10G A10Gx1
    in aws/us-east-2a at $0.1389/h is cheaper but comes later in `ordered```."""
    if request.expected_hours is None:
        figure = f"at {fmt_rate(offer.price_per_hour * request.num_nodes)}/h"
    else:
        estimate = int(cost.to_integral_value(rounding=ROUND_CEILING))  # rounded up, as the quote's estimates are
        figure = f"estimated at {fmt(estimate)} for {request.expected_hours} h"
    return f"; {offer.describe()} {figure} {LATER_IN_ORDERED}"


LATER_IN_ORDERED = "is cheaper but comes later in `ordered`"
"""How :func:`_passed_over`'s clause ends, the last of a placement's sentence: what tells a reader of the sentence (the
CLI's dry run, adding the placement's price) where the offer placed on ends and the one passed over begins."""


def alternative_rank(request: JobRequest, offer: Offer) -> int:
    """With ``ordered`` alternatives, the index of the first one ``offer`` matches (placement takes the earliest that
    has an offer it may take); 0 for every offer otherwise."""
    return next(i for i, alt in enumerate(request.alternatives) if matches(offer, alt)) if request.ordered else 0


def start_words(min_run_seconds: int, *, placed_again: bool = False) -> str:
    """What a start must pay for, in a sentence: ``a start and a clean stop (64 s)``; for a job placed again (after a
    preemption, a lost node, a resume), held to more than a first start, ``a minute's run and a clean stop (61 s, as a
    job placed again must)``."""
    if placed_again:
        return f"a minute's run and a clean stop ({min_run_seconds} s, as a job placed again must)"
    return f"a start and a clean stop ({min_run_seconds} s)"


def _run_seconds(request: JobRequest, min_run_seconds: int = 0, *, placed_again: bool = False) -> Decimal:
    """The run a start must be able to pay for: without ``expected_hours``, ``min_run_seconds`` (a start and a clean
    stop); with it, the expected length and the clean stop after it, as the quote's :meth:`~pricing.quote.Quote.fits`
    and the submit weigh it — the engine stops a job once what is left pays only for that stop, so a budget of the
    run alone on spot was placed there and stopped just short of its end, while the pool it did cover came free
    seconds later. A job placed again is held to ``min_run_seconds`` of its own (a minute's run and a clean stop,
    shortened to the run left: :func:`broker.engine.budget.rerun_for`), which counts part of its run already, so its
    run is never less than that, as before."""
    if request.expected_hours is None:
        return Decimal(min_run_seconds)
    if placed_again:
        return max(request.expected_hours * 3600, Decimal(min_run_seconds))
    return request.expected_hours * 3600 + min_run_seconds


def start_shortfall(request: JobRequest, offers: Sequence[Offer], budget: Micros, *, min_run_seconds: int,
                    after_run_seconds: Mapping[Offer, int] | None = None, placed_again: bool = False) -> str | None:
    """Why ``budget`` can start the job on none of ``offers``, whatever their capacity — it would be
    stopped at once (a cloud cluster's launcher would launch none) — or ``None`` when it can start on one.
    A start pays for ``min_run_seconds`` (a start and a clean stop) and the offer's billing after its
    run. Only offers at or under the job's ``max_price_per_hour`` count: one over it is never taken, so
    a budget that pays only for such offers can start nothing. Capacity and blocked zones do not count:
    they pass, a budget does not grow by itself. The words follow "the budget of $X": ``cannot pay
    for a start and a clean stop (36 s) ...`` (``placed_again``: :func:`start_words`)."""
    after = after_run_seconds or {}
    n = request.num_nodes
    cap = request.max_price_per_hour
    offers = [o for o in offers if holds(o, n)]  # a zone too small for the job is never a start it could pay for
    priced = under_cap(request, offers)
    run = {o: cost_for_seconds(o.price_per_hour * n, min_run_seconds) for o in offers}
    total = {o: cost_for_seconds(o.price_per_hour * n, min_run_seconds + after.get(o, 0)) for o in offers}
    if not priced or any(total[o] <= budget for o in priced):
        return None  # nothing under the cap at all is placement's to say (:func:`place`), not the budget's
    over_cap = [o for o in offers if o not in priced and total[o] <= budget]
    beyond = (f" (it could pay for {min(over_cap, key=lambda x: total[x]).describe()}, over the job's "
              f"max_price_per_hour of {fmt(cap or 0)})") if over_cap else ""
    text = f"cannot pay for {start_words(min_run_seconds, placed_again=placed_again)}"
    held_back = [o for o in priced if run[o] <= budget]  # ruled out by their billing after the run alone
    if held_back:
        o = min(held_back, key=lambda x: (total[x], *_cheapest_rank(x, n, min_run_seconds + after.get(x, 0))))
        return (f"{text} and the billing after its run on any offer: on the cheapest, {o.describe()}, that is "
                f"{fmt(run[o])} and {fmt(total[o] - run[o])} for {billed_after_run(o)} {duration_text(after[o])} "
                f"of billing after its run{beyond}")
    cheapest = min(priced, key=lambda o: (o.price_per_hour, total[o], *_cheapest_rank(o, n, min_run_seconds)))
    return (f"{text} on any offer: the cheapest, {cheapest.describe()}, costs {fmt_rate(cheapest.price_per_hour * n)}/h"
            f"{beyond}")


def _cheapest_rank(offer: Offer, num_nodes: int, seconds: int | Decimal) -> tuple:
    """How a sentence's "the cheapest" breaks a tie of rounded figures, as :func:`place` ranks offers: the exact cost
    of ``seconds`` on ``offer`` (micro-dollars rounded up made $21.957642/h and $21.957640/h the same figure, and the
    sentence named the dearer zone, not the one placement took), then the more reliable tier, cloud, location and
    instance type."""
    exact = Decimal(offer.price_per_hour * num_nodes) * Decimal(seconds) / 3600
    return exact, offer.price_per_hour, TIER_ORDER[offer.tier], offer.cloud, offer.location, offer.instance_type


def least_start_budget(request: JobRequest, offers: Sequence[Offer], *, min_run_seconds: int,
                       after_run_seconds: Mapping[Offer, int] | None = None) -> Micros | None:
    """The least budget :func:`start_shortfall` lets start the job on one of ``offers`` (those at or under its
    ``max_price_per_hour`` whose location holds its nodes): the least of ``min_run_seconds`` and the offer's billing
    after its run, as it weighs them, in micro-dollars rounded up; ``None`` when no offer counts."""
    after = after_run_seconds or {}
    n = request.num_nodes
    priced = under_cap(request, [o for o in offers if holds(o, n)])
    return min((cost_for_seconds(o.price_per_hour * n, min_run_seconds + after.get(o, 0)) for o in priced),
               default=None)


CLOUD_NAMES = {"aws": "AWS", "gcp": "GCP", "azure": "Azure", "oci": "OCI", "ibm": "IBM", "lambda": "Lambda",
               "kubernetes": "Kubernetes"}
"""How a sentence names an offer's ``cloud``."""


def billed_after_run(offer: Offer) -> str:
    """What bills an attempt on ``offer`` after its run, for a sentence: ``an AWS cluster's``, ``a GCP
    cluster's``, ``a Kubernetes pool's`` (a pool reached through SkyPilot: its pods autodown too)."""
    return f"{what_runs(offer.cloud, offer.tier, simulated=offer.simulated)}'s"


def what_runs(cloud: str, tier: Tier, *, simulated: bool = False) -> str:
    """What an attempt on ``cloud`` and ``tier`` runs on, for a sentence: ``an AWS cluster``, ``a GCP
    cluster``, ``a Kubernetes pool``, ``a pool`` (one on this host), ``a simulated AWS zone``."""
    name = CLOUD_NAMES.get(cloud.lower(), cloud)
    if simulated:
        what = f"simulated {name} zone"
    elif tier is Tier.ONPREM:
        what = f"{name} pool" if cloud.lower() != "local" else "pool"
    else:
        what = f"{name} cluster"
    spoken_vowel = what[0] in "AEIOUaeiou" or (what.split()[0].isupper() and what[0] in "FHLMNRSX")
    return f"{'an' if spoken_vowel else 'a'} {what}"


def budget_shortfall(request: JobRequest, offers: Sequence[Offer], budget_left: Micros, *, min_run_seconds: int,
                     after_run_seconds: Mapping[Offer, int] | None = None) -> str | None:
    """Why ``budget_left`` pays for the job on none of ``offers`` (under its price cap), as :func:`place` weighs it
    whatever their capacity, or ``None`` when it pays for one: what a pin to a tier checks before the job is held
    to offers it could then never take."""
    got = _affordable(request, under_cap(request, offers), budget_left, min_run_seconds, after_run_seconds or {})
    return got.reason if isinstance(got, NoFit) else None


def _affordable(request: JobRequest, offers: Sequence[Offer], budget_left: Micros, min_run_seconds: int,
                after_run: Mapping[Offer, int], *, placed_again: bool = False) -> list[Offer] | NoFit:
    """The offers whose run (:func:`_run_seconds`) and billing after it the budget left pays for, or why none
    (``placed_again``: the run named as :func:`start_words` names it)."""
    n = request.num_nodes
    seconds = _run_seconds(request, min_run_seconds, placed_again=placed_again)
    run = {o: cost_for_seconds(o.price_per_hour * n, seconds) for o in offers}
    total = {o: cost_for_seconds(o.price_per_hour * n, seconds + after_run.get(o, 0)) for o in offers}
    affordable = [o for o in offers if total[o] <= budget_left]
    if affordable or not offers:
        return affordable
    # with expected_hours, the clean stop after the run is part of what it must cover (:func:`_run_seconds`)
    stopped = request.expected_hours is not None and not placed_again and min_run_seconds > 0
    what = (f"{request.expected_hours} h" + (f" and a clean stop ({min_run_seconds} s)" if stopped else "")
            if request.expected_hours is not None else start_words(min_run_seconds, placed_again=placed_again))
    # the billing after the run is what rules out an offer whose run alone the budget would pay for
    held_back = [o for o in offers if after_run.get(o, 0) > 0 and run[o] <= budget_left]
    if held_back:
        o = min(held_back, key=lambda x: (total[x], *_cheapest_rank(x, n, seconds + after_run.get(x, 0))))
        return NoFit(
            f"the budget left, {fmt_left(budget_left)}, cannot pay {billed_after_run(o)} {duration_text(after_run[o])} of "
            f"billing after its run on the cheapest free match, {o.describe()}: {fmt(total[o] - run[o])}"
            + (f" on top of {fmt(run[o])} for {what}" if run[o] else "")
        )
    o = min(offers, key=lambda x: (total[x], *_cheapest_rank(x, n, seconds + after_run.get(x, 0))))
    after = (f" and {fmt(total[o] - run[o])} for {billed_after_run(o)} billing after its run"
             if after_run.get(o, 0) > 0 else "")
    if request.expected_hours is not None:
        # the run's estimate as the quote says it, then what the budget must cover beyond it
        alone = cost_for_seconds(o.price_per_hour * n, request.expected_hours * 3600) if stopped else run[o]
        beyond = [f"{fmt(run[o] - alone)} for the stop" if run[o] > alone else "",
                  f"{fmt(total[o] - run[o])} for {billed_after_run(o)} billing after its run"
                  if after_run.get(o, 0) > 0 else ""]
        plus = f", plus {_series(beyond)}" if beyond[0] else f" and {beyond[1]}" if beyond[1] else ""
        return NoFit(f"the budget left, {fmt_left(budget_left)}, does not cover {what} on the cheapest free match, "
                     f"{o.describe()}, estimated at {fmt(alone)}{plus}")
    return NoFit(f"the budget left, {fmt_left(budget_left)}, cannot pay for {what} on the cheapest free match, "
                 f"{o.describe()}, which costs {fmt(run[o])}{after}")


def _places(offers: Sequence[Offer], verb: bool = True) -> str:
    """The pools and zones of ``offers`` for a sentence, with its verb: ``the pool lab is``, ``zones
    us-east-1a and us-east-1b are``; past four, ``and N more``. Without ``verb``: ``zones us-east-1a and
    us-east-1b``."""
    pools = sorted({o.location for o in offers if o.tier is Tier.ONPREM})
    zones = sorted({o.location for o in offers if o.tier is not Tier.ONPREM})

    def listed(names: list[str]) -> str:
        return _series(names[:4] + ([f"{len(names) - 4} more"] if len(names) > 4 else []))

    words = [f"{'the pool' if len(pools) == 1 else 'pools'} {listed(pools)}" if pools else "",
             f"{'zone' if len(zones) == 1 else 'zones'} {listed(zones)}" if zones else ""]
    named = " and ".join(w for w in words if w)
    return f"{named} {'is' if len(pools) + len(zones) == 1 else 'are'}" if verb else named


def _series(items: Sequence[str], last: str = "and") -> str:
    """``a, b and c`` of the non-empty ``items`` (``a or b`` with ``last="or"``)."""
    items = [i for i in items if i]
    return ", ".join(items[:-1]) + f" {last} " + items[-1] if len(items) > 1 else "".join(items)


def duration_text(seconds: int) -> str:
    """``900`` → ``15 minutes`` (a length in a sentence); seconds when not whole minutes."""
    if seconds % 60:
        return f"{seconds} s"
    return f"{seconds // 60} minute{'s' if seconds != 60 else ''}"


def _price_over(price: Micros, cap: Micros) -> str:
    """A price over a cap the user set (shown exactly, :func:`fmt_limit`), as a cost is shown (:func:`fmt`), or
    exactly where that would read as the cap: a $1.006 price over a $1.005 cap read "$1.01 over $1.01"."""
    return fmt_limit(price) if fmt(price) == fmt(cap) else fmt(price)


def why_no_offer(request: JobRequest, offers: Sequence[Offer]) -> str:
    """Why none of ``offers`` has the shape ``request`` asks (the submit's own words: "no offer has 1x A100
    (accelerators offered: A10G)")."""
    return _no_match(request, offers)


def _no_match(request: JobRequest, offers: Sequence[Offer]) -> str:
    """Why no offer has the shape asked. When the shape is there but not of the exact size asked (``cpus: 16``:
    every type with the GPUs asked has 8 or 32 vCPUs), it says so and how to ask for at least that size; when the
    shape is there but not with the local disk asked, it says what the price table knows of local disks. When only
    offers outside the broker's limits (:class:`Barred`) have it, it names the limit that rules them out
    (:func:`_barred_text`); else those offers are not spoken of, as they are not there to be taken."""
    if any(isinstance(o, Barred) for o in offers):
        outside = _barred_text(request, [o for o in offers if isinstance(o, Barred)])
        if outside:
            return outside
        offers = [o for o in offers if not isinstance(o, Barred)]
    if any(alt.local_disk for alt in request.alternatives):
        fits = candidates(without_local_disk(request), offers)
        if fits:
            return _local_disk_text(request, fits, offers)
    held = _host_memory_text(request, offers)
    if held:
        return held
    if any(alt.cpus_exact or alt.memory_exact for alt in request.alternatives) \
            and candidates(_loosened(request, ("cpus", "memory")), offers):
        return _exact_size_text(request, offers)
    return f"no offer has {_describe_request(request)}{_what_there_is(request, offers)}"


def _barred_text(request: JobRequest, outside: Sequence[Barred]) -> str | None:
    """Why a job has no offer when offers outside the broker's limits (``outside``) would fit it: each limit that rules
    them out, named as its setting, with what it allows — ``no offer this broker may launch has 1+ vCPUs: m6i.2xlarge
    is outside this broker's instance_types (g5.*, p4d.*); the cheapest that has it is spot CPU m6i.2xlarge in
    aws/us-east-1a``: the limit one of them is kept out by alone, or, where each is outside both, both. ``None``
    when none of them would fit either (the sentence is then the shape's). It was "would be
    placed on spot CPU m6i.2xlarge", whose launch the cloud role refused, or a bare "no offer has ..."."""
    tiers = request.allowed_tiers
    fits = [o for o in outside if o.tier in tiers and holds(o, request.num_nodes)
            and any(_shape_fits(o, alt) for alt in request.alternatives)]
    if not fits:
        return None
    fits.sort(key=lambda o: (o.price_per_hour, TIER_ORDER[o.tier], o.cloud, o.location, o.instance_type))
    limits = fits[0].limits
    # the offers one setting alone keeps out (widened, it lets them in) are what to name; only where every one is
    # outside both, both for all (a CPU task under GPU-only instance_types was told of the regions too, where the
    # instance types it may launch have no CPU type in any region)
    alone = [o for o in fits if limits.type_allowed(o.instance_type) != limits.region_allowed(o.region)] or fits
    fits = alone
    said = []
    types = list(dict.fromkeys(o.instance_type for o in fits if not limits.type_allowed(o.instance_type)))
    if types:
        said.append(f"{_listed(types)} {'is' if len(types) == 1 else 'are'} outside this broker's instance_types "
                    f"({', '.join(limits.instance_types)})")
    regions = list(dict.fromkeys(o.region for o in fits if not limits.region_allowed(o.region)))
    if regions:
        whose = "its" if said else "this broker's"
        said.append(f"region{'s' if len(regions) > 1 else ''} {_listed(regions)} "
                    f"{'is' if len(regions) == 1 else 'are'} outside {whose} launch_regions "
                    f"({', '.join(limits.launch_regions)})")
    return (f"no offer this broker may launch has {_describe_request(request)}: {' and '.join(said)}; the cheapest "
            f"that has it is {fits[0].describe()}")


def _listed(names: Sequence[str]) -> str:
    """``a, b and c``; past three, ``a, b, c and 4 more``."""
    return _series(list(names[:3]) + ([f"{len(names) - 3} more"] if len(names) > 3 else []))


def _host_memory_text(request: JobRequest, offers: Sequence[Offer]) -> str | None:
    """Why a GCP GPU's ``n1-`` host of the vCPUs asked is no fit when the task gives ``cpus`` without ``memory``: SkyPilot
    then asks 4 GiB per vCPU of it (:func:`_gcp_host_fits`), which the host lacks — with what to write to take it, and
    what ``cpus: N+`` would take. ``None`` when that rule rules out no host. "no instance type has 1x T4 with exactly 4
    vCPUs in gcp (the ones that fit otherwise have 8 or 16 vCPUs)" was said while n1-standard-4 has 4 vCPUs, and only
    its 15 GiB, under the 16 GiB asked, kept it out."""
    for alt in request.alternatives:
        if alt.accelerator is None or alt.cpus is None or alt.memory_gib is not None or alt.instance_type is not None:
            continue
        freed = replace(request, alternatives=(replace(alt, memory_gib=Decimal(0)),))
        need = alt.cpus * GCP_N1_MEMORY_PER_CPU
        held = [o for o in candidates(freed, offers) if o.default_host_cpus is not None
                and o.memory_gib is not None and o.memory_gib < need]
        if not held:
            continue
        host = max(held, key=lambda o: (o.memory_gib, -o.price_per_hour, o.instance_type))
        text = (f"no instance type has {_describe_request(request)}: {host.instance_type.split('+', 1)[0]} has "
                f"{_num(host.vcpus)} vCPUs but {_num(host.memory_gib)} GiB of memory, under the {_num(need)} GiB "
                f"SkyPilot asks of a GCP GPU's host for cpus: {_num(alt.cpus)}{'' if alt.cpus_exact else '+'} without "
                f"memory ({GCP_N1_MEMORY_PER_CPU} GiB a vCPU); write memory: {_num(host.memory_gib)}+ to take it")
        if alt.cpus_exact:
            loose = [o for o in candidates(_loosened(request, ("cpus",)), offers) if o.vcpus is not None]
            have = sorted({o.vcpus for o in loose})
            if have:
                listed = [_num(v) for v in have[:4]] + (["more"] if len(have) > 4 else [])
                text += (f", or cpus: {_num(alt.cpus)}+ for at least {_num(alt.cpus)} vCPUs (the ones that fit then "
                         f"have {_series(listed, 'or')} vCPUs)")
        return text
    return None


def without_local_disk(request: JobRequest) -> JobRequest:
    """``request`` asking no local disk: what has its shape but for the disk (the no-fit sentence, and the field a
    refused submit blames, :func:`broker.admission.admit`)."""
    return replace(request, alternatives=tuple(replace(alt, local_disk=None) for alt in request.alternatives))


def _local_disk_text(request: JobRequest, fits: Sequence[Offer], offers: Sequence[Offer]) -> str:
    """Why the offers of the shape asked (``fits``: all but its local disk) give no ``local_disk`` it asks: none is on
    a cloud where SkyPilot selects a local disk, the price table knows no instance's local disk (the shipped snapshot
    lists none), or the local disks the ones that fit otherwise have are not enough."""
    head = f"no offer has {_describe_request(request)}: resources.local_disk"
    able = [o for o in fits if o.tier is not Tier.ONPREM and not o.simulated and o.cloud.lower() in LOCAL_DISK_CLOUDS]
    if not able:
        clouds = _series([CLOUD_NAMES.get(c, c) for c in sorted(LOCAL_DISK_CLOUDS)], "or")
        return (f"{head} is given only by a cloud instance type on {clouds}, where SkyPilot selects one by its local "
                f"disk, and every offer of that shape here is {_series(sorted({_kind(o) for o in fits}), 'or')}")
    if not any(o.local_disk is not None for o in offers):
        return (f"{head} needs an instance type whose local disk the price table knows, and the price table lists "
                "no instance's local disk: a SkyPilot catalog with the LocalDiskType, LocalDiskSize, LocalDiskCount "
                "and NVMeSupported columns in ~/.sky/catalogs/v8 provides them")
    known = sorted({o.local_disk for o in able if o.local_disk is not None}, key=lambda d: (d.size_gb, d.mode))
    have = [str(d) for d in known[-4:]] + (["not known"] if any(o.local_disk is None for o in able) else [])
    return (f"{head} fits none of the instance types that fit otherwise, whose local disks are "
            f"{_series(have, 'or')}")


def _kind(offer: Offer) -> str:
    """What an offer that no local disk fits is, for a sentence: ``an on-prem pool``, ``a simulated zone``, ``on
    GCP``."""
    if offer.tier is Tier.ONPREM:
        return "an on-prem pool"
    if offer.simulated:
        return "a simulated zone"
    return f"on {CLOUD_NAMES.get(offer.cloud.lower(), offer.cloud)}"


def _loosened(request: JobRequest, sizes: Sequence[str]) -> JobRequest:
    """``request`` with its exact ``sizes`` (``cpus``, ``memory``) taken as at least."""
    flags = {f"{size}_exact": False for size in sizes}
    return replace(request, alternatives=tuple(replace(alt, **flags) for alt in request.alternatives))


def _exact_size_text(request: JobRequest, offers: Sequence[Offer]) -> str:
    """``no instance type has 1x A100 with exactly 16 vCPUs (the ones that fit otherwise have 12 or 24 vCPUs);
    write cpus: 16+ for at least 16 vCPUs``: the fewest sizes to write with '+' for an offer to match, and the
    sizes the types that would then match have."""
    for sizes in (("cpus",), ("memory",), ("cpus", "memory")):
        loose = _loosened(request, sizes)
        fits = candidates(loose, offers) if loose != request else []
        if fits:
            break
    units = {"cpus": ("vcpus", "vCPUs"), "memory": ("memory_gib", "GiB")}
    relaxed = [s for s in sizes if any(getattr(alt, f"{s}_exact") for alt in request.alternatives)]
    if len(relaxed) == 1:
        attr, unit = units[relaxed[0]]
        have = sorted({getattr(o, attr) for o in fits if getattr(o, attr) is not None})
        listed = [_num(v) for v in have[:4]] + (["more"] if len(have) > 4 else [])
        there = f" (the ones that fit otherwise have {_series(listed, 'or')} {unit})" if have else ""
    else:
        shapes = sorted({(o.vcpus, o.memory_gib) for o in fits if o.vcpus is not None and o.memory_gib is not None})
        listed = [f"{_num(c)} vCPUs with {_num(m)} GiB" for c, m in shapes[:4]] + (["more"] if len(shapes) > 4 else [])
        there = f" (the ones that fit otherwise have {_series(listed, 'or')})" if shapes else ""
    wanted = [(s, value) for s in relaxed for value in dict.fromkeys(
        getattr(alt, "cpus" if s == "cpus" else "memory_gib") for alt in request.alternatives
        if getattr(alt, f"{s}_exact"))]
    write = _series([f"{s}: {_num(v)}+" for s, v in wanted])
    least = f"{_num(wanted[0][1])} {units[wanted[0][0]][1]}" if len(wanted) == 1 else "those sizes"
    return f"no instance type has {_describe_request(request)}{there}; write {write} for at least {least}"


def _num(value: Decimal) -> str:
    """A size for a sentence: ``16``, ``7.5`` (not ``16.0`` nor ``1E+1``)."""
    return format(value.normalize(), "f")


def _describe_request(request: JobRequest) -> str:
    """What the job asks for, alternative by alternative: ``8x H100 with 64+ vCPUs in aws/us-east-1 on spot``
    (``with exactly 64 vCPUs`` for ``cpus: 64``, which SkyPilot takes as exact)."""
    parts = []
    for alt in request.alternatives:
        shape = [f"{max(alt.accelerator_count, 1)}x {alt.accelerator}"] if alt.accelerator else []
        if alt.instance_type:
            shape.append(f"instance type {alt.instance_type}")
        size = [_size_text(alt.cpus, alt.cpus_exact, "vCPUs"), _size_text(alt.memory_gib, alt.memory_exact, "GiB of memory")]
        size = [x for x in size if x]
        if alt.local_disk is not None:
            size.append(f"local disk {alt.local_disk}")
        text = " ".join(shape) + (" with " if shape and size else "") + " and ".join(size)
        where = "/".join(x for x in (alt.cloud, alt.region, alt.zone) if x)
        text = (text or "the resources asked") + (f" in {where}" if where else "")
        text += " on spot" if alt.use_spot else " off spot" if alt.use_spot is False else ""
        parts.append(text)
    return " or ".join(parts) + (f" for {request.num_nodes} nodes" if request.num_nodes > 1 else "")


def _size_text(value: Decimal | None, exact: bool, unit: str) -> str:
    """``16+ vCPUs``, ``exactly 16 vCPUs``, or nothing when not asked."""
    if value is None:
        return ""
    return f"exactly {_num(value)} {unit}" if exact else f"{_num(value)}+ {unit}"


def _how_to_price(asked: Collection[str]) -> str:
    """What gives the broker offers in the ``asked`` clouds, for a sentence of a job that asked for them and has none:
    a cloud it prices (:data:`pricing.catalog.PRICED_CLOUDS`), its `clouds` setting and SkyPilot's catalog;
    Kubernetes, an on-prem pool with a ``kubernetes_context``; any other, that the broker cannot price it at all. It told every
    cloud to be put in `clouds` with SkyPilot's catalog, which for Azure stops the broker ("cannot price 'azure'"),
    and is no way to Kubernetes."""
    said = []
    if any(c in PRICED_CLOUDS for c in asked):
        fetch = "; for GCP, `sky show-gpus --cloud gcp` fetches it" if "gcp" in asked else ""
        said.append(f"with BROKER_LAUNCHER=skypilot the broker prices each cloud of its `clouds` setting that has "
                    f"SkyPilot's catalog on the broker's host{fetch}")
    if "kubernetes" in asked:
        said.append("Kubernetes takes an on-prem pool with a `kubernetes_context` in the broker's `pools` (with "
                    "BROKER_LAUNCHER=skypilot), not a catalog")
    if "local" in asked:  # "the broker cannot price local: … (a pool is `infra: local` …)" told it to write what it did
        said.append("`infra: local` names the broker's on-prem pools, and it has none: add one to `pools` in its "
                    "config")
    other = sorted(c for c in asked if c not in PRICED_CLOUDS and c not in ("kubernetes", "local"))
    if other:
        priced = _series([*PRICED_CLOUDS, "on-prem pools"])
        said.append(f"the broker cannot price {_series(other, 'or')}: it prices {priced}, so ask for one of those "
                    "(a pool is `infra: local`, or `local/<pool>` for one of them)")
    return "; ".join([*said, "see docs/deploy.md"])


def _gpu_pools_text(there: Sequence[Offer]) -> str:
    """Why a task asking for no accelerator has no offer where every offer it may look at (``there``: those of the
    place it asks for) is a pool's GPU slot, which such a task never takes (:func:`matches`), or "" when some offer
    is not. It was told "no offer is priced in local at all", to write the `infra: local` it had written."""
    if not there or any(o.tier is not Tier.ONPREM or o.accelerator is None for o in there):
        return ""
    names = sorted({o.zone for o in there})
    gpus = sorted({o.accelerator for o in there})
    return (f" (the pool{'s' if len(names) > 1 else ''} here ({', '.join(names)}) "
            f"{'have' if len(names) > 1 else 'has'} GPUs, which a task asking for no accelerator does not take: ask "
            f"for one (accelerators: {_series([f'{g}:1' for g in gpus], 'or')}), or add a CPU pool)")


def _no_zone_text(alt: ResourceRequest, offers: Sequence[Offer]) -> str:
    """Why a zone pinned (``infra: aws/us-east-1/sim-spott``) matches nothing when no offer in its cloud and region
    is in that zone: the zones there are, the likely one meant first, as a pool mistyped is answered; "" when one is
    (the shape is what is missing, said after). A simulated zone is a process on this host named by its ``name``: its
    ``cloud_zone`` is only the real zone it takes its price from (docs/deploy.md, ``zones``), so pinning that one
    is told to name the simulated zone. It was "no offer has 1x A10G in aws/us-east-1/sim-spott", bare."""
    scope = {a: str(getattr(alt, a)).lower() for a in ("cloud", "region") if getattr(alt, a) is not None}
    inside = [o for o in offers if o.tier is not Tier.ONPREM and o.zone
              and all(str(getattr(o, a)).lower() == v for a, v in scope.items())]
    names = sorted({o.zone for o in inside})
    if not names or alt.zone.lower() in {z.lower() for z in names}:
        return ""
    where = "/".join(getattr(alt, a) for a in ("cloud", "region") if a in scope)
    close = difflib.get_close_matches(alt.zone, names, n=1, cutoff=0.75)
    meant = f"did you mean {where + '/' if where else ''}{close[0]}? " if close else ""
    listed = _series(names[:6] + ([f"{len(names) - 6} more"] if len(names) > 6 else []))
    zones = f"the zones{' in ' + where if where else ''} are {listed}" if len(names) > 1 else \
        f"the only zone{' in ' + where if where else ''} is {listed}"
    sim = ("; a simulated zone is named by its name, not by the cloud_zone it takes its price from"
           if any(o.simulated for o in inside) and not close else "")
    return f" (there is no zone {alt.zone} here: {meant}{zones}{sim})"


def _what_there_is(request: JobRequest, offers: Sequence[Offer]) -> str:
    """A hint at what the offers do have, for the alternative's first unmet want."""
    if not offers:
        return " (no offers are configured)"
    asked = {alt.cloud.lower() for alt in request.alternatives if alt.cloud}
    if asked and len(asked) == len([a for a in request.alternatives if a.cloud]) == len(request.alternatives) \
            and not any(o.cloud.lower() in asked for o in offers):
        # "no offer has 1x V100 in gcp (an offer here has 4 V100)" named an AWS offer, and not why gcp had none
        clouds = _series(sorted(asked), "or")
        return f" (no offer is priced in {clouds} at all: {_how_to_price(asked)})"
    alt = request.alternatives[0]
    pools = sorted({o.region for o in offers if o.tier is Tier.ONPREM and o.cloud.lower() == "local"})
    if (alt.cloud or "").lower() == "local" and alt.region is not None \
            and alt.region.lower() not in {p.lower() for p in pools}:
        close = difflib.get_close_matches(alt.region, pools, n=1, cutoff=0.75) if len(pools) > 1 else []
        meant = f"did you mean local/{close[0]}? " if close else ""
        named = f"the pools are {_series(pools)}" if len(pools) > 1 else f"the only pool is {pools[0]}" if pools else ""
        return (f" (there is no pool {alt.region} here: {meant}{named})" if pools else
                f" (there is no pool {alt.region} here, nor any: `pools` in the broker's config has none)")
    if alt.zone is not None and (alt.cloud or "").lower() != "local" and (zone := _no_zone_text(alt, offers)):
        return zone
    if alt.use_spot is True and not any(o.tier is Tier.SPOT for o in offers):  # said for a GPU, not for CPUs
        return (" (no offer here is spot: spot needs a spot zone in the broker's config or the clouds priced with "
                "BROKER_LAUNCHER=skypilot; see docs/deploy.md)")
    if alt.accelerator:
        names = sorted({f"{o.accelerator}" for o in offers if o.accelerator})
        if not any(n.lower() == alt.accelerator.lower() for n in names):
            # "A1000" for A100: the likely one first, as an unknown key is answered; not "A10G" for A100 nor "L40"
            # for L4, other GPUs whose names are as close (0.75, 0.8)
            close = difflib.get_close_matches(alt.accelerator.lower(), [n.lower() for n in names], n=1, cutoff=0.85)
            meant = next((f"did you mean {n}? " for n in names if close and n.lower() == close[0]), "")
            return (f" ({meant}accelerators offered: {', '.join(names[:12])})" if names else
                    " (every offer here is CPU only: a GPU needs a pool with an accelerator or a GPU zone in the "
                    "broker's config, or the clouds priced with BROKER_LAUNCHER=skypilot; see docs/deploy.md)")
        counts = sorted({o.accelerator_count for o in offers
                         if o.accelerator and o.accelerator.lower() == alt.accelerator.lower()})
        if max(alt.accelerator_count, 1) not in counts:
            return f" (an offer here has {_series([str(c) for c in counts], 'or')} {alt.accelerator})"
    # the largest size where the alternative asks (its cloud, region, zone): "no offer has 64+ vCPUs in aws (the
    # largest offer has 32.0 vCPUs)" named GCP's n2d-standard-32 where AWS's largest had 8
    where = {a: str(getattr(alt, a)).lower() for a in ("cloud", "region", "zone") if getattr(alt, a) is not None}
    there = [o for o in offers if all(str(getattr(o, a)).lower() == v for a, v in where.items())]
    cpu_only = not alt.accelerator and alt.instance_type is None
    if not alt.accelerator and (gpu_pools := _gpu_pools_text(there)):
        return gpu_pools
    # a GPU type is none of a CPU-only task's sizes (:func:`matches`), and is left out, saying so where one has it: "the
    # largest offer has 128.0 GiB" was said of a memory p5.48xlarge has sixteen times over
    kept = [o for o in there if not (o.accelerator and (sized_exactly(o) or o.tier is Tier.ONPREM))] \
        if cpu_only else there
    in_ = f" in {'/'.join(getattr(alt, a) for a in ('cloud', 'region', 'zone') if a in where)}" if where else ""
    for want, attr, unit in ((alt.cpus, "vcpus", "vCPUs"), (alt.memory_gib, "memory_gib", "GiB of memory")):
        if want is None:
            continue
        known = [getattr(o, attr) for o in kept if getattr(o, attr) is not None]
        gpu = [o for o in there if o not in kept and getattr(o, attr) is not None and getattr(o, attr) >= want]
        if known and max(known) < want:
            largest = f"the largest {'CPU-only ' if gpu else ''}offer{in_} has {_num(max(known))} {unit}"
            if not gpu:
                return f" ({largest})"
            big = max(gpu, key=lambda o: (getattr(o, attr), o.instance_type))
            return (f" ({largest}; GPU instance types such as {big.instance_type}, with {_num(getattr(big, attr))} "
                    f"{unit}, are left out: a task asking for no accelerator never takes one, as SkyPilot launches it)")
    return ""
