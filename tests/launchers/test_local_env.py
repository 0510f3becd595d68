"""What a job on a local pool sees of the broker's environment. It runs as the broker's user, in the broker's
environment (its PATH, its cloud variables), but the broker's own secrets are not the job's: with them any team's
`run: env` printed the admin token, every team's token and the store's password into logs the team reads."""

from __future__ import annotations

import json
import sys

from launchers.local_runner import Runner

BROKERS_OWN = {
    "BROKER_ADMIN_TOKEN": "admin-secret-1234",
    "BROKER_TEAM_TOKENS": '{"vision": "vision-secret-5678"}',
    "BROKER_SECRETS_KEY": "c2VhbGluZy1rZXktb2YtdGhlLWJyb2tlcg==",
    "BROKER_SECRETS_OLD_KEYS": "b2xkLXNlYWxpbmcta2V5LW9mLXRoZS1icm9rZXI=",
    "BROKER_STORE_URL": "redis://:store-password-9012@10.0.0.5:6379/0",
    "BROKER_SLACK_SIGNING_SECRET": "slack-signing-3456",
    "BROKER_SLACK_BOT_TOKEN": "xoxb-slack-bot-7890",
    "BROKER_METRICS_TOKEN": "metrics-secret-2468",
    "BROKER_TOKEN": "cli-token-1357",
}


def test_a_local_job_does_not_inherit_the_brokers_secrets(tmp_path, monkeypatch):
    for name, value in BROKERS_OWN.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOST_SETTING", "kept")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    request = {"attempt_id": "j-1-a1", "task": {"run": "env", "envs": {"MINE": "mine"}, "secrets": {"KEY": "own"}},
               "placement": {}, "envs": {"BROKER_JOB_TOKEN": "the-jobs-own"}}
    (run_dir / "request.json").write_text(json.dumps(request))
    result = Runner(run_dir).run()
    assert result["exit_code"] == 0
    out = (run_dir / "output.log").read_text()
    assert not [name for name, value in BROKERS_OWN.items() if value in out or f"{name}=" in out]
    for line in ("HOST_SETTING=kept", "MINE=mine", "KEY=own", "BROKER_JOB_TOKEN=the-jobs-own"):
        assert line in out  # the host's environment, the task's own and the broker's for the job stay


def test_every_secret_setting_of_the_deploy_doc_is_kept_from_local_jobs():
    import re
    from pathlib import Path

    table = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    secret = set(re.findall(r"^\| `(BROKER_[A-Z_]+)` \| yes \|", table, flags=re.M))
    from launchers.local_runner import BROKER_SECRETS

    assert secret and secret <= set(BROKER_SECRETS)


def _run(tmp_path, task, monkeypatch, home):
    monkeypatch.setenv("HOME", str(home))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "request.json").write_text(json.dumps({"attempt_id": "j-1-a1", "task": task, "placement": {}}))
    return run_dir, Runner(run_dir).run()


def test_a_workdir_under_home_written_with_a_tilde_is_where_the_job_runs(tmp_path, monkeypatch):
    """`workdir: ~/my-project`, as SkyPilot tasks write it, ran in the attempt's own folder: `python train.py` was
    not found there, and the job failed as if its code were wrong."""
    home = tmp_path / "home"
    (home / "my-project").mkdir(parents=True)
    (home / "my-project" / "train.py").write_text("print('trained')\n")
    run_dir, result = _run(tmp_path, {"workdir": "~/my-project", "run": f"{sys.executable} train.py"},
                           monkeypatch, home)
    assert result["exit_code"] == 0, (run_dir / "output.log").read_text()
    assert "trained" in (run_dir / "output.log").read_text()


def test_a_workdir_that_is_not_on_this_host_fails_before_its_setup_and_says_so(tmp_path, monkeypatch):
    """A workdir the host does not have (a typo, another machine's path) ran in the attempt's own folder, where the
    run failed further on, or — a `run` that needs no file of it — succeeded having run none of the user's code."""
    marker = tmp_path / "ran"
    run_dir, result = _run(tmp_path, {"workdir": "~/no-such-project", "setup": f"touch {marker}",
                                      "run": f"touch {marker}"}, monkeypatch, tmp_path / "home")
    assert (result["exit_code"], result["step"]) == (1, "setup") and not marker.exists()
    assert "workdir ~/no-such-project: not run: there is no such directory on this host" in \
        (run_dir / "output.log").read_text()
