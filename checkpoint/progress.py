"""Tell the broker how training is going. Standard library only; never fails training.

    from checkpoint.progress import report
    report(step, total_steps, {"loss": loss})

When ``BROKER_PROGRESS_URL`` and ``BROKER_JOB_TOKEN`` are set, this POSTs
``{"step": s, "total_steps": T, "metrics": {...}}`` with ``Authorization: Bearer <token>``,
at most once every ``BROKER_PROGRESS_INTERVAL_S`` seconds (default 5); calls in between are
dropped, except the last one, which is sent as the process exits (within a second, so the broker's
view ends at the last step trained, not up to 5 s before it). Posts run on a daemon thread with a short timeout, and every error is swallowed:
a broker that is down or slow must never stop or slow a training run.

The broker refuses a whole report whose metrics break its limits (more than :data:`MAX_METRICS`, a name over
:data:`MAX_METRIC_NAME` characters, empty or holding a control character), step and all; this was lost without a
word, as every error here is. So such a metric is left out of the report (the rest goes) and a
:class:`~checkpoint.errors.CheckpointWarning` names it and the limit, once per name. Not a ``ValueError``: a name
built at run time (``f"eval/{dataset}"``) first seen hours into a run must not end it.

The checkpointer also reports each commit — ``{"checkpoint": {"step": s, "uri": ...}}`` —
through :func:`report_checkpoint`, which is never rate-limited. A commit the broker could not be told of (it was
down, or did not answer) is not dropped: the latest such one is kept and sent again with the next report or commit,
and tried once more at exit (within a second or so). And it is said on stderr — which is the attempt's log — in one
plain line of a stable format, :data:`UNDELIVERED_LINE`::

    [checkpoint] committed step 900: file:///ckpt/job/step-000000000900-... (not yet told to the broker: <why>)

so that a broker that comes back after the run ended still learns the last checkpoint it committed, from the log
(the broker reads this line when it reconciles an attempt that ended while it was not watching).

Every report names the attempt that sends it (``"attempt"``: ``BROKER_ATTEMPT``), so the broker can refuse one from
an attempt it has moved past — a process of a preempted attempt still running beside the next one, whose steps
and checkpoint would otherwise be taken for the new attempt's (and its checkpoint resumed from).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
import warnings
from typing import Any

from checkpoint.errors import CheckpointWarning

log = logging.getLogger("checkpoint.progress")

DEFAULT_INTERVAL_S = 5.0
TIMEOUT_S = 3.0
#: The broker's limits on a report's metrics (``broker/service.py``, ``_progress_point``): beyond them it refuses
#: the whole report.
MAX_METRICS = 50
MAX_METRIC_NAME = 200
#: Whole numbers the broker stores as such (a larger int is sent as a float).
_MAX_INT = 2**63 - 1
#: The line written to stderr (the attempt's log) for a committed checkpoint the broker was not told of. Its format
#: is stable: the broker parses it (``broker/engine/reconcile.py``); keep the two in step.
UNDELIVERED_LINE = "[checkpoint] committed step {step}: {uri} (not yet told to the broker: {why})"
#: How long the exit tries once more to deliver a checkpoint report that was not delivered.
EXIT_RETRY_S = 1.0


class _Held:
    """The latest checkpoint report of one broker URL, until the broker took it. Shared by every :class:`Reporter` of
    that URL (the checkpointer's own and :func:`report`'s), so that the next report of either sends it again."""

    def __init__(self) -> None:
        self.payload: dict | None = None
        self.delivered = True
        self.said = False  # its UNDELIVERED_LINE is on stderr


_held: dict[tuple, _Held] = {}
_held_lock = threading.Lock()
_exit_hook = False
#: A broker URL → the URLs its reports may go to: it and the other brokers serving on its data dir
#: (``BROKER_PROGRESS_URLS``), the one that answered last first. Shared by every :class:`Reporter` of that URL.
_routes: dict[str, list[str]] = {}
_routes_lock = threading.Lock()


def _route(url: str, fallbacks: Sequence[str] = ()) -> list[str]:
    with _routes_lock:
        route = _routes.setdefault(url, [url])
        route.extend(u for u in fallbacks if u and u not in route)
        return list(route)


def _answered(url: str, target: str) -> None:
    """``target`` answered for ``url``: it is tried first from now on."""
    with _routes_lock:
        route = _routes.get(url)
        if route and route[0] != target and target in route:
            route.remove(target)
            route.insert(0, target)


def _held_for(key: tuple) -> _Held:
    global _exit_hook
    with _held_lock:
        held = _held.setdefault(key, _Held())
        if not _exit_hook:
            _exit_hook = True
            atexit.register(_deliver_held_at_exit)
        return held


def _deliver_held_at_exit(budget_s: float = EXIT_RETRY_S) -> None:
    """At exit: each checkpoint report not (yet) taken by the broker is tried once more, within ``budget_s`` in all;
    one still not delivered is said on stderr, if it was not yet. Never raises."""
    try:
        deadline = time.monotonic() + budget_s
        with _held_lock:
            pending = [(key, h) for key, h in _held.items() if h.payload is not None and not h.delivered]
        for (url, token, attempt), held in pending:
            left = deadline - time.monotonic()
            reporter = Reporter(url, token, attempt=attempt)
            if left > 0.05:
                reporter._deliver(held.payload, timeout=left)
            else:
                reporter._said(held, held.payload, "no time left at exit to tell it")
    except Exception:  # noqa: BLE001 - progress must never fail training
        pass


class Reporter:
    """POSTs progress JSON to the broker's URL (or, when it does not answer, to another broker serving on its data
    dir: ``fallbacks``, ``BROKER_PROGRESS_URLS``); rate-limited; fire-and-forget."""

    def __init__(
        self,
        url: str | None,
        token: str | None,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        attempt: int | None = None,
        fallbacks: Sequence[str] = (),
    ):
        if url:
            _route(url, fallbacks)
        self.url = url
        self.token = token
        self.attempt = attempt
        self.interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        self._pending: tuple | None = None  # the last report the rate limit held back: (step, total, metrics)
        self._lock = threading.Lock()
        self._warned: set[str] = set()  # metric names already warned about (each once)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Reporter:
        env = os.environ if env is None else env
        try:
            interval = float(env.get("BROKER_PROGRESS_INTERVAL_S", DEFAULT_INTERVAL_S))
        except ValueError:
            interval = DEFAULT_INTERVAL_S
        attempt = env.get("BROKER_ATTEMPT", "")
        fallbacks = [u.strip() for u in env.get("BROKER_PROGRESS_URLS", "").split(",") if u.strip()]
        return cls(env.get("BROKER_PROGRESS_URL") or None, env.get("BROKER_JOB_TOKEN") or None, interval,
                   attempt=int(attempt) if attempt.isdigit() and int(attempt) > 0 else None, fallbacks=fallbacks)

    @property
    def enabled(self) -> bool:
        return bool(self.url and self.token)

    def report(self, step: int, total_steps: int | None = None, metrics: Mapping[str, float] | None = None) -> bool:
        """Send a progress report unless one went out less than ``interval_s`` ago."""
        if not self.enabled:
            return False
        metrics = self._within_limits(metrics) if metrics else None  # names only: no value is read here
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self.interval_s:
                # kept as given: converting the metrics (a GPU tensor's float() waits for the GPU) only if sent
                self._pending = (step, total_steps, metrics)
                return False
            self._last = now
            self._pending = None
        payload = _payload(step, total_steps, metrics)
        if self._undelivered() is not None:
            threading.Thread(target=self._resend_then, args=(payload,), name="progress-report", daemon=True).start()
        else:
            self._send_async(payload)
        return True

    @property
    def _key(self) -> tuple:
        return (self.url, self.token, self.attempt)

    def _undelivered(self) -> dict | None:
        """The latest checkpoint report the broker could not be told of (kept to be sent again), or None."""
        if not self.enabled:
            return None
        held = _held.get(self._key)
        return held.payload if held is not None and not held.delivered else None

    def _resend_then(self, payload: Mapping[str, Any], timeout: float = TIMEOUT_S) -> bool:
        """Send the undelivered checkpoint report (if one is still held), then ``payload``. Never raises."""
        held = self._undelivered()
        if held is not None:
            self._deliver(held, timeout=timeout)
        return self.post(payload, timeout=timeout)

    def _deliver(self, payload: dict, timeout: float = TIMEOUT_S) -> bool:
        """POST a checkpoint report. One that did not reach the broker stays held (the latest only), to be sent again
        with the next report or commit and at exit, and is said on stderr once. Never raises."""
        ok, why = self._post(payload, timeout)
        held = _held_for(self._key)
        with _held_lock:
            if held.payload is not payload:
                return ok  # a newer commit replaced it: that one is what is sent again
            if ok or why is None:  # taken, or refused by the broker (sending it again would change nothing)
                held.delivered = True
                return ok
        self._said(held, payload, why)
        return False

    def _said(self, held: _Held, payload: dict, why: str) -> None:
        with _held_lock:
            if held.said or held.payload is not payload:
                return
            held.said = True
        checkpoint = payload["checkpoint"]
        _say(UNDELIVERED_LINE.format(step=checkpoint["step"], uri=checkpoint["uri"], why=why))

    def _within_limits(self, metrics: Mapping[Any, Any]) -> dict[str, Any]:
        """The metrics the broker takes, by name (values untouched); each one left out is warned about once."""
        kept: dict[str, Any] = {}
        for key, value in metrics.items():
            name = key if isinstance(key, str) else str(key)
            problem = _name_problem(name)
            if problem is None and len(kept) >= MAX_METRICS:
                problem = f"a report holds at most {MAX_METRICS} metrics"
            if problem is None:
                kept[name] = value
            elif name not in self._warned:
                self._warned.add(name)
                shown = name if len(name) <= 80 else f"{name[:60]}…({len(name)} characters)"
                message = f"progress metric {shown!r} is not reported: {problem} (the broker refuses the whole report)"
                log.warning(message)
                warnings.warn(CheckpointWarning(message), stacklevel=4)
        return kept

    def flush(self, timeout: float = 1.0) -> bool:
        """Send the last report the rate limit held back, now, on this thread (at exit). Never raises."""
        with self._lock:
            held, self._pending = self._pending, None
        if not self.enabled:
            return False
        undelivered = self._undelivered()
        if undelivered is not None:
            self._deliver(undelivered, timeout=min(timeout, EXIT_RETRY_S))
        return self.post(_payload(*held), timeout=timeout) if held is not None else False

    def report_checkpoint(self, step: int, uri: str, wait: bool = False) -> bool:
        """Announce a committed checkpoint (always sent, not rate-limited)."""
        if not self.enabled:
            return False
        payload = {"checkpoint": {"step": int(step), "uri": uri}}
        held = _held_for(self._key)
        with _held_lock:  # the latest commit is the one held until the broker takes it; an older one is not sent again
            older = held.payload is not None and held.payload["checkpoint"]["step"] > int(step)
            if not older:
                held.payload, held.delivered, held.said = payload, False, False
        if older:
            return self.post(payload) if wait else (self._send_async(payload) or True)
        if wait:
            return self._deliver(payload)
        threading.Thread(target=self._deliver, args=(payload,), name="progress-report", daemon=True).start()
        return True

    def post(self, payload: Mapping[str, Any], timeout: float = TIMEOUT_S) -> bool:
        """POST now, on this thread. True on a 2xx answer; never raises."""
        return self._post(payload, timeout)[0]

    def _post(self, payload: Mapping[str, Any], timeout: float = TIMEOUT_S) -> tuple[bool, str | None]:
        """POST now: (delivered, why not — None where the broker answered and refused it). Never raises. A broker
        that does not answer (gone, or unreachable) is passed over for the next one serving on its data dir; the one
        that answered is asked first from then on."""
        if self.attempt is not None:
            payload = {**payload, "attempt": self.attempt}
        why = "no broker URL"
        for target in _route(self.url) if self.url else ():
            try:
                request = urllib.request.Request(
                    target, data=json.dumps(payload).encode(), method="POST",
                    headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
                )
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    _answered(self.url, target)
                    ok = 200 <= response.status < 300
                    return ok, None if ok or response.status < 500 else f"HTTP {response.status}"
            except urllib.error.HTTPError as e:  # the broker answered: a 4xx is a refusal, a 5xx may pass later
                log.debug("progress report to %s failed: %s", target, e)
                _answered(self.url, target)
                return False, None if e.code < 500 else f"HTTP {e.code}"
            except Exception as e:  # noqa: BLE001 - progress must never fail training
                log.debug("progress report to %s failed: %s", target, e)
                if target == self.url or why == "no broker URL":  # said: why the broker's own did not answer
                    why = _why(e)
        return False, why

    def _send_async(self, payload: Mapping[str, Any]) -> None:
        threading.Thread(target=self.post, args=(payload,), name="progress-report", daemon=True).start()


def _why(e: BaseException) -> str:
    """A short, one-line reason a report did not reach the broker."""
    reason = getattr(e, "reason", None)
    text = str(reason if reason is not None else e) or type(e).__name__
    return " ".join(text.split())[:200]


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except Exception:  # noqa: BLE001 - a closed stderr must never fail training
        pass


def _payload(step: int, total_steps: int | None, metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"step": int(step), "total_steps": total_steps,
            "metrics": {k: _number(v) for k, v in (metrics or {}).items()}}


def _name_problem(name: str) -> str | None:
    """Why the broker would refuse this metric name, or None."""
    if not name:
        return "a metric name cannot be empty"
    if len(name) > MAX_METRIC_NAME:
        return f"a metric name is at most {MAX_METRIC_NAME} characters, this one has {len(name)}"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a metric name cannot hold a control character"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "a metric name must be valid UTF-8 (it holds a lone surrogate)"
    return None


def _number(v: Any) -> float | int | None:
    """A JSON number the broker takes: ``True`` was sent as ``true`` and a 20-digit int as is, and the broker
    refused the whole report for either."""
    try:
        if isinstance(v, int) and not isinstance(v, bool) and -_MAX_INT <= v <= _MAX_INT:
            return v
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return None


_default: Reporter | None = None
_default_lock = threading.Lock()


def default_reporter() -> Reporter:
    """The process-wide reporter, built from the environment on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Reporter.from_env()
            atexit.register(_default.flush)
        return _default


def report(step: int, total_steps: int | None = None, metrics: Mapping[str, float] | None = None) -> bool:
    """Report progress to the broker if it asked for it (see module docstring)."""
    return default_reporter().report(step, total_steps, metrics)
