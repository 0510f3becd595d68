"""The config file: every setting a user may write is read; a misspelt one is refused, naming the likely one."""

import base64

import pytest

from broker.config import CONFIG_KEYS, ConfigError


def test_a_misspelt_setting_is_refused_with_the_likely_one(make_settings):
    with pytest.raises(ConfigError, match=r"stop_grace_secods is not a setting \(did you mean 'stop_grace_seconds'\?\)"):
        make_settings(config="pools: [{name: p, slots: 1, price_per_slot_hour: '0.10'}]\nstop_grace_secods: 5\n")


def test_a_setting_unlike_any_lists_them_all(make_settings):
    with pytest.raises(ConfigError, match="bogus_key is not a setting .known: admin_token_sha256, "):
        make_settings(config="bogus_key: 1\n")


@pytest.mark.parametrize("config, said", [
    pytest.param("teams: {a: {tokens: [x]}}\ntick_seconds: 1\nteams: {b: {tokens: [y]}}\n",
                 r"config.yaml: teams: is given twice in the same mapping \(line 3\): give it once$",
                 id="a setting given twice is refused naming its line, not the last one kept"),
    pytest.param("pools: [{name: p, slots: 1, price_per_slot_hour: '0.1', price_per_slot_hour: '0'}]\n",
                 r"config.yaml: pools\[0\].price_per_slot_hour: is given twice in the same mapping \(line 1\)",
                 id="a key given twice inside a pool names the pool"),
    pytest.param("pools: [\n  - x\n", r"config.yaml: is not valid YAML at line 2, column 3: ",
                 id="broken YAML names the line in the file, not <unicode string>"),
])
def test_a_config_file_is_read_as_strictly_as_a_task(make_settings, config, said):
    """The config was read with yaml.safe_load: a second `teams:` block replaced the first without a word (its
    teams' tokens stopped working), and a YAML error pointed at "<unicode string>"."""
    with pytest.raises(ConfigError, match=said):
        make_settings(config=config)


@pytest.mark.parametrize("port", ["abc", "-1", "70000", "８０"])
def test_a_broker_port_that_is_no_port_is_refused_where_it_makes_the_url_jobs_report_to(make_settings, port):
    """`broker worker` pasted it in unchecked: jobs were handed http://127.0.0.1:abc to report their progress to."""
    with pytest.raises(ConfigError, match=f"BROKER_PORT: '{port}' is not a port: give a number from 0 to 65535"):
        make_settings(BROKER_PORT=port)
    assert make_settings(BROKER_PORT=port, BROKER_PUBLIC_URL="http://10.0.0.5:8000").public_url == \
        "http://10.0.0.5:8000", "not used, so not refused"
    assert make_settings(BROKER_PORT="8123").public_url == "http://127.0.0.1:8123"


def test_every_known_setting_is_accepted(make_settings, tmp_path):
    values = {"data_dir": str(tmp_path / "d"), "store_url": f"sqlite://{tmp_path / 'x.db'}",
              "pools": [{"name": "p", "slots": 1, "price_per_slot_hour": "0.10"}], "teams": {},
              "admin_token_sha256": [], "default_budget_usd": "5", "checkpoint_root": str(tmp_path / "ck"),
              "public_url": "http://127.0.0.1:9", "launcher": "local", "engine": "off", "tick_seconds": 0.5,
              "stop_grace_seconds": 3, "max_body_bytes": 10_000, "max_workdir_bytes": 20_000,
              "workdir_retention_seconds": 3600, "workdir_grace_seconds": 600, "zones": [], "heartbeat_timeout_seconds": 0,
              "zone_cooldown_seconds": 60, "changeover_seconds": 30, "failure_rules": None, "slack": None,
              "notifications": None, "owner_timeout_seconds": 90, "clouds": ["gcp"],
              "cluster_prefix": "broker-staging", "instance_types": ["g5.*"], "launch_regions": ["us-east-1"],
              "secrets_key": base64.b64encode(bytes(range(32))).decode(),
              "secrets_old_keys": [base64.b64encode(b"o" * 32).decode()], "job_retention_days": 90}
    assert set(values) == CONFIG_KEYS
    import yaml

    settings = make_settings(config=yaml.safe_dump(values))
    assert settings.stop_grace_seconds == 3 and settings.tick_seconds == 0.5 and settings.max_body_bytes == 10_000
    assert settings.owner_timeout_seconds == 90 and settings.max_workdir_bytes == 20_000
    assert settings.workdir_retention_seconds == 3600 and settings.workdir_grace_seconds == 600
    assert settings.job_retention_days == 90
    assert settings.clouds == ("gcp",) and settings.cluster_prefix == "broker-staging"
    assert settings.instance_types == ("g5.*",) and settings.launch_regions == ("us-east-1",)
    assert settings.secrets_key == bytes(range(32)) and settings.secrets_old_keys == (b"o" * 32,)


