"""A small Python client for the broker's HTTP API (the CLI is built on it).

    from broker.client import BrokerClient
    client = BrokerClient()                      # BROKER_URL / BROKER_TOKEN, or the local broker (on BROKER_PORT)
    job = client.submit(open("task.yaml").read(), budget="20", deadline="6h")
    client.wait(job["id"])
"""

from __future__ import annotations

import os
import re
import time
import uuid
from datetime import date
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

import httpx
import yaml

from broker.config import default_data_dir, redacted_url
from broker.spec import SpecError
from broker.task_text import DEFAULT_MAX_BYTES, load_yaml, yaml_error

FINAL = {"succeeded", "failed", "cancelled", "stopped_budget"}
SUBMIT_RETRY_DELAYS = (0.5, 1.0, 2.0)  # seconds before each retry of a submit whose outcome is unknown
MAX_JOBS_LISTED = 1000
"""The most jobs `GET /v1/jobs` lists at once (the largest `limit` it takes)."""


class BrokerError(Exception):
    """The broker refused a request; ``status`` is the HTTP status, ``field`` the field it names."""

    def __init__(self, status: int, detail: str, field: str | None = None, *, unknown_outcome: bool = False,
                 retry_after: float | None = None):
        self.status = status
        self.detail = detail
        self.field = field
        self.unknown_outcome = unknown_outcome  # the request may have been carried out (no answer came)
        self.retry_after = retry_after  # seconds the answer's Retry-After header asked to wait, when it gave one
        super().__init__(detail)

    def __str__(self) -> str:
        return self.detail


MADE_ITS_OWN = ("or, if the broker made its own admin token (it was given none: no BROKER_ADMIN_TOKEN, no "
                "admin_token_sha256), set BROKER_DATA_DIR to the data dir it was started with, where it keeps that token "
                "(`broker serve` names it at start)")
"""A 401's hint on this host: where a broker keeps the admin token it made. A broker given its admin token keeps it in
no file, and "set BROKER_DATA_DIR to the data dir the broker was started with" sent the user after a file that was
nowhere: said only as a condition."""


def default_token(env: dict[str, str] | os._Environ = os.environ) -> str | None:
    """``BROKER_TOKEN``, else the admin token a local ``broker serve`` wrote to its data dir.

    ``BROKER_TOKEN`` set but empty is refused (:class:`BrokerError`), not read as unset: ``BROKER_TOKEN=$TEAM_TOKEN``
    with the variable unset went as this host's admin, listing every team's jobs and submitting as admin."""
    if "BROKER_TOKEN" in env:
        if not env["BROKER_TOKEN"].strip():
            raise BrokerError(0, "BROKER_TOKEN is set but empty: give it your token, or unset it (unset BROKER_TOKEN) "
                                 "for the admin token of a broker on this host")
        return env["BROKER_TOKEN"]
    path = default_data_dir(env) / "admin-token"
    return path.read_text().strip() if path.exists() else None


def default_url(env: dict[str, str] | os._Environ = os.environ) -> str:
    """``BROKER_URL``, else the local broker on ``BROKER_PORT`` (8000 unless set), the port ``broker serve``
    listens on: a broker started on another port with ``BROKER_PORT`` is found by the CLI in the same shell.

    ``BROKER_URL`` set but empty is refused (:class:`BrokerError`), as ``--url ""`` and the API's ``?team=`` are:
    most often a variable a script left unset (``BROKER_URL=$PROD_URL``), and read as unset it sent the command —
    a submit, a cancel — to the broker on this host instead. An empty ``BROKER_PORT`` is read as unset (8000), as
    ``broker serve`` reads it; one that is not a port is refused, naming it."""
    if "BROKER_URL" in env:
        if not env["BROKER_URL"].strip():
            raise BrokerError(0, "BROKER_URL is set but empty: give it the broker's URL, or unset it (unset "
                                 "BROKER_URL) for the broker on this host")
        return env["BROKER_URL"].strip()
    try:
        port = env_port(env)
    except ValueError as exc:
        raise BrokerError(0, f"{exc} (BROKER_URL is not set, so the CLI looks for the broker on this host at that "
                             "port)") from None
    return f"http://127.0.0.1:{port}"


