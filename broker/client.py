"""A small Python client for the broker's HTTP API (the CLI is built on it).

    from pathlib import Path
    from broker.client import BrokerClient
    client = BrokerClient()                      # BROKER_URL / BROKER_TOKEN, or the local broker (on BROKER_PORT)
    job = client.submit(Path("task.yaml"), budget="20", deadline="6h")   # workdir: . is this folder, as `broker submit`
    client.wait(job["id"])

Every call blocks until the broker answers (in a notebook's event loop: ``await asyncio.to_thread(client.wait, id)``).
"""

from __future__ import annotations

import copy
import os
import re
import time
import uuid
from datetime import date, datetime, timedelta
from decimal import Decimal
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
    """A request the broker refused, or one that could not be made.

    ``status`` is the HTTP status the broker answered (a 4xx names what to change: 422 bad input, 403 not allowed,
    404 no such job, 409 not in this state), or **0** when no answer came or the client refused before sending: the
    task's YAML broken (the broker would have answered 422), a path that is not here, the broker out of reach or
    slow to answer. ``field`` is the field or option to blame, when one is; ``detail`` the sentence.
    ``unknown_outcome``: no answer came, so the request may have been carried out. ``idempotency_key``: on a submit
    whose outcome is unknown after its retries, the key it was sent with — submitting again with it
    (``idempotency_key=exc.idempotency_key``) cannot make a second job."""

    def __init__(self, status: int, detail: str, field: str | None = None, *, unknown_outcome: bool = False,
                 retry_after: float | None = None, idempotency_key: str | None = None):
        self.status = status
        self.detail = detail
        self.field = field
        self.unknown_outcome = unknown_outcome  # the request may have been carried out (no answer came)
        self.retry_after = retry_after  # seconds the answer's Retry-After header asked to wait, when it gave one
        self.idempotency_key = idempotency_key
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


def _task_of(spec: str | Path | dict) -> dict:
    """``spec`` as a task mapping of its own (the caller's is never changed): YAML or JSON text, a task file
    (a :class:`pathlib.Path`), or a mapping. A one-line str that names a file is refused, pointing to it: read as
    YAML text, it was "the task file must hold a mapping", which said nothing of the file."""
    if isinstance(spec, Path):
        return load_task(read_task_file(spec))
    if isinstance(spec, str):
        line = spec.strip()
        if line and "\n" not in line and (line.endswith((".yaml", ".yml")) or _is_file(line)):
            raise BrokerError(0, f"{line!r} looks like a file's path, but a str is the task's YAML text: to submit the "
                                 f"file, pass pathlib.Path({line!r})")
        return load_task(spec)
    if not isinstance(spec, dict):
        raise BrokerError(0, f"the task must be YAML text, a pathlib.Path to a task file, or a mapping, not a "
                             f"{type(spec).__name__}")
    return copy.deepcopy(spec)


def _is_file(text: str) -> bool:
    try:
        return Path(text).expanduser().is_file()
    except (OSError, ValueError):  # a name too long, a NUL: not a file
        return False


def duration_text(span: timedelta) -> str:
    """A :class:`~datetime.timedelta` as a deadline reads a duration from now: ``6h``, ``1d12h``, ``90m``, ``30s``
    (``-2h`` for a negative one, which the broker refuses in its own words)."""
    micros = (span.days * 86400 + span.seconds) * 10**6 + span.microseconds
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    days, rest = divmod(micros, 86400 * 10**6)
    hours, rest = divmod(rest, 3600 * 10**6)
    minutes, rest = divmod(rest, 60 * 10**6)
    seconds = Decimal(rest) / 10**6
    parts = [f"{n}{unit}" for n, unit in ((days, "d"), (hours, "h"), (minutes, "m")) if n]
    if seconds or not parts:
        parts.append(f"{seconds.normalize():f}s")
    return sign + "".join(parts)


def _moment_text(moment: date) -> str:
    """A deadline's :class:`~datetime.datetime` (or date) as ISO text; a datetime with no timezone is read on this
    machine's clock, as ``broker submit --deadline 18:00`` reads one."""
    if isinstance(moment, datetime) and moment.tzinfo is None:
        moment = moment.astimezone()
    return moment.isoformat()


