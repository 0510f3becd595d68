"""The ``slack:`` and ``notifications:`` config sections, read once. Pure.

:func:`broker.config.load_settings` reads them when the broker starts (a mistake stops ``broker serve`` naming the
setting) and keeps the result as ``Settings.slack``; the routes and the notifier take it from there
(:func:`slack_of`), with the environment the settings were read with.

Environment variables ``BROKER_SLACK_SIGNING_SECRET`` and
``BROKER_SLACK_BOT_TOKEN`` take precedence over the file, so secrets can stay
out of it. The full shape is documented in ``docs/slack.md``.
"""

from __future__ import annotations

import os
import re
from urllib.parse import urlsplit
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.auth import Principal
from broker.config import ConfigError, Settings
from broker.spec import unknown_key_hint

DEFAULT_EVENTS = ("start", "recover", "resume", "budget_warning", "ended", "fail", "succeed", "cancel")
"""Events that notify a team's channel unless ``notifications.events`` says otherwise."""


@dataclass(frozen=True)
class SlackConfig:
    signing_secret: str | None = None
    bot_token: str | None = None
    command: str = "/broker"
    users: Mapping[str, str] = field(default_factory=dict)  # Slack user id → team
    admins: frozenset[str] = frozenset()  # Slack user ids that act as the broker admin
    channels: Mapping[str, str] = field(default_factory=dict)  # team (or "*") → channel id
    webhook_urls: Mapping[str, str] = field(default_factory=dict)  # team (or "*") → incoming-webhook URL
    api_url: str = "https://slack.com/api/"
    spec_url_prefixes: tuple[str, ...] = ("https://",)
    events: frozenset[str] = frozenset(DEFAULT_EVENTS)
    retries: int = 20  # tries after the first, at most; the notifier gives a message up after 10 minutes anyway
    raise_budget_percent: int = 50  # what the "Raise budget" button adds

    @property
    def commands_enabled(self) -> bool:
        return bool(self.signing_secret)

    @property
    def notifications_enabled(self) -> bool:
        return bool((self.bot_token and self.channels) or self.webhook_urls)

    def principal(self, user_id: str) -> Principal | None:
        """Who a Slack user is to the broker: their team's member, the admin, or nobody."""
        if user_id in self.admins:
            return Principal(name=f"slack:{user_id}", team=self.users.get(user_id), admin=True)
        team = self.users.get(user_id)
        return Principal(name=f"slack:{user_id}", team=team) if team else None

    def destination(self, team: str) -> tuple[str, str] | None:
        """("channel", id) or ("webhook", url) for a team's notifications; ``"*"`` is the fallback."""
        for key in (team, "*"):
            if self.bot_token and key in self.channels:
                return "channel", self.channels[key]
            if key in self.webhook_urls:
                return "webhook", self.webhook_urls[key]
        return None


SLACK_KEYS = frozenset({"signing_secret", "bot_token", "command", "users", "admins", "channels", "webhook_urls",
                        "api_url", "spec_url_prefixes", "raise_budget_percent"})
NOTIFICATION_KEYS = frozenset({"events", "retries"})
EVENTS = frozenset({*DEFAULT_EVENTS, "stop_budget", "past_expected_length", "deadline_passed", "resume_not_restored"})
"""The events a notification is written for (``broker/slack/messages.py``)."""


def slack_of(settings: Settings) -> SlackConfig:
    """The Slack config of ``settings``: as :func:`broker.config.load_settings` read it (once, at start, where a
    mistake is refused naming its setting), else, for settings built in code, read from their ``extra``."""
    return settings.slack if settings.slack is not None else slack_config(settings.extra)


