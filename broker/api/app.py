"""The HTTP API (FastAPI; OpenAPI at ``/docs``). Routes parse, call the service, render.

``/docs`` (Swagger UI) and ``/redoc`` load their JavaScript and CSS from the broker itself
(``fastapi-offline`` ships the files), not from a CDN: broker hosts often have no internet.

``fastapi`` is imported only in this package. The app owns the store, the
launcher and (unless ``BROKER_ENGINE=off``) the engine thread.
"""

# no `from __future__ import annotations`: FastAPI must see the real types of local aliases

import hashlib
import json
import logging
import os
import tempfile
import time
from contextlib import asynccontextmanager
from urllib.parse import unquote
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from broker.api.probe import StoreProbe, clock_refusal
from broker.api.query import API_PREFIX, JobPage, Text, job_cursor, read_cursor, refuse_unknown_query
from broker.api.schema import (BUDGET, CANCEL_MANY, COMMON, DEADLINE, FAULT, PROGRESS, RESUME, TASK, WORKDIR_PACK, CancelBatchOut,
                               DryRunOut, EventList,
                               Health, JobOut, LogsOut, MetricsOut, ProgressAck, WhoAmI, WorkdirLimits,
                               WorkdirOut, answers, errors, ok, secured)
from broker.auth import Principal, Unauthorized, authenticate
from broker.config import Settings, load_settings
from broker.engine.reconcile import Engine
from broker.retention import Retention
from broker.runtime import key_warnings, open_launcher
from broker.service import BrokerService, Conflict, Invalid, NotFound
from broker.spec import EMPTY_KEY, SpecError, unknown_key_hint
from broker.store import JobStore, StoreUnavailable, open_store
from broker.task_text import load_json, load_text
from broker.views import dry_run_view, event_view, job_view
from broker.workdir import UNPACK_RATIO, PackError, human, parse_digest
from pricing.money import AmountTooLarge, DecimalComma, MoneyError, NotPlain, TooPrecise, typed_to_micros

MAX_LOG_OFFSET = 1 << 62  # a byte offset into an attempt's output; a file seek takes no more
MAX_CANCEL_IDS = 1000  # job ids one POST /v1/jobs/cancel takes (its documented maxItems); the CLI sends more in parts
ONE_VALUE_HEADERS = {name.lower(): name for name in (
    "Authorization", "Idempotency-Key", "Content-Type", "Content-Length", "Content-Encoding", "X-Slack-Signature",
    "X-Slack-Request-Timestamp")}
"""Headers whose value decides what a request does. Starlette's ``headers.get`` reads the first of a header sent
twice, so a second ``Idempotency-Key`` (a proxy's or a client's own) was dropped without a word, and a retry could
make a second job; sent twice with different values, one of these is refused (:func:`repeated_header`)."""

log = logging.getLogger("broker.api")


