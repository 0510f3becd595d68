"""The cost report's ``report`` as it was at b87e017, before it listed only the newest 50 preemptions' rows and
took each day's share with ``_part`` written out: what ``test_scale_reads.py`` checks the report now against, to
the micro-dollar and the character. Copied whole; every helper it calls is ``broker.costs``' own (unchanged)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from broker.costs import (LOST_STATE, PREEMPTED_STATES, RUNNING_STATES, TIERS, TOP_JOBS, Window, _days, _days_of,
                          _iso_out, _part, _preemption, _seconds_up, _time_lost, billed_span, burn, money, money_in,
                          ondemand_equivalent, ondemand_known, percent, retention_note, rounding_note, saving,
                          tier_of)
from broker.lifecycle import JobState
from broker.models import Attempt, CostAttempt, CostJob, Job
from broker.store import PrunedCosts


def report(jobs: Sequence[Job | CostJob], attempts: Mapping[str, Sequence[Attempt | CostAttempt]], *, win: Window,
           now: float, positions: Mapping[str, int], team: str | None, starts: Mapping[str, float] | None = None,
           pruned: int | None = None, retention_days: float | None = None,
           ledger: PrunedCosts | None = None) -> dict:
    """Everything the dashboard shows for ``team`` (``None``: all teams) in ``win``.

    ``jobs`` must already be limited to what the caller may see; ``attempts``
    maps job id to its attempts, oldest first; ``positions`` is the global
    queue position of each queued job, ``starts`` the rough start estimate
    (epoch seconds) of those that have one. ``pruned`` (how many jobs the
    retention policy has deleted from the store) and ``retention_days``
    (``job_retention_days``) make :func:`retention_note`. ``ledger``
    (:class:`~broker.store.base.PrunedCosts`, as :func:`gather` reads it) is
    what the jobs pruned cost, by team, tier and UTC hour; its buckets whose
    hour begins in the window count in the totals, by day, by team and by
    tier, and its ``pruned`` stands for ``pruned`` when that is not given.
    A caller passes ``ledger`` and ``retention_days`` as :func:`gather`
    returns them: the report reads nothing but its arguments.
    """
    if pruned is None and ledger is not None:
        pruned = ledger.pruned
    days = _days(win)
    day_starts, day_ends = [a for _, a, _ in days], [b for _, _, b in days]
    by_day = {d[0]: {t: 0 for t in (*TIERS, "ondemand_equivalent")} for d in days}
    tier_total = dict.fromkeys(TIERS, 0)
    equiv_total = 0
    teams: dict[str, dict[str, int]] = {}
    per_job: list[tuple[Job, int, int, int, bool]] = []
    # the teams with some spend in the window weighed against an on-demand price (ondemand_known): a team, or a
    # whole report, of on-prem jobs with no on-demand shape read "saved $0.00 (0%)", as top_jobs rows did
    compared_teams: set[str] = set()
    preemptions: list[dict] = []
    lost_seconds = 0.0  # the exact time to recover of every preemption listed, rounded once for the total
    for job in jobs:
        job_cost = job_equiv = 0
        compared = False  # as job_costs: some attempt had an on-demand price to compare with
        tries = list(attempts.get(job.id, ()))
        for i, att in enumerate(tries):
            compared = compared or ondemand_known(att, job)
            tier = tier_of(att)
            equiv = ondemand_equivalent(att, job)
            start, seconds = billed_span(att)
            first, last = _days_of(day_starts, day_ends, start, seconds)
            cost_in = equiv_in = 0
            if first < last:
                # A day's share is F(its end) - F(its start), a day ends where the next starts, and the days
                # left out hold exactly 0: so F is taken once per boundary, and the window's share is the sum.
                bounds = [day_starts[first], *day_ends[first:last]]
                cost_at = [_part(att.cost, start, seconds, t) for t in bounds]
                equiv_at = cost_at if equiv == att.cost else [_part(equiv, start, seconds, t) for t in bounds]
                for d, (key, _, _) in enumerate(days[first:last]):
                    by_day[key][tier] += cost_at[d + 1] - cost_at[d]
                    by_day[key]["ondemand_equivalent"] += equiv_at[d + 1] - equiv_at[d]
                cost_in, equiv_in = cost_at[-1] - cost_at[0], equiv_at[-1] - equiv_at[0]
                if ondemand_known(att, job):
                    compared_teams.add(job.team)
            tier_total[tier] += cost_in
            equiv_total += equiv_in
            job_cost += cost_in
            job_equiv += equiv_in
            t = teams.setdefault(job.team, {"spent": 0, "ondemand_equivalent": 0, **dict.fromkeys(TIERS, 0)})
            t["spent"] += cost_in
            t[tier] += cost_in
            t["ondemand_equivalent"] += equiv_in
            if att.state.value in PREEMPTED_STATES and att.ended_at is not None and win.since <= att.ended_at < win.until:
                nxt = tries[i + 1] if i + 1 < len(tries) else None
                preemptions.append(_preemption(job, att, nxt, now))
                lost_seconds += _time_lost(job, att, nxt, now)[0]
        if tries:
            per_job.append((job, job_cost, job_equiv, len(tries), compared))
    pruned_spent = 0
    for who, tier, hour, cost, equiv in (ledger.buckets if ledger is not None else ()):
        # the hour's start is in the window, and so in one of its UTC days (hours align with days)
        if not (win.since <= hour < win.until) or (team is not None and who != team):
            continue
        tier = tier if tier in TIERS else "onprem"
        key = datetime.fromtimestamp(hour, tz=timezone.utc).date().isoformat()
        by_day[key][tier] += cost
        by_day[key]["ondemand_equivalent"] += equiv
        tier_total[tier] += cost
        equiv_total += equiv
        pruned_spent += cost
        # a ledger entry keeps no ondemand_known: an equivalent other than its cost was one, and on-demand is its
        # own (an on-prem shape whose on-demand price equals its own reads as nothing compared, saving $0 either way)
        if tier == "ondemand" or equiv != cost:
            compared_teams.add(who)
        t = teams.setdefault(who, {"spent": 0, "ondemand_equivalent": 0, **dict.fromkeys(TIERS, 0)})
        t["spent"] += cost
        t[tier] += cost
        t["ondemand_equivalent"] += equiv
    spent = sum(tier_total.values())
    top = sorted((p for p in per_job if p[1] > 0), key=lambda p: (-p[1], p[0].id))[:TOP_JOBS]
    # the exact seconds summed, then rounded up once (as a total of money is): each event rounded down first read
    # "18 s to recover" beside /metrics' broker_recovery_seconds_sum of 20.54, and a recovery of 0.4 s "0 s"
    recovery = _seconds_up(lost_seconds)
    zones: dict[str, int] = {}
    lost = sum(1 for p in preemptions if p["state"] == LOST_STATE)
    for p in preemptions:
        if p["state"] != LOST_STATE:
            zones[p["zone"]] = zones.get(p["zone"], 0) + 1
    return {
        "team": team,
        "window": {"since": _iso_out(win.since), "until": _iso_out(win.until), "period": win.label},
        "currency": "USD",
        "totals": {
            "spent": money(spent),
            "ondemand_equivalent": money(equiv_total),
            "saving": saving(spent, equiv_total),
            "saving_percent": percent(equiv_total - spent, equiv_total) if compared_teams else None,
            "by_tier": {t: money(tier_total[t]) for t in TIERS},
        },
        "by_day": [
            {"date": key, **{t: money(v[t]) for t in TIERS},
             "total": money(sum(v[t] for t in TIERS)),
             "ondemand_equivalent": money(v["ondemand_equivalent"]),
             "saving": saving(sum(v[t] for t in TIERS), v["ondemand_equivalent"]),
             "saving_percent": percent(v["ondemand_equivalent"] - sum(v[t] for t in TIERS), v["ondemand_equivalent"])}
            for key, v in by_day.items()
        ],
        "by_team": [
            {"team": name, "spent": money(v["spent"]), "ondemand_equivalent": money(v["ondemand_equivalent"]),
             "saving": saving(v["spent"], v["ondemand_equivalent"]),
             "saving_percent": percent(v["ondemand_equivalent"] - v["spent"], v["ondemand_equivalent"])
             if name in compared_teams else None,
             "by_tier": {t: money(v[t]) for t in TIERS}}
            for name, v in sorted(teams.items())
        ],
        "top_jobs": [
            # a job none of whose attempts had an on-demand price read "saved $0.00 (0%)" here and "nothing to
            # compare" in its own costs (job_costs): percent null, as there, so every edge shows "—"
            {"id": j.id, "name": j.name, "team": j.team, "state": j.state.value, "spent": money_in(c, j.budget),
             "ondemand_equivalent": money(e), "saving": saving(c, e),
             "saving_percent": percent(e - c, e) if compared else None, "attempts": n}
            for j, c, e, n, compared in top
        ],
        "preemptions": {
            "count": len(preemptions) - lost,
            "lost": lost,
            "recovery_seconds": recovery,
            "by_zone": [{"zone": z, "count": n} for z, n in sorted(zones.items(), key=lambda x: (-x[1], x[0]))],
            "events": sorted(preemptions, key=lambda p: p["time"], reverse=True)[:50],
        },
        "rounding_note": rounding_note(spent, equiv_total, tier_total.values(),
                                       [(v["spent"], v["ondemand_equivalent"]) for v in teams.values()]),
        "retention_note": retention_note(win, now, pruned or 0, retention_days,
                                         counted=ledger.ledger_jobs if ledger is not None else 0, spent=pruned_spent),
        "budget_burn": [burn(j, attempts.get(j.id, ()), now) for j in jobs if j.state in RUNNING_STATES],
        "queue": sorted(
            ({"id": j.id, "name": j.name, "team": j.team, "position": positions.get(j.id),
              "estimated_start": _iso_out((starts or {}).get(j.id)), "priority": j.priority, "reason": j.reason,
              # since it last entered the queue: a job resumed after days waited days from its submit, said so
              "waiting_seconds": max(0, int(now - (getattr(j, "queued_at", None) or j.submitted_at)))}
             for j in jobs if j.state is JobState.QUEUED),
            key=lambda q: (q["position"] is None, q["position"] or 0, q["id"]),
        ),
    }
