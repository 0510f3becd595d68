"""The notifier: stored events → messages in each team's channel, sent by a background thread.

``handle(event, job)`` only puts the pair on a bounded queue and returns, so
the engine never waits on Slack. The sender thread reads what the message
needs (attempts, progress points) from the store, renders it with
:func:`broker.slack.messages.notification`, and delivers it with bounded
retries: ``retries`` more tries after the first, backing off 1 s, 2 s, 4 s …
(capped at 30 s, or Slack's ``Retry-After``); a permanent error
(``channel_not_found``, a 4xx from a webhook) is not retried. When the queue
is full the newest notification is dropped and logged — the event itself is
always in the store.

Which events notify is ``notifications.events`` (default
:data:`broker.slack.config.DEFAULT_EVENTS`); the engine calls ``handle``
through its ``on_event`` hook once per committed event.

Bursts: the thread delivers in passes. A pass takes what is queued; one that
begins less than ``pace`` seconds (1 s: Slack's rate for a channel) after the
last post first gathers what arrives until then. Within a pass, more than
``summarize_over`` (5) notifications of one kind
(:func:`broker.slack.messages.notice_kind`: cancelled, failed, finished …) for
one destination become ONE summary message
(:func:`broker.slack.messages.summary`) naming them; fewer are posted one by
one, with their buttons, as before. 200 jobs cancelled at once post a handful
of messages, not 200. Each queued notification is taken off the queue once
and is in at most one post (its own or a summary): the queue is in memory and
nothing is re-sent after a restart, as before.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from broker.models import Event, Job
from broker.slack import sdk
from broker.slack.config import SlackConfig
from broker.slack.messages import notice_kind, notification, summary

log = logging.getLogger("broker.slack")

Sender = Callable[[tuple[str, str], dict], None]

MAX_PASS = 1000
"""The most notifications one delivery pass takes (the queue's default bound): a pass ends even while more arrive."""


def slack_sender(cfg: SlackConfig) -> Sender:
    """Deliver to ("channel", id) with the bot token, or ("webhook", url)."""

    def send(dest: tuple[str, str], payload: dict) -> None:
        kind, target = dest
        if kind == "channel":
            sdk.post_message(cfg.bot_token or "", target, payload, api_url=cfg.api_url)
        else:
            sdk.post_webhook(target, payload)

    return send


class Notifier:
    def __init__(self, cfg: SlackConfig, store, *, dashboard_url: str, send: Sender | None = None,
                 sleep: Callable[[float], None] = time.sleep, max_queue: int = 1000, max_backoff: float = 30.0,
                 summarize_over: int = 5, pace: float = 1.0, resume_needs: Callable[[Job], int | None] | None = None):
        self.cfg = cfg
        self.store = store
        #: the budget a resume of a budget-stopped job needs (BrokerService.resume_needs), for its Raise budget button
        self.resume_needs = resume_needs
        self.dashboard_url = dashboard_url
        self.send = send or slack_sender(cfg)
        self.sleep = sleep
        self.max_backoff = max_backoff
        self.summarize_over = summarize_over  # more than this many of one kind for one channel in a pass: a summary
        self.pace = pace  # a pass that begins sooner than this after the last post gathers until then
        self._last_post = float("-inf")  # time.monotonic() of the last post (tried)
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.sent = 0
        self.failed = 0
        self.dropped = 0
        self.summarized = 0  # notifications that went out in a summary, not a message of their own

    # -- called by the engine (never blocks) ----------------------------------------------------

    def handle(self, event: Event, job: Job) -> None:
        """Queue a notification for ``event`` if it is one the team wants; return at once."""
        if event.event not in self.cfg.events or self.cfg.destination(job.team) is None:
            return
        self._ensure_thread()
        try:
            self._queue.put_nowait((event, job))
        except queue.Full:
            self.dropped += 1
            log.warning("slack notification queue full; dropped %s for %s", event.event, job.id)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued notification was sent or given up on (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    # -- the sender thread ----------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="broker-slack-notifier", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            batch, stop = self._gather(first)
            try:
                if batch:
                    self._deliver_batch(batch)
            except Exception:
                log.exception("slack notification failed")
            finally:
                for _ in range(len(batch) + (1 if stop else 0)):
                    self._queue.task_done()
            if stop:
                return

    def _gather(self, first) -> tuple[list[tuple[Event, Job]], bool]:
        """One pass's notifications: ``first`` and what is queued behind it — and, when the last post was less than
        ``pace`` ago, what arrives until then. Also whether the ``None`` that stops the thread was taken."""
        if first is None:
            return [], True
        batch = [first]
        until = self._last_post + self.pace
        while True:
            left = until - time.monotonic()
            try:
                item = self._queue.get(timeout=left) if left > 0 else self._queue.get_nowait()
            except queue.Empty:
                return batch, False
            if item is None:
                return batch, True
            batch.append(item)
            if len(batch) >= MAX_PASS:
                return batch, False

    def _render(self, event: Event, job: Job):
        """``(destination, reply, who cancelled)`` for one notification; the reply is ``None`` for no message."""
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
        return self.cfg.destination(job.team), reply, (event.actor if event.event == "cancel" else cancelled_by)

    def _deliver_batch(self, batch: list[tuple[Event, Job]]) -> None:
        """Post a pass, in the order it came: a message each — but one summary, where the first of them was, for
        the notifications of a :func:`notice_kind` to a destination that are more than ``summarize_over``."""
        rendered = []
        for event, job in batch:
            try:
                dest, reply, who = self._render(event, job)
            except Exception:  # one notification that cannot be rendered does not lose the pass's others
                log.exception("slack: could not render %s for %s", event.event, job.id)
                continue
            if reply is not None and dest is not None:
                rendered.append(((dest, notice_kind(event)), event, job, reply, who))
        groups: dict[tuple[tuple[str, str], str], list] = {}
        for item in rendered:
            groups.setdefault(item[0], []).append(item)
        done: set = set()
        for key, event, job, reply, _ in rendered:
            dest, kind = key
            items = groups[key]
            if len(items) > self.summarize_over:
                if key in done:
                    continue
                done.add(key)
                whos = {who for *_, who in items}
                reply = summary(kind, [j for _, _, j, _, _ in items], dashboard_url=self.dashboard_url,
                                command=self.cfg.command, by=next(iter(whos)) if len(whos) == 1 else None)
                self.summarized += len(items)
                what, of = f"{len(items)} {kind}", "a summary"
            else:
                what, of = event.event, job.id
            try:
                self._post(dest, {"text": reply.text, "blocks": reply.blocks}, what, of)
            except Exception:  # a sender's bug: this post is lost, not the pass's others
                self.failed += 1
                log.exception("slack: could not send %s for %s", what, of)

    def _post(self, dest: tuple[str, str], payload: dict, what: str, of: str) -> None:
        """Send one message, retrying what Slack says is transient (after its ``Retry-After``, else backing off)."""
        for attempt in range(self.cfg.retries + 1):
            self._last_post = time.monotonic()
            try:
                self.send(dest, payload)
                self.sent += 1
                return
            except sdk.DeliveryError as exc:
                if exc.permanent or attempt == self.cfg.retries:
                    self.failed += 1
                    log.warning("slack: gave up on %s for %s after %d tries: %s", what, of, attempt + 1, exc)
                    return
                self.sleep(min(self.max_backoff, exc.retry_after or 2.0 ** attempt))
