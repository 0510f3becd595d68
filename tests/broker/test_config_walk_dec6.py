"""An operator's config-edit walk (Dec 6): what the broker took at start without a word, or refused without saying
where — a local output cap that is no size, an emptied config file, a config path that is a folder, two pools of one
name, a zone's instance type misspelt, and team tokens given both in the file and in BROKER_TEAM_TOKENS."""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from broker_testing import ADMIN

from broker.config import ConfigError, load_settings
from launchers.local_runner import DEFAULT_OUTPUT_CAP, OUTPUT_CAP_ENV, output_cap

REPO = Path(__file__).parents[2]
POOL = "pools: [{name: p, slots: 1, price_per_slot_hour: '0.10'}]\n"


# -- BROKER_LOCAL_OUTPUT_CAP ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["inf", "64X", "1T", "nan", "-1", "1e400", "64 MB of it"])
def test_an_output_cap_that_is_no_size_is_refused_at_start_naming_the_variable_and_the_form(make_settings, value):
    """`inf` crashed every local runner (each launch relaunched as a lost node, 20 times, billed), and `64X` was read
    as the 64 MiB default without a word."""
    with pytest.raises(ConfigError) as caught:
        make_settings(**{OUTPUT_CAP_ENV: value})
    assert str(caught.value) == (f"BROKER_LOCAL_OUTPUT_CAP: {value!r} is not a size: give bytes, or a number with K, "
                                 "M or G (256K, 64M, 1G)")
    assert caught.value.located() == str(caught.value), "a variable's error is not put in a config file"


@pytest.mark.parametrize("value, cap", [("64M", 64 << 20), ("256KiB", 256 << 10), ("1.5G", 3 << 29),
                                        ("1048576", 1 << 20), ("", DEFAULT_OUTPUT_CAP), ("  ", DEFAULT_OUTPUT_CAP)])
def test_an_output_cap_that_is_a_size_starts_the_broker_and_is_the_runners_cap(make_settings, value, cap):
    make_settings(**{OUTPUT_CAP_ENV: value})
    assert output_cap({OUTPUT_CAP_ENV: value}) == cap


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e400", "64X", "1T"])
def test_the_runner_reads_an_output_cap_that_is_no_size_as_the_default_and_never_crashes(value):
    """A runner started by a broker from before the start's check: `inf` raised OverflowError in the runner."""
    assert output_cap({OUTPUT_CAP_ENV: value}) == DEFAULT_OUTPUT_CAP


def _broker(command: str, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN,
            "BROKER_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run([sys.executable, "-m", "broker.cli", command, *args], env={**base, **env}, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_broker_serve_and_worker_refuse_an_output_cap_that_is_no_size_in_one_line(tmp_path, command):
    r = _broker(command, tmp_path, *(["--port", "0"] if command == "serve" else ["--burst"]),
                BROKER_LOCAL_OUTPUT_CAP="inf")
    assert r.returncode == 1 and r.stderr == ("error: BROKER_LOCAL_OUTPUT_CAP: 'inf' is not a size: give bytes, or a "
                                              "number with K, M or G (256K, 64M, 1G)\n"), r.stderr


# -- an empty config file ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, said", [
    pytest.param("", "is empty", id="a file emptied by a failed write is refused"),
    pytest.param("\n  \n", "is empty", id="a file of blank lines is refused"),
    pytest.param("# pools moved to the new host\n\n  # teams: ...\n", "is empty (comments only)",
                 id="a file of comments only is refused"),
    pytest.param("~\n", "holds no settings (YAML's null)", id="a file holding YAML's null alone is refused"),
])
def test_an_empty_config_file_is_refused_naming_it_not_read_as_the_defaults(make_settings, tmp_path, text, said):
    """Read as the defaults, every team vanished (each team's token answered 401) and the pools became `local`."""
    with pytest.raises(ConfigError) as caught:
        make_settings(config=text)
    path = tmp_path / "config.yaml"
    assert caught.value.located() == (f"{path}: {said}: the broker reads its config file for its settings; restore "
                                      "them, or write {} in it to run with the built-in defaults (pool local, no "
                                      "teams)")


def test_a_config_file_of_an_empty_mapping_is_the_defaults_as_asked(make_settings, tmp_path):
    settings = make_settings(config="{}\n")
    assert [p.name for p in settings.pools] == ["local"] and settings.config_file == tmp_path / "config.yaml"


def test_an_empty_config_file_in_the_data_dir_is_refused_too_and_removing_it_is_offered(tmp_path):
    """The default path, `<data dir>/config.yaml`: a file there is one the broker reads, so an emptied one is refused
    as a named one is; with none there, the defaults, as before."""
    data = tmp_path / "data"
    data.mkdir()
    env = {"BROKER_DATA_DIR": str(data), "BROKER_ADMIN_TOKEN": ADMIN}
    assert load_settings(env).config_file is None, "no file there: the defaults"
    (data / "config.yaml").write_text("")
    with pytest.raises(ConfigError) as caught:
        load_settings(env)
    assert caught.value.located() == (f"{data / 'config.yaml'}: is empty: the broker reads its config file for its "
                                      "settings; restore them, or remove it (or write {} in it) to run with the "
                                      "built-in defaults (pool local, no teams)")


