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
from broker.slack.messages import notification

log = logging.getLogger("broker.slack")

Sender = Callable[[tuple[str, str], dict], None]


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
                 sleep: Callable[[float], None] = time.sleep, max_queue: int = 1000, max_backoff: float = 30.0):
        self.cfg = cfg
        self.store = store
        self.dashboard_url = dashboard_url
        self.send = send or slack_sender(cfg)
        self.sleep = sleep
        self.max_backoff = max_backoff
        self._queue: queue.Queue = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.sent = 0
        self.failed = 0
        self.dropped = 0

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
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._deliver(*item)
            except Exception:
                log.exception("slack notification failed")
            finally:
                self._queue.task_done()

    def _deliver(self, event: Event, job: Job) -> None:
        attempts = self.store.attempts(job.id)
        points = self.store.metrics(job.id, limit=500)
        cancelled_by = None
        if event.event == "ended" and event.to_state == "cancelled":  # the engine's, once it stopped: who asked?
            cancelled_by = next((e.actor for e in reversed(self.store.events(job.id)) if e.event == "cancel"), None)
        reply = notification(event, job, attempts, points, dashboard_url=self.dashboard_url,
                             raise_percent=self.cfg.raise_budget_percent, command=self.cfg.command,
                             cancelled_by=cancelled_by)
        dest = self.cfg.destination(job.team)
        if reply is None or dest is None:
            return
        payload = {"text": reply.text, "blocks": reply.blocks}
        for attempt in range(self.cfg.retries + 1):
            try:
                self.send(dest, payload)
                self.sent += 1
                return
            except sdk.DeliveryError as exc:
                if exc.permanent or attempt == self.cfg.retries:
                    self.failed += 1
                    log.warning("slack: gave up on %s for %s after %d tries: %s", event.event, job.id,
                                attempt + 1, exc)
                    return
                self.sleep(min(self.max_backoff, exc.retry_after or 2.0 ** attempt))
