"""The admission quote: what a job is estimated to cost, per tier, before it runs.

Pure. Used at submit to refuse a job whose budget cannot cover the cheapest
way to run it, with a sentence that names the alternatives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from pricing.money import Micros, affordable_seconds, cost_for_seconds, fmt, fmt_limit, fmt_rate
from pricing.offers import JobRequest, Offer, Tier
from pricing.placement import NoFit, alternative_rank, candidates, effective_price, holds, place


@dataclass(frozen=True)
class TierQuote:
    tier: Tier
    offer: Offer
    price_per_hour: Micros  # all nodes
    estimate: Micros | None  # total for expected_hours (after_run included), None when the length is unknown
    after_run: Micros = 0  # billed after the run ends (a cloud cluster's idle minutes and teardown), all nodes
    also: tuple[Offer, ...] = ()  # the tier's other offers at the same figure: a sentence names no one zone of them
    after_run_seconds: int = 0  # the seconds ``after_run`` is billed for (what its launcher keeps of the budget)
    num_nodes: int = 1  # the job's: ``price_per_hour`` and ``estimate`` are for all of them


@dataclass(frozen=True)
class Quote:
    """Cheapest offer per tier; ``best`` is the one placement would choose now."""

    tiers: tuple[TierQuote, ...]
    expected_hours: Decimal | None
    best: TierQuote | None
    no_fit: str | None = None
    #: with ``ordered`` alternatives, the cheapest way of any of them when no tier's quote is it (a later alternative,
    #: which placement falls back to when the budget left cannot pay the earlier): what the budget must cover at least
    least: TierQuote | None = None

    @property
    def per_hour(self) -> bool:
        """True when the job gave no ``expected_hours``: figures are $/h, not totals."""
        return self.expected_hours is None

    def cheapest(self) -> TierQuote | None:
        if not self.tiers:
            return None
        return min((*self.tiers, *((self.least,) if self.least is not None else ())), key=_figure)

    def summary(self) -> str:
        """One sentence: the estimate of the offer placement would choose now."""
        if self.best is None:
            return self.no_fit or "no offer matches the job's resources"
        if self.per_hour:
            return f"{money_text(self.best)} on {offer_text(self.best)} (no expected_hours given, so this is per hour)"
        return f"estimated {money_text(self.best)} for {self.expected_hours} h on {offer_text(self.best)}"

    def fits(self, budget: Micros, *, stop_seconds: int = 0) -> bool:
        """Whether the budget covers the cheapest tier for the expected length, and ``stop_seconds`` more at its
        price: the clean stop the engine keeps of every budget (it stops a job once what is left pays only for
        that), so a budget of exactly the estimate stopped the job that much before the end of its expected run."""
        cheapest = self.cheapest()
        if cheapest is None:
            return False
        if cheapest.estimate is None:
            return budget > 0
        return cheapest.estimate + cost_for_seconds(cheapest.price_per_hour, stop_seconds) <= budget

    def least_budget(self, *, stop_seconds: int = 0) -> Micros | None:
        """The least budget :meth:`fits` accepts, in micro-dollars: the cheapest tier's estimate and ``stop_seconds``
        at its price, each rounded up as :meth:`fits` adds them; a micro-dollar for a quote per hour (any budget
        above nothing); ``None`` with no tier."""
        cheapest = self.cheapest()
        if cheapest is None:
            return None
        if cheapest.estimate is None:
            return 1
        return cheapest.estimate + cost_for_seconds(cheapest.price_per_hour, stop_seconds)

    def refusal(self, budget: Micros, *, stop_seconds: int = 0, least: Micros | None = None) -> str:
        """The sentence a user reads when the budget does not cover the job: the cheapest way first — the one
        :meth:`fits` weighs, so its figure is the least budget that would do — then the other tiers, cheapest
        first. It led with the dearest tier ("estimated $30.60 on ondemand ... exceeds the budget of $5.00; ...;
        spot is estimated at $10.00"), which read as though $30.60 were needed. After the budget it says what to
        give: ``least`` (the least budget every check of the submit accepts, which may ask more than this quote: a
        start's billing after its run), else :meth:`least_budget` — shown rounded up, so that figure is accepted."""
        if not self.tiers:
            return self.no_fit or "no offer matches the job's resources"
        head = self.cheapest()
        rest = sorted((t for t in self.tiers if t is not head), key=_figure)
        stop = cost_for_seconds(head.price_per_hour, stop_seconds) if head.estimate is not None else 0
        if stop and head.estimate is not None and head.estimate <= budget:
            # the estimate alone fits: what is short is the clean stop the engine keeps of the budget
            text = (f"estimated {money_text(head)} on {offer_text(head)}, plus {fmt(stop)} for a clean stop at its "
                    f"end ({stop_seconds} s, which the broker keeps of every budget: it stops a job once what is left "
                    f"pays only for that), is more than the budget of {fmt_limit(budget)}: give at least "
                    f"{fmt(max(head.estimate + stop, least or 0))}")
            others = "; ".join(f"{t.tier.value.replace('ondemand', 'on-demand').replace('onprem', 'on-prem')} is estimated at {money_text(t)}" for t in rest)
            return text + (f"; {others}" if others else "")
        text = (f"estimated {money_text(head)} on {offer_text(head)}{',' if head.num_nodes > 1 else ''} exceeds the "
                f"budget of {fmt_limit(budget)}")
        give = max(least or 0, self.least_budget(stop_seconds=stop_seconds) or 0)
        if head.estimate is not None and give > budget:
            text += f": give at least {fmt(give)}"
        others = "; ".join(f"{t.tier.value.replace('ondemand', 'on-demand').replace('onprem', 'on-prem')} is estimated at {money_text(t)}" for t in rest)
        return text + (f"; {others}" if others else "")


def _figure(t: TierQuote) -> tuple[Micros, Micros]:
    """What a tier is ranked by for the budget: its estimate (its price per hour without one), then that price."""
    return (t.estimate if t.estimate is not None else t.price_per_hour, t.price_per_hour)


def offer_text(t: TierQuote) -> str:
    """The tier's offer in a sentence, as placement's sentences name one (:meth:`Offer.describe`: its
    cloud and zone, ``spot 1x V100 p3.2xlarge in aws/us-east-1a``); where the tier's figure is the same
    in several places, the cloud and what they share, so that no one of them reads as the one
    (``spot 1x V100 p3.2xlarge in aws/us-east-1 (2 zones)``, ``in aws (2 regions)``, ``in aws or gcp``); for a job
    of several nodes, how many, as its figure is for all of them (``..., 2 nodes``)."""
    return _offer_words(t) + nodes_words(t.num_nodes)


def nodes_words(n: int) -> str:
    """``, 2 nodes`` after an offer whose figure is for a job of several nodes, as a placement says it: "estimated
    $0.0170 on spot 1x A10G g5.xlarge" for 2 nodes read as one instance's price, twice what it costs."""
    return f", {n} nodes" if n > 1 else ""


def _offer_words(t: TierQuote) -> str:
    offers = (t.offer, *t.also)
    places = sorted({(o.cloud, o.region, o.location) for o in offers})
    if len(places) == 1:
        return t.offer.describe()
    o = t.offer
    acc = f"{o.accelerator_count}x {o.accelerator}" if o.accelerator else "CPU"
    kind = f" {o.instance_type}" if len({x.instance_type for x in offers}) == 1 else ""
    clouds = sorted({c for c, _, _ in places})
    regions = {(c, r) for c, r, _ in places}
    if len(clouds) > 1:
        where = " or ".join(clouds)
    elif o.tier is Tier.ONPREM:
        where = f"{clouds[0]} ({len(places)} pools)"
    elif len(regions) == 1:
        where = f"{clouds[0]}/{o.region} ({len(places)} zones)"
    else:
        where = f"{clouds[0]} ({len(regions)} regions)"
    sim = " (simulated)" if all(x.simulated for x in offers) else ""
    return f"{o.tier.value} {acc}{kind} in {where}{sim}"


def money_text(t: TierQuote) -> str:
    """The tier's figure for a person: ``$5.77 ($0.77 of it billed after the run)``, or per hour
    ``$3.06/h + $0.77 billed after the run``; the after-run part only where there is one."""
    if t.estimate is not None:
        return fmt(t.estimate) + (f" ({fmt(t.after_run)} of it billed after the run)" if t.after_run else "")
    return f"{fmt_rate(t.price_per_hour)}/h" + (f" + {fmt(t.after_run)} billed after the run" if t.after_run else "")


def quote(
    request: JobRequest,
    offers: Sequence[Offer],
    *,
    free_capacity: Mapping[str, int] | None = None,
    blocked_zones: frozenset[str] = frozenset(),
    preemption_risk: Mapping[str, Decimal] | None = None,
    after_run_seconds: Mapping[Offer, int] | None = None,
    budget: Micros | None = None,
    stop_seconds: int = 0,
) -> Quote:
    """Price the job on every tier it may use; capacity only affects ``best``.

    With ``ordered`` alternatives a tier is quoted on the alternative placement takes there: the earliest whose offer
    ``budget`` pays for as placement weighs it (:func:`pricing.placement.place`, ``stop_seconds`` its clean stop),
    else — no alternative the budget pays for on that tier — its cheapest way, the least the budget must cover to
    run on it. Without a budget, the earliest alternative. Quoted on the earliest alone whatever the budget, a job
    of A100s listed first on GCP and then on AWS was quoted at GCP's $14.70, "the budget covers no tier", and then
    admitted and placed on AWS's at $2.47/h.

    An estimate is the job's total for ``expected_hours`` (all nodes); a spot
    estimate adds its zone's ``preemption_risk`` (the expected fraction of time
    lost to preemptions), so it is an honest total, not the list price times
    the hours. It also adds what the offer is billed after the run ends
    (``after_run_seconds``, as :func:`pricing.placement.place` takes it: a cloud
    cluster's idle minutes before autodown and its teardown, which its launcher
    keeps of the budget), so a tier is the cheapest by what the job will pay,
    not by its hourly price alone. Without ``expected_hours`` estimates are
    ``None`` and the quote is per hour (:attr:`Quote.per_hour`), the after-run
    billing a figure of its own (:attr:`TierQuote.after_run`).
    """
    risk = preemption_risk or {}
    after = after_run_seconds or {}
    matching = [o for o in candidates(request, offers) if holds(o, request.num_nodes)]
    if request.max_price_per_hour is not None:
        matching = [o for o in matching if o.price_per_hour * request.num_nodes <= request.max_price_per_hour]
    quoted = [_tier_quote(o, request, risk, after) for o in matching]

    def figure(t: TierQuote) -> tuple:
        return t.estimate if t.estimate is not None else 0, effective_price(t.offer, request.num_nodes, risk)

    # with ``ordered`` alternatives a tier is quoted on its earliest alternative, as placement takes it: quoted on the
    # cheapest of them, an A10G listed second priced a job placed on the A100s listed first at a twentieth of it
    per_tier: dict[Tier, TierQuote] = {}
    for t in sorted(quoted, key=lambda t: (alternative_rank(request, t.offer), figure(t), t.offer.location)):
        per_tier.setdefault(t.tier, t)
    if request.ordered and budget is not None:
        for tier in per_tier:
            on_tier = [t for t in quoted if t.tier is tier]
            got = place(request, [t.offer for t in on_tier], budget_left=budget, preemption_risk=risk,
                        min_run_seconds=stop_seconds, after_run_seconds=after)
            per_tier[tier] = (next(t for t in on_tier if t.offer == got.offer) if not isinstance(got, NoFit)
                              else min(on_tier, key=lambda t: (figure(t), t.offer.location)))
    least = min(quoted, key=lambda t: (figure(t), t.offer.location), default=None)
    tiers = tuple(replace(t, also=tuple(o.offer for o in quoted
                                        if o.tier is t.tier and o is not t and figure(o) == figure(t)))
                  for t in per_tier.values())
    chosen = place(request, offers, free_capacity=free_capacity, blocked_zones=blocked_zones, preemption_risk=risk,
                   after_run_seconds=after)
    best = None
    no_fit = None
    if isinstance(chosen, NoFit):
        no_fit = chosen.reason
    else:
        best = _tier_quote(chosen.offer, request, risk, after)
    return Quote(tiers=tiers, expected_hours=request.expected_hours, best=best, no_fit=no_fit,
                 least=least if least is not None and least.offer not in {t.offer for t in tiers} else None)


def _tier_quote(offer: Offer, request: JobRequest, risk: Mapping[str, Decimal],
                after_run_seconds: Mapping[Offer, int]) -> TierQuote:
    hourly = offer.price_per_hour * request.num_nodes
    after_seconds = after_run_seconds.get(offer, 0)
    after = cost_for_seconds(hourly, after_seconds)
    estimate = None
    if request.expected_hours is not None:
        loaded = Decimal(1) + (max(risk.get(offer.location, Decimal(0)), Decimal(0)) if offer.tier is Tier.SPOT else 0)
        run = request.expected_hours * 3600 * loaded
        # rounded up once, over the run and the billing after it, as placement weighs the budget: the two
        # rounded apart made the quote up to $0.000001 dearer, refusing a budget placement would fit
        estimate = cost_for_seconds(hourly, run + after_seconds)
        after = estimate - cost_for_seconds(hourly, run)
    return TierQuote(tier=offer.tier, offer=offer, price_per_hour=hourly, estimate=estimate, after_run=after,
                     after_run_seconds=after_seconds, num_nodes=request.num_nodes)


def run_until_budget_stop(budget: Micros, price_per_hour: Micros, *, after_run_seconds: int = 0,
                          stop_seconds: int = 0) -> int | None:
    """How long ``budget`` runs a job at ``price_per_hour`` (all nodes) before the engine stops it at its budget, in
    whole seconds: what the budget pays for, less what the offer is billed after its run (``after_run_seconds``: a
    cloud cluster's idle minutes before autodown and its teardown, which its launcher keeps of the budget) and the
    clean stop the engine keeps of every budget (``stop_seconds``: :meth:`Quote.fits`'s). ``None`` when the budget
    cannot start the job there at all — it pays for less than the clean stop and the billing after the run, the start
    placement refuses (:func:`pricing.placement.start_shortfall`). A price above nothing only (a free offer has no
    budget stop). It was the budget over the price alone: a $0.0495
    budget on a spot T4 was said to run it 15 min, of which SkyPilot's cluster billed $0.0476 after the run."""
    left = affordable_seconds(price_per_hour, max(budget, 0)) - after_run_seconds - stop_seconds
    return left if left >= 0 else None
