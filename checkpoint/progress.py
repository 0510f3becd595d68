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
through :func:`report_checkpoint`, which is never rate-limited.

Every report names the attempt that sends it (``"attempt"``: ``BROKER_ATTEMPT``), so the broker can refuse one from
an attempt it has moved past — a process of a preempted attempt still running beside the next one, whose steps
and checkpoint would otherwise be taken for the new attempt's (and its checkpoint resumed from).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
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


class Reporter:
    """POSTs progress JSON to one URL; rate-limited; fire-and-forget."""

    def __init__(
        self,
        url: str | None,
        token: str | None,
        interval_s: float = DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        attempt: int | None = None,
    ):
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
        return cls(env.get("BROKER_PROGRESS_URL") or None, env.get("BROKER_JOB_TOKEN") or None, interval,
                   attempt=int(attempt) if attempt.isdigit() and int(attempt) > 0 else None)

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
        self._send_async(_payload(step, total_steps, metrics))
        return True

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
        return self.post(_payload(*held), timeout=timeout) if held is not None and self.enabled else False

    def report_checkpoint(self, step: int, uri: str, wait: bool = False) -> bool:
        """Announce a committed checkpoint (always sent, not rate-limited)."""
        if not self.enabled:
            return False
        payload = {"checkpoint": {"step": int(step), "uri": uri}}
        if wait:
            return self.post(payload)
        self._send_async(payload)
        return True

    def post(self, payload: Mapping[str, Any], timeout: float = TIMEOUT_S) -> bool:
        """POST now, on this thread. True on a 2xx answer; never raises."""
        if self.attempt is not None:
            payload = {**payload, "attempt": self.attempt}
        try:
            request = urllib.request.Request(
                self.url, data=json.dumps(payload).encode(), method="POST",
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"},
            )
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return 200 <= response.status < 300
        except Exception as e:  # noqa: BLE001 - progress must never fail training
            log.debug("progress report to %s failed: %s", self.url, e)
            return False

    def _send_async(self, payload: Mapping[str, Any]) -> None:
        threading.Thread(target=self.post, args=(payload,), name="progress-report", daemon=True).start()


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