POOL = "pools: [{name: p, slots: 1, price_per_slot_hour: '0.10'}]\n"


@pytest.mark.parametrize("config, message", [
    ("tick_seconds: fast\n", r"^tick_seconds: must be a number, not 'fast'$"),
    ("tick_seconds: -1\n", r"^tick_seconds: must be more than 0"),
    ("stop_grace_seconds: [1]\n", r"^stop_grace_seconds: must be a number"),
    ("max_body_bytes: 1MB\n", r"^max_body_bytes: must be a whole number"),
    ("heartbeat_timeout_seconds: -5\n", r"^heartbeat_timeout_seconds: must be 0 or more"),
    ("public_url: 5\n", r"^public_url: must be a string"),
    ("store_url: postgres://db/broker\n", r"^store_url: 'postgres://db/broker' is not a store URL"),
    ("launcher: skypliot\n", r"^launcher: 'skypliot' is not a launcher"),
    ("default_budget_usd: -5\n", r"^default_budget_usd: must be more than \$0"),
    ("pools: {name: p, slots: 1}\n", r"^pools: must be a list"),
    ("pools: [{name: p, slot: 4, price_per_slot_hour: '1'}]\n", r"^pools\[0\]\.slot: is not a pool setting \(did you mean 'slots'\?\)"),
    ("pools: [{name: p, slots: 2.5, price_per_slot_hour: '1'}]\n", r"^pools\[0\]\.slots: must be a whole number"),
    ("pools: [{name: p, slots: 2, price_per_slot_hour: '1', cpus_per_slot: lots}]\n", r"^pools\[0\]\.cpus_per_slot: must be a number"),
    (POOL + "teams: {vision: abc123}\n", r"^teams\.vision: must be a mapping"),
    (POOL + "teams: {vision: {token: [abc]}}\n", r"^teams\.vision\.token: is not a team setting \(did you mean 'tokens'\?\)"),
    (POOL + "teams: {vision: {tokens: ['']}}\n", r"^teams\.vision\.tokens: a token must not be empty"),
    (POOL + "teams: {vision: {tokens: [abc], default_budget_usd: 0}}\n", r"^teams\.vision\.default_budget_usd: must be more than"),
    (POOL + "admin_token_sha256: [my-admin-token]\n", r"^admin_token_sha256: each entry must be a SHA-256 digest"),
    ("zones: [{name: z, teir: ondemand}]\n", r"^zones\[0\]\.teir: is not a zone setting \(did you mean 'tier'\?\)"),
    ("zones: [{name: z, nodes: many}]\n", r"^zones\[0\]\.nodes: must be a whole number"),
    ("zones: [{name: z, grace_seconds: soon}]\n", r"^zones\[0\]\.grace_seconds: must be a number"),
    ("zones: [{name: z, price_per_hour: cheap}]\n", r"^zones\[0\]\.price_per_hour: 'cheap' is not an amount of dollars"),
    ("clouds: gcp\n", r"^clouds: must be a list of cloud names like \[aws, gcp\]"),
    ("clouds: [aws, gpc]\n", r"^clouds: the broker cannot price 'gpc'; it prices aws, gcp$"),
    ("clouds: [azure]\n", r"^clouds: the broker cannot price 'azure' \(its catalog prices VMs per region, with no "
                           r"AvailabilityZone column"),
])
def test_a_wrong_value_is_one_line_naming_the_setting(make_settings, config, message):
    """Not a bare 'could not convert string to float', a traceback, or a value silently dropped."""
    with pytest.raises(ConfigError, match=message):
        make_settings(config=config)


