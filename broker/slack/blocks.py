"""Block Kit rendering for replies and notifications. Pure: data in, JSON-ready dicts out.

Every message also carries ``text``: Slack shows it in notifications and to
clients that cannot draw blocks.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.models import Attempt, Job
from broker.slack.commands import USAGE
from broker.views import (beside_state, deadline_met_words, duration, minute, preemptions_words, saving_words,
                          shown_reason, step_words)
from pricing.money import fmt, fmt_spent_of

ACTIONS = {
    "resume": "broker_resume",
    "switch_ondemand": "broker_switch_ondemand",
    "raise_budget": "broker_raise_budget",
    "cancel": "broker_cancel",
}
"""Button kind → Slack ``action_id``; :mod:`.dispatch` maps them back."""

STATE_EMOJI = {
    "queued": ":hourglass_flowing_sand:", "placed": ":round_pushpin:", "launching": ":rocket:",
    "running": ":arrow_forward:", "succeeded": ":white_check_mark:", "failed": ":x:",
    "cancelling": ":no_entry_sign:", "cancelled": ":no_entry_sign:", "stopped_budget": ":money_with_wings:",
}


@dataclass(frozen=True)
class Reply:
    """A Slack message: fallback text, blocks, and whether the whole channel sees it. ``refused``: the answer to a
    request that was refused and changed nothing (not sent to Slack), so a retry of it may run again."""

    text: str
    blocks: list[dict] = field(default_factory=list)
    in_channel: bool = False
    refused: bool = False

    def payload(self) -> dict:
        # Slack takes at most 40,000 characters of ``text``: a safety net, each reply is sized by its maker
        body: dict = {"response_type": "in_channel" if self.in_channel else "ephemeral",
                      "text": shorten(self.text, MESSAGE_TEXT_CHARS)}
        if self.blocks:
            body["blocks"] = self.blocks
        return body


MESSAGE_TEXT_CHARS = 4000
"""The most of a message's fallback ``text`` sent: Slack truncates past 40,000 and advises at most 4,000."""

TEXT_CHARS = 3000
"""The most text Slack takes in a section or context element."""


