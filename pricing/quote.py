"""The admission quote: what a job is estimated to cost, per tier, before it runs.

Pure. Used at submit to refuse a job whose budget cannot cover the cheapest
way to run it, with a sentence that names the alternatives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from pricing.money import Micros, cost_for_seconds, fmt
from pricing.offers import JobRequest, Offer, Tier
from pricing.placement import NoFit, candidates, place


@dataclass(frozen=True)
class TierQuote:
    tier: Tier
    offer: Offer
    price_per_hour: Micros  # all nodes
    estimate: Micros | None  # total for expected_hours, None when the length is unknown


@dataclass(frozen=True)
class Quote:
    """Cheapest offer per tier; ``best`` is the one placement would choose now."""

    tiers: tuple[TierQuote, ...]
    expected_hours: Decimal | None
    best: TierQuote | None
    no_fit: str | None = None

    def cheapest(self) -> TierQuote | None:
        priced = [t for t in self.tiers]
        if not priced:
            return None
        return min(priced, key=lambda t: t.price_per_hour)

    def fits(self, budget: Micros) -> bool:
        """Whether the budget covers the cheapest tier for the expected length."""
        cheapest = self.cheapest()
        if cheapest is None:
            return False
        if cheapest.estimate is None:
            return budget > 0
        return cheapest.estimate <= budget

    def refusal(self, budget: Micros) -> str:
        """The sentence a user reads when the budget does not cover the job."""
        if not self.tiers:
            return self.no_fit or "no offer matches the job's resources"
        order = sorted(self.tiers, key=lambda t: t.price_per_hour, reverse=True)
        head, *rest = order
        text = f"estimated {_money(head)} on {_label(head)} exceeds the budget of {fmt(budget)}"
        others = "; ".join(f"{t.tier.value.replace('ondemand', 'on-demand').replace('onprem', 'on-prem')} is estimated at {_money(t)}" for t in rest)
        return text + (f"; {others}" if others else "")


def _label(t: TierQuote) -> str:
    tier = {"ondemand": "on-demand", "onprem": "on-prem", "spot": "spot"}[t.tier.value]
    acc = t.offer.accelerator or "CPU"
    return f"{tier} {acc}"


def _money(t: TierQuote) -> str:
    return fmt(t.estimate) if t.estimate is not None else f"{fmt(t.price_per_hour)}/h"


def quote(
    request: JobRequest,
    offers: Sequence[Offer],
    *,
    free_capacity: Mapping[str, int] | None = None,
) -> Quote:
    """Price the job on every tier it may use; capacity only affects ``best``."""
    matching = candidates(request, offers)
    if request.max_price_per_hour is not None:
        matching = [o for o in matching if o.price_per_hour * request.num_nodes <= request.max_price_per_hour]
    per_tier: dict[Tier, Offer] = {}
    for offer in sorted(matching, key=lambda o: o.price_per_hour):
        per_tier.setdefault(offer.tier, offer)
    tiers = tuple(_tier_quote(o, request) for o in per_tier.values())
    chosen = place(request, offers, free_capacity=free_capacity)
    best = None
    no_fit = None
    if isinstance(chosen, NoFit):
        no_fit = chosen.reason
    else:
        best = _tier_quote(chosen.offer, request)
    return Quote(tiers=tiers, expected_hours=request.expected_hours, best=best, no_fit=no_fit)


def _tier_quote(offer: Offer, request: JobRequest) -> TierQuote:
    hourly = offer.price_per_hour * request.num_nodes
    estimate = None
    if request.expected_hours is not None:
        estimate = cost_for_seconds(hourly, request.expected_hours * 3600)
    return TierQuote(tier=offer.tier, offer=offer, price_per_hour=hourly, estimate=estimate)