class _JSON(JSONResponse):
    """Every answer's JSON. A string that is not Unicode (a lone surrogate, ``"\\ud800"`` in JSON, in a record stored
    before submits refused them, or echoed in an error) is written escaped, as ``\\ud800``, rather than failing the
    whole answer: one job's label made its team's job list a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, detail: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"detail": detail}
    if field:
        body["field"] = field
    return _JSON(status_code=status, content=body)


def create_app(settings: Settings | None = None, *, store: JobStore | None = None, launcher=None,
               engine: bool | None = None) -> FastAPI:
    settings = settings or load_settings(create_admin_token=True)
    store = store or open_store(settings.store_url)
    launcher = launcher or open_launcher(settings)
    for warning in key_warnings(settings, store):  # a queued job's secrets this broker cannot open, a stale key file
        log.warning("%s", warning)
    run_engine = settings.engine if engine is None else engine
    notifier_box: dict = {}

    def on_event(event, job) -> None:
        notifier = notifier_box.get("notifier")
        if notifier is not None:
            notifier.handle(event, job)  # queues and returns: delivery never blocks the engine or a request

    service = BrokerService(settings, store, launcher, on_event=on_event)  # a cancel or resume notifies too
    eng = Engine(settings, store, launcher, on_event=on_event) if run_engine else None
    retention = Retention.of(settings, store)  # prunes finished jobs beside the engine's ticks (job_retention_days)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if eng:
            eng.start()
            retention.start()
        try:
            yield
        finally:
            if eng:
                eng.stop()
                retention.stop()
            if notifier_box.get("notifier") is not None:
                notifier_box["notifier"].close()

    # every route, the edges' too: a query parameter a /v1 route does not take is a 422 (broker/api/query.py)
    # no redirect of a path with a trailing slash: `POST /v1/jobs/` was a 307 to a URL built from the request's Host
    # header (any host the client named), with an empty body; it is a 404 naming the path, as any path no route takes
    app = FastAPIOffline(title="spot-broker", version="0.1.0", lifespan=lifespan, responses=errors(*COMMON),
                         default_response_class=_JSON, dependencies=[Depends(refuse_unknown_query)],
                         redirect_slashes=False,
                         static_url="/docs/static",
                         description="Submit ML training jobs with a budget cap and a deadline; the broker runs "
                                     "each where it is cheapest and resumes it after preemption.")
    built = app.openapi
    app.openapi = lambda: secured(built())  # the bearer tokens as security schemes, not a header parameter of each route
    app.state.service = service
    app.state.engine = eng
    app.state.settings = settings

    # -- errors: a 4xx naming the field, never a traceback --------------------------------------

    @app.exception_handler(Invalid)
    async def _invalid(request: Request, exc: Invalid):
        return _error(exc.status, f"{exc.field}: {exc.reason}", exc.field)

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound):
        detail = str(exc)
        days = settings.job_retention_days
        if days is not None and request.url.path.startswith(("/v1/jobs/", "/v1/costs/jobs/")):
            # a pruned job is a 404 like a mistyped id: say that it may have been deleted, and when that happens
            # said as what may be, of any id: "this one may have been pruned" was said of a made-up id too, and of
            # another team's job (which is not this team's to know of)
            detail += (f"; finished jobs are deleted {days:g} day{'' if days == 1 else 's'} after they end "
                       "(job_retention_days), so if it ended before that it may have been pruned")
        return _error(404, detail, "job_id")  # the job id in the path (a bad-input answer names its field)

    @app.exception_handler(Conflict)
    async def _conflict(request: Request, exc: Conflict):
        return _error(409, str(exc), exc.field)

    @app.exception_handler(Unauthorized)
    async def _unauthorized(request: Request, exc: Unauthorized):
        # the field it is about, as the 403s name it (a 401 named none)
        return _JSON(status_code=401, content={"detail": str(exc), "field": "Authorization"},
                     headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": ("body",), "msg": "invalid"}
        field = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query", "header", "path"))
        return _error(422, f"{field or 'request'}: {first.get('msg')}", field or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        # the router's own 404 and 405 said "Not Found" and "Method Not Allowed", naming nothing, and the 405 lost
        # its Allow header here (which named one route's methods: POST alone for /v1/jobs, which GET reads too)
        allowed = methods_at(request.app.router.routes, request.scope) if exc.status_code == 405 else []
        answer = _error(exc.status_code, *routing_refusal(request.method, request.url.path, exc, allowed))
        answer.headers.update(exc.headers or {})
        if allowed:
            answer.headers["Allow"] = ", ".join(allowed)
        return answer

    @app.exception_handler(StoreUnavailable)
    async def _store_down(request: Request, exc: StoreUnavailable):
        log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
        if request.method in ("GET", "HEAD"):  # a read changes nothing: "nothing was changed" read oddly there
            detail = "the job store did not answer: retry in a moment"
        elif exc.written is False:
            detail = "the job store did not answer; nothing was changed: retry in a moment"
        elif request.url.path == "/v1/jobs":
            detail = ("the job store did not answer, so this submit may or may not have been stored: retry it with the "
                      "same Idempotency-Key (safe), or check `broker status` before submitting again")
        else:
            detail = "the job store did not answer, so this change may or may not have been made: check the job, then retry"
        response = _error(503, detail)
        response.headers["Retry-After"] = "1"
        return response

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect):
        # the caller closed the connection before its body was all sent: nothing to answer and nothing went wrong
        # here (it was an ERROR with two tracebacks). Nothing was done: the route had not read its input yet
        log.info("client went away before sending its whole body on %s %s; nothing was done", request.method,
                 request.url.path)
        answer = _error(400, "body: the client closed the connection before sending all of it")
        answer.headers["Connection"] = "close"
        return answer

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        if request.method in ("GET", "HEAD"):
            answer = _error(500, "the broker hit an unexpected error; it is logged. Nothing was changed: retry the "
                                 "request.")
        else:
            answer = _error(500, "the broker hit an unexpected error; it is logged. The change may or may not have been "
                                 "made: check before retrying (a submit retried with the same Idempotency-Key is safe).")
        # Starlette raises the error again once this answer is sent, and the server then drops the connection: a
        # client that kept it alive met "connection reset" on its next request. Said here, it opens a new one
        answer.headers["Connection"] = "close"
        return answer

    @app.middleware("http")
    async def _body_limit(request: Request, call_next):
        """Before anything reads a header (this its Content-Length, a route its token or key): one that decides what
        the request does, sent twice with different values, is a 400 naming it, on every route, and nothing is done;
        then a body over its limit is a 413, and one this API does not read (:func:`body_refusal`) a 415 naming the
        header. (One middleware for all three: each is a layer every request goes through.) A job id holding a
        '/' (sent as %2F) is answered as an unknown id is. And an unexpected error is answered here
        (:func:`_unexpected`), so it goes no further: Starlette's last handler raises it again once answered, and the
        server logged it a second time, with this middleware's exception group and a chained copy (~200 lines)."""
        repeated = repeated_header(request.scope["headers"])
        if repeated is not None:
            name, reason = repeated
            return _error(400, f"{name}: {reason}", name)
        slashed = slashed_job_id(request.app.router.routes, request.scope)
        if slashed is not None:  # no job's id holds a '/': nothing to look up, and nothing is told of any job
            return _error(404, str(NotFound(slashed)), "job_id")
        length = request.headers.get("content-length")
        if length is not None:
            if not (length.isascii() and length.isdigit()):  # HTTP's 1*DIGIT: int() also takes "-1", "1_000", " 9"
                return _error(400, "Content-Length: not a number of bytes", "Content-Length")
            size = int(length)
            if request.url.path.startswith("/v1/workdirs/"):  # a pack has a limit of its own
                if size > settings.max_workdir_bytes:
                    return _error(413, _pack_too_large(size), "body")
            elif size > settings.max_body_bytes:
                return _error(413, f"body: larger than {settings.max_body_bytes} bytes", "body")
        refused = body_refusal(request.url.path, request.headers)
        if refused is not None:
            name, reason = refused
            answer = _error(415, f"{name}: {reason}", name)
            if name == "Content-Encoding":
                answer.headers["Accept-Encoding"] = "identity"  # RFC 7694: the codings a request may use here
            return answer
        try:
            return await call_next(request)
        except Exception as exc:  # noqa: BLE001 - the handler of last resort: logged once, answered 500
            return await _unexpected(request, exc)

    def _pack_too_large(size: int | None) -> str:
        what = f"is {human(size)} ({size} bytes)" if size is not None else "is larger than that"
        return (f"body: the workdir pack {what}, over this broker's limit of {human(settings.max_workdir_bytes)} "
                f"({settings.max_workdir_bytes} bytes, max_workdir_bytes); leave large files out with .skyignore "
                f"or .gitignore and put data in a bucket")

    # -- auth ------------------------------------------------------------------------------------

    def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
        return authenticate(settings, authorization)

    Caller = Annotated[Principal, Depends(principal)]

    async def read_body(request: Request) -> bytes:
        """The body, refused (413) once past ``max_body_bytes``: a chunked request has no Content-Length for the
        middleware to check, and reading it whole first held all a caller sent in memory, authenticated or not."""
        body = bytearray()
        async for chunk in request.stream():
            body.extend(chunk)
            if len(body) > settings.max_body_bytes:
                raise Invalid("body", f"larger than {settings.max_body_bytes} bytes", status=413)
        return bytes(body)

    async def read_spec(request: Request) -> dict:
        body = await read_body(request)
        if not body.strip():
            raise Invalid("body", "is empty: send the task as JSON or YAML")
        try:  # a body in Latin-1 had each byte it could not read turned into U+FFFD, in its run command too
            text = body.decode("utf-8-sig")  # and a byte-order mark (Windows editors write one) is not JSON
        except UnicodeDecodeError as exc:  # counted after a byte-order mark: the offset in the body is past it
            at = exc.start + len(body) - len(exc.object)
            raise Invalid("body", f"is not UTF-8 (byte 0x{body[at]:02x} at offset {at}): send the task as UTF-8 "
                                  "text") from None
        # parsed off the event loop: a megabyte of YAML takes PyYAML seconds, and every other request waited
        return await run_in_threadpool(_task_of, text, request.headers.get("content-type", ""))

    def _task_of(text: str, ctype: str) -> dict:
        try:
            if "json" not in ctype:
                return load_text(text, max_bytes=settings.max_body_bytes)
            try:
                data = load_json(text)
            except json.JSONDecodeError as exc:
                raise Invalid("body", f"is not valid JSON (line {exc.lineno}, column {exc.colno})") from None
        except SpecError as exc:
            raise Invalid(exc.field, exc.reason) from None
        if not isinstance(data, dict):
            raise Invalid("body", "must be a JSON object (a SkyPilot task)")
        return data

    # -- routes ----------------------------------------------------------------------------------

    probe = StoreProbe(lambda: store.get_job("healthz-probe"))

    @app.get("/v1/healthz", tags=["ops"], **answers(Health))
    @app.head("/v1/healthz", include_in_schema=False)  # a balancer's check may be a HEAD: it was a 405
    def healthz() -> dict:
        """Liveness: 200 while the process answers, with the store's state in the body. A store outage is
        not the process's fault and restarting it does not help (every broker shares the store), so
        load-balancer checks and liveness probes use this; ``/v1/readyz`` says whether the store answers."""
        try:
            probe.look()  # at most PROBE_SECONDS: a stalled store held this past a balancer's check timeout
            state = "ok"
        except StoreUnavailable as exc:
            # no token is asked here: the store's address and its error go to the log, not to whoever asks
            log.warning("healthz: the store is unavailable: %s", exc)
            state = "unavailable: the job store did not answer (the broker's log says why)"
        return {"ok": True, "engine": eng is not None, "store": state}

    @app.get("/v1/readyz", tags=["ops"], **answers(Health, 503))
    @app.head("/v1/readyz", include_in_schema=False)  # answered as GET is, without the body
    def readyz():
        """Readiness: 200 when the store answers, else 503 (a start-up probe waits for it); 503 too while this host's
        clock is further from a shared store's than ``max_clock_offset_seconds`` (its engine does not tick then, and a
        balancer should send its jobs to a broker whose clock is right)."""
        probe.look()
        if (why := clock_refusal(store, time.time, settings.max_clock_offset_seconds)) is not None:
            answer = _error(503, why)
            answer.headers["Retry-After"] = "30"
            return answer
        return {"ok": True, "engine": eng is not None, "store": "ok"}

    @app.get("/v1/whoami", tags=["ops"], **answers(WhoAmI, 401, 422))
    def whoami(caller: Caller) -> dict:
        """Who the token is: its team, or the admin. The CLI asks before an admin's ``cancel --all``: guessed from
        the teams of the jobs listed, an admin's ``--all`` without ``--team`` was refused only while two teams had
        jobs not ended, and with one it cancelled that team's jobs unnamed."""
        return {"name": caller.name, "team": caller.team, "admin": caller.admin}

    @app.post("/v1/jobs", status_code=201, tags=["jobs"], openapi_extra=TASK,
              responses={**ok(JobOut, "the job, queued", status=201),
                         **ok(JobOut | DryRunOut, "a retry with the same Idempotency-Key: the job it created first "
                                                  "(JobOut); with dry_run=true: what the submit would do (DryRunOut)"),
                         **errors(401, 403, 409, 422)})
    async def submit(request: Request, caller: Caller,
                     idempotency_key: Annotated[str | None, Header()] = None,
                     dry_run: Annotated[bool, Query(description="price and check the task, storing nothing: "
                                                                "answers 200 with a DryRunOut, or the very error "
                                                                "the submit would")] = False) -> JSONResponse:
        """Submit a SkyPilot task (JSON or YAML) with an optional ``broker:`` section.

        Refused with 422 and a sentence when the budget cannot cover the cheapest placement, and with 409 when
        its ``broker.checkpoint`` is the checkpoint base of a job that has not ended.
        A retried request with the same ``Idempotency-Key`` returns the first job (200).
        With ``dry_run=true`` nothing is stored (no job, no event, the Idempotency-Key not taken): the answer (200)
        is the quote, where the job would be placed now and where it would stand in the queue, or the refusal
        the submit would answer.
        """
        raw = await read_spec(request)
        if dry_run:
            run = await run_in_threadpool(service.submit_dry_run, caller, raw, idempotency_key=idempotency_key)
            return _JSON(status_code=200, content=dry_run_view(run))
        # the store write blocks (fsync): run it off the event loop so other requests go on
        job, created = await run_in_threadpool(service.submit, caller, raw, idempotency_key=idempotency_key)
        return _JSON(status_code=201 if created else 200, content=job_view(job),
                            headers={"Location": f"/v1/jobs/{job.id}"})

    @app.get("/v1/jobs", tags=["jobs"], **answers(JobPage, 401, 403, 422))
    def list_jobs(caller: Caller, state: Text = None, team: Text = None, name: Text = None,
                  limit: Annotated[int, Query(ge=1, le=1000)] = 200, cursor: Text = None) -> dict:
        """Jobs you can see, newest first (by submit time, then id); filter by ``state`` (one, or several with
        commas: ``queued,running``), ``team`` and ``name`` (the start of the job's name: ``sweep3`` lists
        ``sweep3-lr0.1``, case-sensitive). ``next_cursor`` is set when more jobs follow: pass it as ``cursor``
        (with the same filters) for the next page, until it is ``null``. A cursor holds a place in the order, so
        jobs submitted meanwhile are not repeated and none is skipped."""
        before = read_cursor(cursor) if cursor is not None else None
        jobs = service.list(caller, state=state, team=team, limit=limit + 1, before=before, name=name)
        more = len(jobs) > limit
        jobs = jobs[:limit]
        q = service.queue_waits(caller, of=jobs)
        return {"jobs": [job_view(j, position=q.positions.get(j.id), estimated_start=q.starts.get(j.id),
                                  waiting=q.waiting.get(j.id)) for j in jobs],
                "next_cursor": job_cursor(jobs[-1].submitted_at, jobs[-1].id) if more else None}

    @app.get("/v1/jobs/{job_id}", tags=["jobs"], **answers(JobOut, 401, 404, 422))
    def get_job(job_id: str, caller: Caller) -> dict:
        """One job with its attempts, queue position and reason."""
        job = service.get(caller, job_id)
        q = service.queue_waits(caller, of=[job])
        return job_view(job, position=q.positions.get(job.id), estimated_start=q.starts.get(job.id),
                        waiting=q.waiting.get(job.id), attempts=service.attempts(caller, job_id))

    @app.get("/v1/jobs/{job_id}/events", tags=["jobs"], **answers(EventList, 401, 404, 422))
    def get_events(job_id: str, caller: Caller) -> dict:
        """Every state change of the job, oldest first."""
        return {"events": [event_view(e) for e in service.events(caller, job_id)]}

    @app.get("/v1/jobs/{job_id}/logs", tags=["jobs"], **answers(LogsOut, 401, 404, 409, 422, 503))
    def get_logs(job_id: str, caller: Caller, offset: Annotated[int, Query(ge=0, le=MAX_LOG_OFFSET)] = 0,
                 attempt: Annotated[int | None, Query(ge=1, le=1_000_000)] = None) -> dict:
        """Output of an attempt (the newest by default) from byte ``offset``; poll to follow."""
        return service.logs(caller, job_id, attempt=attempt, offset=offset)

    @app.post("/v1/jobs/{job_id}/cancel", tags=["jobs"], **answers(JobOut, 401, 404, 409, 422))
    def cancel(job_id: str, caller: Caller) -> dict:
        """Cancel a job. A running attempt is stopped (SIGTERM, then SIGKILL after the grace period).
        409 if the job already ended."""
        return job_view(service.cancel(caller, job_id))

    @app.post("/v1/jobs/cancel", tags=["jobs"], **answers(CancelBatchOut, 401, 403, 422), openapi_extra=CANCEL_MANY)
    async def cancel_many(caller: Caller, request: Request) -> dict:
        """Cancel several jobs: ``{"ids": [...]}``, ``{"name": "sweep3-"}`` (every job not ended whose name begins
        so) or ``{"all": true}`` (every job not ended of your team; an admin gives ``"team"`` too, or it is a 422).
        Answers 200 with each job in ``cancelled``, ``already_ended`` (skipped: nothing to cancel) or ``refused``
        (with why: no such job, ...); ``already_cancelling`` names those of ``cancelled`` another cancel was already
        stopping."""
        body = await _json_object(request)
        _only(body, {"ids", "name", "all", "team"})
        ids = body.get("ids")
        if ids is not None and not (isinstance(ids, list) and 0 < len(ids) <= MAX_CANCEL_IDS
                                    and all(isinstance(i, str) and i for i in ids)):
            raise Invalid("ids", f"must be a list of 1 to {MAX_CANCEL_IDS:,} job ids")
        for key in ("name", "team"):
            if body.get(key) is not None and not (isinstance(body[key], str) and body[key]):
                raise Invalid(key, "must be a non-empty string")
        every = body.get("all", False)
        if not isinstance(every, bool):
            raise Invalid("all", "must be true or false")
        batch = await run_in_threadpool(service.cancel_many, caller, ids=ids or (), name=body.get("name"),
                                        team=body.get("team"), every=every)

        def brief(job) -> dict:
            return {"id": job.id, "name": job.name, "state": job.state.value}

        return {"cancelled": [brief(j) for j in batch.cancelled], "already_ended": [brief(j) for j in batch.ended],
                "refused": [{"id": i, "detail": why} for i, why in batch.refused],
                "already_cancelling": list(batch.already)}

    @app.post("/v1/jobs/{job_id}/resume", tags=["recovery"], **answers(JobOut, 401, 404, 409, 422),
              openapi_extra=RESUME)
    async def resume(job_id: str, caller: Caller, request: Request, force: bool = False) -> dict:
        """One-click resume of a failed or budget-stopped job, as a new attempt from its latest checkpoint.
        A failure in the job's own code answers 409 with the diagnosis unless ``force=true``, or unless the body
        gives the job ``envs`` or ``secrets`` (``{"secrets": {"HF_TOKEN": "..."}}``), set from this attempt on."""
        body = await _json_object(request)
        _only(body, {"envs", "secrets"})
        return job_view(await run_in_threadpool(service.resume, caller, job_id, force=force, envs=body.get("envs"),
                                                secrets=body.get("secrets")))

    @app.post("/v1/jobs/{job_id}/budget", tags=["recovery"], **answers(JobOut, 401, 404, 409, 422),
              openapi_extra=BUDGET)
    async def set_budget(job_id: str, caller: Caller, request: Request) -> dict:
        """Change the budget cap: ``{"budget_usd": "40"}``. Raising it lets a budget-stopped job resume."""
        body = await _json_object(request)
        if "" in body:  # before the required field: "'' is not a field this takes" read as a broken answer
            raise Invalid("body", EMPTY_KEY)
        if body.get("budget_usd") is None:
            # {"budget": 40} was told "must be an amount of dollars", as if 40 were wrong rather than the key
            others = [k for k in body if k != "budget_usd"]
            wrong = "".join(f"; '{k}' is not a field this takes ({unknown_key_hint(k, {'budget_usd'})})"
                            for k in others)
            raise Invalid("budget_usd", f"is required: send {{\"budget_usd\": \"40\"}}{wrong}")
        _only(body, {"budget_usd"})
        try:
            micros = typed_to_micros(body["budget_usd"], exact=True)  # a JSON 0.00001 is 10 micros, not "1e-05"
        except (AmountTooLarge, TooPrecise, DecimalComma, NotPlain) as exc:
            raise Invalid("budget_usd", str(exc)) from None
        except MoneyError:
            raise Invalid("budget_usd", "must be an amount of dollars such as \"40\"") from None
        return job_view(service.raise_budget(caller, job_id, micros))

    @app.post("/v1/jobs/{job_id}/deadline", tags=["recovery"], **answers(JobOut, 401, 404, 409, 422),
              openapi_extra=DEADLINE)
    async def set_deadline(job_id: str, caller: Caller, request: Request) -> dict:
        """Change a job's deadline after its submit: ``{"deadline": "6h"}`` (read as a submit's ``broker.deadline``:
        a duration from now, or an ISO time with its timezone), or ``{"deadline": null}`` to remove it. 409 for a job
        ended or being cancelled; 422 on ``deadline`` for one the job cannot meet even on on-demand from now. The
        engine's spot policy and safety net use it from their next tick."""
        body = await _json_object(request)
        if "" in body:
            raise Invalid("body", EMPTY_KEY)
        if "deadline" not in body:
            others = [k for k in body if k != "deadline"]
            wrong = "".join(f"; '{k}' is not a field this takes ({unknown_key_hint(k, {'deadline'})})"
                            for k in others)
            raise Invalid("deadline", f"is required: send {{\"deadline\": \"6h\"}}, or {{\"deadline\": null}} to "
                                      f"remove it{wrong}")
        _only(body, {"deadline"})
        return job_view(await run_in_threadpool(service.set_deadline, caller, job_id, body["deadline"]))

    @app.post("/v1/jobs/{job_id}/ondemand", tags=["recovery"], **answers(JobOut, 401, 404, 409, 422))
    def switch_to_ondemand(job_id: str, caller: Caller, force: bool = False) -> dict:
        """Run the job on on-demand from its next attempt on (and resume it if it had stopped). Resuming a
        failure in the job's own code answers 409 with the diagnosis unless ``force=true``, as resume does."""
        return job_view(service.switch_to_ondemand(caller, job_id, force=force))

    @app.delete("/v1/jobs/{job_id}/ondemand", tags=["recovery"], **answers(JobOut, 401, 404, 409, 422))
    def unpin_ondemand(job_id: str, caller: Caller) -> dict:
        """Take back a pin to on-demand: the job's next attempts are placed where it is cheapest again (a job not
        pinned is answered as it is)."""
        return job_view(service.unpin(caller, job_id))

    @app.post("/v1/jobs/{job_id}/progress", tags=["progress"], **answers(ProgressAck, 401, 403, 404, 409, 422),
              openapi_extra=PROGRESS)
    async def progress(job_id: str, request: Request,
                       authorization: Annotated[str | None, Header()] = None) -> dict:
        """Called by the training script with the job's own token (``BROKER_JOB_TOKEN``):
        ``{"step": 1200, "total_steps": 5000, "metrics": {"loss": 0.71}}`` and/or
        ``{"checkpoint": {"step": 1200, "uri": "s3://..."}}`` after a checkpoint commits. A token that is not the
        job's is a 401 (``Unauthorized`` from the service) whether or not the job exists, never a 404 "no job"."""
        token = (authorization or "")[7:].strip() if (authorization or "").lower().startswith("bearer ") else ""
        if not token:
            raise Unauthorized("send the job's token: Authorization: Bearer $BROKER_JOB_TOKEN")
        if settings.is_admin_token(token) or settings.team_for_token(token) is not None:
            raise Invalid("Authorization", "progress is reported with the job's own token ($BROKER_JOB_TOKEN in "
                                           "its environment), not a user's", status=403)
        # a diverged loss comes as NaN (checkpoint.progress sends what json.dumps writes): the service keeps the
        # rest of the report
        job = service.report_progress(job_id, token, await _json_object(request, finite=False))
        return {"ok": True, "state": job.state.value, "stop": job.state.value in ("cancelling", "stopping")}

    @app.get("/v1/jobs/{job_id}/metrics", tags=["progress"], **answers(MetricsOut, 401, 404, 422))
    def job_metrics(job_id: str, caller: Caller) -> dict:
        """The progress and metric points the job reported, oldest first."""
        service.get(caller, job_id)
        return {"points": store.metrics(job_id)}

    @app.post("/v1/admin/faults", tags=["admin"], responses=errors(401, 403, 404, 409, 422), openapi_extra=FAULT)
    async def fault(caller: Caller, request: Request) -> dict:
        """Admins, simulated zones only: ``{"kind": "preempt"|"kill", "job_id": ...}`` or
        ``{"kind": "zone", "zone": ..., "available": false|true|null}``."""
        if not caller.admin:  # decided before the body is read: a caller who may not do this learns nothing of it
            raise Invalid("Authorization", "fault injection is for admins", status=403)
        body = await _json_object(request)
        _only(body, {"kind", "job_id", "zone", "available"})
        kind = body.get("kind")
        if kind not in ("preempt", "kill", "zone"):
            raise Invalid("kind", "must be preempt, kill or zone")
        for key in ("job_id", "zone"):
            if body.get(key) is not None and not isinstance(body[key], str):
                raise Invalid(key, "must be a string")
        available = body.get("available")
        if kind == "zone" and available is not None and not isinstance(available, bool):
            raise Invalid("available", "must be true, false or null")
        needed = "zone" if kind == "zone" else "job_id"  # was "no job " or "no simulated zone None", naming nothing
        if not body.get(needed):
            raise Invalid(needed, f"is required to {kind if kind != 'zone' else 'change a zone'}")
        return service.inject_fault(caller, kind, job_id=body.get("job_id"), zone=body.get("zone"),
                                    available=available)

    @app.get("/v1/workdirs", tags=["workdirs"], **answers(WorkdirLimits, 401, 422))
    def workdir_limits(caller: Caller) -> dict:
        """How large a workdir pack this broker accepts (``broker submit`` checks before it uploads), and whether
        the caller may name paths on the broker's host instead (``host_paths``: an admin only)."""
        return {"max_bytes": settings.max_workdir_bytes, "max_unpacked_bytes": settings.max_workdir_bytes * UNPACK_RATIO,
                "host_paths": service.may_name_host_paths(caller)}

    @app.get("/v1/workdirs/{digest}", tags=["workdirs"], **answers(WorkdirOut, 401, 404, 422))
    def get_workdir(digest: str, caller: Caller) -> dict:
        """Whether a workdir pack is stored (200) or not (404): ``broker submit`` uploads only what is missing."""
        return service.workdir(caller, digest)

    @app.put("/v1/workdirs/{digest}", status_code=201, tags=["workdirs"], openapi_extra=WORKDIR_PACK,
             responses={**ok(WorkdirOut, "the pack, stored", status=201),
                        **ok(WorkdirOut, "that pack was stored already"), **errors(401, 413, 422)})
    async def put_workdir(digest: str, caller: Caller, request: Request) -> JSONResponse:
        """Upload a task's workdir as a tar.gz named by its SHA-256 (``sha256:<hex>``); a task then names it in
        ``broker.workdir`` and each attempt runs from a fresh copy of it. Refused (4xx, saying why): a body
        whose SHA-256 is not the digest, a pack over ``max_bytes``, one that is not a tar.gz, or one holding
        an absolute path, a ``..``, a link out of the tree or a device file. Stored in the object store
        under ``checkpoint_root``, where every broker process reads it."""
        try:
            parse_digest(digest)
        except PackError as exc:
            raise Invalid("digest", str(exc)) from None
        fd, name = tempfile.mkstemp(prefix="broker-upload-", suffix=".tar.gz")
        try:
            sha, size = hashlib.sha256(), 0
            with os.fdopen(fd, "wb") as fh:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > settings.max_workdir_bytes:
                        raise Invalid("body", _pack_too_large(None).removeprefix("body: "), status=413)
                    sha.update(chunk)
                    fh.write(chunk)
            if size == 0:
                raise Invalid("body", "is empty: send the workdir as a tar.gz")
            answer, created = await run_in_threadpool(service.upload_workdir, caller, digest, Path(name), size,
                                                      sha.hexdigest())
        finally:
            os.unlink(name)
        return _JSON(status_code=201 if created else 200, content=answer,
                            headers={"Location": f"/v1/workdirs/{digest}"})

    @app.get("/v1/zones", tags=["admin"], responses=errors(401, 422))
    def zones(caller: Caller) -> dict:
        """Simulated zones (labelled as such) and whether each has spot capacity now."""
        availability = getattr(launcher, "availability", dict)()
        return {"zones": [{"name": z.name, "tier": z.tier, "cloud": z.cloud, "region": z.region,
                           "instance_type": z.instance_type, "simulated": True,
                           "available": availability.get(z.name, True)} for z in settings.zones]}

    async def _json_object(request: Request, *, finite: bool = True) -> dict:
        raw = await read_body(request)
        try:  # as a task's JSON: NaN, a key given twice, a number too long to read or [[[[...]]]] are named
            body = load_json(raw or b"{}", finite=finite)
        except SpecError as exc:
            raise Invalid(exc.field, exc.reason) from None
        except ValueError:  # JSONDecodeError, or UnicodeDecodeError for bytes that are not text
            raise Invalid("body", "is not valid JSON") from None
        if not isinstance(body, dict):
            raise Invalid("body", "must be a JSON object")
        return body

    from broker.api.edges import install_edges

    install_edges(app, service, settings)
    notifier_box["notifier"] = getattr(app.state, "notifier", None)
    return app