def port_number(text: str) -> int:
    """A TCP port as typed (``--port``, ``BROKER_PORT``): 0 to 65535 (0: any free port), or ``ValueError`` saying so."""
    try:
        port = int(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not a port number (0 to 65535)") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"{port} is not a port number (0 to 65535)")
    return port


def env_port(env: dict[str, str] | os._Environ = os.environ) -> int:
    """``BROKER_PORT``: 8000 when unset or empty, else a port number, or ``ValueError`` naming it."""
    text = env.get("BROKER_PORT") or ""
    if not text.strip():
        return 8000
    try:
        return port_number(text)
    except ValueError:
        raise ValueError(f"BROKER_PORT={text!r} is not a port number (0 to 65535): give one, or unset it for "
                         "8000") from None


def load_task(text: str) -> dict:
    """A task file's text (YAML or JSON) as a mapping, or :class:`BrokerError` saying where it is broken.

    Read as the broker reads a YAML body (:mod:`broker.task_text`): a key given twice, an unquoted date outside
    ``broker.deadline``, ``.nan`` and the like are refused here, naming the field, rather than sent as the last
    key alone or failing to be written as JSON (a traceback); an unquoted deadline time is sent as its ISO text."""
    try:
        task = load_yaml(text, max_bytes=DEFAULT_MAX_BYTES)
    except SpecError as exc:
        raise BrokerError(0, f"the task's {exc.field}: {exc.reason}", exc.field) from None
    except yaml.YAMLError as exc:
        raise BrokerError(0, f"the task {yaml_error(exc)}") from None
    if not isinstance(task, dict):
        raise BrokerError(0, "the task file must hold a mapping (a SkyPilot task)")
    section = task.get("broker")
    if isinstance(section, dict) and isinstance(section.get("deadline"), date):
        task["broker"] = {**section, "deadline": section["deadline"].isoformat()}  # a date or a datetime, as written
    return task


RECONNECT_SECONDS = 120.0
"""How long a follower (``logs -f``, ``submit --wait``) asks again for a broker it cannot reach before giving up."""

PASSING_STATUSES = (502, 503, 504)
"""Answers a follower reads as the broker out of reach for a moment, not as a refusal: a load balancer's 502 or 504
while the broker behind it restarts (``terraform/`` puts one in front), the broker's own 503 while its job store is
briefly down. The job runs on meanwhile, and a follower that ended at the first of them left it unwatched."""


def _retry_after(r: httpx.Response) -> float | None:
    """The seconds an answer's ``Retry-After`` header asks to wait, when it gives them as a number (the broker's 503
    does); ``None`` for none, or an HTTP date, which the follower's own pace stands in for."""
    try:
        seconds = float(r.headers.get("Retry-After", ""))
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


def _submit_task(spec: str | dict, budget: str | None, team: str | None, deadline: str | None,
                 expected_hours: str | None = None) -> dict:
    """The task a submit sends: ``spec`` (YAML text or a mapping) with ``budget``/``team``/``deadline``/
    ``expected_hours`` set in its broker: section over what it says."""
    task = load_task(spec) if isinstance(spec, str) else dict(spec)
    overrides = {k: v for k, v in {"budget_usd": budget, "team": team, "deadline": deadline,
                                   "expected_hours": expected_hours}.items() if v is not None}
    if overrides:
        task["broker"] = {**(task.get("broker") or {}), **overrides}
    return task


def _check_key(idempotency_key: str | None) -> None:
    """A malformed Idempotency-Key refused before anything is sent: sent, it failed as a dropped connection, and a
    submit was retried."""
    problem = idempotency_key_problem(idempotency_key) if idempotency_key is not None else None
    if problem:
        raise BrokerError(0, f"the idempotency key {problem}", "Idempotency-Key")


class BrokerClient:
    @staticmethod
    def _shown(url: str) -> str:
        """``url`` as the CLI says it: a ``user:password@`` part's password (a proxy's basic auth) as ``***``."""
        try:
            return redacted_url(url)
        except ValueError:  # not a URL: said as such below, with the password still hidden
            return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", url)

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0):
        # an empty url or token is refused, not read as "not given": `--token "$UNSET"` went as this host's admin
        if url is not None and not url.strip():
            raise BrokerError(0, "the broker URL (--url) is empty: give it, or leave it out for BROKER_URL or the "
                                 "broker on this host")
        if token is not None and not token.strip():
            raise BrokerError(0, "the token (--token) is empty: give it, or leave it out for BROKER_TOKEN or the "
                                 "admin token of a broker on this host")
        self.url = (url.strip() if url is not None else default_url()).rstrip("/")
        self.shown_url = self._shown(self.url)  # in what it says: a terminal, a CI log
        if not self.url.lower().startswith(("http://", "https://")):
            raise BrokerError(0, f"the broker URL {self.shown_url!r} must start with http:// or https://, "
                                 "like http://127.0.0.1:8000")
        self.last_submit_created: bool | None = None  # whether the last submit made a job (False: its Idempotency-Key had; None: unknown)
        self.token = _header_token(token if token is not None else default_token())
        # where the token came from when this host's admin-token file gave it, for a 401's hint
        self._token_file = (default_data_dir() / "admin-token"
                            if self.token and token is None and "BROKER_TOKEN" not in os.environ else None)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        except httpx.InvalidURL as exc:  # `--url http://[::1` was a traceback
            raise BrokerError(0, f"the broker URL {self.shown_url!r} is not a URL: {exc}; give it as "
                                 "http://127.0.0.1:8000") from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, **kw) -> Any:
        return self._json(self._request(method, path, **kw))

    def _json(self, r: httpx.Response) -> Any:
        try:
            return r.json()
        except ValueError:  # "Expecting value: line 1 column 1 (char 0)" said nothing of what answered
            raise BrokerError(0, _not_the_broker(self.shown_url, r)) from None

    def _request(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.ConnectError:
            raise BrokerError(0, f"cannot reach the broker at {self.shown_url} (is `broker serve` running?)") from None
        except httpx.TimeoutException:
            raise BrokerError(0, f"the broker at {self.shown_url} did not answer in time", unknown_outcome=True) from None
        except (httpx.LocalProtocolError, UnicodeEncodeError) as exc:
            # the request could not be written (a header HTTP cannot carry): nothing was sent, so nothing was done;
            # read as a dropped connection below, a submit was retried three times and said it "may have been stored"
            raise BrokerError(0, f"cannot send the request to the broker at {self.shown_url}: {exc} (nothing was sent)") \
                from None
        except httpx.TransportError as exc:  # sent, then the connection dropped: it may have been carried out
            raise BrokerError(0, f"the connection to the broker at {self.shown_url} dropped before it answered: {exc}",
                              unknown_outcome=True) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise BrokerError(0, f"cannot talk to the broker at {self.shown_url}: {exc}") from None
        if r.status_code >= 400:
            try:
                body = r.json()
                detail, field = body.get("detail", r.text), body.get("field")
            except (ValueError, AttributeError):  # a page from something else (a proxy's HTML), not one line
                detail, field = _not_the_broker(self.shown_url, r), None
            if r.status_code == 401 and not self.token:
                # a broker on this host started with another BROKER_DATA_DIR wrote its token there, not here
                # -- only where it generated its admin token: one given it (BROKER_ADMIN_TOKEN, admin_token_sha256)
                # is in no file, and "set BROKER_DATA_DIR" sent the user after a file that was nowhere
                other_dir = (f"; {MADE_ITS_OWN}" if _loopback(self.url) else "")
                # the admin-token file is named only where it is: a broker given its admin token (BROKER_ADMIN_TOKEN,
                # admin_token_sha256) writes none, and "run this where `broker serve` wrote <file>" sent the user
                # looking for a file that was nowhere (here, one that is there and was not sent holds no token)
                token_file = default_data_dir() / "admin-token"
                empty = f"; {token_file} holds no token" if token_file.exists() else ""
                detail = (f"{detail} (no token was sent{empty}: set BROKER_TOKEN or --token to the admin token the "
                          f"broker was given, or a team token{other_dir})")
            elif r.status_code == 401 and self._token_file is not None:
                detail = (f"{detail} (the token sent is the admin token in {self._token_file}, which this broker "
                          f"does not take: set BROKER_TOKEN to a token it takes; {MADE_ITS_OWN})")
            raise BrokerError(r.status_code, str(detail), field, unknown_outcome=r.status_code in (500, 503),
                              retry_after=_retry_after(r))
        return r

    # -- jobs ------------------------------------------------------------------------------------

    def submit(self, spec: str | dict, *, budget: str | None = None, team: str | None = None,
               deadline: str | None = None, idempotency_key: str | None = None,
               expected_hours: str | None = None) -> dict:
        """Submit a task (YAML text or a mapping); ``budget``/``team``/``deadline``/``expected_hours`` override its
        broker: section."""
        task = _submit_task(spec, budget, team, deadline, expected_hours)
        # Every submit carries a key (a fresh one unless given), so a submit whose answer was lost — a
        # timeout, the store briefly down — is retried here without making a second job.
        _check_key(idempotency_key)
        key = idempotency_key or uuid.uuid4().hex
        retried = False
        for delay in (*SUBMIT_RETRY_DELAYS, None):
            try:
                r = self._request("POST", "/v1/jobs", json=task, headers={"Idempotency-Key": key})
                break
            except BrokerError as exc:
                if not exc.unknown_outcome:
                    raise
                if delay is None:
                    exc.detail += (f" — the submit may have been stored; retrying with --idempotency-key {key} "
                                   "(Idempotency-Key header) cannot submit it twice")
                    raise
                time.sleep(delay)
                retried = True
        # after a retry, a 200 may be this very call's job (its first answer lost): unknown then
        self.last_submit_created = True if r.status_code == 201 else None if retried else False
        return self._json(r)

    def submit_dry_run(self, spec: str | dict, *, budget: str | None = None, team: str | None = None,
                       deadline: str | None = None, idempotency_key: str | None = None,
                       expected_hours: str | None = None) -> dict:
        """What :meth:`submit` would do with the same arguments, storing nothing (``POST /v1/jobs?dry_run=true``): the
        quote, where the job would be placed now and where it would stand in the queue; the submit's own refusal is
        raised (:class:`BrokerError`, its status and field) as the submit would raise it. No key is made up: with
        nothing stored, a dry run needs none to be retried, and ``idempotency_key`` asks whether that key was used."""
        task = _submit_task(spec, budget, team, deadline, expected_hours)
        _check_key(idempotency_key)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        return self._call("POST", "/v1/jobs", params={"dry_run": "true"}, json=task, headers=headers)

    # -- workdir packs ---------------------------------------------------------------------------

    def workdir_limits(self) -> dict:
        return self._call("GET", "/v1/workdirs")

    def workdir(self, digest: str) -> dict | None:
        """The stored pack, or ``None`` when the broker has none with this digest."""
        try:
            return self._call("GET", f"/v1/workdirs/{digest}")
        except BrokerError as exc:
            if exc.status == 404:
                return None
            raise

    def upload_workdir(self, path: str | Path, digest: str) -> dict:
        """Upload a pack (``broker.workdir.pack``) unless the broker has it already: the same code goes once."""
        stored = self.workdir(digest)
        if stored is not None:
            return {**stored, "uploaded": False}
        with open(path, "rb") as fh:
            answer = self._call("PUT", f"/v1/workdirs/{digest}", content=fh,
                                headers={"Content-Type": "application/octet-stream",
                                         "Content-Length": str(os.fstat(fh.fileno()).st_size)})
        return {**answer, "uploaded": True}

    def jobs(self, *, state: str | None = None, team: str | None = None, limit: int | None = None) -> list[dict]:
        """Jobs newest first: the broker's 200 newest unless ``limit`` (at most :data:`MAX_JOBS_LISTED` at once;
        :meth:`jobs_page` reads on from there)."""
        return self.jobs_page(state=state, team=team, limit=limit)["jobs"]

    def jobs_page(self, *, state: str | None = None, team: str | None = None, limit: int | None = None,
                  cursor: str | None = None, name: str | None = None) -> dict:
        """One page of the listing: ``{"jobs": [...], "next_cursor": ...}``; pass ``next_cursor`` back as ``cursor``
        for the next page (``None``: the last page). A broker from before cursors answers no ``next_cursor``.
        ``state``: one state or several with commas (``queued,running``); ``name``: the start of the jobs' names."""
        params = {k: v for k, v in {"state": state, "team": team, "name": name, "limit": limit,
                                    "cursor": cursor}.items() if v}
        return self._call("GET", "/v1/jobs", params=params)

    def all_jobs(self, *, state: str | None = None, team: str | None = None,
                 name: str | None = None) -> tuple[list[dict], bool]:
        """Every job matching, newest first, read page by page along the cursor; and whether that is all of them
        (``False`` only from a broker from before cursors, whose one page of :data:`MAX_JOBS_LISTED` was full)."""
        jobs: list[dict] = []
        cursor = None
        while True:
            page = self.jobs_page(state=state, team=team, limit=MAX_JOBS_LISTED, cursor=cursor, name=name)
            jobs += page["jobs"]
            if "next_cursor" not in page:
                return jobs, len(page["jobs"]) < MAX_JOBS_LISTED
            cursor = page["next_cursor"]
            if not cursor:
                return jobs, True

    def whoami(self) -> dict | None:
        """``{"name", "team", "admin"}``: who this client's token is; ``None`` from a broker too old to say (404)."""
        try:
            return self._call("GET", "/v1/whoami")
        except BrokerError as exc:
            if exc.status in (404, 405):
                return None
            raise

    def job(self, job_id: str) -> dict:
        return self._call("GET", _job_path(job_id))

    def events(self, job_id: str) -> list[dict]:
        return self._call("GET", f"{_job_path(job_id)}/events")["events"]

    def cancel(self, job_id: str) -> dict:
        return self._call("POST", f"{_job_path(job_id)}/cancel")

    def cancel_many(self, *, ids: list[str] | tuple[str, ...] = (), name: str | None = None,
                    team: str | None = None, every: bool = False) -> dict:
        """Cancel the jobs ``ids``, or every job not ended whose name begins with ``name``, or (``every``) all of a
        team's (``POST /v1/jobs/cancel``): ``{"cancelled": [...], "already_ended": [...], "refused": [...]}``. An id
        that is no job id is refused here, as :meth:`cancel` refuses it, before any job is cancelled; more ids than
        the broker takes at once go in parts, their answers put together."""
        for job_id in ids:
            _job_path(job_id)
        if not ids:
            body: dict[str, Any] = {"name": name} if name is not None else {"all": True} if every else {}
            return self._call("POST", "/v1/jobs/cancel", json={**body, **({"team": team} if team else {})})
        out: dict[str, list] = {"cancelled": [], "already_ended": [], "refused": [], "already_cancelling": []}
        for start in range(0, len(ids), MAX_CANCEL_IDS):
            part = self._call("POST", "/v1/jobs/cancel", json={"ids": list(ids[start:start + MAX_CANCEL_IDS])})
            for key in out:
                out[key] += part.get(key, [])  # already_cancelling: not from a broker of before it
        return out

    def resume(self, job_id: str, *, force: bool = False, envs: dict | None = None,
               secrets: dict | None = None) -> dict:
        """Resume the job; ``envs`` / ``secrets`` set those of its task from this attempt on."""
        given = {k: v for k, v in (("envs", envs), ("secrets", secrets)) if v}
        return self._call("POST", f"{_job_path(job_id)}/resume", params={"force": "true"} if force else None,
                          **({"json": given} if given else {}))

    def set_budget(self, job_id: str, budget_usd: str) -> dict:
        return self._call("POST", f"{_job_path(job_id)}/budget", json={"budget_usd": str(budget_usd)})

    def set_deadline(self, job_id: str, deadline: str | None) -> dict:
        """Set or move a job's deadline (a duration from now or an ISO time with its timezone), or remove it (``None``)."""
        return self._call("POST", f"{_job_path(job_id)}/deadline", json={"deadline": deadline})

    def switch_to_ondemand(self, job_id: str, *, force: bool = False) -> dict:
        return self._call("POST", f"{_job_path(job_id)}/ondemand", params={"force": "true"} if force else None)

    def unpin(self, job_id: str) -> dict:
        return self._call("DELETE", f"{_job_path(job_id)}/ondemand")

    def fault(self, kind: str, *, job_id: str | None = None, zone: str | None = None,
              available: bool | None = None) -> dict:
        return self._call("POST", "/v1/admin/faults",
                          json={"kind": kind, "job_id": job_id, "zone": zone, "available": available})

    def costs(self, **params) -> dict:
        return self._call("GET", "/v1/costs", params=params)

    def job_costs(self, job_id: str) -> dict:
        return self._call("GET", _job_path(job_id, "/v1/costs/jobs/"))

    def logs(self, job_id: str, *, offset: int = 0, attempt: int | None = None) -> dict:
        params: dict[str, Any] = {"offset": offset}
        if attempt is not None:  # 0 is not "the newest": the broker says attempts count from 1
            params["attempt"] = attempt
        return self._call("GET", f"{_job_path(job_id)}/logs", params=params)

    def log_pages(self, job_id: str, *, attempt: int | None = None) -> Iterator[dict]:
        """An attempt's output as it is now (the newest attempt's unless ``attempt``), page by page: the broker
        answers at most 1 MiB a read, and one read cut a longer log in the middle of a line, saying nothing. The
        first page always (``attempt`` None in it: nothing has run yet), then each next one along ``offset`` while
        it holds output; the attempt read is the first page's throughout, though a newer one starts meanwhile."""
        page = self.logs(job_id, attempt=attempt)
        yield page
        while page["data"] and page["attempt"] is not None:
            page = self.logs(job_id, offset=page["offset"], attempt=page["attempt"])
            if not page["data"]:
                return
            yield page

    def follow_logs(self, job_id: str, *, attempt: int | None = None, poll: float = 0.5,
                    on_status: Callable[[dict], None] | None = None,
                    on_attempt_end: Callable[[dict, int], None] | None = None,
                    on_unreachable: Callable[[str | None], None] | None = None,
                    reconnect_seconds: float = RECONNECT_SECONDS) -> Iterator[str]:
        """Yield log text as it appears, across attempts (from ``attempt`` on, else from the newest), until the
        job ends. ``on_status`` is called with the job whenever its state, queue position or reason changes
        while there is no output (so a queued job says why it waits instead of looking hung); ``on_attempt_end``
        with the job and the number of the attempt whose output ended as the follower moves on to the next (a
        preemption read as one log running on into "launching attempt 2")."""
        for chunk in self.follow_log_chunks(job_id, attempt=attempt, poll=poll, on_status=on_status,
                                            on_attempt_end=on_attempt_end, on_unreachable=on_unreachable,
                                            reconnect_seconds=reconnect_seconds):
            yield chunk["data"]

    def follow_log_chunks(self, job_id: str, *, attempt: int | None = None, poll: float = 0.5,
                          on_status: Callable[[dict], None] | None = None,
                          on_attempt_end: Callable[[dict, int], None] | None = None,
                          on_unreachable: Callable[[str | None], None] | None = None,
                          reconnect_seconds: float = RECONNECT_SECONDS) -> Iterator[dict]:
        """:meth:`follow_logs`, each piece of text as ``{"attempt": n, "data": text, "offset": end}``: the attempt
        that wrote it, and where it ends in that attempt's log (as ``GET /v1/jobs/{id}/logs`` answers).

        A broker that cannot be reached (restarted, or a network blip), or answers one of :data:`PASSING_STATUSES` (a
        proxy's 502 meanwhile, its own 503 while its store is down), is asked again for up to ``reconnect_seconds``,
        no sooner than a ``Retry-After`` asks, before the error is raised: a follower ended with "cannot reach the
        broker" at every broker restart, while the job ran on. ``on_unreachable`` is told once when it goes (with why) and once when it is back (None)."""
        offset, seen, said_at, eager = 0, None, 0.0, True
        gone: list[float] = []  # when the broker went out of reach, while it is

        def asked(call: Callable[[], dict]) -> dict:
            while True:
                try:
                    answer = call()
                except BrokerError as exc:
                    if exc.status not in (0, *PASSING_STATUSES):  # a refusal, not a broker out of reach: said as it is
                        raise
                    if not gone:
                        gone.append(time.monotonic())
                        if on_unreachable is not None:
                            on_unreachable(_out_of_reach(exc, self.shown_url))
                    left = gone[0] + reconnect_seconds - time.monotonic()
                    if left < 0:
                        raise
                    # as long as the answer's Retry-After asks, but never past the end of the wait
                    time.sleep(min(max(poll, 1.0, exc.retry_after or 0.0), left + 0.1))
                    continue
                if gone:
                    gone.clear()
                    if on_unreachable is not None:
                        on_unreachable(None)
                return answer

        while True:
            chunk = asked(lambda: self.logs(job_id, offset=offset, attempt=attempt))
            if chunk["attempt"] is not None and attempt is None:
                attempt = chunk["attempt"]
            if chunk["data"]:
                yield {"attempt": chunk["attempt"], "data": chunk["data"], "offset": chunk["offset"]}
                offset = chunk["offset"]
                continue
            job = asked(lambda: self.job(job_id))
            status = (job["state"], job.get("queue_position"), _in_substance(job.get("reason")))
            moved_on = attempt is not None and job["attempts"] > attempt
            # a job moved on to its next attempt: the end of this one is said first (its last lines, then how it
            # ended), and where the next stands after it ("launching attempt 2 …" came before "attempt 1 preempted")
            if on_status is not None and status != seen and not moved_on:
                # a new state or place in the queue at once, and the first new reason after it (the engine's first
                # look at it: "waiting to be placed", then why it waits); a reason that says something else again
                # at most once a minute (a holder "running 9 s past its expected 10 s" printed a line every
                # second, and a reason that changes in substance that often would too)
                now = time.monotonic()
                moved = seen is None or status[:2] != seen[:2]
                if moved or eager or now - said_at >= STATUS_EVERY_S:
                    eager = moved
                    seen, said_at = status, now
                    on_status(job)
            if moved_on or job["state"] in FINAL and (attempt is None or attempt >= job["attempts"]):
                # what the attempt wrote between the read above and the job's answer (its last lines, as it
                # ended) is read before the follower moves on or returns
                rest = asked(lambda: self.logs(job_id, offset=offset, attempt=attempt))
                if rest["data"]:
                    yield {"attempt": rest["attempt"], "data": rest["data"], "offset": rest["offset"]}
                    offset = rest["offset"]
                    continue
                if moved_on:
                    if on_attempt_end is not None:
                        on_attempt_end(job, attempt)
                    attempt, offset = attempt + 1, 0
                    continue
                return
            time.sleep(poll)

    def wait(self, job_id: str, *, timeout: float = 3600, poll: float = 0.5) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in FINAL:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout} s")
            time.sleep(poll)

    def health(self) -> dict:
        return self._call("GET", "/v1/healthz")


