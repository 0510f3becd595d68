"""Slack notification config, checked at start (docs/slack.md says every value is), and said once where each
team's notifications go.

QA (Dec 7): ``channels`` given without a bot token left notifications silently off, and ``webhook_urls: {alpha:
not-a-url}`` was taken; nothing said at start where a team's notifications went, or that a team had none.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from broker.config import ConfigError, load_settings
from broker.slack.config import slack_config
from broker.slack.notify import Notifier

from . import world
from .conftest import build_app

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("slack, message", [
    ({"channels": {"team-a": "C0123"}},
     "slack.channels: needs slack.bot_token (or BROKER_SLACK_BOT_TOKEN) to post to the channels it names; give the "
     "bot token, or use slack.webhook_urls instead"),
    ({"webhook_urls": {"alpha": "not-a-url"}},
     "slack.webhook_urls.alpha: must be an http(s) URL with a host, the incoming webhook's "
     "(https://hooks.slack.com/services/…)"),
    ({"webhook_urls": {"alpha": "ftp://hooks.slack.com/services/T/B/x"}},
     "slack.webhook_urls.alpha: must be an http(s) URL with a host, the incoming webhook's "
     "(https://hooks.slack.com/services/…)"),
    ({"webhook_urls": {"alpha": "https:///services/T/B/x"}},
     "slack.webhook_urls.alpha: must be an http(s) URL with a host, the incoming webhook's "
     "(https://hooks.slack.com/services/…)"),
    ({"webhook_urls": {"alpha": "hooks.slack.com/services/T/B/secret"}},
     "slack.webhook_urls.alpha: must be an http(s) URL with a host, the incoming webhook's "
     "(https://hooks.slack.com/services/…)"),
], ids=["channels without a bot token", "a webhook that is no URL", "a webhook not over http(s)",
        "a webhook URL with no host", "a webhook URL without its scheme (not echoed: its path is the secret)"])
def test_a_notification_mistake_is_refused_naming_the_setting(slack, message):
    with pytest.raises(ConfigError) as caught:
        slack_config({"slack": slack}, env={})
    assert str(caught.value) == message
    assert "secret" not in str(caught.value)


def test_channels_with_a_bot_token_from_the_environment_and_good_webhooks_are_taken():
    cfg = slack_config({"slack": {"channels": {"team-a": "C0123"},
                                  "webhook_urls": {"team-b": "https://hooks.slack.com/services/T/B/x",
                                                   "team-c": "http://127.0.0.1:18930/hook"}}},
                       env={"BROKER_SLACK_BOT_TOKEN": "xoxb-1"})
    assert cfg.notifications_enabled
    assert cfg.destination("team-a") == ("channel", "C0123")
    assert cfg.destination("team-c") == ("webhook", "http://127.0.0.1:18930/hook")


def test_broker_serve_stops_at_start_on_channels_without_a_bot_token(tmp_path):
    config = tmp_path / "broker.yaml"
    config.write_text("slack:\n  channels: {team-a: C0123}\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BROKER_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "--port", "0", "--config", str(config)],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stderr) == (1, f"error: {config}: slack.channels: needs slack.bot_token (or "
                                           "BROKER_SLACK_BOT_TOKEN) to post to the channels it names; give the bot "
                                           "token, or use slack.webhook_urls instead\n"), r.stderr


def test_load_settings_refuses_a_webhook_that_is_no_url(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("slack: {webhook_urls: {alpha: not-a-url}}\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data")}, config_path=path)
    assert caught.value.located().startswith(f"{path}: slack.webhook_urls.alpha: must be an http(s) URL with a host")


def test_the_start_says_once_where_each_teams_notifications_go_and_which_have_none(store, said):
    cfg = slack_config({"slack": {"bot_token": "xoxb-1", "channels": {"team-a": "C0123"},
                                  "webhook_urls": {"team-b": "https://hooks.slack.com/services/T0/B0/s3cr3t"}}},
                       env={})
    Notifier(cfg, store, dashboard_url="http://x/dashboard", teams=["team-a", "team-b", "team-c"])
    assert said.entries == ["INFO slack notifications: team-a → channel C0123; team-b → webhook hooks.slack.com; no "
                          "notifications for team-c (no entry in slack.channels or slack.webhook_urls)"]
    assert "s3cr3t" not in said.entries[0]  # the webhook's path is its secret


def test_a_fallback_channel_is_said_as_every_other_teams(store, said):
    cfg = slack_config({"slack": {"bot_token": "xoxb-1", "channels": {"team-a": "C0123", "*": "C0999"}}}, env={})
    Notifier(cfg, store, dashboard_url="http://x/dashboard", teams=["team-a", "team-b"])
    assert said.entries == ["INFO slack notifications: team-a → channel C0123; team-b → channel C0999; every other "
                          "team → channel C0999"]


def test_the_app_says_it_at_start_with_the_configs_teams(tmp_path, store, seeded, said):
    settings = world.settings(tmp_path, slack={"webhook_urls": {"team-b": "https://hooks.slack.com/services/T/B/x"}})
    build_app(settings, store)
    assert said.entries == ["INFO slack notifications: team-b → webhook hooks.slack.com; no notifications for team-a "
                          "(no entry in slack.channels or slack.webhook_urls)"]


def test_metrics_count_the_notifiers_outcomes_and_its_queue(tmp_path, store, seeded):
    """A notification given up after its retry window was a log line alone: /metrics now counts each outcome (every
    one at 0 from the first scrape) and the notifications waiting."""
    from fastapi.testclient import TestClient

    settings = world.settings(tmp_path, slack={"webhook_urls": {"team-b": "https://hooks.slack.com/services/T/B/x"}})
    app = build_app(settings, store)
    with TestClient(app) as c:
        text = c.get("/metrics").text
    for outcome in ("sent", "failed", "dropped", "discarded"):
        assert f'broker_slack_notifications_total{{outcome="{outcome}"}} 0.0' in text, text
    assert "broker_slack_notifications_queued 0.0" in text, text