def test_env_settings_are_checked_naming_the_variable(make_settings):
    with pytest.raises(ConfigError, match=r"^BROKER_TEAM_TOKENS: the token of team 'vision' must be a non-empty"):
        make_settings(BROKER_TEAM_TOKENS='{"vision": ""}')
    with pytest.raises(ConfigError, match=r"^BROKER_STORE_URL: '/var/lib/broker.db' is not a store URL"):
        make_settings(store_url="/var/lib/broker.db")


def test_an_empty_pools_list_means_no_pools_and_no_section_the_default(make_settings):
    assert make_settings(config="pools: []\n").pools == ()
    assert [p.name for p in make_settings(config="default_budget_usd: '5'\n").pools] == ["local"]


def test_a_sha256_digest_is_accepted_as_written_by_sha256sum(make_settings):
    import hashlib

    digest, ml = hashlib.sha256(b"ops-token").hexdigest(), hashlib.sha256(b"ml-token").hexdigest()
    settings = make_settings(config=POOL + f"admin_token_sha256: ['{digest.upper()}']\nteams: {{ml: {{token_sha256: {ml}}}}}\n")
    assert settings.is_admin_token("ops-token") and settings.team_for_token("ml-token") == "ml"


def test_the_priced_clouds_are_aws_and_gcp_unless_set(make_settings):
    """Every cloud whose SkyPilot catalog the broker reads, by default; a setting narrows it (env over file)."""
    assert make_settings().clouds == ("aws", "gcp")
    assert make_settings(config="clouds: [GCP]\n").clouds == ("gcp",)
    assert make_settings(config="clouds: []\n").clouds == ()
    assert make_settings(config="clouds: [gcp]\n", BROKER_CLOUDS="aws").clouds == ("aws",)
    assert make_settings(BROKER_CLOUDS="gcp, aws").clouds == ("gcp", "aws")
    with pytest.raises(ConfigError, match=r"^BROKER_CLOUDS: the broker cannot price 'oci'"):
        make_settings(BROKER_CLOUDS="aws,oci")


def test_the_cluster_prefix_keeps_todays_names_unless_a_deployment_sets_its_own(make_settings):
    assert make_settings().cluster_prefix == "broker"
    assert make_settings(config="cluster_prefix: prod\n").cluster_prefix == "prod"
    assert make_settings(config="cluster_prefix: prod\n", BROKER_CLUSTER_PREFIX="broker-staging").cluster_prefix \
        == "broker-staging"
    for bad in ("Broker", "broker-", "-b", "b_1", "x" * 21):
        with pytest.raises(ConfigError, match=r"^BROKER_CLUSTER_PREFIX: .* is not a cluster name prefix"):
            make_settings(BROKER_CLUSTER_PREFIX=bad)


def test_the_cpu_pool_on_this_host_is_a_default_of_the_local_launcher_only(make_settings):
    """A pool runs a team's job on the broker's host as the broker's user, who can read its tokens and keys: a
    deployment's SkyPilot broker has none unless its config names them."""
    assert [p.name for p in make_settings().pools] == ["local"]
    assert make_settings(BROKER_LAUNCHER="skypilot").pools == ()
    named = make_settings(BROKER_LAUNCHER="skypilot",
                          config="pools:\n  - {name: gpu, slots: 1, accelerator: A100, price_per_slot_hour: '2.00'}\n")
    assert [p.name for p in named.pools] == ["gpu"]


@pytest.mark.parametrize("price, micros", [("0.00005", 50), ("'0.00005'", 50), ("2", 2_000_000), ("0.4259", 425_900)])
def test_a_simulated_zones_price_is_priced_exactly_however_yaml_writes_it(make_settings, price, micros):
    """YAML reads 0.00005 as a float whose text is "5e-05": kept as that text, the price table refused it as an
    amount written with an exponent, and every offer (the quote, the placement) failed."""
    from broker.offers import all_offers

    settings = make_settings(config=f"pools: []\nzones: [{{name: z, tier: spot, price_per_hour: {price}}}]\n")
    (offer,) = [o for o in all_offers(settings) if o.simulated]
    assert offer.price_per_hour == micros


def test_a_zone_named_as_a_pool_is_refused(make_settings):
    """Capacity is kept by name: a pool and a simulated zone of one name shared it, and a 1-slot pool ran three jobs."""
    with pytest.raises(ConfigError, match=r"^zones\[0\]\.name: 'sim-1a' is also a pool's name: give the zone another "
                                          r"name$"):
        make_settings(config="pools: [{name: sim-1a, slots: 1, price_per_slot_hour: '0.05'}]\n"
                             "zones: [{name: sim-1a, tier: spot, instance_type: g5.xlarge, region: us-east-1}]\n")