STATUS_EVERY_S = 60.0
"""While following a job with no output, the least time between two lines that say only that its reason changed."""

_TICKING = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?(?=\s?(?:ms|s|min|h|seconds?|minutes?|hours?)\b)"
                      r"|(?<![\d:])\d{1,2}:\d{2}(?::\d{2})?(?![\d:])")


def _in_substance(reason: Any) -> Any:
    """A job's reason with its spans of time and clock times masked (``running 9 s past its expected 10 s``,
    ``retrying at 19:45Z``), so that the seconds ticking by are not read as a change of what it says."""
    return _TICKING.sub("#", reason) if isinstance(reason, str) else reason


def _out_of_reach(exc: BrokerError, url: str) -> str:
    """Why a follower cannot read the broker, as it tells the user: the error's sentence, with the status of an answer
    that stood in for the broker's (a proxy's 502, the broker's 503) where the sentence does not give it already."""
    if exc.status == 0 or f"answered {exc.status}" in exc.detail:
        return exc.detail
    return f"the broker at {url} answered {exc.status}: {exc.detail}"


def _loopback(url: str) -> bool:
    """Whether the broker URL names this machine (``localhost``, a loopback address)."""
    import ipaddress
    from urllib.parse import urlsplit

    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


MAX_CANCEL_IDS = 1000
"""Job ids one ``POST /v1/jobs/cancel`` takes (the broker's ``MAX_CANCEL_IDS``)."""


