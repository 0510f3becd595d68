"""What one job adds to the broker's counters on ``/metrics``. Pure.

``broker_spend_dollars_total{team, tier}``, ``broker_ondemand_equivalent_dollars_total{team}`` and
``broker_preemptions_total{zone, tier}`` are sums over jobs. Two places add a job in: ``/metrics``
(``broker/api/metrics.py``), for each job in the store, and the retention policy's deletion
(``JobStore.prune``), which adds a deleted job's part to running totals kept in the store, in the same atomic
write as the deletion — so the sums do not fall when a job is pruned. Both call :func:`of_job`, so the two can
never count a job differently.

A total is keyed by the counter and its label values, in the metric's label order (:data:`SPEND`: team, tier;
:data:`ONDEMAND_EQUIVALENT`: team; :data:`PREEMPTIONS`: zone, tier), and valued as an exact integer: micro-dollars
for money (``pricing/money.py``), a count of attempts for preemptions. The stores keep a key as :func:`encode`
writes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from broker import costs
from broker.models import Attempt, Job

SPEND = "spend"
"""Micro-dollars accrued by the job's attempts, by (team, tier)."""
ONDEMAND_EQUIVALENT = "ondemand_equivalent"
"""Micro-dollars the same attempts would have cost on-demand, by (team,)."""
PREEMPTIONS = "preemptions"
"""Attempts preempted or lost, by (zone, tier)."""

Key = tuple[str, ...]
"""(counter, *label values)."""


def of_job(job: Job, attempts: Iterable[Attempt]) -> dict[Key, int]:
    """What ``job`` and its ``attempts`` add to each counter (the rules of ``broker/costs.py``); no zero entries."""
    out: dict[Key, int] = {}
    for a in attempts:
        tier = costs.tier_of(a)
        add(out, {(SPEND, job.team, tier): a.cost, (ONDEMAND_EQUIVALENT, job.team): costs.ondemand_equivalent(a, job)})
        if a.state.value in costs.PREEMPTED_STATES:
            add(out, {(PREEMPTIONS, costs.location(a), tier): 1})
    return out


def add(into: dict[Key, int], part: Mapping[Key, int]) -> dict[Key, int]:
    """``into`` plus ``part``, key by key, in place (zeros left out); returned for chaining."""
    for key, value in part.items():
        if value:
            into[key] = into.get(key, 0) + value
    return into


def encode(key: Key) -> str:
    """The key as the stores keep it: a JSON array, unambiguous whatever a team or zone is named."""
    return json.dumps(list(key), separators=(",", ":"), ensure_ascii=False)


def decode(text: str) -> Key:
    return tuple(json.loads(text))
