"""The config file: every setting a user may write is read; a misspelt one is refused, naming the likely one."""

import pytest

from broker.config import CONFIG_KEYS, ConfigError


def test_a_misspelt_setting_is_refused_with_the_likely_one(make_settings):
    with pytest.raises(ConfigError, match=r"stop_grace_secods is not a setting \(did you mean 'stop_grace_seconds'\?\)"):
        make_settings(config="pools: [{name: p, slots: 1, price_per_slot_hour: '0.10'}]\nstop_grace_secods: 5\n")


def test_a_setting_unlike_any_lists_them_all(make_settings):
    with pytest.raises(ConfigError, match="bogus_key is not a setting .known: admin_token_sha256, "):
        make_settings(config="bogus_key: 1\n")


def test_every_known_setting_is_accepted(make_settings, tmp_path):
    values = {"data_dir": str(tmp_path / "d"), "store_url": f"sqlite://{tmp_path / 'x.db'}",
              "pools": [{"name": "p", "slots": 1, "price_per_slot_hour": "0.10"}], "teams": {},
              "admin_token_sha256": [], "default_budget_usd": "5", "checkpoint_root": str(tmp_path / "ck"),
              "public_url": "http://127.0.0.1:9", "launcher": "local", "engine": "off", "tick_seconds": 0.5,
              "stop_grace_seconds": 3, "max_body_bytes": 10_000, "zones": [], "heartbeat_timeout_seconds": 0,
              "zone_cooldown_seconds": 60, "changeover_seconds": 30, "failure_rules": None, "slack": None,
              "notifications": None}
    assert set(values) == CONFIG_KEYS
    import yaml

    settings = make_settings(config=yaml.safe_dump(values))
    assert settings.stop_grace_seconds == 3 and settings.tick_seconds == 0.5 and settings.max_body_bytes == 10_000
