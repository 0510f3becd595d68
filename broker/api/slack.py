"""Slack routes: ``POST /slack/commands`` (the slash command) and ``POST /slack/interactions`` (buttons).

Both check Slack's request signature over the raw body first; a request
that fails it gets 401 and changes nothing. Replies are Block Kit, sent
within Slack's 3-second window: quick commands answer in the HTTP response,
slower ones (fetching a spec URL, logs) acknowledge and post the result to
``response_url`` after the response is sent. Button results also go to
``response_url``. A request Slack sends again (a retry: the same ``trigger_id``,
with ``X-Slack-Retry-Num``) does not act twice: see :class:`Replays`. A signed body with a field given twice,
which Slack never sends, is a 400 and nothing is done (:func:`slack_form`). Setup: ``docs/slack.md``.
"""

# no `from __future__ import annotations`: FastAPI must see the real types of local aliases

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs

from fastapi import APIRouter, BackgroundTasks, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from broker.config import Settings
from broker.slack import sdk, spec_url
from broker.slack.blocks import Reply, error
from broker.slack.commands import CommandError, parse
from broker.slack.config import SlackConfig, slack_of
from broker.slack.dispatch import Deferred, Dispatcher
from broker.slack.notify import Notifier

log = logging.getLogger("broker.slack")

INLINE_SECONDS = 2.0
"""How long a slash command may work before its answer goes to ``response_url`` instead (Slack waits 3 s for the
HTTP answer, the network included)."""


class Replays:
    """The ``trigger_id`` of each command and button press taken in the last ``keep`` seconds, so that Slack's
    retry of one (or any replay of its signed body, which the signature check admits for 5 minutes) is not
    acted on again. In memory, per process: a submit is also keyed by its ``trigger_id`` in the store (the
    service's idempotency key), so it is made once whichever broker process a retry reaches. Only what changes
    things is kept (:data:`READ_ONLY` commands answer every time), and one that was refused or failed (an error,
    the store down) is taken back (:meth:`forget`): its retry runs, where it was answered "already taken"."""

    def __init__(self, keep: float = 600.0, clock: Callable[[], float] = time.monotonic):
        self.keep, self.clock = keep, clock
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def first(self, trigger_id: str) -> bool:
        """Whether this is the first time ``trigger_id`` is seen (it is recorded either way)."""
        now = self.clock()
        with self._lock:
            while self._seen:
                oldest = next(iter(self._seen))
                if self._seen[oldest] > now - self.keep:
                    break
                del self._seen[oldest]
            if trigger_id in self._seen:
                return False
            self._seen[trigger_id] = now
            return True

    def forget(self, trigger_id: str) -> None:
        """Take ``trigger_id`` back: what it asked was refused or failed with nothing done, so a retry runs."""
        with self._lock:
            self._seen.pop(trigger_id, None)


READ_ONLY = frozenset({"help", "status", "queue", "costs", "logs"})
"""Commands that change nothing: Slack's retry of one is answered again, as the first was (or would have been)."""

RETRIED = ":repeat: Slack sent this command again (it retries when an answer is slow): it was already taken, so " \
          "it is not run twice. See where things stand with `{command} status`."


def dashboard_url(settings: Settings) -> str:
    return settings.public_url.rstrip("/") + "/dashboard"


def notifier_for(store, settings: Settings) -> Notifier | None:
    """A started-on-demand :class:`Notifier` when the config names a channel or webhook, else ``None``
    (the API app's, and ``broker worker``'s for its engine)."""
    from broker.service import BrokerService  # (the figure a Raise budget button proposes at least)

    cfg = slack_of(settings)
    if not cfg.notifications_enabled:
        return None
    return Notifier(cfg, store, dashboard_url=dashboard_url(settings),
                    resume_needs=BrokerService(settings, store).resume_needs, teams=settings.teams)


def spec_fetcher(cfg: SlackConfig, max_bytes: int):
    """Read a task from a URL the config allows (``slack.spec_url_prefixes``), at most ``max_bytes``;
    a bare-scheme prefix admits public hosts only (``broker.slack.spec_url``)."""

    def fetch(url: str) -> str:
        return spec_url.fetch(url, cfg.spec_url_prefixes, max_bytes=max_bytes)

    return fetch


def slack_form(body: bytes) -> dict[str, str] | tuple[str, str]:
    """A signed form body from Slack as one value per field, or the field it is refused for and why: a field given
    more than once.
    Slack sends each field once; ``text=status&text=cancel j-1`` was read as its first ``text`` without a word, and
    which of two a sender meant cannot be known, so neither is acted on (a 400: only a sender holding the signing
    secret gets this far)."""
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    for name, values in fields.items():
        if len(values) > 1:
            return name, f"field '{name}' is given {len(values)} times; Slack sends each field once, so nothing was done"
    return {name: values[0] for name, values in fields.items()}


