"""A parsed command or a pressed button → one call to the service → a :class:`Reply`.

No rule lives here: who may act on which job is the service's check (a Slack
user acts as ``Principal(team=<their mapped team>)``), so Slack and the HTTP
API refuse the same things. Work that may take longer than Slack's 3 seconds
(fetching a spec URL, reading logs) comes back as :class:`Deferred`: the edge
acknowledges at once and posts the result to the ``response_url``.
"""

from __future__ import annotations

import difflib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker import costs
from broker.auth import Principal
from broker.lifecycle import FINAL_STATES, JobState
from broker.models import Job
from broker.service import Conflict, Invalid, NotFound
from broker.slack import blocks, messages
from broker.slack.blocks import Reply, esc
from broker.slack.commands import SUBMIT_OPTIONS, Command, shown
from broker.slack.config import SlackConfig
from broker.spec import SETTING_FIELDS, SpecError, _parse_broker, same_setting
from broker.task_text import load_text
from broker.views import deadline_words, iso
from pricing.money import fmt_limit

JOB_ID_TEXT = re.compile(r"[\x21-\x7e]{1,200}")
"""A job id as a button carries it: printable ASCII, no space (the broker's ids are ``j-`` and hex)."""

Fetch = Callable[[str], str]
"""Read a spec URL and return its text; raises ``ValueError`` with a sentence."""

ACTION_KINDS = {v: k for k, v in blocks.ACTIONS.items()}

ACTIVE = [s for s in JobState if s not in FINAL_STATES]
ENDED = list(FINAL_STATES)
ENDED_NAMES = frozenset(s.value for s in FINAL_STATES)
ALL_JOBS = 100_000
"""Read them all (as the service's queue does): a count of what a capped list returned was the cap."""
RECENT = 5
"""How many ended jobs ``status`` lists: those that ended last."""
RECENT_WINDOWS = (600, 3600, 6 * 3600, 86_400, 7 * 86_400, 30 * 86_400)
"""How far back, in seconds, ``status`` reads jobs by their end, widening until :data:`RECENT` are found. From ten
minutes: each window's read is every ended job in it (the store lists by submission, not by end), and a day's was
0.2 s of each `status` with 5,000 jobs ended that day; the few reads of a short window cost a millisecond each."""
RECENT_OLDER = 200
"""Where fewer ended in the last month: how many of the ended jobs submitted last are read besides."""

SLACK_WORDS = {"budget_usd": "budget", "broker.budget_usd": "budget"}
"""The API's field names a refusal in Slack says in the command's own words (``budget j-1 $5``, ``submit budget=$5``:
"budget"). A submit's refusals name ``broker.budget_usd``, the task's field, in their field and in their text ("give
broker.budget_usd at most $2.94"): both said "budget" (:func:`for_slack`)."""

NOT_RESUMED = re.compile(r"^not resumed:\s*", re.I)
"""How the service begins some refusals of a resume; the Slack reply says "Not resumed:" once."""

JOB_ID_FIRST = re.compile(r"^j-")
"""A refusal that begins with a job's id, which keeps its case."""

CLI_ADVICE = [
    # spec.py: an env or secret with no value ("required" in SkyPilot)
    (re.compile(r"`broker submit --(?:env|secret) ([A-Za-z_][A-Za-z0-9_]*)=\.\.\.` \(or \1: \"\" for an empty one\)"),
     r'a value in the YAML (\1: …, or \1: "" for an empty one)'),
    # service.py: a workdir or file_mounts source on the broker's host, which a team's submit may not name
    (re.compile(r"`broker submit` uploads the workdir and local file_mounts sources instead \(--upload-workdir\)"),
     "from Slack, give the workdir as a git repository (workdir: {url: …, ref: …}) and sources as bucket URLs, "
     "or submit from a terminal with `broker submit`, which uploads local files"),
    # service.py: a resume or switch refused for a failure of the job's own, which --force gets past (Slack: "force",
    # the word after `resume <job id>`, or the button that asks first); an env is set on resume only by the CLI/API
    (re.compile(r"\b(resume|switch) it with --force\b"), r"\1 it with force"),
    (re.compile(r"broker resume (\S+) --env NAME=value needs no --force"),
     r"a resume from a terminal sets it with no force needed (`broker resume \1 --env NAME=value`; Slack's resume "
     r"sets no env)"),
    (re.compile(r"\band broker ondemand \S+ then pins it to on-demand"),
     "and its *Switch to on-demand* button then pins it to on-demand"),
    # service.py: the on-demand switch over the job's own price cap
    (re.compile(r"\bwith a max_price_per_hour that\b"), "with a `max_price=` that"),
    (re.compile(r"\bthe job's max_price_per_hour of\b"), "the job's max_price of"),
]
"""The service's refusals that advise a CLI flag, and what a Slack user can do instead (the API keeps its words)."""