@pytest.mark.parametrize("config, setting", [
    ("pools: [{name: p, slots: -2, price_per_slot_hour: '1'}]\n", "pools[0].slots"),
    ("launcher: lokal\n", "launcher"),
    ("pools: 3\n", "pools"),
    (POOL + "teams: {vision: abc123}\n", "teams.vision"),
    (POOL + "slack: {raise_budget_percent: 0}\n", "slack.raise_budget_percent"),
    (POOL + "notifications: [started]\n", "notifications"),
], ids=["a pool's slots", "the launcher", "the pools list", "a team", "slack's section", "the notifications"])
def test_a_config_files_setting_is_named_with_the_file_it_is_in(make_settings, tmp_path, config, setting):
    """A host may hold several config files (a test broker's, the deployment's): the message a user reads says
    which one holds the setting, while the message itself stays the setting's."""
    with pytest.raises(ConfigError) as caught:
        make_settings(config=config)
    assert str(caught.value).startswith(f"{setting}: ")
    assert caught.value.located() == f"{tmp_path / 'config.yaml'}: {caught.value}"


def test_an_environment_variables_error_is_not_put_in_the_config_file(make_settings, tmp_path):
    with pytest.raises(ConfigError) as caught:
        make_settings(config="pools: []\n", BROKER_LAUNCHER="lokal")
    assert caught.value.config_path == tmp_path / "config.yaml"
    assert caught.value.located() == str(caught.value) and str(caught.value).startswith("BROKER_LAUNCHER: 'lokal'")