def esc(text: object) -> str:
    """Text from a job, a user or a log, made literal in mrkdwn: Slack's three escapes (``&``, ``<``, ``>``), so
    ``<!channel>`` or ``<https://evil|click>`` in a job's output reads as written and neither pings nor links."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def local_time(epoch: float) -> str:
    """A moment as Slack shows it to each reader, on their own clock (its ``<!date^…>`` token: "Tomorrow 09:00"),
    with the UTC minute as the text a client that cannot render it shows (a notification's preview)."""
    fallback = time.strftime("%Y-%m-%d %H:%MZ", time.gmtime(epoch))
    return f"<!date^{int(epoch)}^{{date_short_pretty}} {{time}}|{fallback}>"


def start_time(epoch: float) -> str:
    """An estimated start as :func:`local_time` gives a moment, but at the nearest minute, as the reason beside it names
    it (:func:`broker.views.minute`, which the queue's ``starts ~`` column reads too): Slack shows a date token's time
    cut to its minute, and a submit's reply read "roughly starting at 15:44" (a start at 15:44:34) beside "estimated
    to start at 2026-12-07 15:45Z, after its deadline"."""
    rounded = (math.floor(epoch) + 30) // 60 * 60
    return f"<!date^{rounded}^{{date_short_pretty}} {{time}}|{minute(epoch)}>"


def shorten(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: whole lines where it can, then ``…``; never half an ``&amp;``.
    A safety net: what may be long (a list, a log) is sized by its caller to fit."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 1]
    if "\n" in cut[limit // 2:]:
        cut = cut[:cut.rindex("\n") + 1]
    return re.sub(r"&[a-z]{0,3}$", "", cut) + "…"


def section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": shorten(text, TEXT_CHARS)}}


def context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": shorten(text, TEXT_CHARS)}]}


def fields(pairs: Sequence[tuple[str, str]]) -> dict:
    return {"type": "section", "fields": [{"type": "mrkdwn", "text": shorten(f"*{k}*\n{v}", 2000)}
                                          for k, v in pairs[:10]]}


def button(kind: str, label: str, job_id: str, *, style: str | None = None, confirm: str | None = None,
           **value) -> dict:
    b: dict = {"type": "button", "action_id": ACTIONS[kind], "text": {"type": "plain_text", "text": label[:75]},
               "value": json.dumps({"job": job_id, **value}, separators=(",", ":"))}
    if style:
        b["style"] = style
    if confirm:
        b["confirm"] = {"title": {"type": "plain_text", "text": "Are you sure?"},
                        "text": {"type": "mrkdwn", "text": confirm[:300]},
                        "confirm": {"type": "plain_text", "text": "Yes"},
                        "deny": {"type": "plain_text", "text": "No"}}
    return b


def actions(buttons: Sequence[dict]) -> dict:
    return {"type": "actions", "elements": list(buttons)}


def error(text: str) -> Reply:
    """A refusal. ``text`` is plain (it may quote what the user typed or a job's reason): escaped here, and its
    fallback text cut as its section is (Slack refuses a message's ``text`` over 40,000 characters)."""
    said = fit_escaped(text, TEXT_CHARS - len(":warning: "))
    return Reply(f":warning: {said}", [section(f":warning: {said}")], refused=True)


def help_reply(command: str) -> Reply:
    lines = "\n".join(f"`{esc(command)} {esc(u)}`" for u in USAGE.values())  # `<job id>` is text, not a link
    return Reply(f"{command} commands", [
        section(f"*spot-broker* runs your training job where it is cheapest and resumes it after preemption.\n{lines}"),
        context("Submit takes a URL to a SkyPilot YAML or the YAML itself on the lines after the command. Without "
                "budget=, your team's default budget applies. A value with spaces goes in quotes: "
                "deadline=\"1 hour 30 mins\"."),
    ])


def where(placement: dict | None) -> str:
    """``spot g5.xlarge in aws/us-east-1a`` from a placement record."""
    if not placement:
        return "not placed"
    p = placement
    loc = p.get("zone") or p.get("location") or p.get("region") or "?"
    cloud = f"{p['cloud']}/" if p.get("cloud") and p["cloud"] != loc else ""  # on-prem: "local", not "local/local"
    return f"{p.get('tier', '?')} {p.get('instance_type', '?')} in {cloud}{loc}"


REASON_CHARS = 300
"""The most of a job's reason one line of a list shows."""


def clip(text: str, limit: int) -> str:
    """Plain ``text`` (before :func:`esc`) within ``limit`` characters, ending ``…`` when cut."""
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def clip_reason(text: str, limit: int) -> str:
    """A reason within ``limit`` characters, its end kept: a reason's last words say what matters now ("if spot does
    not come by about 18:21Z, it cannot meet its deadline", "it moves to on-demand … by about …"), after a long
    parenthetical (what an offer is, what it was estimated at). So the parentheticals are shortened first, the longest
    first, to ``(…)``; then the middle is cut, keeping the start and the last clause; only a last clause too long
    for the line is cut at its end, as :func:`clip` does."""
    if len(text) <= limit:
        return text
    out = text
    while len(out) > limit:
        groups = _parentheticals(out)
        if not groups:
            break
        start, end = max(groups, key=lambda g: g[1] - g[0])
        if end - start <= len("(…)"):
            break
        out = out[:start] + "(…)" + out[end:]
    if len(out) <= limit:
        return out
    cut = max((out.rfind(mark) for mark in ("; ", ": ", ". ", ", ")), default=-1)
    tail = out[cut:] if cut > 0 else ""  # "; if spot does not come by …", its separator with it
    if tail and len(tail) <= limit * 2 // 3:
        return clip(out[:cut].rstrip(), limit - len(tail)) + tail
    return clip(out, limit)


def _parentheticals(text: str) -> list[tuple[int, int]]:
    """The outermost ``(…)`` groups of ``text`` as (start, end) slices; an unclosed one is left alone."""
    groups, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")" and depth:
            depth -= 1
            if depth == 0:
                groups.append((start, i + 1))
    return groups


def job_line(job: Job, position: int | None = None, start: float | None = None, waiting: str | None = None,
             ended: float | None = None, team: bool = False, said: str | None = None, due: bool = False) -> str:
    """One job in a line, and its reason on the next as the API shows it (:func:`broker.views.shown_reason`): for a
    queued job, with a start too late for its deadline or why it has no estimate (``waiting``, from
    :meth:`broker.service.BrokerService.queue_waits`); for a running one, the step it last reported
    (:func:`broker.views.step_words`); for an ended one, when it ended (``ended``), which orders a list of them;
    with ``team``, whose job it is (an admin's list of several teams' jobs); ``said``, the reason to show in place
    of the job's own (``""``: none, as in a list that says a reason shared by several lines once); with ``due``, the
    deadline of a job not ended, beside its rough start (a list: ``broker status`` has its due column, and a job's
    own reply its Due field)."""
    emoji = STATE_EMOJI.get(job.state.value, "")
    pos = f" · #{position} in queue" if position else ""
    if position and start is not None:  # on each reader's own clock, as Slack shows a date token
        pos += f", roughly starting at {start_time(start)}"
    if due and job.deadline is not None and not job.state.is_final:  # an ended job's deadline is history
        pos += f" · due {local_time(job.deadline)}"
    if ended is not None:
        pos += f" · ended {local_time(ended)}"
    step = step_words(job.state.value, job.progress)
    pos += f" · {step}" if step else ""
    if said is None:
        said = line_reason(job, start, waiting)
    reason = f"\n      _{esc(clip_reason(said, REASON_CHARS))}_" if said else ""
    spent, budget = fmt_spent_of(job.spent, job.budget)
    whose = f" ({esc(job.team)})" if team else ""
    return (f"{emoji} *{esc(job.name)}* `{esc(job.id)}`{whose} — {job.state.value}{pos} · spent {spent} of "
            f"{budget}{reason}")


def line_reason(job: Job, start: float | None = None, waiting: str | None = None) -> str:
    """The reason :func:`job_line` shows under a job: less a lead that says its state ("— succeeded" then
    "succeeded: ...")."""
    return beside_state(job.state.value, shown_reason(job, start, waiting))


def job_reply(job: Job, attempts: Sequence[Attempt], position: int | None, dashboard_url: str,
              start: float | None = None, waiting: str | None = None) -> Reply:
    blocks = [section(job_line(job, position, start, waiting)),
              fields([("Team", esc(job.team)), where_field(job, attempts),
                      ("Attempts", str(len(attempts))), ("Budget", "{} of {}".format(*fmt_spent_of(job.spent, job.budget))),
                      # on each reader's own clock; an ended job's deadline is history: whether it met it, as
                      # `broker status ID` says it
                      *([("Due", local_time(job.deadline))] if job.deadline is not None
                        and not job.state.is_final else []),
                      *([("Deadline", deadline_field(job))] if job.deadline is not None
                        and job.state.is_final else [])])]
    if attempts:
        rows = [f"{a.n}. {a.state.value} on {esc(where(a.placement))} — {fmt(a.cost)}"
                + (f" ({esc(clip(beside_state(a.state.value, a.reason), REASON_CHARS))})" if a.reason else "")
                for a in attempts[-5:]]
        blocks.append(section("*Attempts*\n" + "\n".join(rows)))
    blocks.append(context(f"<{dashboard_url}|Open the cost dashboard>"))
    return Reply(f"{esc(job.name)} ({esc(job.id)}): {job.state.value}", blocks)


def where_field(job: Job, attempts: Sequence[Attempt]) -> tuple[str, str]:
    """A job's reply's field of where it is: where it is placed (placed, launching, running, stopping, or ended, the
    placement it last had); for a queued job, where its last attempt ran, said so — "*Where* spot … in aws/sim-b" of a
    job queued again after a preemption there read as if it ran there still (``broker status ID`` shows no Where of a
    queued job, only its attempts)."""
    if job.state.value == "queued":
        if not attempts:
            return "Where", where(None)
        last = attempts[-1]
        return "Last attempt", esc(f"{where(last.placement)} (attempt {last.n}, {last.state.value})")
    return "Where", esc(where(job.placement or (attempts[-1].placement if attempts else None)))


def deadline_field(job: Job) -> str:
    """An ended job's deadline, on each reader's own clock, and whether it met it, as ``broker status ID`` says it
    (:func:`broker.views.deadline_met_words`, at its last change, which the engine keeps as its end): ``… (missed by
    1 min)``, ``… (met, 5.9 h before it)``."""
    said = deadline_met_words(job.state.value, job.deadline, job.updated_at) if job.deadline is not None else None
    return local_time(job.deadline) + (f" ({esc(said)})" if said else "")


def jobs_reply(title: str, jobs: Sequence[Job], positions: dict[str, int], empty: str,
               starts: dict[str, float] | None = None, waiting: dict[str, str] | None = None,
               ended: dict[str, float] | None = None, see_all: str = "") -> Reply:
    """A titled list of jobs: as many lines as fit in one section (at most ``LIST_LINES``), then how many more and
    where to see them (``see_all``); ``starts`` and ``waiting`` as :meth:`broker.service.BrokerService.queue_waits`
    gives them, ``ended`` the ended jobs' ends (:func:`job_line`). A reason that several queued jobs share (the
    same wait, hundreds of characters long) is said once, above the list, not under each of them: repeated, it
    filled the section with a handful of queued jobs and pushed the rest off."""
    if not jobs:
        return Reply(empty, [section(empty)])
    starts, waiting, ended = starts or {}, waiting or {}, ended or {}
    # the jobs that ended lately (last in ``jobs``) keep their lines however long the queue before them is
    last = [j for j in jobs if j.id in ended]
    first = [j for j in jobs if j.id not in ended]
    first = first[:LIST_LINES - min(len(last), ENDED_LINES)]
    shown = first + last[:LIST_LINES - len(first)]
    reasons = {j.id: line_reason(j, starts.get(j.id), waiting.get(j.id)) for j in shown}
    queued = [reasons[j.id] for j in shown if j.state.value == "queued" and reasons[j.id]]
    shared = max(set(queued), key=queued.count) if queued else ""
    shared = shared if queued.count(shared) > 1 else ""
    said = shared.removeprefix("waiting: ")  # the reason's own word: "are waiting: waiting: the pool ..." said it twice
    head = f"▸ _queued jobs marked ▸ are waiting: {esc(clip_reason(said, REASON_CHARS))}_" if shared else ""
    lines: list[str] = [head] if head else []
    size = len(head) if head else -1  # the joining newlines: one fewer than the lines
    teams = len({j.team for j in jobs}) > 1  # an admin's list: which team's each job is, as `broker status` shows
    listed = 0
    for j in shown:
        common = shared and j.state.value == "queued" and reasons[j.id] == shared
        line = job_line(j, positions.get(j.id), starts.get(j.id), waiting.get(j.id), ended.get(j.id), team=teams,
                        said="" if common else reasons[j.id], due=True)
        line = f"▸ {line}" if common else line
        more = len(jobs) - listed - 1
        room = TEXT_CHARS - (len(_more(more, see_all)) if more else 0)
        if size + 1 + len(line) > room:
            break
        lines.append(line)
        listed += 1
        size += 1 + len(line)
    return Reply(title, [section(f"*{title}*"), section("\n".join(lines) + _more(len(jobs) - listed, see_all))])


LIST_LINES = 15
"""The most jobs a list shows; ``status <id>`` shows one, ``/v1/jobs`` and ``broker status`` all."""

ENDED_LINES = 5
"""The lines of a list kept for the jobs that ended lately, however many active jobs come before them."""


def _more(n: int, see_all: str = "") -> str:
    return f"\n…and {n} more{f' ({see_all})' if see_all else ''}" if n > 0 else ""


def costs_reply(report: dict, dashboard_url: str) -> Reply:
    t = report["totals"]
    who = esc(report["team"] or "all teams")
    saved = saving_words(t["saving"], t["saving_percent"], f"the same time on on-demand ({t['ondemand_equivalent']['usd']})")
    tiers = " · ".join(f"{k} {v['usd']}" for k, v in t["by_tier"].items())
    pre = report["preemptions"]
    blocks = [
        section(f"*Spend for {who}, last {report['window']['period']}*: {t['spent']['usd']}\n"
                f"{saved[0].upper()}{saved[1:]}."),
        context(tiers),
        *(context(f"Team {esc(c['team'])}: {esc(c['text'])}") for c in report.get("monthly_caps") or ()),
    ]
    if report["top_jobs"]:
        blocks.append(section("*Most expensive*\n" + "\n".join(
            f"`{esc(j['id'])}` {esc(j['name'])} — {j['spent']['usd']}" for j in report["top_jobs"][:5])))
    for note in ("rounding_note", "retention_note"):
        if report.get(note):
            blocks.append(context(report[note]))
    # a node lost without notice (an on-prem pool's) is no preemption; a job that has not resumed since waits, not
    # "recovers" (it said "1 preemption(s), 14 s to recover" of a job still queued): as the CLI says it
    said = preemptions_words(pre)
    said = said[0].upper() + said[1:]
    blocks.append(context(f"{said} · <{dashboard_url}|Open the dashboard>"))
    return Reply(f"Spend for {who}: {t['spent']['usd']}, {saving_words(t['saving'], t['saving_percent'])}", blocks)


def job_costs_reply(job: Job, c: dict, dashboard_url: str) -> Reply:
    """One job's cost over its whole life (:func:`broker.costs.job_costs`), attempt by attempt, as
    ``broker costs <job id>`` shows it."""
    saved = saving_words(c["saving"], c["saving_percent"],
                         f"the same time on on-demand ({c['ondemand_equivalent']['usd']})")
    head = (f"*Cost of {esc(job.name)}* `{esc(job.id)}` ({esc(job.team)}, {job.state.value}), over its whole life: "
            f"{c['spent_of_budget']['spent']} of its {c['spent_of_budget']['budget']} budget")
    if not c["attempts"]:
        out = [section(head), context("No attempt has run, so it has cost nothing.")]
    else:
        rows = [f"{a['n']}. {a['state']} on {esc(a['tier'])} in {esc(a['zone'])}"
                + (f", {a['num_nodes']} nodes" if (a.get("num_nodes") or 1) > 1 else "")  # its price is all of them
                + (f" at {a['price_per_hour']['usd']}/h" if a["price_per_hour"] else "")
                + f", {duration(a['seconds'])} — {a['cost']['usd']}" for a in c["attempts"][-10:]]
        more = len(c["attempts"]) - len(rows)
        out = [section(f"{head}\n{saved[0].upper()}{saved[1:]}."),
               section("*Attempts*\n" + "\n".join(rows) + (f"\n…and {more} earlier" if more else ""))]
        if c.get("rounding_note"):
            out.append(context(c["rounding_note"]))
    out.append(context(f"<{dashboard_url}|Open the cost dashboard>"))
    return Reply(f"Cost of {esc(job.id)}: {c['spent']['usd']}, {saving_words(c['saving'], c['saving_percent'])}", out)


def fit_escaped(text: str, room: int, render=None, *, mark: str = "…", keep_end: bool = False) -> str:
    """``render(text)`` (:func:`esc` by default) within ``room`` characters: when it does not fit, the plain text is
    cut — its end, or its start with ``keep_end`` — and ``mark`` put where it was cut. Measured after escaping (a
    text of ``<`` or backticks grows up to 5 times), and cut before it, so no escape is ever split."""
    render = render or esc
    out = render(text)
    n = room - len(mark)
    while len(out) > room:
        n = max(n, 0)
        out = mark + render(text[max(len(text) - n, 0):]) if keep_end else render(text[:n].rstrip()) + mark
        n -= max(1, (len(out) - room) // 5)  # an escape is at most 5 characters: never more cut than needed
    return out


def log_text(text: str) -> str:
    """Output as the inside of a ``` block: escaped (Slack still reads ``<!channel>`` there), and no ``` of its own
    to close the block early."""
    return esc(text).replace("```", "` ` `")


def logs_reply(job_id: str, data: dict, limit: int = 2800) -> Reply:
    """The newest output that fits in ``limit`` characters once escaped, inside one closed ``` block."""
    text = data.get("data") or ""
    jid = esc(job_id)
    if not text:
        return Reply(f"No output yet for {jid}", [section(f"No output yet for `{jid}`.")])
    # sized after escaping: a log of backticks or <, cut first, overflowed the section
    body = fit_escaped(text, limit, log_text, mark="…\n", keep_end=True)
    return Reply(f"Logs of {jid}", [section(f"*Logs of `{jid}` (attempt {data.get('attempt')})*"),
                                    section(f"```{body}```")])