def _sendable(value: Any, where: str) -> Any:
    """``value`` as JSON carries it, for the Python values a notebook puts in a task or a submit's options: a
    ``Decimal`` as its exact text (a budget of ``Decimal("0.25")``), a datetime or date as ISO text, a timedelta as a
    duration (``broker.deadline``: from now, like ``6h``; ``broker.expected_hours``: its hours). Anything else JSON
    cannot carry is refused naming its field, where json said only "Object of type X is not JSON serializable"."""
    if isinstance(value, dict):
        return {k: _sendable(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sendable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)  # the broker refuses NaN in its own words
    if isinstance(value, date):
        return _moment_text(value)
    if isinstance(value, timedelta):
        if where == "broker.expected_hours":
            return format((Decimal(value // timedelta(microseconds=1)) / (3600 * 10**6)).normalize(), "f")
        return duration_text(value)
    raise BrokerError(0, f"{where}: a {type(value).__name__} cannot be sent to the broker: give text, a number, "
                         "or a mapping or list of them", where or None)


def _submit_task(spec: str | Path | dict, budget: Any = None, team: str | None = None, deadline: Any = None,
                 expected_hours: Any = None, priority: int | None = None) -> dict:
    """The task a submit sends: ``spec`` (YAML text, a task file or a mapping) with ``budget``/``team``/``deadline``/
    ``expected_hours``/``priority`` set in its broker: section over what it says, and its Python values (a
    ``Decimal``, a ``datetime``, a ``timedelta``) as JSON carries them (:func:`_sendable`)."""
    task = _task_of(spec)
    overrides = {k: v for k, v in {"budget_usd": budget, "team": team, "deadline": deadline,
                                   "expected_hours": expected_hours, "priority": priority}.items() if v is not None}
    if overrides:
        task["broker"] = {**(task.get("broker") or {}), **overrides}
    return _sendable(task, "")


def fill_task_env_refs(task: dict) -> None:
    """``${VAR}`` (or ``$VAR``) in the ``workdir`` and in each ``file_mounts`` source filled from the task's envs, as
    SkyPilot fills them when it reads the task (:func:`broker.spec.fill_env_refs`): the directory checked and packed
    here is the one the job runs in. ``workdir: /tmp/x/${PROJ}`` with ``envs: {PROJ: proj}`` was looked for as written
    ("no such directory"). A reference to no env is left as written, as SkyPilot leaves it (the broker says what is
    wrong with it). A mount's destination is filled too: a source uploaded from here moves to ``broker.file_mounts``,
    which the broker does not fill, and its destination was mounted as written."""
    from broker.spec import fill_env_refs

    envs = task.get("envs")
    if not isinstance(envs, dict) or not envs:
        return
    secrets = task.get("secrets") if isinstance(task.get("secrets"), dict) else {}
    envs = {k: v for k, v in envs.items() if k not in secrets}  # a secret's name the broker refuses, never filled in
    if isinstance(task.get("workdir"), str):
        task["workdir"] = fill_env_refs(task["workdir"], envs)
    mounts = task.get("file_mounts")
    if isinstance(mounts, dict):
        filled = {(fill_env_refs(dest, envs) if isinstance(dest, str) else dest):
                  (fill_env_refs(source, envs) if isinstance(source, str) else source)
                  for dest, source in mounts.items()}
        if len(filled) < len(mounts):  # as the broker refuses them: an uploaded one escaped its check
            seen: dict[Any, Any] = {}
            for dest in mounts:
                key = fill_env_refs(dest, envs) if isinstance(dest, str) else dest
                if key in seen:
                    raise BrokerError(0, f"file_mounts {dest}: and {seen[key]} are both {key!r} once the task's envs "
                                         "are filled in: mount each at a path of its own", f"file_mounts.{dest}")
                seen[key] = dest
        task["file_mounts"] = filled


def _unfilled_words(path: str, task: dict) -> str:
    """For a path still holding ``${VAR}`` or ``$VAR`` after :func:`fill_task_env_refs`: why each was not filled in — a
    secret (never filled into a path: the broker keeps it sealed), an env left null, or no env of that name — so that
    "no such directory" of ``/proj/${TOK}`` does not leave its user to guess. ``""`` when none is left."""
    from broker.spec import _ENV_REF

    envs = task.get("envs") if isinstance(task.get("envs"), dict) else {}
    secrets = task.get("secrets") if isinstance(task.get("secrets"), dict) else {}
    said = []
    for match in dict.fromkeys(m.group(0) for m in _ENV_REF.finditer(path)):
        name = _ENV_REF.fullmatch(match).group(1)
        why = ("is one of the task's secrets, which are never filled into a path" if name in secrets else
               f"is an env left without a value (give it: --env {name}=VALUE)" if name in envs else
               "names no env of the task, so it is left as written (SkyPilot fills only the task's envs)")
        said.append(f"{match} {why}")
    return f"; {'; '.join(said)}" if said else ""


def _local_source(source: Any) -> bool:
    """Whether a ``file_mounts`` source is a path on this machine (:func:`broker.spec.is_local_path`)."""
    from broker.spec import is_local_path

    return is_local_path(source)


def resolve_local_paths(task: dict) -> None:
    """Relative local paths — ``workdir`` and ``file_mounts`` sources — made absolute from the folder this process runs
    in, and a ``~/`` workdir from this user's home, as ``sky launch`` reads them: the broker launches from its own
    directory, as its own user, and refuses a relative path (a notebook's ``workdir: .`` ran the broker's install).
    ``broker submit`` and :meth:`BrokerClient.submit` both call this; a path that is not here is left as written."""
    def absolute(path: Any) -> Any:
        if not _local_source(path):
            return path  # a bucket URL, or the broker:checkpoint mount
        p = Path(path)
        return str(p.resolve()) if not p.is_absolute() and not path.startswith("~") and p.exists() else path

    workdir = Path(task["workdir"]).expanduser() if isinstance(task.get("workdir"), str) and task["workdir"] else None
    if workdir is not None and workdir.is_dir():  # the local launcher runs from here; `~` is this user's home
        task["workdir"] = str(workdir if workdir.is_absolute() else workdir.resolve())
    mounts = task.get("file_mounts")
    if isinstance(mounts, dict):
        for destination, source in mounts.items():
            if isinstance(source, dict) and "source" in source:
                inner = source["source"]
                source = {**source, "source": [absolute(x) for x in inner] if isinstance(inner, list) else absolute(inner)}
                mounts[destination] = source
            else:
                mounts[destination] = absolute(source)


def on_this_host(url: str) -> bool:
    """Whether the broker URL names this machine (loopback), where the broker can read the workdir itself: named so
    (``localhost``, ``127.0.0.1``), or a name or address that reaches it all the same (``vm`` in /etc/hosts as
    127.0.0.1, ``0.0.0.0``), which was read as a remote broker and had the workdir packed and uploaded at every
    submit. A name that does not resolve in a moment is read as remote, as before."""
    from urllib.parse import urlsplit

    if _loopback(url):
        return True
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return False
    return bool(host) and _resolves_here(host)


RESOLVE_SECONDS = 1.0
"""How long the client waits for a broker URL's host name to resolve before reading it as a remote broker."""


_RESOLVED: dict[str, bool] = {}


def _resolves_here(host: str) -> bool:
    """Whether every address ``host`` resolves to is this machine (loopback, or the unspecified 0.0.0.0 / ::, which
    a connection takes as this machine); False when it does not resolve within :data:`RESOLVE_SECONDS`. The lookup
    runs in a thread of its own because the system's resolver takes no timeout; it is asked once per host."""
    import ipaddress
    import socket
    import threading

    if host in _RESOLVED:
        return _RESOLVED[host]
    found: list[set[str]] = []

    def resolve() -> None:
        try:
            found.append({info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})
        except (OSError, UnicodeError):
            pass

    looker = threading.Thread(target=resolve, daemon=True)  # left behind, not waited on, when the resolver hangs
    looker.start()
    looker.join(RESOLVE_SECONDS)
    here = False
    if found and found[0]:
        try:
            addresses = [ipaddress.ip_address(a.split("%")[0]) for a in found[0]]
        except ValueError:
            addresses = []
        here = bool(addresses) and all(a.is_loopback or a.is_unspecified for a in addresses)
    _RESOLVED[host] = here
    return here


def files_said(n: int) -> str:
    """``1 file``, ``37 files``: an upload's count ("1 files" was said of a single file's mount)."""
    return f"{n:,} file{'' if n == 1 else 's'}"


UPLOAD_OPTIONS = ("upload_workdir=True", "upload_workdir=False")
"""How :meth:`BrokerClient.ship_workdir`'s sentences name the choice to upload or not, from Python; the CLI passes
its flags (``--upload-workdir``, ``--no-upload-workdir``)."""


def _check_key(idempotency_key: str | None) -> None:
    """A malformed Idempotency-Key refused before anything is sent: sent, it failed as a dropped connection, and a
    submit was retried."""
    problem = idempotency_key_problem(idempotency_key) if idempotency_key is not None else None
    if problem:
        raise BrokerError(0, f"the idempotency key {problem}", "Idempotency-Key")


class BrokerClient:
    """The broker's HTTP API from Python: submit, list, follow, cancel, resume and cost jobs, as ``broker`` (the CLI,
    built on it) does.

    Every call is synchronous: it blocks until the broker answers. In a notebook's event loop (Jupyter, ``asyncio``),
    run a long one in a thread, ``await asyncio.to_thread(client.wait, job_id)``, so the loop goes on meanwhile.
    A refusal raises :class:`BrokerError` (its ``status`` and ``field``); :meth:`wait` past its timeout raises
    :class:`TimeoutError`. Use it as a context manager, or call :meth:`close`, to close its connections."""

    @staticmethod
    def _shown(url: str) -> str:
        """``url`` as the CLI says it: a ``user:password@`` part's password (a proxy's basic auth) as ``***``."""
        try:
            return redacted_url(url)
        except ValueError:  # not a URL: said as such below, with the password still hidden
            return re.sub(r"(//[^/@:]*):[^/@]*@", r"\1:***@", url)

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0):
        """A client of the broker at ``url`` (else ``BROKER_URL``, else ``http://127.0.0.1:$BROKER_PORT``, 8000 unless
        set) with ``token`` (else ``BROKER_TOKEN``, else the admin token a ``broker serve`` on this host wrote to its
        data dir). ``timeout``: seconds to wait for each answer. Raises :class:`BrokerError` (status 0) for an empty
        or malformed URL or token."""
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
        """Close the client's connections."""
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

    def prepare_task(self, spec: str | Path | dict, *, name: str | None = None, envs: dict | None = None,
                     secrets: dict | None = None, upload_workdir: bool | None = None, dry_run: bool = False,
                     on_upload: Callable[[str], None] | None = None,
                     options: tuple[str, str] = UPLOAD_OPTIONS) -> dict:
        """The task as :meth:`submit` sends it, as ``broker submit`` makes it: ``spec`` read (:func:`_task_of`),
        ``name``, ``envs`` and ``secrets`` set over the task's, ``${VAR}`` in its paths filled from its envs, its
        relative ``workdir`` and ``file_mounts`` sources made absolute from this process's folder
        (:func:`resolve_local_paths`), then those uploaded where the broker cannot read them
        (:meth:`ship_workdir`). ``spec`` itself is never changed. Raises :class:`BrokerError`."""
        task = _task_of(spec)
        for key, given in (("envs", envs), ("secrets", secrets)):
            if given:
                task[key] = {**(task.get(key) or {}), **given}
        if name is not None:
            task["name"] = name
        fill_task_env_refs(task)
        resolve_local_paths(task)
        self.ship_workdir(task, upload_workdir, on_upload=on_upload, dry_run=dry_run, options=options)
        return task

    def submit(self, spec: str | Path | dict, *, budget: str | Decimal | float | None = None,
               team: str | None = None, deadline: str | datetime | timedelta | None = None,
               idempotency_key: str | None = None, expected_hours: str | float | timedelta | None = None,
               name: str | None = None, envs: dict | None = None, secrets: dict | None = None,
               priority: int | None = None, upload_workdir: bool | None = None,
               on_upload: Callable[[str], None] | None = None, prepared: bool = False) -> dict:
        """Submit a task and return the job the broker stored (``POST /v1/jobs``), as ``broker submit`` does.

        ``spec``: the task's YAML (or JSON) text, a :class:`pathlib.Path` to a task file, or a mapping (not changed).
        ``budget``, ``team``, ``deadline`` (a duration like ``"6h"`` or a ``timedelta`` from now, an ISO time, a
        ``datetime``: one with no timezone is on this machine's clock), ``expected_hours`` and ``priority`` are set
        in its ``broker:`` section over what it says; ``name``, ``envs`` and ``secrets`` over the task's own.

        A relative ``workdir`` or ``file_mounts`` source is read from this process's folder, as ``broker submit``
        reads it from where it runs (the broker refuses a relative one). ``upload_workdir``: ``None`` packs and
        uploads them (``.skyignore``/``.gitignore`` followed, the broker's size limit held) only where the broker
        cannot read them itself — on another host, or for a team's token —; ``True`` always; ``False`` never (the
        broker's host reads the paths: an admin's, on this host). ``on_upload`` is told one line per pack.
        ``prepared``: ``spec`` is :meth:`prepare_task`'s answer, sent as it is.

        Each submit carries an ``Idempotency-Key`` (``idempotency_key``, else a fresh one); one whose answer is lost
        (a timeout, a dropped connection, the broker's 500 or 503) is retried up to 3 times with that same key, so it
        never makes a second job. :attr:`last_submit_created` then says whether this call made the job (``False``: the
        key's earlier submit had; ``None``: cannot be told after a retry).

        Raises :class:`BrokerError`: the broker's refusal (status and field), or status 0 with ``unknown_outcome``
        and ``idempotency_key`` set when no answer came after the retries."""
        task = dict(spec) if prepared else self.prepare_task(  # type: ignore[arg-type]
            spec, name=name, envs=envs, secrets=secrets, upload_workdir=upload_workdir, on_upload=on_upload)
        task = _submit_task(task, budget, team, deadline, expected_hours, priority)
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
                    exc.idempotency_key = key
                    raise
                time.sleep(delay)
                retried = True
        # after a retry, a 200 may be this very call's job (its first answer lost): unknown then
        self.last_submit_created = True if r.status_code == 201 else None if retried else False
        return self._json(r)

    def submit_dry_run(self, spec: str | Path | dict, *, budget: str | Decimal | float | None = None,
                       team: str | None = None, deadline: str | datetime | timedelta | None = None,
                       idempotency_key: str | None = None, expected_hours: str | float | timedelta | None = None,
                       name: str | None = None, envs: dict | None = None, secrets: dict | None = None,
                       priority: int | None = None, upload_workdir: bool | None = None,
                       on_upload: Callable[[str], None] | None = None, prepared: bool = False) -> dict:
        """What :meth:`submit` would do with the same arguments, storing nothing (``POST /v1/jobs?dry_run=true``): the
        quote, where the job would be placed now and where it would stand in the queue; the submit's own refusal is
        raised (:class:`BrokerError`, its status and field) as the submit would raise it. A workdir the submit would
        upload is packed and held to the broker's limit, then left out: nothing is uploaded. No key is made up: with
        nothing stored, a dry run needs none to be retried, and ``idempotency_key`` asks whether that key was used."""
        task = dict(spec) if prepared else self.prepare_task(  # type: ignore[arg-type]
            spec, name=name, envs=envs, secrets=secrets, upload_workdir=upload_workdir, on_upload=on_upload,
            dry_run=True)
        task = _submit_task(task, budget, team, deadline, expected_hours, priority)
        _check_key(idempotency_key)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key is not None else {}
        return self._call("POST", "/v1/jobs", params={"dry_run": "true"}, json=task, headers=headers)

    # -- workdir packs ---------------------------------------------------------------------------

    def workdir_limits(self) -> dict:
        """What the broker takes of an uploaded workdir (``GET /v1/workdirs``): ``max_bytes``, a pack's largest size,
        and ``host_paths``, whether this token's submits may name paths on the broker's host instead."""
        return self._call("GET", "/v1/workdirs")

    def may_name_host_paths(self) -> bool:
        """Whether the broker reads this caller's paths on its host itself: only an admin's (a team's token
        uploads, as to a remote broker). A broker too old to say reads them."""
        try:
            return bool(self.workdir_limits().get("host_paths", True))
        except BrokerError as exc:
            if exc.status in (404, 405):
                return True
            raise

    def ship_workdir(self, task: dict, upload: bool | None, *, on_upload: Callable[[str], None] | None = None,
                     dry_run: bool = False, options: tuple[str, str] = UPLOAD_OPTIONS) -> None:
        """A broker on another host cannot read the submitter's disk: the ``workdir``, and each ``file_mounts``
        source that is a path here (a directory or a single file), is packed, uploaded once (named by its
        SHA-256) and named instead in ``broker.workdir`` and ``broker.file_mounts`` of ``task`` (changed in place) — so
        the spec keeps no path of this machine. ``upload`` None: only for a broker on another host, or one that
        reads no path of this caller's (a team's token). Each pack is held to the broker's ``max_workdir_bytes`` on
        its own. ``dry_run``: the same checks, then what would be uploaded is left out of the task instead: each is
        packed and held to the limit as a submit would (a pack too large is refused as the submit refuses it), then
        thrown away; nothing is sent. ``on_upload`` is told a line per pack; ``options`` are the words that name
        uploading and not (:data:`UPLOAD_OPTIONS`, or the CLI's flags). Raises :class:`BrokerError`."""
        up, no = options
        workdir = task.get("workdir")
        mounts = task.get("file_mounts") if isinstance(task.get("file_mounts"), dict) else {}
        local = {dest: source for dest, source in mounts.items() if _local_source(source)}
        if upload is None:
            upload = (isinstance(workdir, str) or bool(local)) and (
                not on_this_host(self.url) or not self.may_name_host_paths())
        has_workdir = isinstance(workdir, str) and bool(workdir)
        unfilled = _unfilled_words(workdir, task) if has_workdir else ""
        if not upload:
            if has_workdir and on_this_host(self.url) and not Path(workdir).expanduser().is_dir():
                # as `sky launch`; the job would fail
                raise BrokerError(0, f"workdir {workdir}: no such directory{unfilled}")
            if on_this_host(self.url):
                # the broker reads these paths on this host: one not here ran the job without it, and it could "succeed"
                for dest, source in sorted(local.items(), key=lambda item: str(item[0])):
                    if not Path(source).expanduser().exists():
                        raise BrokerError(0, f"file_mounts {dest}: {source}: no such file or directory",
                                          f"file_mounts.{dest}")
            return
        if not has_workdir and not local:
            raise BrokerError(0, f"{up}: the task has no workdir to upload (workdir: . for this directory), "
                                 "nor file_mounts from this machine")
        if has_workdir and not Path(workdir).expanduser().is_dir():
            raise BrokerError(0, f"workdir {workdir}: no such directory here, so it cannot be uploaded "
                                 f"({no} leaves it for the broker's host to read){unfilled}")
        for dest, source in sorted(local.items()):
            if not Path(source).expanduser().exists():
                raise BrokerError(0, f"file_mounts {dest}: {source}: no such file or directory here, so it cannot be "
                                     f"uploaded ({no} leaves it for the broker's host to read)",
                                  f"file_mounts.{dest}")
        for dest, source in sorted(mounts.items()):
            if on_upload is not None and isinstance(source, dict) and _local_source(source.get("source")):
                on_upload(f"file_mounts {dest}: a bucket SkyPilot makes from local files ({source['source']}) is not "
                          "uploaded: the broker's host must read them")
        from broker.workdir import PackError, human, pack, pack_file

        try:
            limit = int(self.workdir_limits()["max_bytes"])
        except BrokerError as exc:
            if exc.status in (404, 405):
                exc.detail = (f"the broker at {self.shown_url} takes no workdir uploads (an older version): update it, "
                              f"or submit with {no} if it can read this directory itself")
            raise
        if dry_run:
            # packed as a submit packs it, against the broker's limit, and thrown away: a workdir too large for the
            # broker is said now, not at the submit (a CI job checking task files with --dry-run missed it)
            for path, what in ([(Path(workdir), f"workdir {workdir}")] if has_workdir else []) + [
                    (Path(src).expanduser(), f"file_mounts {d} ({src})") for d, src in sorted(local.items())]:
                try:
                    packed = pack(path, limit=limit, what=what) if path.is_dir() else \
                        pack_file(path, limit=limit, what=what)
                except PackError as exc:
                    raise BrokerError(0, str(exc)) from None
                packed.path.unlink(missing_ok=True)
                if on_upload is not None:
                    on_upload(f"dry run: {what}: {files_said(packed.files)}, {human(packed.size)} packed (the broker "
                              f"takes {human(limit)}), would be uploaded by a submit; nothing is uploaded")
            if has_workdir:
                task.pop("workdir")
            for dest in local:
                del mounts[dest]
            if local and not mounts:
                task.pop("file_mounts")
            return

        def ship(path: Path, what: str) -> str:
            try:
                packed = pack(path, limit=limit, what=what) if path.is_dir() else \
                    pack_file(path, limit=limit, what=what)
            except PackError as exc:
                raise BrokerError(0, str(exc)) from None
            try:
                sent = self.upload_workdir(packed.path, packed.digest)
            finally:
                packed.path.unlink(missing_ok=True)
            if on_upload is not None:
                how = "uploaded" if sent["uploaded"] else "already on the broker"
                on_upload(f"{what}: {files_said(packed.files)}, {human(packed.size)} packed, {how} "
                          f"({packed.digest[:19]}…)")
            return packed.digest

        section = dict(task.get("broker") or {})
        if has_workdir:
            section["workdir"] = ship(Path(workdir), f"workdir {workdir}")
            task.pop("workdir")
        shipped = {}
        for dest, source in sorted(local.items()):
            path = Path(source).expanduser()
            digest = ship(path, f"file_mounts {dest} ({source})")
            # a single file: its name in the pack follows the digest (the launcher mounts that file, not a directory)
            shipped[dest] = digest if path.is_dir() else f"{digest}/{path.resolve().name}"
            del mounts[dest]
        if shipped:
            section["file_mounts"] = {**(section.get("file_mounts") or {}), **shipped}
            if not mounts:
                task.pop("file_mounts")
        task["broker"] = section

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

    def jobs(self, *, state: str | None = None, team: str | None = None, limit: int | None = None,
             name: str | None = None) -> list[dict]:
        """Jobs newest first: the broker's 200 newest unless ``limit`` (at most :data:`MAX_JOBS_LISTED` at once;
        :meth:`jobs_page` reads on from there, :meth:`all_jobs` reads them all). ``state``: one state or several with
        commas; ``team``: one team's (an admin's); ``name``: those whose name begins so. A filter given empty
        (``state=""``) is sent as it is, and the broker refuses it (:class:`BrokerError` 422 naming it): most often a
        variable left unset, which listed every job."""
        return self.jobs_page(state=state, team=team, limit=limit, name=name)["jobs"]

    def jobs_page(self, *, state: str | None = None, team: str | None = None, limit: int | None = None,
                  cursor: str | None = None, name: str | None = None) -> dict:
        """One page of the listing: ``{"jobs": [...], "next_cursor": ...}``; pass ``next_cursor`` back as ``cursor``
        for the next page (``None``: the last page). A broker from before cursors answers no ``next_cursor``.
        ``state``: one state or several with commas (``queued,running``); ``name``: the start of the jobs' names."""
        # a filter given is sent, empty or 0 too, for the broker to refuse: dropped, `state=""` listed every job
        params = {k: v for k, v in {"state": state, "team": team, "name": name, "limit": limit,
                                    "cursor": cursor}.items() if v is not None}
        return self._call("GET", "/v1/jobs", params=params)

    def queue(self, *, team: str | None = None, name: str | None = None) -> list[dict]:
        """Every queued job in the order they start (``queue_position`` 1 first), as ``broker queue`` lists them: each
        with its ``estimated_start`` (``None`` where it cannot be told) and the ``reason`` it waits. ``team``: one
        team's (an admin's); ``name``: those whose name begins so. Raises :class:`BrokerError`."""
        jobs, _ = self.all_jobs(state="queued", team=team, name=name)
        return queue_order(jobs)

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
        """The job now (``GET /v1/jobs/{id}``): its state, reason, attempts, spend and budget, queue position and
        estimated start. Raises :class:`BrokerError` (404: no such job, or not your team's)."""
        return self._call("GET", _job_path(job_id))

    def events(self, job_id: str) -> list[dict]:
        """Every state change of the job, oldest first, each with its time, who made it and why."""
        return self._call("GET", f"{_job_path(job_id)}/events")["events"]

    def cancel(self, job_id: str) -> dict:
        """Cancel the job and return it (``cancelling`` while its run stops). Raises :class:`BrokerError` (409 on
        ``state``: it has ended already)."""
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
        """Resume a failed or budget-stopped job from its last checkpoint and return it; ``envs`` / ``secrets`` set
        those of its task from this attempt on. A job that failed for its own code needs ``force=True`` (or new
        ``envs``/``secrets``): else :class:`BrokerError` 409 on ``force``."""
        given = {k: v for k, v in (("envs", envs), ("secrets", secrets)) if v}
        return self._call("POST", f"{_job_path(job_id)}/resume", params={"force": "true"} if force else None,
                          **({"json": given} if given else {}))

    def set_budget(self, job_id: str, budget_usd: str | Decimal | float) -> dict:
        """Set the job's budget cap in dollars (raise or lower it) and return the job. Raises :class:`BrokerError`
        (422 on ``budget_usd``)."""
        return self._call("POST", f"{_job_path(job_id)}/budget", json={"budget_usd": str(budget_usd)})

    def set_deadline(self, job_id: str, deadline: str | datetime | timedelta | None) -> dict:
        """Set or move a job's deadline (a duration from now or a ``timedelta``, an ISO time with its timezone or a
        ``datetime``: one with no timezone is on this machine's clock), or remove it (``None``); returns the job."""
        return self._call("POST", f"{_job_path(job_id)}/deadline",
                          json={"deadline": _sendable(deadline, "deadline")})

    def switch_to_ondemand(self, job_id: str, *, force: bool = False) -> dict:
        """Pin the job to on-demand from its next attempt (a running spot attempt is moved; a stopped job resumes
        there) and return it; ``force`` after a code error. Raises :class:`BrokerError`."""
        return self._call("POST", f"{_job_path(job_id)}/ondemand", params={"force": "true"} if force else None)

    def unpin(self, job_id: str) -> dict:
        """Undo :meth:`switch_to_ondemand`: the job's spot policy places it again; returns the job."""
        return self._call("DELETE", f"{_job_path(job_id)}/ondemand")

    def fault(self, kind: str, *, job_id: str | None = None, zone: str | None = None,
              available: bool | None = None) -> dict:
        """Inject a fault on the simulated zones (an admin's, for demos and tests): ``kind`` ``preempt`` or ``kill`` a
        job's attempt (``job_id``), or ``zone`` to set a zone's spot capacity ``available`` (``None``: back to its
        trace). Raises :class:`BrokerError` (422 naming the field)."""
        return self._call("POST", "/v1/admin/faults",
                          json={"kind": kind, "job_id": job_id, "zone": zone, "available": available})

    def costs(self, **params) -> dict:
        """The cost report (``GET /v1/costs``): spend, the saving against on-demand, top jobs, preemptions, monthly
        caps. ``params`` are its query parameters (``period="30d"``, ``since``/``until``, ``team``); one it does not
        know, or an empty one, is a :class:`BrokerError` 422 naming it."""
        return self._call("GET", "/v1/costs", params=params)

    def job_costs(self, job_id: str) -> dict:
        """One job's costs, attempt by attempt, over its whole life, with its saving against on-demand."""
        return self._call("GET", _job_path(job_id, "/v1/costs/jobs/"))

    def logs(self, job_id: str, *, offset: int = 0, attempt: int | None = None) -> dict:
        """One read of an attempt's output (the newest unless ``attempt``), from ``offset``:
        ``{"attempt": n, "data": text, "offset": end}`` (at most 1 MiB; :meth:`log_pages` reads it all,
        :meth:`follow_logs` as it grows). ``attempt`` is ``None`` while nothing has run yet."""
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
            return self._through_outages(call, gone, poll=poll, on_unreachable=on_unreachable,
                                         reconnect_seconds=reconnect_seconds)

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

    def _through_outages(self, call: Callable[[], Any], gone: list[float], *, poll: float,
                         on_unreachable: Callable[[str | None], None] | None, reconnect_seconds: float) -> Any:
        """``call()``'s answer, asking again while the broker is out of reach — no answer (status 0: restarted, a
        network blip) or one of :data:`PASSING_STATUSES` — for up to ``reconnect_seconds`` from when it went (kept in
        ``gone`` across calls, empty while it answers), no sooner than a ``Retry-After`` asks; then its error is raised.
        A refusal is raised at once. ``on_unreachable`` is told once when it goes (with why) and once when it is back
        (None). What :meth:`follow_log_chunks` and :meth:`wait` ride out a broker restart with."""
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

    def wait(self, job_id: str, *, timeout: float | None = 3600, poll: float = 0.5,
             on_unreachable: Callable[[str | None], None] | None = None,
             reconnect_seconds: float = RECONNECT_SECONDS) -> dict:
        """Block until the job ends (succeeded, failed, cancelled or stopped_budget) and return it as it ended.

        ``timeout``: seconds to wait at most (``None``: for as long as it runs); past it, :class:`TimeoutError`
        (the job runs on). A broker that cannot be reached (a restart) or answers 502, 503 or 504 is asked again
        for up to ``reconnect_seconds`` (2 minutes), as :meth:`follow_logs` does: it ended the wait at once while
        the job ran on; ``on_unreachable`` is told when it goes and when it is back (None). Raises
        :class:`BrokerError` for a refusal (404: no such job) or a broker away longer than that."""
        deadline = None if timeout is None else time.monotonic() + timeout
        gone: list[float] = []
        while True:
            job = self._through_outages(lambda: self.job(job_id), gone, poll=poll, on_unreachable=on_unreachable,
                                        reconnect_seconds=reconnect_seconds)
            if job["state"] in FINAL:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} after {timeout} s")
            time.sleep(poll)

    def health(self) -> dict:
        """The broker's liveness (``GET /v1/healthz``): ``{"ok": True, "engine": ..., "store": "ok" or why not}``."""
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


def queue_order(jobs: list[dict]) -> list[dict]:
    """Queued jobs in the order they start, as ``broker queue`` lists them: by ``queue_position`` (1 first), a job
    with none (held, say) after them all; the listing's own order is newest first."""
    return sorted(jobs, key=lambda j: (j.get("queue_position") is None, j.get("queue_position") or 0))


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
    """A task file's text, read as UTF-8 (a byte-order mark allowed), or :class:`BrokerError` saying why not."""
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
