"""The cloud's own spot interruption notice, read from the instance metadata service.

A spot VM hears of its reclaim first from the cloud's metadata endpoint, well before the
operating system's shutdown sends SIGTERM:

| cloud | endpoint (polled) | notice | lead time |
|---|---|---|---|
| ``aws`` | IMDSv2 ``GET /latest/meta-data/spot/instance-action`` (token from ``PUT /latest/api/token``) | HTTP 200 with ``{"action": "terminate" \\| "stop" \\| "hibernate", "time": …}``; 404 while none | 2 minutes |
| ``gcp`` | ``GET /computeMetadata/v1/instance/preempted`` (header ``Metadata-Flavor: Google``) | body ``TRUE`` | 30 seconds |

:class:`MetadataWatcher` polls that endpoint from a daemon thread and calls
:meth:`PreemptionNotice.notify` once, so a training loop gets the whole lead time to save at
the next step boundary. The broker's SkyPilot launcher turns it on for spot placements by
setting ``BROKER_PREEMPTION_METADATA`` to the placement's cloud; nothing polls otherwise.

Environment:

* ``BROKER_PREEMPTION_METADATA`` — ``aws`` or ``gcp`` (unset or ``off``: no polling);
* ``BROKER_METADATA_URL`` — the endpoint's base URL (default ``http://169.254.169.254`` on
  AWS, ``http://metadata.google.internal`` on GCP; tests point it at a loopback server);
* ``BROKER_METADATA_POLL_S`` — seconds between polls (default 5).

Unreachable or failing endpoints are retried quietly; the first failure is logged once.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping

log = logging.getLogger("checkpoint")

DEFAULT_URLS = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal"}
DEFAULT_POLL_S = 5.0
_TIMEOUT_S = 2.0
_TOKEN_TTL_S = 21600


class MetadataError(ValueError):
    """The metadata watcher's configuration is not usable."""


CLOUDS = ("aws", "gcp")


class MetadataWatcher:
    """Polls one cloud's metadata endpoint; on a notice, calls ``notify`` once and stops.

    Args:
        cloud: ``aws`` or ``gcp``.
        notify: called (from the watcher thread) when the notice appears.
        base_url: the endpoint's base URL (default: the cloud's link-local one).
        poll_s: seconds between polls.
    """

    def __init__(self, cloud: str, notify, *, base_url: str | None = None, poll_s: float = DEFAULT_POLL_S):
        if cloud not in CLOUDS:
            raise MetadataError(f"BROKER_PREEMPTION_METADATA must be one of {', '.join(CLOUDS)} or off, not {cloud!r}")
        if poll_s <= 0:
            raise MetadataError("BROKER_METADATA_POLL_S must be a positive number of seconds")
        base = (base_url or DEFAULT_URLS[cloud]).rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise MetadataError(f"BROKER_METADATA_URL must be an http:// or https:// URL, not {base_url!r}")
        self.cloud = cloud
        self.base_url = base
        self.poll_s = poll_s
        self.noticed: str | None = None
        self._notify = notify
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: str | None = None  # AWS IMDSv2 session token
        self._warned = False

    @classmethod
    def from_env(cls, env: Mapping[str, str], notify) -> MetadataWatcher | None:
        cloud = (env.get("BROKER_PREEMPTION_METADATA") or "").strip().lower()
        if cloud in ("", "off", "none", "0", "false"):
            return None
        try:
            poll_s = float(env.get("BROKER_METADATA_POLL_S") or DEFAULT_POLL_S)
        except ValueError:
            raise MetadataError("BROKER_METADATA_POLL_S must be a positive number of seconds") from None
        return cls(cloud, notify, base_url=env.get("BROKER_METADATA_URL") or None, poll_s=poll_s)

    def check(self) -> str | None:
        """One poll: the notice (an action word) if the cloud has announced a reclaim."""
        return self._aws_notice() if self.cloud == "aws" else self._gcp_notice()

    def _aws_notice(self) -> str | None:
        """The pending spot interruption action (``terminate``, …) or None; IMDSv2."""
        if self._token is None:
            req = urllib.request.Request(self.base_url + "/latest/api/token", method="PUT",
                                         headers={"X-aws-ec2-metadata-token-ttl-seconds": str(_TOKEN_TTL_S)})
            with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
                self._token = resp.read().decode().strip()
        req = urllib.request.Request(self.base_url + "/latest/meta-data/spot/instance-action",
                                     headers={"X-aws-ec2-metadata-token": self._token})
        try:
            with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
                body = resp.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None  # no interruption scheduled
            if exc.code == 401:
                self._token = None  # the token expired: fetch a new one next time
            raise
        try:
            action = json.loads(body).get("action")
        except (ValueError, AttributeError):
            action = None
        return str(action or "terminate")

    def _gcp_notice(self) -> str | None:
        req = urllib.request.Request(self.base_url + "/computeMetadata/v1/instance/preempted",
                                     headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
            return "preempted" if resp.read().decode().strip().upper() == "TRUE" else None

    def start(self) -> MetadataWatcher:
        self._thread = threading.Thread(target=self._run, name="checkpoint-cloud-notice", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(_TIMEOUT_S + 1)
        self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                notice = self.check()
            except (OSError, urllib.error.URLError) as exc:
                if not self._warned:
                    log.warning("cannot read the %s spot notice from %s (%s); retrying every %.0f s",
                                self.cloud, self.base_url, exc, self.poll_s)
                    self._warned = True
                notice = None
            if notice is not None:
                self.noticed = notice
                log.warning("%s metadata announces a spot reclaim (%s)", self.cloud, notice)
                self._notify()
                return
            self._stop.wait(self.poll_s)
