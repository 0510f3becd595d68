"""What one job adds to the broker's counters on ``/metrics``. Pure.

``broker_spend_dollars_total{team, tier}``, ``broker_ondemand_equivalent_dollars_total{team}``,
``broker_preemptions_total{zone, tier}``, ``broker_attempts_lost_total{zone, tier}`` and the histograms ``broker_recovery_seconds`` and
``broker_queue_wait_seconds`` are sums over jobs. Two places add a job in: ``/metrics``
(``broker/api/metrics.py``), for each job in the store, and the retention policy's deletion
(``JobStore.prune``), which adds a deleted job's part to running totals kept in the store, in the same atomic
write as the deletion — so the sums do not fall when a job is pruned. Both call :func:`of_job`, so the two can
never count a job differently.

A total is keyed by the counter and its label values, in the metric's label order (:data:`SPEND`: team, tier;
:data:`ONDEMAND_EQUIVALENT`: team; :data:`PREEMPTIONS`, :data:`LOST`: zone, tier), and valued as an exact integer: micro-dollars
for money (``pricing/money.py``), a count of attempts for preemptions. A histogram is kept as one count per bucket
(:data:`RECOVERY`, :data:`QUEUE_WAIT`: the bucket's upper bound as written by :func:`bound`, or ``"+Inf"``; each
observation counted once, in the first bucket that holds it, not cumulated) and its sum in microseconds (key
``(name, "sum")``). A count keyed by its bound, not by its place in :data:`BUCKETS`, still reads right if the bounds
change: :func:`histogram` adds it to every bound at or above its own. The stores keep a key as :func:`encode` writes
it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping

from broker import costs
from broker.models import Attempt, Job

SPEND = "spend"
"""Micro-dollars accrued by the job's attempts, by (team, tier)."""
ONDEMAND_EQUIVALENT = "ondemand_equivalent"
"""Micro-dollars the same attempts would have cost on-demand, by (team,)."""
PREEMPTIONS = "preemptions"
"""Attempts preempted (the cloud took the spot VM back), by (zone, tier). A total a pruned job added before lost
nodes were counted apart (:data:`LOST`) holds its lost attempts too."""
LOST = "lost"
"""Attempts whose node was lost without notice (an on-prem pool node that went away, a VM that vanished), by (zone,
tier): a pool is not preempted, and its lost nodes were counted as preemptions."""
ATTEMPTS_ENDED = "attempts_ended"
"""Attempts that ended, by (team, state: succeeded, failed, preempted, lost, stopped — a stop the broker asked for: a
cancel, a budget stop, a move): what a failure alert counts. Jobs pruned before this counter existed are not in it."""
RECOVERY = "recovery_seconds"
"""Seconds from each preemption (or lost node) to the next attempt running, by (bucket,); and ``(RECOVERY, "sum")``."""
QUEUE_WAIT = "queue_wait_seconds"
"""Seconds from submit to a job's first launch, by (bucket,); and ``(QUEUE_WAIT, "sum")``."""

BUCKETS: dict[str, tuple[float, ...]] = {
    RECOVERY: (10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600),
    QUEUE_WAIT: (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600),
}
"""The upper bounds of each histogram's buckets, in seconds (``+Inf`` follows the last)."""
SUM = "sum"
INF = "+Inf"

Key = tuple[str, ...]
"""(counter, *label values)."""


def of_job(job: Job, attempts: Iterable[Attempt]) -> dict[Key, int]:
    """What ``job`` and its ``attempts`` (in order) add to each counter and histogram (the rules of
    ``broker/costs.py``); no zero entries. Each key is the one :func:`key` keeps (equal keys, one tuple), so that
    ``/metrics``, which holds every job's figures, holds each key once. (Written out rather than through
    :func:`add` and a dict per attempt: ``/metrics``' first read calls it for every job stored.)"""
    tries = list(attempts)
    out: dict[Key, int] = {}
    team = job.team
    for a in tries:
        tier = costs.tier_of(a)
        state = a.state.value
        for k, value in ((key((SPEND, team, tier)), a.cost),
                         (key((ONDEMAND_EQUIVALENT, team)), costs.ondemand_equivalent(a, job))):
            if value:
                out[k] = out.get(k, 0) + value
        if state in costs.PREEMPTED_STATES:
            k = key((LOST if state == costs.LOST_STATE else PREEMPTIONS, costs.location(a), tier))
            out[k] = out.get(k, 0) + 1
        if getattr(a.state, "is_final", False):  # (a newer broker's own state: not counted here)
            k = key((ATTEMPTS_ENDED, team, state))
            out[k] = out.get(k, 0) + 1
    for seconds in costs.recoveries(tries):
        observe(out, RECOVERY, seconds)
    if tries:
        observe(out, QUEUE_WAIT, max(0.0, min(a.created_at for a in tries) - job.submitted_at))
    return out


_KEYS: dict[Key, Key] = {}
_KEYS_MAX = 100_000


def key(k: Key) -> Key:
    """``k``, as the one tuple kept for keys equal to it (bounded: past :data:`_KEYS_MAX` distinct keys, a zone or
    team named anew each time, ``k`` itself)."""
    kept = _KEYS.get(k)
    if kept is None:
        if len(_KEYS) >= _KEYS_MAX:
            return k
        kept = _KEYS.setdefault(k, k)
    return kept


def bound(b: float) -> str:
    """A bucket's upper bound as a key and a Prometheus ``le`` label write it (``"60.0"``)."""
    return str(float(b))


def observe(into: dict[Key, int], name: str, seconds: float) -> None:
    """Count ``seconds`` in histogram ``name``: one in the first bucket that holds it, and its microseconds in the
    sum (a count is kept even when the sum adds nothing: zero seconds is an observation)."""
    where = _INF[name]
    for b, k in _BOUNDS[name]:
        if seconds <= b:
            where = k
            break
    into[where] = into.get(where, 0) + 1
    micros = round(seconds * 1_000_000)
    if micros:
        into[_SUM[name]] = into.get(_SUM[name], 0) + micros


_BOUNDS = {name: tuple((b, (name, bound(b))) for b in bounds) for name, bounds in BUCKETS.items()}
_INF = {name: (name, INF) for name in BUCKETS}
_SUM = {name: (name, SUM) for name in BUCKETS}
"""Each histogram's keys, made once: :func:`observe` runs for every attempt of every job /metrics reads."""


def histogram(sums: Mapping[Key, int], name: str) -> tuple[list[tuple[str, int]], float]:
    """Histogram ``name`` of ``sums`` as Prometheus reads one: the cumulative count at each bound of
    :data:`BUCKETS` and at ``+Inf``, and the sum in seconds. A count kept under a bound that is no longer one of
    :data:`BUCKETS` (the bounds changed after it was stored) counts at every bound at or above its own."""
    counts = [(math.inf if key[1] == INF else float(key[1]), n) for key, n in sums.items()
              if len(key) == 2 and key[0] == name and key[1] != SUM]
    cumulative = [(bound(b), sum(n for at, n in counts if at <= b)) for b in BUCKETS[name]]
    return cumulative + [(INF, sum(n for _, n in counts))], sums.get((name, SUM), 0) / 1_000_000


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