def router(service, settings: Settings) -> APIRouter:
    r = APIRouter(tags=["slack"])
    cfg = slack_of(settings)
    dispatcher = Dispatcher(service, cfg, dashboard_url=dashboard_url(settings),
                            fetch=spec_fetcher(cfg, settings.max_body_bytes))
    replays = Replays()

    async def verified(request: Request) -> bytes | Response:
        if not cfg.signing_secret:
            return JSONResponse(status_code=404, content={"detail": "Slack is not configured on this broker"})
        body = bytearray()
        async for chunk in request.stream():  # signed over the body, so read before it is checked: to a limit
            body.extend(chunk)
            if len(body) > settings.max_body_bytes:
                return JSONResponse(status_code=413, content={"detail": f"body: larger than {settings.max_body_bytes} "
                                                                        "bytes", "field": "body"})
        body = bytes(body)
        try:
            ok = sdk.verify(cfg.signing_secret, body, request.headers)
        except sdk.SlackUnavailable as exc:
            return JSONResponse(status_code=503, content={"detail": str(exc)})
        if not ok:
            return JSONResponse(status_code=401, content={"detail": "invalid Slack signature or stale timestamp",
                                                          "field": "X-Slack-Signature"})
        return body

    def respond_later(url: str, reply: Reply) -> None:
        payload = {**reply.payload(), "replace_original": False}
        for _ in range(3):
            try:
                sdk.post_webhook(url, payload)
                return
            except sdk.DeliveryError as exc:
                log.warning("slack response_url post failed: %s", exc)
                if exc.permanent:
                    return

    async def finish_later(work: "asyncio.Future", url: str, kept: str | None) -> None:
        """Post the answer of a command acknowledged before it was done (:data:`INLINE_SECONDS`)."""
        try:
            outcome = await work
            reply = await run_in_threadpool(outcome.work) if isinstance(outcome, Deferred) else outcome
        except Exception as exc:  # the answer was sent: Slack will not retry, so the user is told
            log.warning("slack command failed after it was acknowledged: %s", exc, exc_info=True)
            if kept:
                replays.forget(kept)
            reply = error("That command failed on the broker (its log says why); try it again.")
        await run_in_threadpool(respond_later, url, reply)

    @r.post("/slack/commands", include_in_schema=False)
    async def commands(request: Request, background: BackgroundTasks) -> Response:
        body = await verified(request)
        if isinstance(body, Response):
            return body
        form = slack_form(body)
        if isinstance(form, tuple):
            return JSONResponse(status_code=400, content={"detail": form[1], "field": form[0]})
        if form.get("command") and form["command"] != cfg.command:
            return JSONResponse(error(f"This broker answers `{cfg.command}`, not `{form['command']}`.").payload())
        if not form.get("user_id"):  # Slack always sends one: a signed request without it is malformed, not a user
            return JSONResponse(status_code=400, content={"detail": "a slash command carries user_id: none was sent",
                                                          "field": "user_id"})
        who = cfg.principal(form.get("user_id", ""))
        if who is None:
            return JSONResponse(error(
                f"Your Slack user `{form.get('user_id')}` is not mapped to a team. Ask the broker admin to add it "
                f"under `slack.users` in the config.").payload())
        try:
            cmd = parse(form.get("text", ""))
        except CommandError as exc:
            return JSONResponse(error(str(exc)).payload())
        trigger = form.get("trigger_id") or None
        # a submit taken again answers "Already submitted" (the store keeps its trigger_id as the idempotency key);
        # a command that changes nothing answers again
        kept = trigger if trigger and cmd.name != "submit" and cmd.name not in READ_ONLY else None
        if kept and not replays.first(kept):
            return JSONResponse(Reply(RETRIED.format(command=cfg.command)).payload())
        url = form.get("response_url")
        work = asyncio.ensure_future(run_in_threadpool(dispatcher.command, cmd, who, trigger_id=trigger))
        # Slack gives up on an answer after 3 s ("operation_timeout"): a command still at work past INLINE_SECONDS (a
        # cost report over a large store, a status read at scale) is acknowledged, and its answer posted when done
        done, _ = await asyncio.wait({work}, timeout=INLINE_SECONDS if url else None)
        if not done:
            background.add_task(finish_later, work, url, kept)
            return JSONResponse(Reply(f":hourglass: Working on `{cmd.name}`… the answer follows here.").payload())
        try:
            outcome = work.result()
        except BaseException:  # the store down (a 503), a bug (a 500): Slack's retry of it runs
            if kept:
                replays.forget(kept)
            raise
        if isinstance(outcome, Deferred):
            if url:
                background.add_task(lambda: respond_later(url, outcome.work()))
            return JSONResponse(outcome.ack.payload())
        if kept and outcome.refused:
            replays.forget(kept)
        return JSONResponse(outcome.payload())

    @r.post("/slack/interactions", include_in_schema=False)
    async def interactions(request: Request, background: BackgroundTasks) -> Response:
        body = await verified(request)
        if isinstance(body, Response):
            return body
        form = slack_form(body)
        if isinstance(form, tuple):
            return JSONResponse(status_code=400, content={"detail": form[1], "field": form[0]})
        try:
            payload = json.loads(form["payload"])
            user_id = str(payload["user"]["id"])
            action = payload["actions"][0]
            if not isinstance(action, dict):
                raise TypeError("an action is an object")
        except (KeyError, IndexError, ValueError, TypeError, RecursionError):  # RecursionError: [[[[...]]]]
            return JSONResponse(status_code=400, content={"detail": "payload: not a Slack block_actions payload",
                                                          "field": "payload"})
        url = payload.get("response_url")
        trigger = payload.get("trigger_id")
        if isinstance(trigger, str) and trigger and not replays.first(trigger):
            return Response(status_code=200)  # a retry of a press already acted on: its answer went to response_url
        who = cfg.principal(user_id)
        if who is None:
            reply = error(f"Your Slack user `{user_id}` is not mapped to a team; nothing was changed.")
        else:
            try:
                reply = await run_in_threadpool(dispatcher.action, str(action.get("action_id")),
                                                str(action.get("value", "")), who)
            except BaseException:  # nothing answered: Slack's retry of the press runs
                if isinstance(trigger, str) and trigger:
                    replays.forget(trigger)
                raise
        if url:
            background.add_task(respond_later, url, reply)
        return Response(status_code=200)

    return r
