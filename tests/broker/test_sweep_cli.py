"""A sweep from the CLI, as SkyPilot's and Slurm's users run one: each run named at submit (``--name``), the
runs listed and cancelled by the start of their names, several states at once, and a failed run on one line."""

import json
import signal

import pytest

from broker_testing import ADMIN, cli_runner, start_broker

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
teams: {vision: {}, nlp: {}}
"""


@pytest.fixture
def cli(tmp_path):
    # no engine: every job stays queued where the test put it
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'c.db'}", engine="off", config=CONFIG,
                             env_extra={"BROKER_TEAM_TOKENS": '{"vision": "vision-token", "nlp": "nlp-token"}'})
    task = tmp_path / "sweep.yaml"
    task.write_text("name: lr-sweep\nresources: {cpus: 1}\nenvs: {LR: null}\nrun: echo $LR\n")
    yield cli_runner(url), task
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_submit_name_overrides_the_tasks_name_and_the_line_says_the_envs_given(cli):
    run, task = cli
    r = run("submit", str(task), "--name", "sweep-lr0.01", "--env", "LR=0.01", "--budget", "1")
    assert "(sweep-lr0.01) for team default with LR=0.01:" in r.stdout, r.stdout
    assert "note: --name sweep-lr0.01 overrides the task's name 'lr-sweep'" in r.stderr
    job = json.loads(run("--json", "status").stdout)[0]
    assert job["name"] == "sweep-lr0.01"
    # a value from this shell may be a token: named, never echoed; a secret never said at all
    r = run("submit", str(task), "--env", "LR", "--secret", "KEY=s3cr3t-value", "--budget", "1",
            extra_env={"LR": "hidden-0.5"})
    assert "with LR (this shell's):" in r.stdout and "hidden-0.5" not in r.stdout + r.stderr
    assert "s3cr3t" not in r.stdout + r.stderr


@pytest.mark.parametrize("name", ["-x", "bad name", "a/b", "x" * 129])
def test_submit_name_is_held_to_a_tasks_name_rules_before_anything_is_sent(cli, name):
    run, task = cli
    r = run("--json", "submit", str(task), f"--name={name}", "--env", "LR=1", check=False)
    assert r.returncode == 2, r.stderr
    assert "argument --name: " in r.stderr and "letters, digits, '-', '_' or '.'" in r.stderr
    assert json.loads(r.stdout)["field"] == "--name"
    assert json.loads(run("--json", "status").stdout) == []


def test_submit_name_given_twice_is_refused(cli):
    run, task = cli
    r = run("submit", str(task), "--name", "a", "--name", "b", check=False)
    assert r.returncode == 2 and "--name: given twice (a, then b): give it once" in r.stderr