def _job_path(job_id: str, base: str = "/v1/jobs/") -> str:
    """``/v1/jobs/<id>``, the id one path segment whatever it holds: put in as it was, ``j-typo/../j-other`` named
    another job's route (``broker cancel`` cancelled that job) and ``?state=failed`` the list's."""
    if "/" in job_id or job_id in ("", ".", ".."):
        raise BrokerError(0, f"no job {job_id!r}: a job id is one word with no '/', like j-3fa9c1b2e0")
    return base + quote(job_id, safe="")


MAX_IDEMPOTENCY_KEY = 200
"""The longest ``Idempotency-Key`` the broker takes (it refuses a longer one with a 422)."""


def idempotency_key_problem(key: str) -> str | None:
    """What keeps ``key`` from being sent as an ``Idempotency-Key`` header and taken by the broker, as words that
    follow "the idempotency key" (naming the character and where it is), or ``None`` for a key that goes.

    A header carries printable ASCII, spaces inside but not at either end: 'ключ' failed as "'ascii' codec can't
    encode", ' k2 ' as a dropped connection, retried three times as if the submit might have been stored."""
    if not key:
        return "is empty"
    if len(key) > MAX_IDEMPOTENCY_KEY:
        return f"is {len(key)} characters long: the broker takes at most {MAX_IDEMPOTENCY_KEY}"
    for i, c in enumerate(key):
        if c == " " and (i == 0 or i == len(key) - 1):
            return ("begins with a space" if i == 0 else "ends with a space") + \
                ", which a header cannot carry there: leave it out"
        if not 32 <= ord(c) <= 126:
            what = "a control character" if ord(c) < 32 or ord(c) == 127 else "a character that is not ASCII"
            return (f"holds {what}, {c!r}, at position {i + 1}, which a header cannot carry: use letters, digits "
                    "and - _ . : (printable ASCII)")
    return None


