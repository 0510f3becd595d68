"""The health probes' look at the store, bounded in time.

A store that stops answering without refusing (a Redis paused, or behind a network that drops packets) holds a
read for its socket timeout, retried: half a minute and more. A load balancer's check gives up after a few seconds
(AWS's default 5 s, Cloud Run's liveness probe 1 s) and replaces the broker — every broker, as they share the store,
which is what ``/v1/healthz`` answering 200 during a store outage exists to prevent. So a probe waits at most
``limit`` seconds for the store's answer, and a look still in flight is shared by the probes that come meanwhile
(one thread at most is held by a store that does not answer, however often the balancer asks).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from broker.engine.reconcile import clock_refusal_words
from broker.store import StoreUnavailable
from broker.store.base import clock_offset

PROBE_SECONDS = 2.0
"""How long a probe waits for the store: under the load balancers' check timeouts, over a healthy store's answer."""


class StoreProbe:
    """``look()``: the store's answer to one read, or :class:`StoreUnavailable` after ``limit`` seconds."""

    def __init__(self, read: Callable[[], object], limit: float = PROBE_SECONDS):
        self.read, self.limit = read, limit
        self._lock = threading.Lock()
        self._inflight: Future | None = None

    def look(self) -> None:
        """Return once the store answered; raise :class:`StoreUnavailable` if it failed, or did not answer in time."""
        with self._lock:
            if self._inflight is None or self._inflight.done():
                self._inflight = Future()
                # a daemon thread, not a pool's: a read stuck on a dead socket must not hold the process at exit
                threading.Thread(target=self._run, args=(self._inflight,), name="store-probe", daemon=True).start()
            inflight = self._inflight
        try:
            inflight.result(timeout=self.limit)
        except FutureTimeout:
            raise StoreUnavailable(f"the store did not answer within {self.limit:g} s") from None

    def _run(self, future: Future) -> None:
        try:
            self.read()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting probe, which re-raises it
            future.set_exception(exc)
        else:
            future.set_result(None)


def clock_refusal(store, clock: Callable[[], float], limit: float) -> str | None:
    """Why this broker is not ready for work because of its clock, for a readiness check to answer 503 with (so that
    a load balancer stops sending it jobs to stamp): this host's clock is further than ``limit`` seconds
    (``max_clock_offset_seconds``) from the store's, measured now (one round trip); ``None`` while within it, or for a
    store with no clock of its own (SQLite: one process, one clock). Raises :class:`StoreUnavailable` as a read does."""
    return clock_refusal_words(clock_offset(store, clock), limit)