def test_broker_serve_says_which_config_file_holds_a_wrong_setting(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    config = tmp_path / "broker.yaml"
    config.write_text("pools: [{name: p, slots: -2, price_per_slot_hour: '1'}]\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "BROKER_DATA_DIR": str(tmp_path / "data")}
    r = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "--port", "0", "--config", str(config)],
                       env=env, cwd=Path(__file__).parents[2], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr == f"error: {config}: pools[0].slots: must be at least 1\n", r.stderr


def test_a_token_two_teams_share_or_a_team_shares_with_the_admin_is_refused_at_start(make_settings):
    """A team whose token was also the admin's submitted as the admin (host paths and all), and a token listed for
    two teams was always the first's: the second team lost its own jobs to it. Both started without a word."""
    with pytest.raises(ConfigError, match=r"^teams\.vision: one of its tokens is also an admin token"):
        make_settings(BROKER_TEAM_TOKENS='{"vision": "same-token-abcdef"}', BROKER_ADMIN_TOKEN="same-token-abcdef")
    with pytest.raises(ConfigError, match=r"^teams\.vision: one of its tokens is also one of team nlp's"):
        make_settings(config="teams:\n  vision: {tokens: [shared-token-123]}\n  nlp: {tokens: [shared-token-123]}\n",
                      BROKER_TEAM_TOKENS="{}")
    with pytest.raises(ConfigError, match=r"one of its tokens is also one of team"):  # one in the file, one in the env
        make_settings(config="teams:\n  nlp: {tokens: [vision-token]}\n")
    assert set(make_settings().teams) == {"vision", "nlp"}  # tokens of their own: taken


@pytest.mark.parametrize("value, on", [("on", True), ("off", False), ("OFF", False), ("false", False), ("no", False),
                                       ("0", False), ("yes", True), ("1", True)])
def test_the_engine_setting_is_on_or_off(make_settings, value, on):
    assert make_settings(BROKER_ENGINE=value).engine is on
    assert make_settings(config=f"engine: {value}\n").engine is on  # YAML reads on/off/yes/no as true/false


@pytest.mark.parametrize("env, config, where", [
    ({"BROKER_ENGINE": "disabled"}, None, "BROKER_ENGINE"),
    ({}, "engine: disabled\n", "engine"),
    ({}, "engine: 2\n", "engine"),
])
def test_an_engine_setting_that_is_neither_on_nor_off_is_refused_not_read_as_on(make_settings, env, config, where):
    """`BROKER_ENGINE=disabled` ran an engine (read as on) beside the worker, with that process's config, and it took
    the shared store's queued jobs."""
    with pytest.raises(ConfigError, match=rf"{where}: .* is neither on nor off"):
        make_settings(config=config, **env)


def test_the_config_file_read_is_kept_to_be_said_at_start(make_settings, tmp_path):
    assert make_settings().config_file is None
    assert make_settings(config="tick_seconds: 2\n").config_file == tmp_path / "config.yaml"


def test_a_zones_price_with_a_decimal_comma_is_said_as_a_pools_is(make_settings):
    with pytest.raises(ConfigError, match=r"zones\[0\]\.price_per_hour: has a comma, which groups thousands only "
                                          r"\(1,000\): write 0\.45"):
        make_settings(config="zones: [{name: sim-a, tier: spot, instance_type: g5.xlarge, price_per_hour: '0,45'}]\n")


def test_a_config_file_named_that_is_not_there_is_said_with_its_whole_path_and_what_to_do(make_settings, tmp_path,
                                                                                          monkeypatch):
    from broker.config import load_settings

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as named:
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_CONFIG": "cfg/nope.yaml"})
    assert str(named.value) == (f"config file {tmp_path / 'cfg' / 'nope.yaml'} does not exist (BROKER_CONFIG names it): "
                                "correct the path, or leave BROKER_CONFIG out to run with the defaults")
    with pytest.raises(ConfigError, match=r"\(--config names it\): correct the path, or leave --config out"):
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data")}, config_path="nope.yaml")


STOLEN = "stolen-admin-token-made-at-first-start-0123456789"


def test_an_admin_token_file_that_broker_admin_token_replaced_is_warned_of_at_start_and_its_401s_counted(tmp_path):
    """QA INCIDENT: the admin token `broker serve` wrote at its first start stayed in <data dir>/admin-token after
    BROKER_ADMIN_TOKEN replaced it; a restart without the variable made the stolen token the admin again, and nothing
    said so. The start now names the file (never the token); and /metrics counts the 401s by route, which the
    request histogram's status class (4xx) mixed with every other refusal."""
    import signal

    import httpx

    from broker_testing import ADMIN, POOL_AND_SPOT, start_broker

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "admin-token").write_text(STOLEN + "\n")
    proc, url = start_broker(tmp_path, engine="off", config=POOL_AND_SPOT)  # BROKER_ADMIN_TOKEN set: the new one
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            for _ in range(2):
                assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {STOLEN}"}).status_code == 401
            assert client.get("/v1/whoami").status_code == 401  # no token at all
            r = client.post("/v1/jobs/j-0123456789/progress", json={"step": 1},
                            headers={"Authorization": "Bearer v2.not-the-jobs"})
            assert r.status_code == 401, r.text
            assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 200
            assert client.get("/v1/jobs/j-0123456789", headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 404
            metrics = client.get("/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    counted = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("broker_http_unauthorized_total")}
    assert counted == {'broker_http_unauthorized_total{route="/v1/jobs"}': 2.0,
                       'broker_http_unauthorized_total{route="/v1/whoami"}': 1.0,
                       'broker_http_unauthorized_total{route="/v1/jobs/{job_id}/progress"}': 1.0}, metrics
    said = next(tmp_path.glob("broker-*.log")).read_text()
    assert (f"warning: {data / 'admin-token'} holds an admin token other than BROKER_ADMIN_TOKEN: refused now, it is "
            "the admin token again for a broker started on this data dir without BROKER_ADMIN_TOKEN") in said, said
    assert "delete the file to retire it" in said and STOLEN not in said


def test_an_admin_token_file_holding_the_token_set_or_no_token_set_is_not_warned_of(make_settings, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "admin-token").write_text("the-admin-token-for-tests-0123\n")
    assert not make_settings(BROKER_ADMIN_TOKEN="the-admin-token-for-tests-0123").warnings  # the same token
    assert not make_settings(BROKER_ADMIN_TOKEN="").warnings  # none set: the file's is the admin token, as meant
    replaced = make_settings(BROKER_ADMIN_TOKEN="another-admin-token-0123456789").warnings
    assert len(replaced) == 1 and "admin-token holds an admin token other than BROKER_ADMIN_TOKEN" in replaced[0]
    assert "the-admin-token-for-tests" not in replaced[0]
