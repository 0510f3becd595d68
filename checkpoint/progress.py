"""Tell the broker how training is going. Standard library only; never fails training.

    from checkpoint.progress import report
    report(step, total_steps, {"loss": loss})

When ``BROKER_PROGRESS_URL`` and ``BROKER_JOB_TOKEN`` are set, this POSTs
``{"step": s, "total_steps": T, "metrics": {...}}`` with ``Authorization: Bearer <token>``,
at most once every ``BROKER_PROGRESS_INTERVAL_S`` seconds (default 5); calls in between are
dropped, except the last one, which is sent as the process exits (within a second, so the broker's
view ends at the last step trained, not up to 5 s before it). Posts run on a daemon thread with a short timeout, and every error is swallowed:
a broker that is down or slow must never stop or slow a training run.

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
from typing import Any

log = logging.getLogger("checkpoint.progress")

DEFAULT_INTERVAL_S = 5.0
TIMEOUT_S = 3.0


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
        now = self._clock()
        with self._lock:
            if self._last is not None and now - self._last < self.interval_s:
                # kept as given: converting the metrics (a GPU tensor's float() waits for the GPU) only if sent
                self._pending = (step, total_steps, dict(metrics) if metrics else None)
                return False
            self._last = now
            self._pending = None
        self._send_async(_payload(step, total_steps, metrics))
        return True

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


def _number(v: Any) -> float | int | None:
    try:
        return v if isinstance(v, int) else float(v)
    except (TypeError, ValueError):
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
