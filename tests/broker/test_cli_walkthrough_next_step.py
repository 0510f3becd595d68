"""A new user's walk through the README with the CLI: a job that ended but may go on says the one command that
continues it, and ``--help`` says what a command does, not more."""

import io
import json
import os
import signal
import subprocess
import sys

import pytest
from rich.console import Console

from broker import cli as broker_cli
from broker_testing import REPO, cli_runner, start_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""


@pytest.fixture
def cli(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'c.db'}", config=CONFIG)
    yield cli_runner(url), tmp_path
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_status_of_a_job_stopped_by_a_signal_it_did_not_send_names_the_command_that_resumes_it(cli):
    # "resume it to continue from its last checkpoint", and no word of which command: the one click of the
    # product, on a terminal, is the command status names
    run, tmp = cli
    task = tmp / "sigterm.yaml"
    task.write_text("name: node-went-away\nresources: {cpus: 1}\nrun: |\n  echo working; kill -TERM $$; sleep 5\n")
    job_id = json.loads(run("--json", "submit", str(task), "--budget", "1").stdout)["id"]
    wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "failed", timeout=60)
    out = run("status", job_id).stdout
    next_line = [line for line in out.splitlines() if line.strip().startswith("next:")]
    # it saved no checkpoint: the resume starts it over, and says so (it said "from its last checkpoint")
    assert next_line == [f"  next: not the job's own error: `broker resume {job_id}` continues it from the start (it "
                         "saved no checkpoint)"], out
    # the command said is the one that does it, with no --force
    r = run("resume", job_id)
    assert f"{job_id}: queued" in r.stdout, r.stdout


def _shown(job: dict) -> str:
    con = Console(file=io.StringIO(), width=200)
    broker_cli._show_job(con, job)
    return con.file.getvalue()


def _job(state: str, diagnosis: dict | None = None, checkpoint: int | None = 1200) -> dict:
    return {"id": "j-0123456789", "name": "n", "team": "t", "state": state, "reason": "r", "spent": {"usd": "$1.00"},
            "budget": {"usd": "$1.00"}, "diagnosis": diagnosis, "attempt_list": [],
            "last_checkpoint": {"step": checkpoint, "uri": "s3://b/run/step-1200"} if checkpoint is not None else None}


@pytest.mark.parametrize("job, says", [
    (_job("failed", {"class": "gpu_oom", "infrastructure": False, "text": "Out of GPU memory."}),
     "next: a failure of the job's own: fix what made it fail, then `broker resume j-0123456789 --force` continues "
     "it from its last checkpoint (step 1200) with the code as it is then (a workdir on the broker's host is read "
     "anew at each attempt); an uploaded workdir stays as it was: submit again"),
    (_job("failed", None),  # failed before anything diagnosed it: the broker asks for --force too
     "`broker resume j-0123456789 --force`"),
    (_job("stopped_budget", {"class": "budget_stop", "infrastructure": True, "text": "Stopped at its budget."}),
     "next: `broker resume j-0123456789` continues it from its last checkpoint (step 1200) once its budget has room: "
     "`broker budget j-0123456789 <dollars>` raises it"),
    (_job("failed", {"class": "spot_preempted", "infrastructure": True, "text": "Lost."}, checkpoint=None),
     "next: not the job's own error: `broker resume j-0123456789` continues it from the start (it saved no "
     "checkpoint)"),
    ({**_job("failed", {"class": "user_code_error", "infrastructure": False, "text": "KeyError."}),
      "checkpoint_uri": "s3://b/run"},  # submitting again starts over unless it names the job's checkpoints
     "next: a failure of the job's own: fix what made it fail, then `broker resume j-0123456789 --force` continues "
     "it from its last checkpoint (step 1200) with the code as it is then (a workdir on the broker's host is read "
     "anew at each attempt); an uploaded workdir stays as it was: submit again (with broker.checkpoint: s3://b/run "
     "to continue from step 1200)"),
    (_job("failed", {"class": "credentials", "infrastructure": False, "text": "No API key."}),
     "next: `broker resume j-0123456789 --secret NAME` gives it the secret it lacked (no value: this shell's) and "
     "continues it from its last checkpoint (step 1200)"),
], ids=["own failure", "undiagnosed failure", "budget stop", "no checkpoint saved", "own failure, checkpoints kept",
        "credentials it lacked"])
def test_status_of_an_ended_job_that_may_go_on_says_how(job, says):
    assert says in _shown(job)


@pytest.mark.parametrize("secrets, flags, lacked", [
    (["WANDB_API_KEY"], "--secret WANDB_API_KEY", "the secret it lacked"),
    (["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"], "--secret AWS_ACCESS_KEY_ID --secret AWS_SECRET_ACCESS_KEY",
     "the secrets it lacked"),
    ([], "--secret NAME", "the secret it lacked"),  # none named: the placeholder, as from a broker that names none
    (None, "--secret NAME", "the secret it lacked"),
], ids=["one named", "two named", "none named", "no secrets key"])
def test_the_next_step_of_a_job_that_lacked_secrets_names_those_its_diagnosis_asks_for(secrets, flags, lacked):
    """`next: broker resume j-x --secret NAME` left the user to find which secret, when the diagnosis named it."""
    diagnosis = {"class": "credentials", "infrastructure": False, "text": "No API key."}
    if secrets is not None:
        diagnosis["secrets"] = secrets
    assert (f"next: `broker resume j-0123456789 {flags}` gives it {lacked} (no value: this shell's) and continues it "
            "from its last checkpoint (step 1200)") in _shown(_job("failed", diagnosis))


def test_the_next_step_of_a_full_disk_says_what_a_resume_cannot_change():
    """It offered `broker resume --force` alone, which runs on a disk of the same size and fills it again."""
    said = " ".join(_shown(_job("failed", {"class": "disk_full", "infrastructure": False, "text": "The disk is full."}))
                    .split())
    assert ("next: a full disk: once the job writes less there, `broker resume j-0123456789 --force` continues it from "
            "its last checkpoint (step 1200) on a disk of the same size; for a larger one, submit again with a larger "
            "resources.disk_size") in said, said


@pytest.mark.parametrize("state", ["queued", "running", "succeeded", "cancelled"])
def test_status_of_a_job_with_nothing_to_continue_names_no_next_step(state):
    assert "next:" not in _shown(_job(state))


def test_budget_help_does_not_say_a_raise_resumes_a_budget_stopped_job():
    # a raise leaves a budget-stopped job stopped (`broker budget` itself says so): the help said it resumed it
    r = subprocess.run([sys.executable, "-m", "broker.cli", "--help"], capture_output=True, text=True, timeout=60,
                       cwd=REPO, env={**os.environ, "COLUMNS": "200"})
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("budget "))
    assert "raise it to resume" not in line
    assert "raise it, then `broker resume`" in line, line
