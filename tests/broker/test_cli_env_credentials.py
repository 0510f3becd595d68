"""`broker submit task.yaml --env HF_TOKEN=hf_abc` printed "submitted j-… with HF_TOKEN=hf_abc": a credential on the
screen, in a CI log, in a pasted transcript. A name that looks like a credential's is said alone, with a line on
``--secret``, which seals it and hides it in the logs; a sweep's ``--env LR=0.02`` is still said as given.

A real ``broker serve`` (SQLite, one local pool slot) and the CLI as a user runs it, in a subprocess."""

from __future__ import annotations

import pytest

from broker_testing import cli_runner, start_broker, stop_broker

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("credentials")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=CONFIG)
    task = tmp / "task.yaml"
    task.write_text("name: ft\nresources: {cpus: 1}\nrun: 'true'\n")
    yield cli_runner(url), task
    stop_broker(proc, url)


def test_a_credential_given_as_an_env_is_named_not_echoed_and_the_submit_hints_at_secret(broker):
    run, task = broker
    r = run("submit", str(task), "--env", "HF_TOKEN=hf_abc", "--env", "LR=0.02", "--env", "wandb_api_key=wk_123",
            "--env", "SSH_KEY=ssh_456")
    said = r.stdout + r.stderr
    for value in ("hf_abc", "wk_123", "ssh_456"):
        assert value not in said, said
    assert "with HF_TOKEN (value not shown) LR=0.02 wandb_api_key (value not shown) SSH_KEY (value not shown):" \
        in r.stdout, r.stdout
    hint = [line for line in r.stderr.splitlines() if "--secret" in line]
    assert hint == ["note: HF_TOKEN, wandb_api_key, SSH_KEY look like credentials: --secret HF_TOKEN=VALUE "
                    "--secret wandb_api_key=VALUE --secret SSH_KEY=VALUE seals them and hides them in the logs "
                    "(an --env is kept as given)"], r.stderr


@pytest.mark.parametrize("name", ["DB_PASSWORD", "MY_PASSWD", "aws_secret_access_key", "GH_Token"])
def test_each_credential_word_hides_the_value(broker, name):
    run, task = broker
    r = run("submit", str(task), "--env", f"{name}=v4lue_x")
    assert "v4lue_x" not in r.stdout + r.stderr and f"with {name} (value not shown):" in r.stdout, r.stdout
    assert f"--secret {name}=VALUE seals it and hides it in the logs" in r.stderr, r.stderr


def test_a_sweeps_envs_are_said_as_given_with_no_hint(broker):
    run, task = broker
    r = run("submit", str(task), "--env", "LR=0.02", "--env", "SEED=0", "--env", "KEYBOARD=us")
    assert "with LR=0.02 SEED=0 KEYBOARD=us:" in r.stdout and "--secret" not in r.stderr, (r.stdout, r.stderr)


def test_a_credential_given_twice_is_refused_without_its_values(broker):
    run, task = broker
    r = run("submit", str(task), "--env", "HF_TOKEN=hf_one", "--env", "HF_TOKEN=hf_two", check=False)
    assert r.returncode == 1 and "hf_one" not in r.stderr and "hf_two" not in r.stderr, r.stderr
    assert "--env HF_TOKEN: given twice: give it once" in r.stderr, r.stderr


def test_a_count_of_tokens_is_said_and_a_token_under_any_name_is_not(broker):
    """QA: ``MAX_TOKENS=2048`` (an LLM setting) was hidden as a credential, while ``GITHUB_PAT=ghp_…`` and
    ``DB_URL=postgres://u:pw@h/db`` were echoed: name words are whole parts of the name, and a value shaped as a
    service's token or a URL with a password is hidden under any name."""
    run, task = broker
    pat, url = "ghp_" + "a1b2c3d4e5" * 3, "postgres://u:pw0rd@h/db"
    r = run("submit", str(task), "--env", "MAX_TOKENS=2048", "--env", f"GITHUB_PAT={pat}", "--env", f"DB_URL={url}",
            "--env", "RUN_ID=ghp")
    said = r.stdout + r.stderr
    assert pat not in said and "pw0rd" not in said, said
    assert "with MAX_TOKENS=2048 GITHUB_PAT (value not shown) DB_URL (value not shown) RUN_ID=ghp:" in r.stdout, \
        r.stdout
    assert "note: GITHUB_PAT, DB_URL look like credentials" in r.stderr, r.stderr