def slashed_job_id(routes: list, scope: dict) -> str | None:
    """The job id of a request whose path names one with a '/' in it (``/v1/jobs/a%2Fb/cancel``), decoded; ``None``
    for any other. The router reads the path decoded, so such an id matched no route: ``GET /v1/jobs/%2F`` was
    redirected to the job list (a client asking for one job got them all) and ``POST /v1/jobs/a%2Fb/cancel`` was a
    404 naming the path. Matched here on the path as sent, segment by segment."""
    raw = scope.get("raw_path")
    if not raw or b"%2f" not in raw.lower():
        return None
    sent = raw.decode("latin-1").split("?", 1)[0].split("/")
    methods = {scope["method"], "GET"} if scope["method"] == "HEAD" else {scope["method"]}
    for route in routes:
        if not isinstance(route, APIRoute) or "{job_id}" not in route.path or not methods & route.methods:
            continue
        template = route.path.split("/")
        if len(template) != len(sent):
            continue
        if all((given != "") if part.startswith("{") else part == unquote(given) for part, given in zip(template, sent)):
            job_id = unquote(sent[template.index("{job_id}")])
            if "/" in job_id:
                return job_id
    return None


def repeated_header(raw: list[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    """The first of :data:`ONE_VALUE_HEADERS` that ``raw`` (an ASGI scope's headers) holds with different values, and
    the reason to give; ``None`` when each is sent once, or again with the same value (read as once)."""
    values: dict[str, list[bytes]] = {}
    for name, value in raw:
        key = name.decode("latin-1").lower()
        if key in ONE_VALUE_HEADERS:
            values.setdefault(key, []).append(value)
    for key, sent in values.items():
        if len(set(sent)) > 1:
            times = "twice" if len(sent) == 2 else f"{len(sent)} times"
            return ONE_VALUE_HEADERS[key], (f"was sent {times} with different values; send one (a proxy on the way "
                                            "may be adding its own)")
    return None


BODY_TYPES = frozenset({"application/json", "application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml",
                        "text/plain", "application/x-www-form-urlencoded"})
"""The media types a ``/v1`` body is read as (with any ``+json`` or ``+yaml`` type, and none at all): a task is read as
JSON when its type says JSON and as YAML (of which JSON is a part) otherwise, the other bodies as JSON. curl's ``-d``
sends ``application/x-www-form-urlencoded`` with a task file's text, which reads as it always has."""


def body_refusal(path: str, headers) -> tuple[str, str] | None:
    """The header and the reason for a 415, when a ``/v1`` request's body is one the API does not read; ``None`` when
    it reads it (or there is no body). Any type was read as a task, so a ``multipart/form-data`` upload (curl's
    ``-F``) or a gzip file was answered a parse error about its bytes. A coded body (``Content-Encoding: gzip``) is
    refused rather than decoded: no client of the broker compresses what it sends (the CLI, the checkpoint library's
    reports, Slack), the bodies are small, and decoding would hand ``max_body_bytes`` a second size to hold. The
    workdir upload (``PUT /v1/workdirs/...``) is left as it is: a pack is a tar.gz whatever its header calls it."""
    if not path.startswith(API_PREFIX) or path.startswith("/v1/workdirs/"):
        return None
    length = headers.get("content-length")
    if headers.get("transfer-encoding") is None and (length is None or not length.strip("0")):
        return None  # no body: a bodyless POST with a header left over reads nothing
    coding = headers.get("content-encoding", "")
    if any(c.strip().lower() not in ("", "identity") for c in coding.split(",")):
        return "Content-Encoding", (f"{coding.strip()[:80]!r} is not read here: send the body uncompressed, with no "
                                    "Content-Encoding")
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    if not media or media in BODY_TYPES or media.endswith(("+json", "+yaml")):
        return None
    return "Content-Type", (f"{media[:80]!r} is not a body this API reads: send JSON (application/json) or, for a "
                            "task, YAML (application/yaml)")


def methods_at(routes: list, scope: dict) -> list[str]:
    """The methods the routes at the path of ``scope`` (an ASGI request's) take, sorted."""
    return sorted({m for r in routes if isinstance(getattr(r, "methods", None), set)
                   and r.matches(scope)[0] is Match.PARTIAL for m in r.methods})


def routing_refusal(method: str, path: str, exc: StarletteHTTPException,
                    allowed: list[str]) -> tuple[str, str | None]:
    """The detail and field of an ``HTTPException`` (the router's own among them): a request to no route (404) names
    the ``path`` (its detail stays Starlette's "Not Found": ``broker`` adds to that one its hint that ``--url`` is
    the base URL, in every CLI version), one with a method the path does not take (405) the ``method`` and the
    ``allowed`` ones; any other keeps its detail."""
    detail, shown = str(exc.detail), path if len(path) <= 200 else path[:200] + "..."
    if exc.status_code == 404 and detail == "Not Found":
        return detail, "path"
    if exc.status_code == 405 and detail == "Method Not Allowed":
        takes = f" (it takes {', '.join(allowed)})" if allowed else ""
        return f"method: {shown} does not take {method}{takes}", "method"
    return detail, None


def _only(body: dict, takes: set[str]) -> None:
    """Refuse a field of ``body`` that is not one of ``takes``, naming it, as a task's unknown keys and a query's
    unknown parameters are: ``{"budget_usd": 40, "deadline": "6h"}`` answered 200 with the deadline dropped. (A
    progress report is read leniently: a newer checkpoint library may send more than this broker reads.)"""
    for key in body:
        if key == "":  # ": is not a field this takes", naming no field
            raise Invalid("body", EMPTY_KEY)
        if key not in takes:
            raise Invalid(key, f"is not a field this takes ({unknown_key_hint(key, takes)})")


def app_from_env() -> FastAPI:
    """Factory for ``uvicorn --factory broker.api.app:app_from_env``."""
    return create_app()