# -- a config path that is no file to read --------------------------------------------------------------------------

def test_a_config_path_that_is_a_folder_is_said_to_be_the_config_file_and_who_named_it(make_settings, tmp_path):
    folder = tmp_path / "cfgs"
    folder.mkdir()
    env = {"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    with pytest.raises(ConfigError) as caught:
        load_settings(env, config_path=folder)
    assert caught.value.located() == f"config file {folder} is a directory (--config names it): name the YAML file itself"
    with pytest.raises(ConfigError, match=r"^config file .*/cfgs is a directory \(BROKER_CONFIG names it\)"):
        load_settings({**env, "BROKER_CONFIG": str(folder)})


def test_a_config_path_that_is_a_folder_stops_serve_in_one_line(tmp_path):
    (tmp_path / "cfgs").mkdir()
    r = _broker("serve", tmp_path, "--port", "0", "--config", str(tmp_path / "cfgs"))
    assert r.returncode == 1 and r.stderr == (f"error: config file {tmp_path / 'cfgs'} is a directory (--config names "
                                              "it): name the YAML file itself\n"), r.stderr


def test_a_config_file_that_is_not_text_is_said_to_be_the_config_file(tmp_path):
    config = tmp_path / "broker.yaml"
    config.write_bytes(b"\xff\xfe\x00pools")
    with pytest.raises(ConfigError, match=r"^config file .*/broker.yaml is not UTF-8 text \(--config names it\)"):
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}, config_path=config)


def test_a_config_file_the_broker_cannot_read_is_said_to_be_the_config_file(tmp_path):
    config = tmp_path / "broker.yaml"
    config.write_text(POOL)
    config.chmod(0)
    env = {"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    if os.geteuid() != 0:
        with pytest.raises(ConfigError, match=r"^config file .*/broker.yaml cannot be read by this user \(--config"):
            load_settings(env, config_path=config)
        return
    # root reads a file of mode 000: read by a forked child that has dropped to nobody's uid, as a broker run as a
    # user without the right to the file would
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery, only the answer down the pipe
        os.close(read)
        said = "no error"
        try:
            os.setgid(65534)
            os.setuid(65534)
            load_settings(env, config_path=config)
        except ConfigError as exc:
            said = str(exc)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            said = f"{type(exc).__name__}: {exc}"
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        said = answer.read()
    os.waitpid(pid, 0)
    assert re.match(r"^config file .*/broker.yaml cannot be read by this user \(--config", said), said


# -- duplicate names, and a zone the price table has no price for ---------------------------------------------------

@pytest.mark.parametrize("config, said", [
    pytest.param("pools:\n  - {name: onprem, slots: 2, price_per_slot_hour: '1.00'}\n"
                 "  - {name: gpu, slots: 1, price_per_slot_hour: '2.00'}\n"
                 "  - {name: onprem, slots: 1, price_per_slot_hour: '1.00'}\n",
                 "pools[2].name: 'onprem' is also the name of pools[0]: each of the pools needs a name of its own",
                 id="a pool name given twice names the name and both pools"),
    pytest.param("pools: []\nzones:\n  - {name: sim-a, tier: spot}\n  - {name: sim-a, tier: ondemand}\n",
                 "zones[1].name: 'sim-a' is also the name of zones[0]: each of the zones needs a name of its own",
                 id="a zone name given twice names the name and both zones"),
    pytest.param("pools: []\nzones: [{name: sim-a, tier: spot, instance_type: g5.xlarg}]\n",
                 "zones[0].instance_type: 'g5.xlarg' is not an instance type of the aws price table (did you mean "
                 "'g5.xlarge'?); set price_per_hour only for a zone that stands for an instance the table lacks",
                 id="a misspelt instance type is named with the one likely meant, not only told to set a price"),
    pytest.param("pools: []\nzones: [{name: sim-a, tier: spot, region: us-east-7}]\n",
                 "zones[0].region: the aws price table has no g5.xlarge in 'us-east-7' (did you mean 'us-east-2'?); "
                 "set price_per_hour only for a zone that stands for an instance the table lacks",
                 id="a misspelt region is named with a region the table has"),
    pytest.param("pools: []\nzones: [{name: sim-a, tier: spot, cloud: azure}]\n",
                 "zones[0].cloud: there is no azure price table on this host to price g5.xlarge from (the broker "
                 "prices aws, gcp): set price_per_hour",
                 id="a cloud with no price table is named"),
])
def test_a_refusal_at_start_names_the_entry_and_what_is_wrong_in_it(make_settings, tmp_path, config, said):
    with pytest.raises(ConfigError) as caught:
        make_settings(config=config)
    assert caught.value.located() == f"{tmp_path / 'config.yaml'}: {said}"


def test_a_zone_with_its_own_price_may_stand_for_an_instance_the_table_lacks(make_settings):
    settings = make_settings(config="pools: []\nzones: [{name: sim-a, tier: spot, instance_type: g9.mega, "
                                    "price_per_hour: '0.40'}]\n")
    assert [z.instance_type for z in settings.zones] == ["g9.mega"]


# -- team tokens from the file and from BROKER_TEAM_TOKENS ---------------------------------------------------------

NEW, OLD, TYPO = "nlp-token-NEW-0123456789abcdef", "nlp-token-OLD-0123456789abcdef", "nlpp-token-0123456789abcdef"


def _with_tokens(tmp_path, config: str, tokens: dict[str, str]):
    path = tmp_path / "config.yaml"
    path.write_text(config)
    return load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
                          "BROKER_TEAM_TOKENS": json.dumps(tokens)}, config_path=path)


