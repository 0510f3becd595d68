"""The cost report as it was computed before ``JobStore.cost_history`` (commit a90e08d), kept verbatim to
compare against: whole jobs and attempts read with ``list_jobs`` and ``attempts_of``, and each day's share
apportioned with two ``share`` calls. ``test_broker_cost_history.py`` checks the report is identical on a
generated store (the report now read by :func:`as_before`, without the fields for people added since);
``benchmarks/costs.py`` times the two side by side.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

from broker import costs
from broker.costs import (PREEMPTED_STATES, RUNNING_STATES, TIERS, TOP_JOBS, Window, _days, _iso_out, _preemption,
                          billed_span, burn, money, ondemand_equivalent, percent, tier_of)
from broker.lifecycle import JobState
from broker.models import Attempt, Job
from pricing.money import Micros, amount_shown


def report(jobs: Sequence[Job], attempts: Mapping[str, Sequence[Attempt]], *, win: Window, now: float,
           positions: Mapping[str, int], team: str | None, starts: Mapping[str, float] | None = None) -> dict:
    """Everything the dashboard shows for ``team`` (``None``: all teams) in ``win``.

    ``jobs`` must already be limited to what the caller may see; ``attempts``
    maps job id to its attempts, oldest first; ``positions`` is the global
    queue position of each queued job, ``starts`` the rough start estimate
    (epoch seconds) of those that have one.
    """
    days = _days(win)
    day_ends = [b for _, _, b in days]
    by_day = {d[0]: {t: 0 for t in (*TIERS, "ondemand_equivalent")} for d in days}
    tier_total = dict.fromkeys(TIERS, 0)
    equiv_total = 0
    teams: dict[str, dict[str, int]] = {}
    per_job: list[tuple[Job, int, int, int]] = []
    preemptions: list[dict] = []
    for job in jobs:
        job_cost = job_equiv = 0
        tries = list(attempts.get(job.id, ()))
        for i, att in enumerate(tries):
            tier = tier_of(att)
            equiv = ondemand_equivalent(att, job)
            cost_in = share(att.cost, att, win.since, win.until)
            equiv_in = share(equiv, att, win.since, win.until)
            for key, a, b in _days_touched(days, day_ends, att):
                by_day[key][tier] += share(att.cost, att, a, b)
                by_day[key]["ondemand_equivalent"] += share(equiv, att, a, b)
            tier_total[tier] += cost_in
            equiv_total += equiv_in
            job_cost += cost_in
            job_equiv += equiv_in
            t = teams.setdefault(job.team, {"spent": 0, "ondemand_equivalent": 0, **dict.fromkeys(TIERS, 0)})
            t["spent"] += cost_in
            t[tier] += cost_in
            t["ondemand_equivalent"] += equiv_in
            if att.state.value in PREEMPTED_STATES and att.ended_at is not None and win.since <= att.ended_at < win.until:
                preemptions.append(_preemption(job, att, tries[i + 1] if i + 1 < len(tries) else None, now))
        if tries:
            per_job.append((job, job_cost, job_equiv, len(tries)))
    spent = sum(tier_total.values())
    top = sorted((p for p in per_job if p[1] > 0), key=lambda p: (-p[1], p[0].id))[:TOP_JOBS]
    zones: dict[str, int] = {}
    for p in preemptions:
        zones[p["zone"]] = zones.get(p["zone"], 0) + 1
    return {
        "team": team,
        "window": {"since": _iso_out(win.since), "until": _iso_out(win.until), "period": win.label},
        "currency": "USD",
        "totals": {
            "spent": money(spent),
            "ondemand_equivalent": money(equiv_total),
            "saving": money(equiv_total - spent),
            "saving_percent": percent(equiv_total - spent, equiv_total),
            "by_tier": {t: money(tier_total[t]) for t in TIERS},
        },
        "by_day": [
            {"date": key, **{t: money(v[t]) for t in TIERS},
             "total": money(sum(v[t] for t in TIERS)),
             "ondemand_equivalent": money(v["ondemand_equivalent"]),
             "saving": money(v["ondemand_equivalent"] - sum(v[t] for t in TIERS))}
            for key, v in by_day.items()
        ],
        "by_team": [
            {"team": name, "spent": money(v["spent"]), "ondemand_equivalent": money(v["ondemand_equivalent"]),
             "saving": money(v["ondemand_equivalent"] - v["spent"]), "by_tier": {t: money(v[t]) for t in TIERS}}
            for name, v in sorted(teams.items())
        ],
        "top_jobs": [
            {"id": j.id, "name": j.name, "team": j.team, "state": j.state.value, "spent": money(c),
             "ondemand_equivalent": money(e), "saving": money(e - c), "attempts": n}
            for j, c, e, n in top
        ],
        "preemptions": {
            "count": len(preemptions),
            "recovery_seconds": sum(p["recovery_seconds"] for p in preemptions),
            "by_zone": [{"zone": z, "count": n} for z, n in sorted(zones.items(), key=lambda x: (-x[1], x[0]))],
            "events": sorted(preemptions, key=lambda p: p["time"], reverse=True)[:50],
        },
        "budget_burn": [burn(j, attempts.get(j.id, ()), now) for j in jobs if j.state in RUNNING_STATES],
        "queue": sorted(
            ({"id": j.id, "name": j.name, "team": j.team, "position": positions.get(j.id),
              "estimated_start": _iso_out((starts or {}).get(j.id)), "priority": j.priority, "reason": j.reason,
              "waiting_seconds": max(0, int(now - j.submitted_at))}
             for j in jobs if j.state is JobState.QUEUED),
            key=lambda q: (q["position"] is None, q["position"] or 0, q["id"]),
        ),
    }


def share(total: Micros, attempt: Attempt, a: float, b: float) -> Micros:
    """The part of ``total`` (accrued evenly over the attempt's billed span) that falls in ``[a, b)``."""
    return _cumulative(total, attempt, b) - _cumulative(total, attempt, a)


def _cumulative(total: Micros, attempt: Attempt, t: float) -> Micros:
    start, seconds = billed_span(attempt)
    if seconds == 0:
        return total if t > start else 0
    elapsed = min(max(int(t) - start, 0), seconds)
    return total * elapsed // seconds


def _days_touched(days: list[tuple[str, float, float]], day_ends: list[float], attempt: Attempt):
    """The days of ``days`` (sorted, ends in ``day_ends``) whose share of ``attempt`` can be non-zero:
    a superset of those overlapping its billed span, by a second each side. Every other day's share
    is exactly 0 (both ends of it are before the span, or both after), so skipping them changes no
    sum — and a 90-day report no longer costs 90 days per attempt."""
    start, seconds = billed_span(attempt)
    first = bisect_right(day_ends, start - 1)
    for i in range(first, len(days)):
        if days[i][1] >= start + seconds + 1:
            break
        yield days[i]


def gather(store, *, team: str | None, win: Window | None) -> tuple[list[Job], dict[str, list[Attempt]]]:
    """Jobs of ``team`` (all when ``None``) that may hold cost in ``win``, and their attempts.

    A job that ended before the window cannot: its attempts were billed no
    later than its last update — the store leaves those out (``active_since``).
    """
    listed = store.list_jobs(team=team, limit=100_000, active_since=None if win is None else win.since)
    jobs = [j for j in listed if win is None or j.submitted_at < win.until]
    return jobs, store.attempts_of([j.id for j in jobs])


def as_before(report: dict) -> dict:
    """``report`` (the report now) less the fields added after the narrow read for people to read
    (``saving_percent`` on rows, ``rounding_note``, ``retention_note``), which the report from before lacks (its
    budget burn is the shared ``costs.burn``); each percentage is first checked against the amounts beside it, so
    what is compared with the report from before is every amount it had. A saving's display string, rounded down
    since (``costs.saving``), is checked the same way and compared as the report from before wrote it."""
    out = {**report, "totals": _saving_as_before({**report["totals"]})}
    out.pop("rounding_note")
    assert out.pop("retention_note") is None  # nothing pruned here
    for table in ("by_day", "by_team", "top_jobs"):
        rows = []
        for row in out[table]:
            row = _saving_as_before({**row})
            equivalent = row["ondemand_equivalent"]["micros"]
            # null where nothing was compared (work on on-demand alone, whose equivalent is its cost: saving $0)
            pct = row.pop("saving_percent")
            assert pct == costs.percent(row["saving"]["micros"], equivalent) or \
                (pct is None and row["saving"]["micros"] == 0), row
            rows.append(row)
        out[table] = rows
    # lost nodes are counted apart from preemptions since (``lost``), and ``by_zone`` counts preemptions alone: the
    # count from before is their sum; its zones are compared by :func:`zones_apart`, on the report from before
    pre = {**out["preemptions"]}
    lost = pre.pop("lost")
    assert sum(z["count"] for z in pre["by_zone"]) == pre["count"]
    assert lost == sum(1 for e in pre["events"] if e["state"] == "lost") or len(pre["events"]) == 50
    pre["count"] += lost
    pre["by_zone"] = None
    # the time to recover is the exact sum rounded up once since, where the report from before summed each event's
    # whole seconds (each rounded as ``costs._preemption`` rounds it now): left out, as :func:`zones_apart` leaves it
    # out of the report from before; test_broker_cost_history.py checks it against the report now on whole records
    pre["recovery_seconds"] = None
    out["preemptions"] = pre
    return out


def zones_apart(before: dict) -> dict:
    """The report from before with its ``by_zone`` (preemptions and lost nodes together) and its total time to
    recover left out, as :func:`as_before` leaves them out of the one now."""
    return {**before, "preemptions": {**before["preemptions"], "by_zone": None, "recovery_seconds": None}}


def _saving_as_before(row: dict) -> dict:
    spent = row["total"] if "total" in row else row["spent"]
    assert row["saving"] == costs.saving(spent["micros"], row["ondemand_equivalent"]["micros"]), row
    _ondemand_as_before(row)
    row["saving"] = costs.money(row["saving"]["micros"])
    return row


def _ondemand_as_before(row: dict) -> dict:
    """A row's on-demand equivalent as the reports from before wrote it (its exact amount rounded up on its own),
    once its display string now is checked to be the spend shown plus the saving shown (``costs.ondemand``)."""
    spent = row["total"] if "total" in row else row["spent"]
    saved = row["saving"]["usd"]
    saved_micros = 0 if saved.startswith("under") else amount_shown(saved)
    assert amount_shown(row["ondemand_equivalent"]["usd"]) == amount_shown(spent["usd"]) + saved_micros, row
    row["ondemand_equivalent"] = costs.money(row["ondemand_equivalent"]["micros"])
    return row


def ondemand_as_before(report: dict) -> dict:
    """``report`` with each on-demand equivalent written as before (:func:`_ondemand_as_before`, which checks the
    one now), and its ``rounding_note`` left out: it compares the on-demand figures shown, which are written
    otherwise since; every other field as it is."""
    out = {**report, "totals": _ondemand_as_before({**report["totals"]}), "rounding_note": None}
    for table in ("by_day", "by_team", "top_jobs"):
        out[table] = [_ondemand_as_before({**row}) for row in report[table]]
    return out
