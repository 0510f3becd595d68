"""Notifications: one stored :class:`~broker.models.Event` → one Slack message (or none), and :func:`summary`: many
of one kind (:func:`notice_kind`) → one message, for a burst. Pure.

====================  ===============================================================  ===============================
event                 says                                                             buttons
====================  ===============================================================  ===============================
start                 started on <where> (attempt 1) / resumed from step N on <where>  —
recover               preempted (or node lost) in <zone>; N steps lost; resumes from   —
                      step N — or, for a retried error or a move off spot, why
resume                resumed by <who>                                                 —
budget_warning        at N% of its budget, time left at this price (stopping, if so)   raise budget, cancel
stop_budget           reached its budget: checkpointing and stopping (not by default)  —
past_expected_length  running past its expected_hours: how far, what to do (not by     cancel
                      default)
deadline_passed       its deadline passed while it waited or ran: it runs on, late     cancel
                      (not by default)
resume_not_restored   its attempt did not restore the checkpoint it resumed from: how  cancel
                      many steps it trains again (not by default)
ended                 stopped at its budget                                            raise budget, resume, on-demand
cancel/ended          cancelled (by <who>)                                             —
fail                  failed: the job's diagnosis in plain words                       resume, on-demand, raise budget
succeed               finished: cost, saving against on-demand                         —
====================  ===============================================================  ===============================

What the engine puts in ``event.data`` and is used here: on ``recover``,
``fail`` and ``ended``: ``zone``, ``tier``, ``diagnosis`` (text),
``diagnosis_class``, ``checkpoint_step`` (the step a resume starts from) and
``steps_lost`` (when the attempt reported progress); on ``budget_warning``:
``percent``. The job record adds ``diagnosis`` (``text``, ``infrastructure``)
and ``last_checkpoint`` (``step``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from broker import costs
from broker.lifecycle import JobState
from broker.models import Attempt, Event, Job
from broker.slack.blocks import Reply, actions, button, context, esc, fit_escaped, section, where
from broker.views import saving_words
from pricing.money import Micros, fmt_left, fmt_limit, fmt_spent_of, to_micros

INTERRUPTIONS = {"preempted": "was preempted", "node_lost": "lost its node"}
"""``diagnosis_class`` values of a ``recover`` that was the infrastructure's doing."""

CONFIRM_CHARS = 300
"""The most text Slack shows in a confirm dialog."""

OWN_FAILURE = "It failed for a reason of its own, likely to recur: "


def recur_warning(diagnosis: str, ask: str) -> str:
    """A confirm dialog's text for running again a job that failed for a reason of its own: the warning,
    the diagnosis and the question, within Slack's limit; a long diagnosis is shortened, never the question.
    The diagnosis (plain text, from the job's output) is escaped, and measured so."""
    return f"{OWN_FAILURE}{fit_escaped(diagnosis, CONFIRM_CHARS - len(OWN_FAILURE) - len(ask) - 1)} {ask}"


def ondemand_button(job_id: str, frm: str, own_failure: str | None = None) -> dict:
    """*Switch to on-demand*. After a failure of the job's own (``own_failure``: its diagnosis) the switch runs it
    again, so the confirmation shows the diagnosis and the warning first, as *Resume* does, and the button forces it."""
    if own_failure is not None:
        return button("switch_ondemand", "Switch to on-demand", job_id, force=True, confirm=recur_warning(
            own_failure, f"On-demand will not change that. Run it again anyway, on on-demand, from {frm}?"))
    return button("switch_ondemand", "Switch to on-demand", job_id,
                  confirm="Resume on on-demand capacity (no preemptions, higher price)?")