def test_a_token_replaced_in_the_file_while_the_variable_keeps_the_old_one_is_warned_at_start(tmp_path, caplog):
    """Both are accepted (the union docs/deploy.md states), so the leaked token still worked: said at start, naming
    the team and never a token."""
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        settings = _with_tokens(tmp_path, f"teams: {{nlp: {{tokens: [{NEW}]}}}}\n", {"nlp": OLD})
    said = ("BROKER_TEAM_TOKENS: team 'nlp' has a token there besides its tokens in the config file (teams.nlp): the "
            "tokens of both are accepted, so a token replaced in one of them alone still works from the other; keep "
            "each team's tokens in one of the two")
    assert settings.warnings == (said,) and [r.getMessage() for r in caplog.records] == [said]
    assert settings.team_for_token(OLD) == settings.team_for_token(NEW) == "nlp"
    assert not any(token in said for token in (OLD, NEW))


def test_a_team_named_only_in_the_variable_is_warned_with_the_team_meant(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        settings = _with_tokens(tmp_path, "teams: {nlp: {default_budget_usd: '50'}, vision: {}}\n",
                                {"nlp": NEW, "nlpp": TYPO})
    said = ("BROKER_TEAM_TOKENS: team 'nlpp' is not one of the config file's teams (did you mean 'nlp'?): its token is "
            "taken as a team of that name, with the broker's default budget and no monthly cap; correct the name, or "
            "add the team to the file's teams:")
    assert settings.warnings == (said,) and [r.getMessage() for r in caplog.records] == [said]
    assert settings.team_for_token(TYPO) == "nlpp", "taken as before: warned, not refused"
    assert TYPO not in said


@pytest.mark.parametrize("config, tokens", [
    pytest.param(POOL, {"nlp": NEW, "vision": OLD}, id="no teams in the file: every team is the variable's"),
    pytest.param("teams: {nlp: {default_budget_usd: '50'}}\n", {"nlp": NEW},
                 id="the file gives the team's budget, the variable its token"),
    pytest.param(f"teams: {{nlp: {{tokens: [{NEW}]}}}}\n", {"nlp": NEW}, id="the same token in both"),
])
def test_no_warning_where_the_file_and_the_variable_do_not_disagree(tmp_path, caplog, config, tokens):
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        settings = _with_tokens(tmp_path, config, tokens)
    assert settings.warnings == () and not caplog.records


def test_broker_serve_says_the_token_warnings_at_start(tmp_path):
    """Said on serve's stderr with its other start-up warnings (here before it finds its port taken, and stops)."""
    config = tmp_path / "broker.yaml"
    config.write_text(f"teams: {{nlp: {{tokens: [{NEW}]}}}}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = _broker("serve", tmp_path, "--port", str(taken.getsockname()[1]), "--config", str(config),
                    BROKER_TEAM_TOKENS=json.dumps({"nlp": OLD, "nlpp": TYPO}))
    assert r.returncode == 1
    assert "BROKER_TEAM_TOKENS: team 'nlp' has a token there besides its tokens in the config file" in r.stderr
    assert "BROKER_TEAM_TOKENS: team 'nlpp' is not one of the config file's teams (did you mean 'nlp'?)" in r.stderr
    assert not any(token in r.stderr for token in (OLD, NEW, TYPO))


def test_a_short_token_in_the_config_file_is_warned_at_start_naming_the_team_never_the_token(tmp_path, caplog):
    """BROKER_ADMIN_TOKEN and BROKER_TEAM_TOKENS under 16 characters were warned of; `teams: {vision: {tokens: [abc]}}`
    in the file started silently."""
    with caplog.at_level(logging.WARNING, logger="broker.config"):
        settings = _with_tokens(tmp_path, f"teams: {{vision: {{tokens: [abc]}}, nlp: {{tokens: [{NEW}]}}}}\n", {})
    said = ("teams.vision.tokens: a token is shorter than 16 characters, which anyone who reaches the broker's port "
            "may guess: give it 32 random characters (`openssl rand -hex 16`)")
    assert settings.warnings == (said,) and [r.getMessage() for r in caplog.records] == [said]
    assert settings.team_for_token("abc") == "vision", "taken as before: warned, not refused"