def _header_token(token: str | None) -> str | None:
    """The token as an ``Authorization`` header carries it. The line break or spaces around a copied token are left
    out (spaces inside are kept: the broker takes a passphrase); any other character a header cannot carry is
    refused in a sentence, never echoed (it is a secret).
    Sent as it was, a line break was "the connection to the broker dropped" (and a submit retried as if its
    answer were lost), a non-ASCII letter "'ascii' codec can't encode character"."""
    if token is None:
        return None
    token = token.strip()
    # a space inside is a header's character, and a token the broker takes ("correct horse battery staple")
    bad = next((i for i, c in enumerate(token) if not 32 <= ord(c) <= 126), None)
    if bad is not None:
        what = "a control character" if ord(token[bad]) < 128 else "a character that is not ASCII"
        raise BrokerError(0, f"the token (--token or BROKER_TOKEN) holds {what} at position {bad + 1}, which a "
                             "token cannot hold: copy it again")
    return token or None


def _not_the_broker(url: str, r: httpx.Response) -> str:
    """A sentence for an answer that is not the broker's JSON: the URL points at something else, or a proxy in
    front of the broker answered for it."""
    kind = r.headers.get("content-type", "no content type").split(";")[0]
    text = r.text.strip() if kind == "text/plain" else ""
    said = f" ({text!r})" if text and len(text) <= 200 and "\n" not in text else ""  # a line, not a page
    return (f"{url} answered {r.status_code} {r.reason_phrase} with {kind}{said}, not the broker's JSON: is {url} "
            "the broker's address (BROKER_URL, --url), or is a proxy in front of it failing?")


def read_task_file(path: str | Path) -> str:
    p = Path(path)
    if not p.exists():
        raise BrokerError(0, f"{path}: no such file")
    if p.is_dir():
        raise BrokerError(0, f"{path} is a directory; give the task's YAML file")
    data = p.read_bytes()
    try:  # UTF-8 whatever this shell's locale, a byte-order mark allowed: as the broker reads a task's body
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = exc.start + len(data) - len(exc.object)  # in the file: the decoder counts from after a byte-order mark
        raise BrokerError(0, f"{path} is not UTF-8 (byte 0x{data[at]:02x} at offset {at}): save the task's YAML as "
                             "UTF-8") from None