def for_slack(reason: str) -> str:
    for pattern, instead in CLI_ADVICE:
        reason = pattern.sub(instead, reason)
    return reason.replace("broker.budget_usd", "budget")


SUBMIT_SETTLE_SECONDS = 1.5
"""How long the submit's reply waits at most for this broker's engine to look at the job
(:meth:`Dispatcher._looked_at`): short of ``broker submit``'s 3 s (:data:`broker.cli.SUBMIT_SETTLE_SECONDS`), since
Slack takes an answer within 3 s and one later than the edge's ``INLINE_SECONDS`` (2 s, ``broker/api/slack.py``)
comes as a second message."""


def _queue_words(position: int | None, start: float | None = None) -> str:
    """A submitted job's place in the queue, for the submit's reply, and its rough start where one is known
    (``start``, as ``status`` says it: on each reader's own clock). The position counts the whole queue, and the
    scheduler starts a job past those ahead of it that wait for capacity it can do without (best-effort FIFO,
    :mod:`broker.queue`): "#3 in queue" was said of a job placed at the next tick. With a start, the engine has
    weighed the job and the estimate what the jobs ahead of it need. Without one (not weighed yet: a new job's reason
    says nothing of capacity; or waiting for something else, spot or its budget, or for ends nobody can tell, which
    ``status`` says), the reply says the position may not hold."""
    if not position:
        return ""
    if start is not None:
        return f" · #{position} in queue, roughly starting at {blocks.start_time(start)}"
    if position == 1:
        return " · #1 in queue"
    ahead = "the job ahead of it does" if position == 2 else "the jobs ahead of it do"
    return f" · #{position} in queue; it may start sooner on capacity {ahead} not use"


_OPTION_OF = {key: option for option, key in SUBMIT_OPTIONS.items() if key}
_DOLLARS = {"budget_usd", "max_price_per_hour"}


def _overridden(opts: dict[str, Any], section: dict, *, now: float) -> list[str]:
    """The options that set a ``broker:`` key the YAML sets to another value, each said as "budget=$1 overrides the
    YAML's broker.budget_usd '2'"; none where they agree (the same value given twice is one value)."""
    said = []
    for key, value in opts.items():
        theirs = section.get(key)
        if key not in SETTING_FIELDS or theirs is None or same_setting(key, value, theirs, now=now):
            continue
        shown = f"'{theirs}'" if isinstance(theirs, str) else str(theirs).lower() if isinstance(theirs, bool) \
            else str(theirs)
        # `budget=$1` comes as "1", `max_price=$2` as typed
        typed = f"${str(value).removeprefix('$')}" if key in _DOLLARS else value
        said.append(f"{_OPTION_OF.get(key, key)}={typed} overrides the YAML's broker.{key} {shown}")
    return said


def _in_option_words(exc: Invalid, given: set[str]) -> Invalid:
    """A submit's refusal of a ``broker:`` setting that a Slack option gave (``given``: the keys the options set), in
    the option's own word, as docs/slack.md promises: `deadline=yesterday` was answered "broker.deadline: ...",
    `team=nlp` "broker.team: you can submit only for your team", where `budget=` already said "budget". The field and
    the sentence both (a deadline refused against `expected_hours=` names that option too); a setting the YAML's own
    ``broker:`` gave keeps its field's name."""
    words = {key: _OPTION_OF[key] for key in given if key in _OPTION_OF}
    if not words:
        return exc
    field = exc.field.removeprefix("broker.") if exc.field.startswith("broker.") else None
    reason = re.sub(r"\bbroker\.(" + "|".join(map(re.escape, words)) + r")\b", lambda m: words[m[1]], exc.reason)
    return Invalid(words[field] if field in words else exc.field, reason, exc.status)


