"""A team's failure rules (``failure_rules``) that the start's check let through and that then could not be used: a
sentence with a bad format field raised in the engine at every tick for every job whose log it matched (the job stayed
``launching``, or ``cancelling``, for ever); ``exit_codes: 1`` and ``pattern: 5`` stopped ``serve`` with a traceback;
``phases: failed`` and ``exit_codes: "1"`` were sets of characters that never matched; a YAML syntax error took four
lines. Each is refused at load in one line naming the rule and the key, and a diagnosis that raises anyway falls back
to the shipped rules."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from broker_testing import ADMIN, local_broker, run_until

from broker.auth import Principal
from broker.config import ConfigError, load_settings
from broker.diagnosis import SHIPPED_RULES, Ending, RuleBook, _r, diagnose, rules_from_yaml
from launchers.base import Phase

REPO = Path(__file__).parents[2]


@pytest.mark.parametrize("rule, said", [
    pytest.param('{class: my, sentence: "x {nosuch", pattern: boom}', "[0].sentence: expected '}' before end of string",
                 id="a sentence with an unclosed brace is refused naming the sentence"),
    pytest.param('{class: my, sentence: "x", hint: "a } b", pattern: boom}', "[0].hint: Single '}' encountered",
                 id="a hint with a lone closing brace is refused naming the hint"),
    pytest.param('{class: my, sentence: "x {}", pattern: boom}', "[0].sentence: {} is not a fact's name",
                 id="a positional field is refused"),
    pytest.param('{class: my, sentence: "x {step.real}", pattern: boom}', "[0].sentence: {step.real}: a fact is",
                 id="a field with an attribute is refused"),
    pytest.param('{class: my, sentence: "x {step!z}", pattern: boom}', "[0].sentence: {step!z}: a conversion is",
                 id="an unknown conversion is refused"),
    pytest.param('{class: my, sentence: "x {step:d}", pattern: boom}', "[0].sentence: {step:d}: the format spec",
                 id="a format spec a step not known cannot take is refused"),
    pytest.param("{class: my, sentence: x, exit_codes: 1}", "[0].exit_codes: must be a list of exit codes",
                 id="exit codes given as one number are refused, not a TypeError"),
    pytest.param('{class: my, sentence: x, exit_codes: "1"}', "[0].exit_codes: must be a list of exit codes",
                 id="exit codes given as a string are refused, not a set of its characters"),
    pytest.param('{class: my, sentence: x, exit_codes: ["1"]}', "[0].exit_codes: must be a list of exit codes (integers)"
                 ": '1' is not one", id="an exit code given as a string is refused"),
    pytest.param("{class: my, sentence: x, pattern: 5}", "[0].pattern: must be a regular expression (text), not 5",
                 id="a pattern that is a number is refused, not a TypeError"),
    pytest.param("{class: my, sentence: x, phases: failed}", "[0].phases: must be a list of phases, not 'failed' "
                 "(write [failed])", id="phases given as one string are refused, not a set of its characters"),
    pytest.param("{class: my, sentence: x, phases: [faild]}", "[0].phases: 'faild' is not a phase an attempt ends in",
                 id="a phase no attempt ends in is refused"),
])
def test_a_rule_that_cannot_be_used_is_refused_at_load_naming_the_rule_and_the_key(rule, said):
    with pytest.raises(ValueError) as caught:
        rules_from_yaml(f"- {{class: fine, sentence: ok}}\n- {rule}\n".replace("[0]", "[1]"), where="rules.yaml")
    assert f"rules.yaml{said.replace('[0]', '[1]')}" in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("sentence, filled", [
    pytest.param("x {nosuch} at {step}", "x ? at 30", id="an unknown field fills as a question mark as before"),
    pytest.param("{{literal}} {code!r} {said:.40}", '{literal} 3 : "boom here"', id="doubled braces and specs work"),
    pytest.param("step {step:>5}", "step    30", id="a spec that suits a number and text works"),
])
def test_a_sentence_that_fills_is_taken_as_a_diagnosis_fills_it(sentence, filled):
    rules = rules_from_yaml(f"- {{class: my, sentence: '{sentence}', pattern: boom}}\n")
    got = diagnose(Ending("failed", 3, log_tail="step 30\nboom here\n", step=30), rules + SHIPPED_RULES)
    assert (got.cls, got.sentence) == ("my", filled)


def _broker(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("rule, said", [
    pytest.param('- {class: my, sentence: "x {nosuch", pattern: "boom"}\n',
                 "[0].sentence: expected '}' before end of string", id="a bad sentence"),
    pytest.param("- {class: my, sentence: x, exit_codes: 1}\n", "[0].exit_codes: must be a list", id="exit codes 1"),
    pytest.param("- {class: my, sentence: x, pattern: 5}\n", "[0].pattern: must be a regular expression",
                 id="pattern 5"),
    pytest.param("- {class: [a\n", ": is not valid YAML at line 2, column 1: ", id="a YAML syntax error"),
])
def test_broker_serve_with_such_a_rules_file_stops_in_one_line_naming_the_file(tmp_path, rule, said):
    (tmp_path / "rules.yaml").write_text(rule)
    cfg = tmp_path / "config.yaml"
    cfg.write_text("failure_rules: rules.yaml\n")
    r = _broker(tmp_path, "serve", "--port", "0", "--config", str(cfg))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {cfg}: failure_rules: {tmp_path / 'rules.yaml'}{said}"), r.stderr
    assert "Traceback" not in r.stderr and "<unicode string>" not in r.stderr


def test_a_yaml_error_in_the_rules_names_the_line_and_column_of_the_file_in_one_line(tmp_path):
    (tmp_path / "rules.yaml").write_text("- {class: my, sentence: x}\n- {class: [a\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("failure_rules: rules.yaml\n")
    with pytest.raises(ConfigError) as caught:
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}, config_path=cfg)
    said = caught.value.located()
    assert said.startswith(f"{cfg}: failure_rules: {tmp_path / 'rules.yaml'}: is not valid YAML at line 3, column 1")\
        and "\n" not in said, said


def test_an_edit_with_a_bad_sentence_while_running_is_logged_and_the_last_good_rules_kept(tmp_path, caplog):
    path = tmp_path / "rules.yaml"
    path.write_text("- {class: my, sentence: 'It said boom.', pattern: boom}\n")
    book = RuleBook(path)
    ending = Ending("failed", 1, log_tail="boom\n")
    assert book.diagnose(ending).cls == "my"
    path.write_text('- {class: my, sentence: "x {nosuch", pattern: boom}\n')
    os.utime(path, (1, 1))  # a changed mtime, however fast the edit
    with caplog.at_level(logging.WARNING, logger="broker.diagnosis"):
        assert book.diagnose(ending).sentence == "It said boom."
        assert book.diagnose(ending).sentence == "It said boom."
    said = [r.getMessage() for r in caplog.records if r.name == "broker.diagnosis"]
    assert said == [f"failure_rules: {path} cannot be used, the rules read before are kept: {path}[0].sentence: "
                    "expected '}' before end of string (a fact is written {step}; a brace of the text's own is doubled: "
                    "{{ or }})"], said


def test_a_team_rule_that_raises_falls_back_to_the_shipped_rules_and_is_said_once(tmp_path, caplog):
    path = tmp_path / "rules.yaml"
    path.write_text("- {class: my, sentence: fine, pattern: nothing-matches-this}\n")
    book = RuleBook(path)
    book.rules()
    book._rules = (_r("my", "x {nosuch", pattern="boom"),) + SHIPPED_RULES  # as one the load's checks let through
    ending = Ending("failed", 1, log_tail="boom\nValueError: bad\n")
    with caplog.at_level(logging.WARNING, logger="broker.diagnosis"):
        first, second = book.diagnose(ending), book.diagnose(ending)
    assert first == second and first.cls != "my" and first.cls != "unknown", first
    said = [r.getMessage() for r in caplog.records if r.name == "broker.diagnosis"]
    assert len(said) == 1 and said[0].startswith(f"failure_rules: {path}: a rule raised diagnosing"), said


CONFIG = """
pools:
  - {name: cpu, slots: 4, price_per_slot_hour: "0.36"}
