"""The ``slack:`` and ``notifications:`` config sections, read once. Pure.

Environment variables ``BROKER_SLACK_SIGNING_SECRET`` and
``BROKER_SLACK_BOT_TOKEN`` take precedence over the file, so secrets can stay
out of it. The full shape is documented in ``docs/slack.md``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.auth import Principal
from broker.config import ConfigError

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
    retries: int = 5
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


def slack_config(extra: Mapping[str, Any], env: Mapping[str, str] | None = None) -> SlackConfig:
    """Read ``settings.extra['slack']`` and ``['notifications']``; raise :class:`ConfigError` naming the key."""
    env = os.environ if env is None else env
    raw = extra.get("slack") or {}
    notes = extra.get("notifications") or {}
    if not isinstance(raw, dict):
        raise ConfigError("slack: must be a mapping")
    if not isinstance(notes, dict):
        raise ConfigError("notifications: must be a mapping")
    command = str(raw.get("command") or "/broker")
    events = notes.get("events", DEFAULT_EVENTS)
    if not isinstance(events, list | tuple) or not all(isinstance(e, str) for e in events):
        raise ConfigError("notifications.events: must be a list of event names")
    try:
        retries = int(notes.get("retries", 5))
        raise_pct = int(raw.get("raise_budget_percent", 50))
    except (TypeError, ValueError):
        raise ConfigError("notifications.retries / slack.raise_budget_percent: must be whole numbers") from None
    if not 0 <= retries <= 20:
        raise ConfigError("notifications.retries: must be from 0 to 20")
    if raise_pct < 1:
        raise ConfigError("slack.raise_budget_percent: must be at least 1")
    prefixes = raw.get("spec_url_prefixes", ["https://"])
    if isinstance(prefixes, str):
        prefixes = [prefixes]
    return SlackConfig(
        signing_secret=env.get("BROKER_SLACK_SIGNING_SECRET") or raw.get("signing_secret"),
        bot_token=env.get("BROKER_SLACK_BOT_TOKEN") or raw.get("bot_token"),
        command=command if command.startswith("/") else "/" + command,
        users={str(k): str(v) for k, v in _mapping(raw, "users").items()},
        admins=frozenset(str(a) for a in raw.get("admins") or []),
        channels={str(k): str(v) for k, v in _mapping(raw, "channels").items()},
        webhook_urls={str(k): str(v) for k, v in _mapping(raw, "webhook_urls").items()},
        api_url=str(raw.get("api_url") or "https://slack.com/api/"),
        spec_url_prefixes=tuple(str(p) for p in prefixes),
        events=frozenset(events),
        retries=retries,
        raise_budget_percent=raise_pct,
    )


def _mapping(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"slack.{key}: must be a mapping")
    return value