def slack_config(extra: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SlackConfig:
    """Read ``settings.extra['slack']`` and ``['notifications']``; raise :class:`ConfigError` naming the setting.
    Every value is checked here, so a mistake stops ``broker serve`` at start rather than the first Slack request
    (a secret YAML read as a number) or nobody's notice (``user:`` for ``users:``, an event named ``started``)."""
    env = os.environ if env is None else env
    raw = extra.get("slack") or {}
    notes = extra.get("notifications") or {}
    if not isinstance(raw, dict):
        raise ConfigError("slack: must be a mapping")
    if not isinstance(notes, dict):
        raise ConfigError("notifications: must be a mapping")
    for section, given, known in (("slack", raw, SLACK_KEYS), ("notifications", notes, NOTIFICATION_KEYS)):
        for key in sorted(map(str, given)):
            if key not in known:
                raise ConfigError(f"{section}.{key}: is not a setting ({unknown_key_hint(key, known)})")
    command = _text(raw, "command") or "/broker"
    if any(c.isspace() for c in command):
        raise ConfigError(f"slack.command: must be one word, the slash command's name (/broker), not {command!r}")
    events = notes.get("events", DEFAULT_EVENTS)
    if not isinstance(events, list | tuple) or not all(isinstance(e, str) for e in events):
        raise ConfigError("notifications.events: must be a list of event names")
    for name in events:
        if name not in EVENTS:
            raise ConfigError(f"notifications.events: {name!r} is not an event ({unknown_key_hint(name, EVENTS)})")
    retries = _whole(notes, "retries", 20, "notifications")
    raise_pct = _whole(raw, "raise_budget_percent", 50, "slack")
    if not 0 <= retries <= 20:
        raise ConfigError("notifications.retries: must be from 0 to 20")
    if raise_pct < 1:
        raise ConfigError("slack.raise_budget_percent: must be at least 1")
    bot_token = env.get("BROKER_SLACK_BOT_TOKEN") or _text(raw, "bot_token")
    channels = _names(raw, "channels", "a channel id (C…)")
    if channels and not bot_token:  # posted with the bot token: without one, these teams were told nothing, silently
        raise ConfigError("slack.channels: needs slack.bot_token (or BROKER_SLACK_BOT_TOKEN) to post to the channels "
                          "it names; give the bot token, or use slack.webhook_urls instead")
    webhook_urls = _names(raw, "webhook_urls", "a webhook URL")
    for team, url in sorted(webhook_urls.items()):
        _webhook_url(team, url)
    return SlackConfig(
        signing_secret=env.get("BROKER_SLACK_SIGNING_SECRET") or _text(raw, "signing_secret"),
        bot_token=bot_token,
        command=command if command.startswith("/") else "/" + command,
        users=_names(raw, "users", "a team's name"),
        admins=frozenset(_texts(raw, "admins", (), "Slack member ids")),
        channels=channels,
        webhook_urls=webhook_urls,
        api_url=_text(raw, "api_url") or "https://slack.com/api/",
        spec_url_prefixes=_texts(raw, "spec_url_prefixes", ("https://",), "URL prefixes"),
        events=frozenset(events),
        retries=retries,
        raise_budget_percent=raise_pct,
    )


def _webhook_url(team: str, url: str) -> None:
    """Refuse a webhook URL that is not http(s) with a host; the message names the setting, never the URL (its path
    is the secret that lets anyone post to the channel)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("https", "http") or not host or any(c.isspace() for c in url.strip()):
        raise ConfigError(f"slack.webhook_urls.{team}: must be an http(s) URL with a host, the incoming webhook's "
                          "(https://hooks.slack.com/services/…)")


def _text(raw: Mapping[str, Any], key: str) -> str | None:
    """A text setting, or ``None`` when absent or empty. YAML reads an unquoted secret of digits as a number: refused
    here, at start, where the signature check refused it on every Slack request (each a 500)."""
    value = raw.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"slack.{key}: must be text (put it in quotes)")
    return value


def _whole(raw: Mapping[str, Any], key: str, default: int, section: str) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not (isinstance(value, int) or isinstance(value, str)
                                       and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)):
        raise ConfigError(f"{section}.{key}: must be a whole number")
    return int(value)


def _texts(raw: Mapping[str, Any], key: str, default: tuple[str, ...], what: str) -> tuple[str, ...]:
    """A list of text, one text standing for a list of one (``admins: U0999``, which was read letter by letter)."""
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"slack.{key}: must be a list of {what}")
    return tuple(value)


def _names(raw: Mapping[str, Any], key: str, what: str) -> dict[str, str]:
    """A mapping whose keys are read as text (YAML may read an id as a number) and whose values must be text."""
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"slack.{key}: must be a mapping")
    for k, v in value.items():
        if not isinstance(v, str) or not v:
            raise ConfigError(f"slack.{key}.{k}: must be {what}")
    return {str(k): v for k, v in value.items()}