stop_grace_seconds: 1
tick_seconds: 0.05
failure_rules: RULES
"""


def test_a_job_whose_diagnosis_raises_ends_rather_than_staying_launching_for_ever(make_settings, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("- {class: my, sentence: fine, pattern: nothing-matches-this}\n")
    with local_broker(make_settings, tmp_path, CONFIG.replace("RULES", str(rules))) as (service, engine, store,
                                                                                       launcher):
        engine.rules.rules()
        engine.rules._rules = (_r("my", "x {nosuch", pattern="boom"),) + SHIPPED_RULES
        try:
            job = service.submit(Principal("admin", None, admin=True),
                                 {"name": "t", "run": "echo boom; exit 3", "resources": {"cpus": 1},
                                  "broker": {"budget_usd": 1}})[0]
            ended = run_until(engine, store, job.id, {"failed"})
            assert ended.diagnosis["class"] != "my" and "exited with code 3" in ended.diagnosis["sentence"], \
                ended.diagnosis
        finally:
            for run in launcher.runs_dir.glob("j-*"):
                launcher.kill(run.name)
            if engine._housekeeping is not None:
                engine._housekeeping.result(timeout=30)



@pytest.mark.parametrize("phase", [p.value for p in Phase if p.is_final and p is not Phase.SUCCEEDED]
                         + ["budget", "cancelled", "silent", "silent_again"])
def test_every_phase_a_rule_is_asked_about_may_be_named_by_one(phase):
    """The list of phases a rule may name was written by hand; it is now the launchers' final phases and the engine's
    own, so a phase added to either is not refused at start."""
    rules = rules_from_yaml(f"- {{class: my, sentence: 'It ended as {phase}.', phases: [{phase}]}}\n")
    got = diagnose(Ending(phase, 1, log_tail="done\n"), rules + SHIPPED_RULES)
    assert (got.cls, got.sentence) == ("my", f"It ended as {phase}.")


def test_a_rule_for_succeeded_is_refused_saying_a_success_is_never_diagnosed_by_a_rule():
    """A succeeded attempt is said to have succeeded before any rule is looked at: a rule naming that phase would never
    apply, and the refusal says why rather than that no attempt ends so."""
    with pytest.raises(ValueError) as caught:
        rules_from_yaml("- {class: my, sentence: x, phases: [failed, succeeded]}\n", where="rules.yaml")
    assert str(caught.value) == ("rules.yaml[0].phases: 'succeeded' is never diagnosed by a rule (an attempt whose "
                                 "command exited 0 succeeded, whatever its log says)"), str(caught.value)
    rules = rules_from_yaml("- {class: my, sentence: x, pattern: boom}\n")
    assert diagnose(Ending("succeeded", 0, log_tail="boom\n"), rules + SHIPPED_RULES).cls == "succeeded"
