"""The notifier: stored events → messages in each team's channel, sent by a sender thread per destination.

``handle(event, job)`` only puts the pair on the bounded queue of its destination (a channel, or a webhook URL) and
returns, so the engine never waits on Slack. Each destination has a queue and a daemon sender thread of its own,
made the first time a notification goes there: a slow, hung or failing receiver holds up its own notifications
only, never another team's. A sender reads what the message needs (attempts, progress points) from the store,
renders it with :func:`broker.slack.messages.notification`, and delivers it, in order, retrying a transient failure
with backoff — 1 s, 2 s, 4 s … capped at ``max_backoff`` (60 s), or Slack's ``Retry-After`` (capped too) — for up
to ``retry_window`` (10 minutes: the waits and the tries themselves) and at most ``notifications.retries`` times;
later notifications to that destination wait behind it. Then it is dropped with a WARNING naming the destination,
the event and the job. A permanent error (``channel_not_found``, a 4xx from a webhook) is not retried. When a
destination's queue is full the newest notification is dropped and logged — the event itself is always in the
store. :meth:`Notifier.counters` gives what was sent, failed, dropped and discarded, for ``/metrics``.

Which events notify is ``notifications.events`` (default
:data:`broker.slack.config.DEFAULT_EVENTS`); the engine calls ``handle``
through its ``on_event`` hook once per committed event.

Bursts: each sender delivers in passes. A pass takes what is queued for its destination; one that begins less than
``pace`` seconds (1 s: Slack's rate for a channel or webhook) after that destination's last post first gathers what
arrives until then. Within a pass, more than ``summarize_over`` (5) notifications of one kind
(:func:`broker.slack.messages.notice_kind`: cancelled, failed, finished …) become ONE summary message
(:func:`broker.slack.messages.summary`) naming them; fewer are posted one by one, with their buttons, as before. 200
jobs cancelled at once post a handful of messages, not 200. Each queued notification is taken off the queue once
and is in at most one post (its own or a summary): the queues are in memory and nothing is re-sent after a
restart; :meth:`Notifier.close` says, at WARNING, how many it discards and which.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

from broker.models import Event, Job
from broker.slack import sdk
from broker.slack.config import SlackConfig
from broker.slack.messages import notice_kind, notification, summary

log = logging.getLogger("broker.slack")

Sender = Callable[[tuple[str, str], dict], None]

MAX_PASS = 1000
"""The most notifications one delivery pass takes (the queue's default bound): a pass ends even while more arrive."""

RETRY_WINDOW = 600.0
"""Seconds a message to a failing destination is retried for (its waits and its tries) before it is dropped."""

MAX_BACKOFF = 60.0
"""The longest wait between two tries of one message, Slack's ``Retry-After`` included."""

NAMED = 5
"""How many notifications a shutdown's or a drop's log line names (of each destination) before "and N more"."""


def slack_sender(cfg: SlackConfig) -> Sender:
    """Deliver to ("channel", id) with the bot token, or ("webhook", url)."""

    def send(dest: tuple[str, str], payload: dict) -> None:
        kind, target = dest
        if kind == "channel":
            sdk.post_message(cfg.bot_token or "", target, payload, api_url=cfg.api_url)
        else:
            sdk.post_webhook(target, payload)

    return send


def destination_words(dest: tuple[str, str]) -> str:
    """A destination as a log line may name it: ``channel C0123``, or ``webhook hooks.slack.com`` — a webhook's host
    only, never its URL, whose path is the secret that lets anyone post."""
    kind, target = dest
    if kind == "channel":
        return f"channel {target}"
    return f"webhook {urlsplit(target).hostname or '?'}"


def routes_words(cfg: SlackConfig, teams: Iterable[str] = ()) -> str:
    """Where each team's notifications go, in one line (webhooks by host), and which teams have none."""
    names = sorted({*teams, *(k for k in (*cfg.channels, *cfg.webhook_urls) if k != "*")})
    said, none = [], []
    for team in names:
        dest = cfg.destination(team)
        if dest is None:
            none.append(team)
        else:
            said.append(f"{team} → {destination_words(dest)}")
    other = cfg.destination("*")  # the "*" entry, if any: every team not named
    if other is not None:
        said.append(f"every other team → {destination_words(other)}")
    line = "; ".join(said) or "no team"
    if none:
        line += f"; no notifications for {', '.join(none)} (no entry in slack.channels or slack.webhook_urls)"
    return line


class _Lane:
    """One destination's queue and sender thread, and what its sender holds (taken off the queue, not yet sent)."""

    def __init__(self, dest: tuple[str, str], max_queue: int):
        self.dest = dest
        self.queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()  # set by close(): the sender ends its retries and stops
        self.last_post = float("-inf")  # time.monotonic() of this destination's last post (tried)
        self.holding: dict[int, tuple[Event, Job]] = {}  # id → (event, job) of the pass being delivered


class Notifier:
    def __init__(self, cfg: SlackConfig, store, *, dashboard_url: str, send: Sender | None = None,
                 sleep: Callable[[float], None] | None = None, max_queue: int = 1000,
                 max_backoff: float = MAX_BACKOFF, retry_window: float = RETRY_WINDOW, summarize_over: int = 5,
                 pace: float = 1.0, resume_needs: Callable[[Job], int | None] | None = None,
                 teams: Iterable[str] | None = None):
        self.cfg = cfg
        self.store = store
        #: the budget a resume of a budget-stopped job needs (BrokerService.resume_needs), for its Raise budget button
        self.resume_needs = resume_needs
        self.dashboard_url = dashboard_url
        self.send = send or slack_sender(cfg)
        #: waits between tries (tests: no wait); ``None``: wait on the destination's stop, so close() cuts it short
        self.sleep = sleep
        self.max_backoff = max_backoff
        self.retry_window = retry_window
        self.summarize_over = summarize_over  # more than this many of one kind for one channel in a pass: a summary
        self.pace = pace  # a pass that begins sooner than this after the destination's last post gathers until then
        self.max_queue = max_queue
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.sent = 0
        self.failed = 0  # given up on: a permanent error, or transient ones past the retries or the retry window
        self.dropped = 0  # not queued: the destination's queue was full
        self.discarded = 0  # still queued (or being retried) when the notifier was closed
        self.summarized = 0  # notifications that went out in a summary, not a message of their own
        if teams is None:  # the service's settings (notifier_for passes its resume_needs), for the teams they name
            teams = getattr(getattr(getattr(resume_needs, "__self__", None), "settings", None), "teams", None) or ()
        log.info("slack notifications: %s", routes_words(cfg, teams))

    # -- called by the engine (never blocks) ----------------------------------------------------

    def handle(self, event: Event, job: Job) -> None:
        """Queue a notification for ``event`` if it is one the team wants; return at once."""
        if event.event not in self.cfg.events:
            return
        dest = self.cfg.destination(job.team)
        if dest is None:
            return
        lane = self._lane(dest)
        try:
            lane.queue.put_nowait((event, job))
        except queue.Full:
            self._count("dropped")
            log.warning("slack: the queue of %s is full (%d waiting); dropped %s for %s",
                        destination_words(dest), self.max_queue, event.event, job.id)

    def counters(self) -> dict[str, int]:
        """What the notifier did since it started, for ``/metrics`` (``broker_slack_notifications_total{outcome}``):
        ``sent`` (posts, a summary one), ``failed`` (given up on), ``dropped`` (a destination's queue full),
        ``discarded`` (left unsent at shutdown), ``summarized`` (notifications that went out in a summary)."""
        with self._count_lock:
            return {"sent": self.sent, "failed": self.failed, "dropped": self.dropped, "discarded": self.discarded,
                    "summarized": self.summarized}

    def queued(self) -> int:
        """Notifications waiting or being delivered, over every destination (``broker_slack_notifications_queued``)."""
        with self._lock:
            lanes = list(self._lanes.values())
        return sum(lane.queue.unfinished_tasks for lane in lanes)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued notification was sent or given up on (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self.queued() and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.queued()

    def close(self, timeout: float = 5.0) -> None:
        """Give what is queued up to ``timeout`` to go out, then stop every sender; what is left is discarded and
        said at WARNING, per destination: how many, and which (the first few)."""
        self.flush(timeout)
        with self._lock:
            lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            lane.stop.set()
            left = list(lane.holding.values())
            while True:
                try:
                    item = lane.queue.get_nowait()
                except queue.Empty:
                    break
                lane.queue.task_done()
                if item is not None:
                    left.append(item)
            if left:
                self._count("discarded", len(left))
                log.warning("slack: shutting down: %d notification(s) to %s not sent, discarded: %s",
                            len(left), destination_words(lane.dest), _named(left))
            try:
                lane.queue.put_nowait(None)
            except queue.Full:  # (refilled meanwhile: the stop event ends it)
                pass
        deadline = time.monotonic() + min(timeout, 1.0)
        for lane in lanes:
            if lane.thread is not None:
                lane.thread.join(max(0.0, deadline - time.monotonic()))

    # -- the sender threads, one per destination ------------------------------------------------

    def _count(self, name: str, n: int = 1) -> None:
        with self._count_lock:
            setattr(self, name, getattr(self, name) + n)

    def _lane(self, dest: tuple[str, str]) -> _Lane:
        with self._lock:
            lane = self._lanes.get(dest)
            if lane is None:
                lane = self._lanes[dest] = _Lane(dest, self.max_queue)
            if lane.thread is None or not lane.thread.is_alive():
                lane.thread = threading.Thread(target=self._run, args=(lane,), daemon=True,
                                               name=f"broker-slack-{destination_words(dest)}")
                lane.thread.start()
            return lane

    def _run(self, lane: _Lane) -> None:
        while not lane.stop.is_set():
            first = lane.queue.get()
            batch, stop = self._gather(lane, first)
            lane.holding = {id(item): item for item in batch}
            try:
                if batch:
                    self._deliver_batch(batch, lane)
            except Exception:
                log.exception("slack notification failed")
            finally:
                if not lane.stop.is_set():
                    lane.holding = {}
                for _ in range(len(batch) + (1 if stop else 0)):
                    lane.queue.task_done()
            if stop:
                return

    def _gather(self, lane: _Lane, first) -> tuple[list[tuple[Event, Job]], bool]:
        """One pass's notifications: ``first`` and what is queued behind it — and, when the destination's last post
        was less than ``pace`` ago, what arrives until then. Also whether the ``None`` that stops the thread was
        taken."""
        if first is None:
            return [], True
        batch = [first]
        until = lane.last_post + self.pace
        while True:
            left = until - time.monotonic()
            try:
                item = lane.queue.get(timeout=left) if left > 0 else lane.queue.get_nowait()
            except queue.Empty:
                return batch, False
            if item is None:
                return batch, True
            batch.append(item)
            if len(batch) >= MAX_PASS:
                return batch, False

    def _render(self, event: Event, job: Job):
        """``(reply, who cancelled)`` for one notification; the reply is ``None`` for no message."""
        attempts = self.store.attempts(job.id)
        points = self.store.metrics(job.id, limit=500)
        cancelled_by = None
        if event.event == "ended" and event.to_state == "cancelled":  # the engine's, once it stopped: who asked?
            cancelled_by = next((e.actor for e in reversed(self.store.events(job.id)) if e.event == "cancel"), None)
        at_least = None
        if self.resume_needs is not None:
            try:
                at_least = self.resume_needs(job)
            except Exception:  # the figure is a help: never a reason to drop the notification
                log.warning("job %s: the budget a resume needs could not be worked out", job.id, exc_info=True)
        reply = notification(event, job, attempts, points, dashboard_url=self.dashboard_url,
                             raise_percent=self.cfg.raise_budget_percent, command=self.cfg.command,
                             cancelled_by=cancelled_by, at_least=at_least)
        return reply, (event.actor if event.event == "cancel" else cancelled_by)

    def _deliver_batch(self, batch: list[tuple[Event, Job]], lane: _Lane) -> None:
        """Post a pass to ``lane``'s destination, in the order it came: a message each — but one summary, where the
        first of them was, for the notifications of a :func:`notice_kind` that are more than ``summarize_over``."""
        rendered = []
        for item in batch:
            event, job = item
            try:
                reply, who = self._render(event, job)
            except Exception:  # one notification that cannot be rendered does not lose the pass's others
                log.exception("slack: could not render %s for %s", event.event, job.id)
                lane.holding.pop(id(item), None)
                continue
            if reply is not None:
                rendered.append((notice_kind(event), item, reply, who))
            else:
                lane.holding.pop(id(item), None)
        groups: dict[str, list] = {}
        for r in rendered:
            groups.setdefault(r[0], []).append(r)
        done: set = set()
        for kind, item, reply, _ in rendered:
            if lane.stop.is_set():  # closed: what is left is close()'s to say
                return
            event, job = item
            items = groups[kind]
            if len(items) > self.summarize_over:
                if kind in done:
                    continue
                done.add(kind)
                whos = {who for *_, who in items}
                jobs = [it[1] for _, it, _, _ in items]
                reply = summary(kind, jobs, dashboard_url=self.dashboard_url,
                                command=self.cfg.command, by=next(iter(whos)) if len(whos) == 1 else None)
                self._count("summarized", len(items))
                what, of, posted = f"a summary of {len(items)} {kind}", _jobs_named(jobs), [it for _, it, _, _ in items]
            else:
                what, of, posted = event.event, job.id, [item]
            try:
                self._post(lane, {"text": reply.text, "blocks": reply.blocks}, what, of)
            except Exception:  # a sender's bug: this post is lost, not the pass's others
                self._count("failed")
                log.exception("slack: could not send %s for %s to %s", what, of, destination_words(lane.dest))
            if not lane.stop.is_set():
                for it in posted:
                    lane.holding.pop(id(it), None)

    def _post(self, lane: _Lane, payload: dict, what: str, of: str) -> None:
        """Send one message, retrying what Slack says is transient (after its ``Retry-After``, else backing off
        1 s, 2 s, 4 s … up to ``max_backoff``) until ``retry_window`` is used (the waits and the tries) or the
        ``retries``; then give it up with a WARNING naming the destination, the event and the job."""
        used = 0.0
        for attempt in range(self.cfg.retries + 1):
            lane.last_post = started = time.monotonic()
            try:
                self.send(lane.dest, payload)
                self._count("sent")
                return
            except sdk.DeliveryError as exc:
                used += time.monotonic() - started
                left = self.retry_window - used
                if lane.stop.is_set():  # closing: close() says it was discarded
                    return
                if exc.permanent or attempt == self.cfg.retries or left <= 0:
                    self._count("failed")
                    why = "a permanent error" if exc.permanent else f"{attempt + 1} tries over {used:.0f} s"
                    log.warning("slack: dropped %s for %s to %s after %s: %s", what, of,
                                destination_words(lane.dest), why, exc)
                    return
                wait = min(self.max_backoff, exc.retry_after or 2.0 ** attempt, left)
                (self.sleep or lane.stop.wait)(wait)
                used += wait
                if lane.stop.is_set():
                    return


def _jobs_named(jobs: list[Job]) -> str:
    ids = [j.id for j in jobs[:NAMED]]
    return ", ".join(ids) + (f" and {len(jobs) - NAMED} more" if len(jobs) > NAMED else "")


def _named(items: list[tuple[Event, Job]]) -> str:
    said = [f"{event.event} for {job.id}" for event, job in items[:NAMED]]
    return ", ".join(said) + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")