def raised_budget(budget: Micros, percent: int, at_least: Micros | None = None) -> Micros:
    """The budget the "Raise budget" button proposes: ``percent`` more, and no less than ``at_least`` (what a resume
    needs, as the service says it), rounded up to a readable amount at the budget's own precision — whole dollars
    from a dollar up, two significant digits under it: a $0.0005 budget was offered $1.00, 2,000 times itself."""
    new = max(budget + budget * percent // 100, at_least or 0, budget + 1)
    if new >= 1_000_000:
        return -(-new // 1_000_000) * 1_000_000
    step = 10 ** max(len(str(new)) - 2, 0)  # micros: two significant digits
    return -(-new // step) * step


NEEDED = re.compile(r"at least \$([0-9][0-9,]*(?:\.[0-9]+)?)")
"""The figure in the service's "raise the budget to at least $X" (a resume's refusal, a raised job's reason)."""


def needed_to_resume(text: str | None) -> Micros | None:
    """The budget the service said a resume needs, "at least $X", in ``text``; ``None`` where it says none."""
    m = NEEDED.search(text or "")
    return to_micros(m.group(1).replace(",", "")) if m else None


def resume_step(event: Event | None, job: Job) -> int | None:
    """The step a resume would start from: the event's ``checkpoint_step``, else the job's last checkpoint."""
    for step in ((event.data if event else {}).get("checkpoint_step"), (job.last_checkpoint or {}).get("step")):
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    return None


def raise_button(job: Job, raise_percent: int, at_least: Micros | None = None) -> dict:
    """*Raise budget* by ``raise_percent``, and to no less than a resume needs (``at_least``, else the figure the
    job's reason quotes from the service), rounded to a readable amount (:func:`raised_budget`), confirmed first."""
    new_budget = raised_budget(job.budget, raise_percent, at_least if at_least is not None
                               else needed_to_resume(job.reason))
    return button("raise_budget", f"Raise budget to {fmt_limit(new_budget)}", job.id, budget=new_budget,
                  confirm=f"Raise the budget of {esc(job.name)} from {fmt_limit(job.budget)} to "
                          f"{fmt_limit(new_budget)}?")


def about_money(job: Job, failure: str | None = None) -> bool:
    """Whether a failed job failed for its budget (a diagnosis of a budget's class, or a reason that says so): a
    failure of the job's own (out of memory) or of its node is not helped by more money, and offers no raise."""
    cls = str((job.diagnosis or {}).get("class") or "")
    return "budget" in cls or any("budget" in (t or "").lower() for t in (failure, job.reason))


def continue_buttons(job: Job, step: int | None, raise_percent: int, failure: str | None = None, *,
                     state: JobState | None = None, at_least: Micros | None = None) -> dict | None:
    """The buttons that continue a job that ended but may go on — resume, on-demand, raise budget — or ``None`` for
    a job in another state. The same in the notification of its end and in ``status <id>``, where a user who comes
    back later looks (it had no button: the one click was only in a message that may have scrolled away).
    ``failure``: a failed job's diagnosis, shown before a button runs again a job that failed for a reason of its own.
    ``state``: how the job ended, for a notification (the job may have been resumed since); else its state now.
    ``at_least``: what a resume needs (the service's figure), the least the raise button proposes."""
    state = state or job.state
    frm = f"step {step}" if step is not None else "the beginning (it saved no checkpoint)"
    resume_label = f"Resume from step {step}" if step is not None else "Resume from the start"
    # a job pinned to on-demand already runs its next attempt there: a "Switch to on-demand" beside it changes nothing
    pinned = job.force_tier == "ondemand"
    if state is JobState.STOPPED_BUDGET:
        if at_least is not None and job.state is JobState.STOPPED_BUDGET:
            # what is left pays for no minute's run and clean stop (the service's figure): Resume and Switch would only
            # answer "raise the budget to at least $X first", so the raise is the one way on
            return actions([{**raise_button(job, raise_percent, at_least), "style": "primary"},
                            button("cancel", "Cancel", job.id, style="danger",
                                   confirm=f"Cancel {esc(job.name)}? Its last checkpoint is kept.")])
        return actions([raise_button(job, raise_percent, at_least), button("resume", resume_label, job.id, style="primary"),
                        *([] if pinned else [ondemand_button(job.id, frm)])])
    if state is not JobState.FAILED:
        return None
    text = failure or (job.diagnosis or {}).get("text") or job.reason
    if (job.diagnosis or {}).get("infrastructure"):
        resume = button("resume", resume_label, job.id, style="primary")
        ondemand = ondemand_button(job.id, frm)
    else:  # the job's own code: the service resumes it only when forced, so the button asks first
        resume = button("resume", resume_label, job.id, style="primary", force=True,
                        confirm=recur_warning(text, f"Run it again anyway from {frm}?"))
        ondemand = ondemand_button(job.id, frm, own_failure=text)
    money = [raise_button(job, raise_percent, at_least)] if about_money(job, text) else []
    return actions([resume, *([] if pinned else [ondemand]), *money])


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


def _zone(event: Event, att: Attempt | None) -> str:
    """``spot g5.xlarge in aws/us-east-1a`` from the attempt, or the event's ``tier``/``zone``."""
    if att is not None and att.placement:
        return esc(where(att.placement))
    tier, zone = event.data.get("tier"), event.data.get("zone")
    return esc(" in ".join(str(x) for x in (tier, zone) if x) or "its placement")


def notification(event: Event, job: Job, attempts: Sequence[Attempt], points: Sequence[dict], *,
                 dashboard_url: str, raise_percent: int = 50, command: str = "/broker",
                 cancelled_by: str | None = None, at_least: Micros | None = None) -> Reply | None:
    """The message for ``event``, or ``None`` when the event is not worth a message (``cancelled_by``: who cancelled
    the job, for the end of a cancelled job that the engine records). Whatever comes from the job,
    its output or a person (names, reasons, diagnoses, who acted) is escaped: only the bot's own markup is mrkdwn.
    ``at_least``: the budget a resume of the job needs (:meth:`broker.service.BrokerService.resume_needs`), which its
    *Raise budget* button proposes at least; ``None``: the figure its reason quotes, if any."""
    att = _attempt(event, attempts)
    head = f"{bold(esc(job.name))} {code(esc(job.id))} ({esc(job.team)})"
    foot = context(f"<{dashboard_url}|Dashboard> · `{command} status {job.id}`")
    step = resume_step(event, job)
    frm = f"step {step}" if step is not None else "the beginning (it saved no checkpoint)"
    raise_btn = raise_button(job, raise_percent, at_least)
    name = event.event

    if name == "start":
        n = event.attempt or (att.n if att else 1)
        if n > 1:
            return _msg(f":arrow_forward: {head} resumed from {frm} on {_zone(event, att)} (attempt {n}).", foot)
        return _msg(f":rocket: {head} started on {_zone(event, att)}.", foot)
    if name == "recover":
        lost = event.data.get("steps_lost")
        if lost is None and step is not None:
            last = last_step(points, att.ended_at if att else None)
            lost = max(0, last - step) if last is not None else None
        lost_text = f"{lost} steps lost" if lost is not None else "steps lost unknown (no progress reported)"
        what = INTERRUPTIONS.get(event.data.get("diagnosis_class"))
        if what is not None:
            zone, tier = event.data.get("zone"), event.data.get("tier")
            # "in sim-us-east-1a (spot, attempt 1)": "(spot) (attempt 1)" read as two afterthoughts
            place, also = (esc(zone), f"{esc(tier)}, ") if zone and tier else (esc(zone), "") if zone \
                else (_zone(event, att), "")
            return _msg(f":zap: {head} {what} in {place} ({also}attempt {event.attempt or '?'}).\n"
                        f"{lost_text}; it is queued to resume from {frm}.", foot)
        why = esc(event.data.get("diagnosis") or event.reason)
        return _msg(f":repeat: {head} attempt {event.attempt or '?'} on {_zone(event, att)} ended: {why}\n"
                    f"It is queued again and resumes from {frm} ({lost_text}).", foot)
    if name == "resume":  # the service's reason already names who: "resumed by slack:U1 from step 400"
        why = event.reason if event.actor in (event.reason or "") else f"was resumed by {event.actor}: {event.reason}"
        return _msg(f":repeat: {head} {esc(why)}.", foot)
    if name == "budget_warning":
        pct = event.data.get("percent") or costs.percent(job.spent, job.budget)
        burn = costs.burn(job, attempts, event.time)
        left = time_left(job, burn)
        spent, budget = fmt_spent_of(job.spent, job.budget)
        return _msg(f":warning: {head} has used {pct}% of its budget ({spent} of {budget}).{left}",
                    actions([raise_btn, button("cancel", "Cancel", job.id, style="danger",
                                               confirm=f"Cancel {esc(job.name)}? Its last checkpoint is kept.")]),
                    foot)
    if name in ("stop_budget", "ended") and event.to_state == "stopped_budget":
        left = job.budget - job.spent
        spent, budget = fmt_spent_of(job.spent, job.budget)
        # "it spent its budget" with a quarter of it left (a budget lowered to under a start's cost) read as a wrong
        # figure: what is left is said when it is more than a hundredth of the budget
        why = (f"it spent its budget ({spent} of {budget})" if left * 100 <= job.budget else
               f"it spent {spent} of its {budget} budget, and what is left ({fmt_left(left, budget=job.budget)}) does "
               "not pay for more running and a clean stop")
        return _msg(f":money_with_wings: {head} was stopped: {why}. Raise the budget to let it resume from {frm}.",
                    *_present(continue_buttons(job, step, raise_percent, state=JobState.STOPPED_BUDGET,
                                               at_least=at_least)), foot)
    if name == "stop_budget":
        return _msg(f":money_with_wings: {head} reached its budget "
                    "({} of {}): it is checkpointing and stopping.".format(*fmt_spent_of(job.spent, job.budget)), foot)
    if name == "past_expected_length":  # opt-in (notifications.events): the reason says how far past, and what to do
        return _msg(f":hourglass_flowing_sand: {head} is {esc(event.reason)}.",
                    actions([button("cancel", "Cancel", job.id, style="danger",
                                    confirm=f"Cancel {esc(job.name)}? Its last checkpoint is kept.")]), foot)
    if name == "deadline_passed":  # opt-in (notifications.events): the reason says when, and where the job stands
        return _msg(f":alarm_clock: {head}: {esc(event.reason)}.",
                    actions([button("cancel", "Cancel", job.id, style="danger",
                                    confirm=f"Cancel {esc(job.name)}? Its last checkpoint is kept.")]), foot)
    if name == "resume_not_restored":  # opt-in: the reason says which checkpoint, how many steps again, where to look
        return _msg(f":warning: {head}: {esc(event.reason)}.",
                    actions([button("cancel", "Cancel", job.id, style="danger",
                                    confirm=f"Cancel {esc(job.name)}? Its last checkpoint is kept.")]), foot)
    if name == "fail":
        diagnosis = job.diagnosis or {}
        text = diagnosis.get("text") or event.data.get("diagnosis") or event.reason or job.reason
        buttons = continue_buttons(job, step, raise_percent, text, state=JobState.FAILED, at_least=at_least)
        return _msg(f":x: {head} failed: {esc(text)}", *_present(buttons), foot)
    if name == "succeed":
        c = costs.job_costs(job, attempts)
        saved = saving_words(c["saving"], c["saving_percent"], f"on-demand ({c['ondemand_equivalent']['usd']})")
        return _msg(f":white_check_mark: {head} finished. Cost {c['spent']['usd']}; {saved} over {len(attempts)} attempt(s).",
                    foot)
    if name in ("cancel", "ended") and event.to_state == "cancelled":
        # the engine's "ended" once a running job stopped is not who cancelled it: the cancel's actor (``cancelled_by``)
        who = event.actor if event.event == "cancel" else cancelled_by
        by = f" by {esc(who)}" if who else ""
        return _msg(f":no_entry_sign: {head} was cancelled{by}.", foot)
    return None


SUMMARY_HEADS = {
    "start": (":rocket:", "started"),
    "preempted": (":zap:", "were preempted; each is queued to resume from its last checkpoint"),
    "node_lost": (":zap:", "lost their node; each is queued to resume from its last checkpoint"),
    "retried": (":repeat:", "had an attempt end in an error; each is queued again"),
    "resume": (":repeat:", "were resumed"),
    "budget_warning": (":warning:", "are near their budget"),
    "stop_budget": (":money_with_wings:", "reached their budget and are checkpointing and stopping"),
    "past_expected_length": (":hourglass_flowing_sand:", "are running past their expected length"),
    "deadline_passed": (":alarm_clock:", "passed their deadline; each runs on, late"),
    "resume_not_restored": (":warning:", "did not restore the checkpoint they were resumed from; each trains again"),
    "stopped_budget": (":money_with_wings:", "were stopped at their budget"),
    "fail": (":x:", "failed"),
    "succeed": (":white_check_mark:", "finished"),
    "cancelled": (":no_entry_sign:", "were cancelled"),
}
"""A summary's emoji and words per :func:`notice_kind`: "12 jobs *were cancelled*"."""

SUMMARY_LISTED = 10
"""How many jobs a summary names before "and N more"."""

SUMMARY_NAME_CHARS = 40
"""The most characters of a job's name a summary shows (escaped), so ten of them fit one message."""


def notice_kind(event: Event) -> str:
    """What a notification says, as one word, for folding many of them into one summary: the event's name, but
    ``cancelled`` for a ``cancel`` or an ``ended`` that cancelled, ``stopped_budget`` for an ``ended`` at the
    budget, and ``preempted``/``node_lost``/``retried`` for a ``recover`` (the table above)."""
    name = event.event
    if name in ("cancel", "ended") and event.to_state == "cancelled":
        return "cancelled"
    if name in ("stop_budget", "ended") and event.to_state == "stopped_budget":
        return "stopped_budget"
    if name == "recover":
        cls = event.data.get("diagnosis_class")
        return cls if cls in INTERRUPTIONS else "retried"
    return name


def summary(kind: str, jobs: Sequence[Job], *, dashboard_url: str, command: str = "/broker",
            by: str | None = None) -> Reply:
    """One message for many notifications of one :func:`notice_kind` to one channel ("12 jobs were cancelled:
    *a* `j-1`, … and 2 more"), in place of a message each: a burst (200 jobs cancelled at once) posted one a job
    floods the channel and runs into Slack's rate limit of about a message a second. It names the first
    :data:`SUMMARY_LISTED` jobs and counts the rest, and says where each is seen — with its buttons, for a failed
    or budget-stopped one — one at a time. ``by``: who acted, when one person did for them all."""
    emoji, says = SUMMARY_HEADS.get(kind, (":information_source:", f"had a {esc(kind)} event"))
    teams = {j.team for j in jobs}
    listed = ", ".join(f"{bold(fit_escaped(j.name, SUMMARY_NAME_CHARS))} {code(esc(j.id))}"
                       + (f" ({esc(j.team)})" if len(teams) > 1 else "") for j in jobs[:SUMMARY_LISTED])
    more = len(jobs) - SUMMARY_LISTED
    rest = f", and {more} more" if more > 0 else ""
    who = f" by {esc(by)}" if by else ""
    team = f" ({esc(next(iter(teams)))})" if len(teams) == 1 else ""
    again = " (with the buttons that continue it)" if kind in ("fail", "stopped_budget", "budget_warning") else ""
    foot = context(f"`{command} status <job id>` shows one{again}; `broker status` in a terminal lists them all, "
                   f"as does <{dashboard_url}|the dashboard>")
    return _msg(f"{emoji} {len(jobs)} jobs{team} {says}{who}: {listed}{rest}.", foot)


def time_left(job: Job, burn: dict) -> str:
    """How long the budget left lasts at the price it runs at (``costs.burn``), never more than it does: hours to a
    tenth down to six minutes, then "under N minutes", then seconds ("Under 6 minutes" was said 16 s from the end).
    A job the engine is stopping at its budget (it warns in the same tick when what is left only pays for a clean
    stop) says so. Empty when it runs for free."""
    if burn["hours_left"] is None:
        return ""
    rate = burn["price_per_hour"]["usd"]
    price = burn["price_per_hour"]["micros"]
    seconds = max(0, job.budget - job.spent) * 3600 // price  # rounded down: what is left lasts at least this
    if seconds >= 360:
        said = f" About {burn['hours_left']} h left at {rate}/h."
    elif seconds >= 60:
        said = f" Under {seconds // 60 + 1} minutes left at {rate}/h."
    else:
        said = f" Under {seconds + 1} s left at {rate}/h."
    if job.state is JobState.STOPPING:
        said = said[:-1] + ": only enough for a clean stop, so it is checkpointing and stopping now."
    return said


def _present(block: dict | None) -> list[dict]:
    return [block] if block is not None else []


BOLD, CODE = "\ue000", "\ue001"
"""Marks (Unicode private use) of the broker's own markup in a message's text, until :func:`_msg` writes it: ``*…*``
and ``\`…\``` in the blocks, nothing in the plain ``text`` (a phone's push notification). Stripping every ``*`` and
backtick from the finished text took the job's own with them: a reason "key was '***'" read "key was ''"."""


def bold(text: str) -> str:
    return f"{BOLD}{text}{BOLD}"


def code(text: str) -> str:
    return f"{CODE}{text}{CODE}"


def _msg(text: str, *extra: dict) -> Reply:
    """A message of ``text`` (its markup marked with :func:`bold` and :func:`code`): the blocks' mrkdwn, and the plain
    text without the broker's markup but with every character of the job's own."""
    plain = text.replace(BOLD, "").replace(CODE, "")
    return Reply(plain, [section(text.replace(BOLD, "*").replace(CODE, "`")), *extra])
