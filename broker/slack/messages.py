"""Notifications: one stored :class:`~broker.models.Event` → one Slack message (or none). Pure.

=================  ===========================================================  ==========================
event              says                                                          buttons
=================  ===========================================================  ==========================
start              started on <where> (attempt 1) / resumed on <where>          —
preempted/recover  preempted on <where>; steps lost; resumes from step N         —
resume             resumed by <who>                                              —
budget_warning     at N% of its budget, hours left at this price                 raise budget, cancel
stop_budget        stopped: budget spent                                         raise budget, resume, on-demand
fail               failed: <plain-words diagnosis>                               resume, on-demand, raise budget
succeed            finished: cost, saving against on-demand                      —
cancel/ended       cancelled by <who>                                            —
=================  ===========================================================  ==========================

Facts the engine may put in ``event.data`` and that are used when present:
``checkpoint_step`` (the step a resume starts from), ``steps_lost``,
``diagnosis`` (plain words), ``percent`` (budget used). Otherwise they are
read off the job, its attempts and its progress points.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker import costs
from broker.models import Attempt, Event, Job
from broker.slack.blocks import Reply, actions, button, context, section, where
from pricing.money import Micros, fmt


def raised_budget(budget: Micros, percent: int) -> Micros:
    """The budget the "Raise budget" button proposes: ``percent`` more, rounded up to whole dollars."""
    new = budget + budget * percent // 100
    return -(-new // 1_000_000) * 1_000_000


def resume_step(event: Event, points: Sequence[dict]) -> int | None:
    """The step a resume would start from, if known (the last checkpoint, not the last report)."""
    if isinstance(event.data.get("checkpoint_step"), int):
        return event.data["checkpoint_step"]
    for p in reversed(points):
        if isinstance(p.get("checkpoint_step"), int):
            return p["checkpoint_step"]
    return None


def last_step(points: Sequence[dict], until: float | None = None) -> int | None:
    for p in reversed(points):
        if isinstance(p.get("step"), int) and (until is None or (p.get("time") or 0) <= until):
            return p["step"]
    return None


def _attempt(event: Event, attempts: Sequence[Attempt]) -> Attempt | None:
    for a in attempts:
        if event.attempt is not None and a.n == event.attempt:
            return a
    return attempts[-1] if attempts else None


def notification(event: Event, job: Job, attempts: Sequence[Attempt], points: Sequence[dict], *,
                 dashboard_url: str, raise_percent: int = 50) -> Reply | None:
    """The message for ``event``, or ``None`` when the event is not worth a message."""
    att = _attempt(event, attempts)
    head = f"*{job.name}* `{job.id}` ({job.team})"
    foot = context(f"<{dashboard_url}|Dashboard> · `/broker status {job.id}`")
    step = resume_step(event, points)
    resume_label = f"Resume from step {step}" if step is not None else "Resume from last checkpoint"
    new_budget = raised_budget(job.budget, raise_percent)
    raise_btn = button("raise_budget", f"Raise budget to {fmt(new_budget)}", job.id, budget=new_budget,
                       confirm=f"Raise the budget of {job.name} from {fmt(job.budget)} to {fmt(new_budget)}?")
    name = event.event

    if name == "start":
        n = event.attempt or (att.n if att else 1)
        if n > 1:
            frm = f" from step {step}" if step is not None else " from its last checkpoint"
            return _msg(f":arrow_forward: {head} resumed{frm} on {where(att.placement if att else None)} "
                        f"(attempt {n}).", foot)
        return _msg(f":rocket: {head} started on {where(att.placement if att else None)}.", foot)
    if name in ("preempted", "recover"):
        lost = event.data.get("steps_lost")
        if lost is None and step is not None:
            last = last_step(points, att.ended_at if att else None)
            lost = max(0, last - step) if last is not None else None
        lost_text = f"{lost} steps lost" if lost is not None else "steps lost unknown (no progress reported)"
        why = att.reason if att and att.reason else event.reason
        frm = f"step {step}" if step is not None else "its last checkpoint"
        return _msg(f":zap: {head} was interrupted on {where(att.placement if att else None)}: {why}.\n"
                    f"{lost_text}; it is queued to resume from {frm}.", foot)
    if name == "resume":
        return _msg(f":repeat: {head} was resumed by {event.actor}: {event.reason}", foot)
    if name == "budget_warning":
        pct = event.data.get("percent") or costs.percent(job.spent, job.budget)
        burn = costs.burn(job, attempts, event.time)
        left = f" About {burn['hours_left']} h left at {burn['price_per_hour']['usd']}/h." if burn["hours_left"] else ""
        return _msg(f":warning: {head} has used {pct}% of its budget ({fmt(job.spent)} of {fmt(job.budget)}).{left}",
                    actions([raise_btn, button("cancel", "Cancel", job.id, style="danger",
                                               confirm=f"Cancel {job.name}? Its last checkpoint is kept.")]), foot)
    if name == "stop_budget":
        return _msg(f":money_with_wings: {head} was stopped: it spent its budget ({fmt(job.spent)} of "
                    f"{fmt(job.budget)}). Raise the budget to let it resume.",
                    actions([raise_btn, button("resume", resume_label, job.id, style="primary"),
                             button("switch_ondemand", "Switch to on-demand", job.id)]), foot)
    if name == "fail":
        diagnosis = event.data.get("diagnosis") or event.reason or job.reason
        return _msg(f":x: {head} failed: {diagnosis}",
                    actions([button("resume", resume_label, job.id, style="primary"),
                             button("switch_ondemand", "Switch to on-demand", job.id,
                                    confirm="Resume on on-demand capacity (no preemptions, higher price)?"),
                             raise_btn]), foot)
    if name == "succeed":
        c = costs.job_costs(job, attempts)
        pct = f" ({c['saving_percent']}%)" if c["saving_percent"] is not None else ""
        return _msg(f":white_check_mark: {head} finished. Cost {c['spent']['usd']}; saved {c['saving']['usd']}{pct} "
                    f"against on-demand ({c['ondemand_equivalent']['usd']}) over {len(attempts)} attempt(s).", foot)
    if name in ("cancel", "ended") and event.to_state == "cancelled":
        return _msg(f":no_entry_sign: {head} was cancelled by {event.actor}.", foot)
    return None


def _msg(text: str, *extra: dict) -> Reply:
    plain = text.replace("*", "").replace("`", "")
    return Reply(plain, [section(text), *extra])