@dataclass(frozen=True)
class Deferred:
    """Acknowledge with ``ack`` now; run ``work`` after answering and post what it returns."""

    ack: Reply
    work: Callable[[], Reply]


class Dispatcher:
    def __init__(self, service, cfg: SlackConfig, *, dashboard_url: str, fetch: Fetch):
        self.service = service
        self.cfg = cfg
        self.dashboard_url = dashboard_url
        self.fetch = fetch

    # -- slash commands -------------------------------------------------------------------------

    def command(self, cmd: Command, who: Principal, *, trigger_id: str | None = None) -> Reply | Deferred:
        """``trigger_id``: Slack's id of this invocation of the command, the same in a retry of it. A submit
        passes it to the service as its idempotency key, so a replayed request does not submit twice."""
        handler = getattr(self, f"_cmd_{cmd.name}")
        kwargs = {"idempotency_key": f"slack:{trigger_id}"} if cmd.name == "submit" and trigger_id else {}
        if cmd.name in ("logs",) or (cmd.name == "submit" and cmd.url):
            return Deferred(Reply(f":hourglass: Working on `{cmd.name}`…"),
                            lambda: self._guard(handler, cmd, who, **kwargs))
        return self._guard(handler, cmd, who, **kwargs)

    def _guard(self, fn: Callable[..., Reply], *args, **kwargs) -> Reply:
        try:
            return fn(*args, **kwargs)
        except NotFound as exc:
            like = f" Did you mean {' or '.join(f'`{i}`' for i in exc.like[:3])}?" if exc.like else ""
            return blocks.error(f"No job `{exc.args[0]}` that you can see.{like}")
        except Conflict as exc:
            # the service's sentence says why, and whether it passes ("… is running, not ended", "try again"):
            # "Not now:" led every one, also those that never pass ("has already ended (succeeded)")
            text = for_slack(str(exc)).rstrip(".")
            if NOT_RESUMED.match(text):
                return blocks.error(f"Not resumed: {NOT_RESUMED.sub('', text)}.")
            return blocks.error(f"{text if JOB_ID_FIRST.match(text) else text[:1].upper() + text[1:]}.")
        except Invalid as exc:
            return blocks.error(f"{SLACK_WORDS.get(exc.field, exc.field)}: {for_slack(exc.reason)}")
        except costs.CostQueryError as exc:
            return blocks.error(str(exc))

    def _cmd_help(self, cmd: Command, who: Principal) -> Reply:
        return blocks.help_reply(self.cfg.command)

    def _cmd_status(self, cmd: Command, who: Principal) -> Reply:
        # the queue's words as the API's job view has them: a start too late for a deadline, why there is no estimate
        if cmd.job_id:
            job = self.service.get(who, cmd.job_id)
            q = self.service.queue_waits(who, of=[job])
            reply = blocks.job_reply(job, self.service.attempts(who, job.id), q.positions.get(job.id),
                                     self.dashboard_url, q.starts.get(job.id), q.waiting.get(job.id))
            # a failed or budget-stopped job goes on in one click from here too, not only from its notification
            buttons = messages.continue_buttons(job, messages.resume_step(None, job), self.cfg.raise_budget_percent,
                                                at_least=self._resume_needs(job))
            if buttons is None:
                return reply
            return Reply(reply.text, [*reply.blocks[:-1], buttons, reply.blocks[-1]])
        # what runs first (running, launching, stopping), then the queue in its order, then what ended last: in
        # listing order, a long queue's newest jobs filled the message and pushed the running ones off
        active = self.service.list(who, states=ACTIVE, limit=ALL_JOBS)
        q = self.service.queue_waits(who, of=active)
        active.sort(key=lambda j: (j.state is JobState.QUEUED, q.positions.get(j.id, 0)))
        recent = self._recently_ended(who)
        return blocks.jobs_reply(f"{len(active)} active job(s), {len(recent)} recently ended",
                                 active + [job for _, job in recent], q.positions,
                                 "No jobs yet. Submit one with `submit`.", q.starts, q.waiting,
                                 ended={job.id: end for end, job in recent}, see_all=self._see_all())

    def _see_all(self) -> str:
        """Where a list cut short in Slack is seen whole."""
        return f"`broker status` in a terminal lists them all, as does <{self.dashboard_url}|the dashboard>"

    def _resume_needs(self, job: Job) -> int | None:
        """The budget a resume of budget-stopped ``job`` needs, as the service's refusal would say it ("raise the
        budget to at least $X"); ``None`` where it needs no more, or says no figure."""
        return self.service.resume_needs(job)

    def _recently_ended(self, who: Principal) -> list[tuple[float, Job]]:
        """The :data:`RECENT` jobs ``who`` can see that ended last, as ``(end, job)``: newest end first, jobs that
        ended at the same moment by id. A job's end is when it last moved to a final state (its event), not its
        ``updated_at``: a budget raised on a job that stopped at its budget yesterday changes the job, not when it
        ended, and listed it first as if it had just ended. A job is last written no earlier than it ended, so the
        store's update-time index still finds every job that ended in a window: read over ten minutes, then wider
        windows (:data:`RECENT_WINDOWS`) up to a month back, until that many ended in the window; beyond a month,
        the ended jobs submitted last (what a month holds no more of) are added to those."""
        now = self.service.clock()
        found: list[Job] = []
        ends: dict[str, float] = {}  # each job's end, read once however many windows hold it
        for seconds in RECENT_WINDOWS:
            found = self.service.list(who, states=ENDED, limit=ALL_JOBS, active_since=now - seconds)
            latest = self._ended_last(who, found, ends)
            if len(latest) >= RECENT and latest[-1][0] >= now - seconds:  # none written before it ended later
                return latest
        seen = {j.id for j in found}
        found += [j for j in self.service.list(who, states=ENDED, limit=RECENT_OLDER) if j.id not in seen]
        return self._ended_last(who, found, ends)

    def _ended_last(self, who: Principal, jobs: list[Job], ends: dict[str, float]) -> list[tuple[float, Job]]:
        """The :data:`RECENT` of ``jobs`` that ended last, as ``(end, job)``, newest end first and ties by id.
        Each job's events are read latest-written first, and no further once the next was last written before
        the last of those found ended (it cannot have ended later): a few reads, not one per job."""
        best: list[tuple[float, Job]] = []
        for job in sorted(jobs, key=lambda j: j.updated_at, reverse=True):
            if len(best) >= RECENT and job.updated_at < best[-1][0]:
                break
            if job.id not in ends:
                ends[job.id] = self._end_of(who, job)
            best.append((ends[job.id], job))
            best = sorted(best, key=lambda e: (-e[0], e[1].id))[:RECENT]
        return best

    def _end_of(self, who: Principal, job: Job) -> float:
        """When ``job`` (ended) last moved to a final state: its latest event into one (a note, such as a budget
        change, stays in the state it found); its ``updated_at`` where no event says (a job stored without its
        events, or pruned since it was listed)."""
        try:
            events = self.service.events(who, job.id)
        except NotFound:
            return job.updated_at
        ends = [e.time for e in events if e.to_state in ENDED_NAMES and e.from_state != e.to_state]
        return min(max(ends), job.updated_at) if ends else job.updated_at

    def _cmd_queue(self, cmd: Command, who: Principal) -> Reply:
        q = self.service.queue_waits(who)
        queued = sorted(self.service.list(who, state="queued", limit=ALL_JOBS), key=lambda j: q.positions.get(j.id, 0))
        return blocks.jobs_reply(f"{len(queued)} job(s) waiting", queued, q.positions, "Nothing is waiting.", q.starts,
                                 q.waiting, see_all=self._see_all())

    def _cmd_logs(self, cmd: Command, who: Principal) -> Reply:
        return blocks.logs_reply(cmd.job_id, self.service.logs(who, cmd.job_id))

    def _cmd_cancel(self, cmd: Command, who: Principal) -> Reply:
        job = self.service.cancel(who, cmd.job_id, reason=f"cancelled from Slack by {who.name}")
        return Reply(f"Cancelling {esc(job.id)}", [blocks.section(blocks.job_line(job))])

    def _cmd_resume(self, cmd: Command, who: Principal) -> Reply:
        return self._resume(who, cmd.job_id, force=cmd.force)

    def _cmd_budget(self, cmd: Command, who: Principal) -> Reply:
        return self._raise(who, cmd.job_id, cmd.amount)

    def _cmd_deadline(self, cmd: Command, who: Principal) -> Reply:
        before = self.service.get(who, cmd.job_id).deadline
        job = self.service.set_deadline(who, cmd.job_id, cmd.when)
        if job.deadline == before:
            said = "Deadline kept" + (f" at {blocks.local_time(before)}" if before is not None else " (none)")
        elif job.deadline is None:
            said = f"Deadline {blocks.local_time(before)} removed"
        elif before is None:
            said = f"Deadline set to {blocks.local_time(job.deadline)}"
        else:
            said = f"Deadline moved from {blocks.local_time(before)} to {blocks.local_time(job.deadline)}"
        return self._done(f"{said} for", job)

    def _cmd_costs(self, cmd: Command, who: Principal) -> Reply:
        job = self._job_named(cmd.team, who)
        if job is not None and cmd.period is not None:  # answered with the whole life, the period unsaid
            return blocks.error(f"A job's costs are its whole life: `costs {job.id}` takes no period "
                                f"(`{cmd.period}`).")
        if job is not None:  # `costs j-a1` was read as a team: "You can see only your team's costs"
            return blocks.job_costs_reply(job, costs.job_costs(job, self.service.attempts(who, job.id)),
                                          self.dashboard_url)
        team = cmd.team
        if not who.admin:
            if team and team != who.team:
                known = {*self.service.settings.teams, self.service.settings.default_team}
                if team not in known:  # `costs visoin`: a typo read as a question of permission
                    # the closest of every team, as `costs <that team>` would be answered: `costs teamb` from team-a
                    # was asked "Did you mean `team-a`?"
                    teams = sorted(t for t in known if t)
                    close = difflib.get_close_matches(team, teams, n=1) or \
                        difflib.get_close_matches(team.lower(), teams, n=1)
                    likely = f" Did you mean `{close[0]}`?" if close else ""
                    then = ("You can see only your team's costs" if close and close[0] != who.team
                            else "You can see your team's costs")
                    return blocks.error(f"There is no team `{shown(team)}`.{likely} {then} ({who.team}).")
                return blocks.error(f"You can see only your team's costs ({who.team}).")
            team = who.team
        self.service.check_team(team)  # a typo'd team was an empty report, as if it had spent nothing
        now = self.service.clock()
        win = costs.window(now=now, period=cmd.period or "7d")
        history = costs.gather(self.service.store, team=team, win=win,
                               retention_days=self.service.settings.job_retention_days)
        q = self.service.queue_waits(who)  # the reply shows no queue: its positions and starts, as the dashboard's
        report = costs.report(history.jobs, history.attempts, win=win, now=now, positions=q.positions,
                              starts=q.starts, team=team, ledger=history.ledger,
                              retention_days=history.retention_days)
        report["monthly_caps"] = self.service.monthly_caps(team, now)  # as GET /v1/costs has it
        return blocks.costs_reply(report, self.dashboard_url)

    def _job_named(self, word: str | None, who: Principal):
        """The job ``word`` names, when it is no team the broker knows (nor the user's own) and the user can see a
        job of that id; else ``None``, and the word is read as a team. A word that is no team and looks like a job
        id (``j-…``), or begins one of the user's jobs' ids, is a job id: one the user cannot see raises
        :class:`NotFound`, answered as ``status <id>`` answers it ("No job … Did you mean …?"), where
        ``costs j-f46ca`` (a part of an id) answered "You can see only your team's costs"."""
        if not word or word == who.team:
            return None
        try:
            self.service.check_team(word)
            return None  # a team: another team's costs are for admins, and the team report says so
        except Invalid:
            pass
        try:
            return self.service.get(who, word)
        except NotFound as exc:
            if word.lower().startswith("j-") or exc.like:
                raise
            return None

    def _cmd_submit(self, cmd: Command, who: Principal, idempotency_key: str | None = None) -> Reply:
        try:
            text = self.fetch(cmd.url) if cmd.url else cmd.yaml
            raw = load_text(text or "", max_bytes=self.service.settings.max_body_bytes)
        except ValueError as exc:  # SpecError is a ValueError too
            msg = str(exc)
            if isinstance(exc, SpecError):  # `body` is the API's word for what a Slack user pasted: its YAML
                where = exc.field.removeprefix("body").lstrip(".")
                msg = f"{where}: {exc.reason}" if where else f"its YAML {exc.reason}"
            return blocks.error(f"Could not read the task: {msg}")
        opts = dict(cmd.options)
        if "name" in opts:
            raw["name"] = opts.pop("name")
        if "priority" in opts:
            # ASCII digits only, as the API reads it (int() also reads "١٢" as 12); anything else is left as text,
            # which the API's own check refuses, and its words (the range it takes) are the reply's
            if re.fullmatch(r"[+-]?[0-9]{1,50}", opts["priority"]):
                opts["priority"] = int(opts["priority"])
            try:
                _parse_broker({"priority": opts["priority"]}, now=self.service.clock())
            except SpecError as exc:
                return blocks.error(f"priority: {exc.reason}")
        if opts and not isinstance(raw.get("broker"), (dict, type(None))):
            # the options were merged into an empty section in its place: `broker: 5` was dropped unsaid
            return blocks.error("broker: must be a mapping")
        # an option wins over the YAML, as `broker submit --budget` does over broker.budget_usd; said in the reply
        # (`budget=$1` with the YAML's `budget_usd: '2'` was submitted at $1 without a word)
        overridden = _overridden(opts, raw.get("broker") or {}, now=self.service.clock())
        if opts:
            raw["broker"] = {**(raw.get("broker") or {}), **opts}
        try:
            job, created = self.service.submit(who, raw, idempotency_key=idempotency_key)
        except Invalid as exc:
            raise _in_option_words(exc, set(opts)) from None
        job = self._looked_at(who, job) if created else job
        q = self.service.queue_waits(who, of=[job])  # its place and rough start, as `status` reads them
        tiers = (job.quote or {}).get("tiers") or []
        est = f" · cheapest: {tiers[0]['tier']} {tiers[0]['text']}" if tiers else ""
        verb = "Submitted" if created else "Already submitted"
        # the moment the broker read, on the reader's own clock: a misread unit or time zone shows now, not when late
        due = f" · due {blocks.local_time(job.deadline)}" if job.deadline is not None else ""
        return Reply(f"{verb} {job.id}", [
            blocks.section(f":inbox_tray: {verb} *{esc(job.name)}* `{job.id}` for team {esc(job.team)} — budget "
                           f"{fmt_limit(job.budget)}{due}{esc(est)}"
                           + _queue_words(q.positions.get(job.id), q.starts.get(job.id))
                           # a start too late for its deadline, as `status` and `queue` say it
                           + (f"; {esc(late)}" if (late := deadline_words(job, q.starts.get(job.id))) else "")),
            *([blocks.context(esc(f"{'; '.join(overridden)}."))] if overridden else []),
            blocks.context(f"Follow it with `{self.cfg.command} status {job.id}`; {self._notified(job, who, opts)}."),
        ])

    def _notified(self, job: Job, who: Principal, opts: dict) -> str:
        """Where a submitted job's notifications go, in the submit's reply. An admin's submit without ``team=`` goes
        to the broker's default team, as the API's does: "notifications go to your team's channel" was said of it, for
        a team with no channel, and of an admin, who has no team of their own."""
        if job.team == who.team:
            return "notifications go to your team's channel"
        unsaid = "" if "team" in opts else f" (no team= given: the broker's default team, {esc(job.team)})"
        where = self.cfg.destination(job.team)
        if where is None:
            known = ", ".join(sorted(t for t in self.service.settings.teams if t))
            other = f"; give team= for another ({esc(known)})" if known and "team" not in opts else ""
            return f"team {esc(job.team)}{unsaid} has no Slack channel, so nothing is posted about it{other}"
        return f"notifications go to team {esc(job.team)}'s channel{unsaid}"

    def _looked_at(self, who: Principal, job: Job) -> Job:
        """``job``, just submitted or resumed, read again until this broker's engine has looked at it (written since
        the command's own write, the version ``job`` holds: placed, or given a reason of its own), for at most
        :data:`SUBMIT_SETTLE_SECONDS`: its rough start is known only then, as ``broker submit`` waits for it
        (``broker.cli._say_behind``). The CLI said an estimated start; Slack's reply gave the position alone. A
        broker process that runs no engine (``engine: off``, an API worker beside another process's engine) does not
        wait, and its reply says the position as before."""
        if not self.service.settings.engine:
            return job
        until = time.monotonic() + SUBMIT_SETTLE_SECONDS
        since = job.version
        while job.state is JobState.QUEUED and job.version <= since and time.monotonic() < until:
            time.sleep(0.1)
            try:
                job = self.service.get(who, job.id)
            except NotFound:  # cancelled and pruned meanwhile: the submit was taken all the same
                break
        return job

    # -- buttons --------------------------------------------------------------------------------

    def action(self, action_id: str, value: str, who: Principal) -> Reply:
        kind = ACTION_KINDS.get(action_id)
        try:
            data: dict[str, Any] = json.loads(value)
            job_id = data["job"]
        except (ValueError, KeyError, TypeError, RecursionError):  # a value nested past the parser's depth too
            return blocks.error("That button is out of date.")
        if not isinstance(job_id, str) or not JOB_ID_TEXT.fullmatch(job_id):  # the broker's ids: ASCII, no surrogates
            return blocks.error("That button is out of date.")
        if kind == "resume":
            return self._guard(self._resume, who, job_id, force=data.get("force") is True)
        if kind == "switch_ondemand":
            return self._guard(self._switch, who, job_id, force=data.get("force") is True)
        if kind == "raise_budget":
            # a budget in micro-dollars above nothing, as the broker writes it: `true` (an int to Python) and -5
            # were answered "Nothing changed: ... this button sets -$0.000005", as if the button were the broker's
            budget = data.get("budget")
            if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
                return blocks.error("That button is out of date.")
            return self._guard(self._raise, who, job_id, budget, button=True)
        if kind == "cancel":
            return self._guard(self._cmd_cancel, Command("cancel", job_id=job_id), who)
        return blocks.error("Unknown button.")

    def _resume(self, who: Principal, job_id: str, *, force: bool = False) -> Reply:
        try:
            job = self.service.resume(who, job_id, force=force)
        except Conflict as exc:
            # the service refuses a failure in the job's own code unless forced: say how to force it here. Only that
            # refusal (on "force"): one for credentials, a shared checkpoint base, the team's cap, ... is the service's
            # own sentence, which says what to do ("resume … force" under it forced what force does not fix)
            job = self.service.get(who, job_id)
            again = self._resumed_already(who, job)
            if again is not None:
                return again
            if exc.field == "state":  # "j-a2 is running, not ended: …" says itself what did not happen
                raise
            if force or job.state is not JobState.FAILED or exc.field != "force":
                # every refusal of a resume leads "Not resumed:", as docs/slack.md says (a budget-stopped job's
                # "Only $0.0005 of the $0.002 budget is left…" did not), as a switch's leads "Not moved to on-demand:"
                said = NOT_RESUMED.sub("", str(exc)).rstrip(".")
                said = said if JOB_ID_FIRST.match(said) else said[:1].lower() + said[1:]
                return blocks.error(f"Not resumed: {for_slack(said)}.")
            text = esc(for_slack(NOT_RESUMED.sub("", str(exc))))  # the service's words begin "not resumed:" (the API's too)
            return Reply(f":warning: Not resumed: {text}", [
                blocks.section(f":warning: Not resumed: {text}"),
                blocks.context(f"To run it again anyway: `{self.cfg.command} resume {job.id} force`"),
            ])
        # its place in the queue and rough start once the engine has weighed it, as a submit's reply says them:
        # "Resumed … — queued" said neither
        return self._where("Resumed", who, job)

    def _where(self, did: str, who: Principal, job: Job) -> Reply:
        """``did`` (a resume, a switch that resumed) said with where ``job``, back in the queue, stands once this
        broker's engine has weighed it (:meth:`_looked_at`): its place in the queue and rough start."""
        job = self._looked_at(who, job)
        q = self.service.queue_waits(who, of=[job])
        return Reply(f"{did} {esc(job.id)}", [blocks.section(
            f"{did} `{esc(job.id)}`.\n"
            + blocks.job_line(job, q.positions.get(job.id), q.starts.get(job.id), q.waiting.get(job.id)))])

    def _resumed_already(self, who: Principal, job: Job) -> Reply | None:
        """The answer to a resume of a job resumed since it ended (a second press of *Resume*, a colleague's): who
        resumed it, when, and where it is now; the service's "is queued, not ended: only a failed or
        budget-stopped job resumes" read as if the press had failed. ``None`` for a job that is not so."""
        if job.state.is_final:
            return None
        try:
            last = next((e for e in reversed(self.service.events(who, job.id)) if e.event == "resume"), None)
        except NotFound:
            return None
        if last is None:
            return None
        said = f"`{esc(job.id)}` was already resumed by {esc(last.actor)} at {iso(last.time)}: it is {job.state.value}."
        return Reply(f":information_source: {said}", [blocks.section(f":information_source: {said}")], refused=True)

    def _switch(self, who: Principal, job_id: str, *, force: bool = False) -> Reply:
        was_queued = self.service.get(who, job_id).state is JobState.QUEUED
        try:
            job = self.service.switch_to_ondemand(who, job_id, force=force)
        except Conflict as exc:
            # a button whose confirmation did not show the diagnosis (a budget message's, or one posted before
            # the failure's showed it): show it now, with a button that asks again and forces. Only for the refusal
            # force gets past (on "force"): credentials, a budget, a spot-only task, ... are the service's own
            # sentence, with no button ("failed for a reason of its own" was said of a lost node too)
            job = self.service.get(who, job_id)
            if force or job.state is not JobState.FAILED or exc.field != "force":
                raise
            text = (job.diagnosis or {}).get("text") or job.reason
            step = job.last_checkpoint.get("step")
            frm = f"step {step}" if step is not None else "the beginning (it saved no checkpoint)"
            return Reply(f":warning: Not switched: {esc(text)}", [
                blocks.section(f":warning: Not switched to on-demand: `{esc(job.id)}` failed for a reason of its own, "
                               f"likely to recur: {esc(text)}"),
                blocks.actions([messages.ondemand_button(job.id, frm, own_failure=text)]),
            ])
        if job.state is not JobState.QUEUED or was_queued:
            return self._done("Switched to on-demand", job)
        # a stopped or failed job the switch resumed: where it stands, as the resume's reply says it ("Switched … —
        # queued" said neither)
        return self._where("Switched to on-demand", who, job)

    def _raise(self, who: Principal, job_id: str, amount: int, *, button: bool = False) -> Reply:
        before = self.service.get(who, job_id).budget
        if button and amount <= before:  # pressed twice, or after the budget was set since: never lowers it
            return blocks.error(f"Nothing changed: the budget of `{job_id}` is already {fmt_limit(before)} (this button "
                                f"sets {fmt_limit(amount)}). To set another: `{self.cfg.command} budget {job_id} <$>`")
        job = self.service.raise_budget(who, job_id, amount, only_up=button)
        verb = "raised" if job.budget > before else "lowered" if job.budget < before else "kept"
        done = self._done(f"Budget {verb} from {fmt_limit(before)} to {fmt_limit(job.budget)} for", job)
        if job.state is not JobState.STOPPED_BUDGET or self._resume_needs(job) is not None:
            return done
        # its reason says "resume it to continue from its last checkpoint": the button that does it, here
        step = messages.resume_step(None, job)
        label = f"Resume from step {step}" if step is not None else "Resume from the start"
        return Reply(done.text, [*done.blocks, blocks.actions([blocks.button("resume", label, job.id, style="primary")])])

    @staticmethod
    def _done(what: str, job) -> Reply:
        return Reply(f"{what} {esc(job.id)}", [blocks.section(f"{what} `{esc(job.id)}`.\n" + blocks.job_line(job))])
