"""Block Kit rendering for replies and notifications. Pure: data in, JSON-ready dicts out.

Every message also carries ``text``: Slack shows it in notifications and to
clients that cannot draw blocks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.models import Attempt, Job
from broker.slack.commands import USAGE
from broker.views import iso, saving_words
from pricing.money import fmt, fmt_limit

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
    """A Slack message: fallback text, blocks, and whether the whole channel sees it."""

    text: str
    blocks: list[dict] = field(default_factory=list)
    in_channel: bool = False

    def payload(self) -> dict:
        body: dict = {"response_type": "in_channel" if self.in_channel else "ephemeral", "text": self.text}
        if self.blocks:
            body["blocks"] = self.blocks
        return body


def section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}}


def context(text: str) -> dict:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": text[:3000]}]}


def fields(pairs: Sequence[tuple[str, str]]) -> dict:
    return {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"[:2000]} for k, v in pairs[:10]]}


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
    return Reply(f":warning: {text}", [section(f":warning: {text}")])


def help_reply(command: str) -> Reply:
    lines = "\n".join(f"`{command} {u}`" for u in USAGE.values())
    return Reply(f"{command} commands", [
        section(f"*spot-broker* runs your training job where it is cheapest and resumes it after preemption.\n{lines}"),
        context("Submit takes a URL to a SkyPilot YAML or the YAML itself on the lines after the command."),
    ])


def where(placement: dict | None) -> str:
    """``spot g5.xlarge in aws/us-east-1a`` from a placement record."""
    if not placement:
        return "not placed"
    p = placement
    loc = p.get("zone") or p.get("location") or p.get("region") or "?"
    cloud = f"{p['cloud']}/" if p.get("cloud") and p["cloud"] != loc else ""  # on-prem: "local", not "local/local"
    return f"{p.get('tier', '?')} {p.get('instance_type', '?')} in {cloud}{loc}"


def job_line(job: Job, position: int | None = None, start: float | None = None) -> str:
    emoji = STATE_EMOJI.get(job.state.value, "")
    pos = f" · #{position} in queue" if position else ""
    if position and start is not None:
        pos += f", roughly starting at {iso(start)}"
    return (f"{emoji} *{job.name}* `{job.id}` — {job.state.value}{pos} · spent {fmt(job.spent)} of "
            f"{fmt_limit(job.budget)}\n      _{job.reason}_")


def job_reply(job: Job, attempts: Sequence[Attempt], position: int | None, dashboard_url: str,
              start: float | None = None) -> Reply:
    blocks = [section(job_line(job, position, start)),
              fields([("Team", job.team), ("Where", where(job.placement or (attempts[-1].placement if attempts else None))),
                      ("Attempts", str(len(attempts))), ("Budget", f"{fmt(job.spent)} of {fmt_limit(job.budget)}")])]
    if attempts:
        rows = [f"{a.n}. {a.state.value} on {where(a.placement)} — {fmt(a.cost)}"
                + (f" ({a.reason})" if a.reason else "") for a in attempts[-5:]]
        blocks.append(section("*Attempts*\n" + "\n".join(rows)))
    blocks.append(context(f"<{dashboard_url}|Open the cost dashboard>"))
    return Reply(f"{job.name} ({job.id}): {job.state.value}", blocks)


def jobs_reply(title: str, jobs: Sequence[Job], positions: dict[str, int], empty: str,
               starts: dict[str, float] | None = None) -> Reply:
    if not jobs:
        return Reply(empty, [section(empty)])
    lines = [job_line(j, positions.get(j.id), (starts or {}).get(j.id)) for j in jobs[:15]]
    more = f"\n…and {len(jobs) - 15} more" if len(jobs) > 15 else ""
    return Reply(title, [section(f"*{title}*"), section("\n".join(lines) + more)])


def costs_reply(report: dict, dashboard_url: str) -> Reply:
    t = report["totals"]
    who = report["team"] or "all teams"
    saved = saving_words(t["saving"], t["saving_percent"], f"running the same work on on-demand ({t['ondemand_equivalent']['usd']})")
    tiers = " · ".join(f"{k} {v['usd']}" for k, v in t["by_tier"].items())
    pre = report["preemptions"]
    blocks = [
        section(f"*Spend for {who}, last {report['window']['period']}*: {t['spent']['usd']}\n"
                f"{saved[0].upper()}{saved[1:]}."),
        context(tiers),
    ]
    if report["top_jobs"]:
        blocks.append(section("*Most expensive*\n" + "\n".join(
            f"`{j['id']}` {j['name']} — {j['spent']['usd']}" for j in report["top_jobs"][:5])))
    blocks.append(context(f"{pre['count']} preemption(s), {pre['recovery_seconds'] // 60} min to recover · "
                          f"<{dashboard_url}|Open the dashboard>"))
    return Reply(f"Spend for {who}: {t['spent']['usd']}, {saving_words(t['saving'], None)}", blocks)


def logs_reply(job_id: str, data: dict, limit: int = 2800) -> Reply:
    text = data.get("data") or ""
    if not text:
        return Reply(f"No output yet for {job_id}", [section(f"No output yet for `{job_id}`.")])
    tail = text[-limit:]
    cut = "…\n" if len(text) > limit else ""
    return Reply(f"Logs of {job_id}", [section(f"*Logs of `{job_id}` (attempt {data.get('attempt')})*"),
                                       section(f"```{cut}{tail.replace('```', '` ` `')}```")])
