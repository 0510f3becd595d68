"""An ops QA walk of the config file (Dec 8): settings the broker took at start that it could not use, or used other
than written — a failure_rules file missing or invalid, a relative checkpoint root, an amount of dollars with an
exponent, a team named "", a preemption schedule on an on-demand zone, and a zone trace named without its folder."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from broker_testing import ADMIN

from broker.config import ConfigError, load_settings
from broker.diagnosis import Ending, RuleBook
from pricing.money import to_micros

REPO = Path(__file__).parents[2]
RULE = "- {class: license, sentence: The licence server said no., pattern: 'LicenseError'}\n"


def _load(tmp_path: Path, config: str, **env: str):
    cfg = tmp_path / "cfg" / "config.yaml"
    cfg.parent.mkdir(exist_ok=True)
    cfg.write_text(config)
    return load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN, **env},
                         config_path=cfg)


def _refused(tmp_path: Path, config: str, **env: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, config, **env)
    return caught.value.located()


def _broker(command: str, tmp_path: Path, *args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN,
            "BROKER_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "broker.cli", command, *args], env={**base, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


# -- failure_rules ---------------------------------------------------------------------------------------------

def test_a_failure_rules_file_that_is_missing_is_refused_at_start_naming_the_setting_and_the_path(tmp_path):
    said = _refused(tmp_path, f"failure_rules: {tmp_path / 'nope.yaml'}\n")
    assert said == (f"{tmp_path / 'cfg' / 'config.yaml'}: failure_rules: {tmp_path / 'nope.yaml'} does not exist: "
                    "correct the path, or leave failure_rules out"), said


def test_a_failure_rule_with_a_key_rules_do_not_have_is_refused_at_start_naming_the_key_and_the_one_meant(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "rules.yaml").write_text("- {class: x, sentence: y, patern: z}\n")
    said = _refused(tmp_path, "failure_rules: rules.yaml\n")
    assert said.endswith(f"failure_rules: {tmp_path / 'cfg' / 'rules.yaml'}[0].patern: is not a rule setting "
                         "(did you mean 'pattern'?)"), said


@pytest.mark.parametrize("text, said", [
    pytest.param("- {class: x, sentence: y, pattern: '('}\n", "[0].pattern: ", id="a pattern that is no regex"),
    pytest.param("- {class: x}\n", "[0]: needs 'class' and 'sentence'", id="a rule without a sentence"),
    pytest.param("- [a\n", "is not valid YAML", id="a file that is not YAML"),
])
def test_a_failure_rules_file_that_cannot_be_used_stops_the_start_saying_why(tmp_path, text, said):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "rules.yaml").write_text(text)
    message = _refused(tmp_path, "failure_rules: rules.yaml\n")
    assert f"failure_rules: {tmp_path / 'cfg' / 'rules.yaml'}" in message and said in message, message


def test_a_relative_failure_rules_path_is_read_from_the_config_files_folder_not_the_brokers_working_dir(
        tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "rules.yaml").write_text(RULE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    settings = _load(tmp_path, "failure_rules: rules.yaml\n")
    assert settings.extra["failure_rules"] == str(tmp_path / "cfg" / "rules.yaml")
    book = RuleBook(settings.extra["failure_rules"])
    assert book.diagnose(Ending("failed", 1, log_tail="LicenseError: no seat")).cls == "license"
    # and one there is not, but beside the working dir, is refused, saying where it looked
    (tmp_path / "cfg" / "rules.yaml").unlink()
    (elsewhere / "rules.yaml").write_text(RULE)
    said = _refused(tmp_path, "failure_rules: rules.yaml\n")
    assert f"failure_rules: {tmp_path / 'cfg' / 'rules.yaml'} does not exist (a relative path is read from the " \
           f"config file's folder, {tmp_path / 'cfg'})" in said, said


def test_broker_serve_with_failure_rules_that_cannot_be_used_stops_in_one_line(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("failure_rules: /tmp/h8_nope_rules.yaml\n")
    r = _broker("serve", tmp_path, "--port", "0", "--config", str(cfg))
    assert r.returncode == 1 and r.stderr == (f"error: {cfg}: failure_rules: /tmp/h8_nope_rules.yaml does not "
                                              "exist: correct the path, or leave failure_rules out\n"), r.stderr


def test_an_edit_of_the_rules_that_cannot_be_used_while_the_broker_runs_is_logged_and_the_last_good_rules_kept(
        tmp_path, caplog):
    path = tmp_path / "rules.yaml"
    path.write_text(RULE)
    book = RuleBook(path)
    ending = Ending("failed", 1, log_tail="LicenseError: no seat")
    assert book.diagnose(ending).cls == "license"
    path.write_text("- {class: x, sentence: y, patern: z}\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    with caplog.at_level(logging.WARNING, logger="broker.diagnosis"):
        assert book.diagnose(ending).cls == "license"
        assert book.diagnose(ending).cls == "license"
    said = [r.getMessage() for r in caplog.records if r.name == "broker.diagnosis"]
    assert said == [f"failure_rules: {path} cannot be used, the rules read before are kept: {path}[0].patern: is not "
                    "a rule setting (did you mean 'pattern'?)"], said


# -- the checkpoint root -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["BROKER_CHECKPOINT_ROOT", "checkpoint_root"])
@pytest.mark.parametrize("root", ["relative/ck", "file://relative/ck", "./ck"])
def test_a_relative_checkpoint_root_is_refused_at_start_naming_the_setting_and_why(tmp_path, where, root):
    if where == "BROKER_CHECKPOINT_ROOT":
        said = _refused(tmp_path, "{}\n", BROKER_CHECKPOINT_ROOT=root)
    else:
        said = _refused(tmp_path, f"checkpoint_root: {root}\n")
    assert f"{where}: {root!r} is a relative path: each attempt runs in a folder of its own, so a resume would not " \
           "find the checkpoints of the attempt before" in said, said


@pytest.mark.parametrize("root", ["s3://bucket/ck", "gs://bucket/ck", "FILE_ABS", "ABS"])
def test_a_bucket_or_an_absolute_checkpoint_root_starts_as_before(tmp_path, root):
    root = {"FILE_ABS": (tmp_path / "ck").as_uri(), "ABS": str(tmp_path / "ck2")}.get(root, root)
    assert _load(tmp_path, "{}\n", BROKER_CHECKPOINT_ROOT=root).checkpoint_root == root
    assert _load(tmp_path, "{}\n").checkpoint_root == (tmp_path / "data" / "checkpoints").as_uri()


def test_broker_serve_with_a_relative_checkpoint_root_stops_in_one_line(tmp_path):
    r = _broker("serve", tmp_path, "--port", "0", BROKER_CHECKPOINT_ROOT="relative/ck")
    assert r.returncode == 1 and r.stderr.startswith("error: BROKER_CHECKPOINT_ROOT: 'relative/ck' is a relative "
                                                     "path"), r.stderr


# -- amounts of dollars ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("config, field, typed, plain", [
    ("default_budget_usd: 1.0e+3\n", "default_budget_usd", "1.0e+3", "1000"),
    ("teams: {vision: {default_budget_usd: 2.5E+1}}\n", "teams.vision.default_budget_usd", "2.5E+1", "25"),
    ("teams: {vision: {monthly_budget_usd: 1.0e+4}}\n", "teams.vision.monthly_budget_usd", "1.0e+4", "10000"),
    ("pools: [{name: p, slots: 1, price_per_slot_hour: 1.5e-1}]\n", "pools[0].price_per_slot_hour", "1.5e-1", "0.15"),
])
def test_an_amount_of_dollars_with_an_exponent_is_refused_in_the_config_as_in_a_task(tmp_path, config, field, typed,
                                                                                     plain):
    said = _refused(tmp_path, config)
    assert said.endswith(f"{field}: {typed!r} (line 1) is not an amount of dollars: write it as {plain}, not with an "
                         "exponent"), said


def test_the_config_and_a_task_read_an_amount_of_dollars_alike(tmp_path):
    from broker.spec import SpecError, parse
    from broker.task_text import load_text

    def task(written: str):
        return parse(load_text(f"name: t\nresources: {{cpus: 1}}\nrun: echo\nbroker: {{budget_usd: {written}}}\n"),
                     now=time.time())

    for written in ("1.0e+3", '"1e3"'):
        with pytest.raises(SpecError):
            task(written)
        with pytest.raises(ConfigError):
            _load(tmp_path, f"default_budget_usd: {written}\n")
    for written, dollars in (("0.5", "0.5"), ("12.50", "12.50"), ("200", "200"), ('"7.25"', "7.25")):
        assert task(written).broker.budget == to_micros(dollars)
        assert _load(tmp_path, f"default_budget_usd: {written}\n").default_budget == to_micros(dollars)


# -- teams and zones ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ['""', "' '", "null"])
def test_a_team_with_no_name_is_refused(tmp_path, name):
    said = _refused(tmp_path, f"teams: {{{name}: {{default_budget_usd: '5'}}}}\n")
    assert said.endswith("teams: a team is named " + ("null" if name == "null" else repr(name.strip('"\'') or "")
                                                     if name != "' '" else "' '") + ": give each team a name"), said


def test_a_preemption_schedule_on_an_on_demand_zone_is_refused_as_it_would_never_preempt(tmp_path):
    said = _refused(tmp_path, "zones: [{name: od, tier: ondemand, schedule: ['preempt attempt 1 at +40s']}]\n")
    assert said.endswith("zones[0].schedule: zone 'od' is on-demand, which is never preempted: a schedule is for a "
                         "spot zone (tier: spot); take it out, or make the zone spot"), said
    (tmp_path / "cfg" / "t.json").write_text('{"data": [1, 0, 1]}')
    said = _refused(tmp_path, "zones: [{name: od, tier: ondemand, trace: t.json}]\n")
    assert "zones[0].trace: zone 'od' is on-demand, which is never preempted" in said, said
    zone, = _load(tmp_path, "zones: [{name: sp, schedule: ['preempt attempt 1 at +40s']}]\n").zones
    assert (zone.tier, zone.instance_type, len(zone.schedule)) == ("spot", "g5.xlarge", 1)


def test_a_zone_trace_that_cannot_be_read_is_named_by_the_path_tried_from_the_config_files_folder(tmp_path):
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (cfg / "config.yaml").write_text("zones: [{name: z, trace: nope.json}]\n")
    r = _broker("serve", tmp_path, "--port", "0", "--config", "config.yaml", cwd=cfg)
    assert r.returncode == 1 and f"zones[0].trace: cannot read {cfg / 'nope.json'} (" in r.stderr, r.stderr
