"""The only module that imports ``slack_sdk`` (lazily: the ``slack`` extra is optional).

Three things touch Slack: checking a request's signature, posting a
message (Web API ``chat.postMessage`` with the bot token, or an incoming
webhook), and answering through a command's ``response_url``. Each send
either returns or raises :class:`DeliveryError`; retrying is the caller's
job (:mod:`broker.slack.notify`), so slack_sdk's own retry handlers are off.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import timezone
from email.utils import parsedate_to_datetime


class SlackUnavailable(RuntimeError):
    """``slack_sdk`` is not installed: ``pip install 'spot-broker[slack]'``."""


class DeliveryError(Exception):
    """A send failed. ``retry_after`` is Slack's rate-limit hint in seconds, when it gave one."""

    def __init__(self, message: str, *, retry_after: float | None = None, permanent: bool = False):
        self.retry_after = retry_after
        self.permanent = permanent
        super().__init__(message)


PERMANENT_ERRORS = {"channel_not_found", "not_in_channel", "invalid_auth", "account_inactive", "token_revoked",
                    "is_archived", "no_permission", "missing_scope", "invalid_blocks"}


RETRY_AFTER_CAP = 300.0
"""The longest ``Retry-After`` taken as said, in seconds: a date far ahead (or a huge number) does not stall a
destination's notifications for hours; the notifier caps its waits lower still."""


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header in seconds, within 0 … :data:`RETRY_AFTER_CAP`: a number of seconds (``30``), or an
    HTTP date (``Wed, 21 Oct 2026 07:28:00 GMT``), which HTTP allows as well; ``None`` when absent or unreadable
    (the caller backs off as it would without one). Read as a number only, a date raised ValueError out of the send,
    and the message was dropped after one try."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # RFC 5322's "-0000": UTC
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


def _sdk():
    try:
        import slack_sdk  # noqa: F401
    except ImportError:
        raise SlackUnavailable("Slack support needs slack_sdk: pip install 'spot-broker[slack]'") from None
    import slack_sdk.errors
    import slack_sdk.signature
    import slack_sdk.webhook

    return slack_sdk


def verify(signing_secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """Slack's v0 signature: HMAC-SHA256 of ``v0:<timestamp>:<body>``, within 5 minutes, compared in constant time."""
    sdk = _sdk()
    timestamp = headers.get("x-slack-request-timestamp")
    signature = headers.get("x-slack-signature")
    # what the SDK would raise on (a 500 to anyone, signed or not): a timestamp of more digits than Python reads or
    # of digits that are not 0-9 ('²'), a signature that is not ASCII, a body that is not UTF-8 (Slack's are)
    if not timestamp or not signature or not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 20) \
            or not signature.isascii():
        return False
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return sdk.signature.SignatureVerifier(signing_secret).is_valid(body, timestamp, signature)


def post_message(token: str, channel: str, payload: Mapping, *, api_url: str, timeout: int = 10) -> None:
    """``chat.postMessage``; raises :class:`DeliveryError`."""
    sdk = _sdk()
    client = sdk.WebClient(token=token, base_url=api_url, timeout=timeout, retry_handlers=[])
    try:
        client.chat_postMessage(channel=channel, text=payload.get("text", ""), blocks=payload.get("blocks"))
    except sdk.errors.SlackApiError as exc:
        resp = exc.response
        error = (resp.data or {}).get("error") if isinstance(resp.data, dict) else None
        retry_after = _header(resp.headers, "Retry-After")
        raise DeliveryError(f"chat.postMessage: {error or resp.status_code}",
                            retry_after=retry_after_seconds(retry_after),
                            permanent=error in PERMANENT_ERRORS) from None
    except Exception as exc:  # network: urllib errors, timeouts
        raise DeliveryError(f"chat.postMessage: {exc}") from None


def post_webhook(url: str, payload: Mapping, *, timeout: int = 10) -> None:
    """An incoming webhook or a ``response_url``; raises :class:`DeliveryError`."""
    sdk = _sdk()
    client = sdk.webhook.WebhookClient(url, timeout=timeout, retry_handlers=[])
    try:
        resp = client.send_dict(dict(payload))
    except Exception as exc:
        raise DeliveryError(f"webhook: {exc}") from None
    if resp.status_code == 429:
        raise DeliveryError("webhook: rate limited",
                            retry_after=retry_after_seconds(_header(resp.headers, "Retry-After")))
    if resp.status_code >= 400:
        raise DeliveryError(f"webhook: HTTP {resp.status_code} {resp.body[:200]}",
                            permanent=400 <= resp.status_code < 500 and resp.status_code not in (408, 429))


def _header(headers, name: str) -> str | None:
    """A response header by name, whatever its case (slack_sdk keeps the server's spelling, or a list of values)."""
    for key, value in (headers or {}).items():
        if str(key).lower() == name.lower():
            return value[0] if isinstance(value, list | tuple) and value else value
    return None
