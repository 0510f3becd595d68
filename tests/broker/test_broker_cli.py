"""The CLI against a real broker: human output, --json, and one-line errors with a non-zero exit."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from broker_testing import ADMIN, POOL_AND_SPOT, REPO, cli_runner, start_broker, wait_for
from testports import free_port

CONFIG = POOL_AND_SPOT


@pytest.fixture
def cli(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'c.db'}", config=CONFIG)
    yield cli_runner(url), tmp_path
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_submit_status_logs_events_through_the_cli(cli):
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("name: hi\nresources: {cpus: 1}\nrun: echo hello-from-cli; sleep 1.1\n")  # a second costs something
    out = run("submit", str(task), "--budget", "2", "--wait")
    assert "hello-from-cli" in out.stdout and "succeeded" in out.stdout
    jobs = json.loads(run("--json", "status").stdout)
    assert jobs[0]["state"] == "succeeded" and jobs[0]["budget"]["usd"] == "$2.00"
    job_id = jobs[0]["id"]
    assert [e["event"] for e in json.loads(run("--json", "events", job_id).stdout)][-1] == "succeed"
    # the client options also go after the command, where they win over those given before it
    assert json.loads(run("status", job_id, "--json").stdout)["id"] == job_id
    r = run("--url", "http://127.0.0.1:9", "--json", "events", job_id, "--url", run.url, check=False)
    assert r.returncode == 0 and json.loads(r.stdout)[-1]["event"] == "succeed", r.stderr
    r = run("--url", run.url, "events", job_id, "--url", "http://127.0.0.1:9", check=False)
    assert r.returncode == 1 and "cannot reach the broker at http://127.0.0.1:9" in r.stderr
    assert "hello-from-cli" in run("logs", job_id).stdout
    # one job at 80 columns (a default terminal, or piped): each attempt whole on its lines
    env_80 = {**os.environ, "BROKER_URL": run.url, "BROKER_TOKEN": ADMIN, "COLUMNS": "80"}
    shown = subprocess.run([sys.executable, "-m", "broker.cli", "status", job_id], env=env_80, cwd=REPO,
                           capture_output=True, text=True, timeout=60).stdout
    line = next(x for x in shown.splitlines() if x.strip().startswith("attempt 1:"))
    assert "succeeded on onprem" in line and f"cost {jobs[0]['spent']['usd']}" in line, shown
    # what it cost: the team's window, and the job attempt by attempt
    report = json.loads(run("costs", "--json").stdout)
    assert report["top_jobs"][0]["id"] == job_id and report["totals"]["spent"] == jobs[0]["spent"]
    out = run("costs", "--period", "24h").stdout
    assert "all teams" in out and job_id in out and f"spent {jobs[0]['spent']['usd']}" in out
    out = run("costs", job_id).stdout
    assert "succeeded" in out and "onprem" in out and "local" in out
    r = run("costs", "--period", "3d", check=False)
    assert r.returncode == 1 and r.stderr.strip() == ("error [422]: period: must be one of 24h (or 1d), 7d (or 1w, 168h), "
                                                      "30d (or 720h), 90d (or 2160h)")


def test_raising_the_budget_of_a_budget_stopped_job_says_how_to_resume_it(cli):
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("name: spender\nresources: {cpus: 1}\nrun: sleep 600\n")
    job_id = json.loads(run("--json", "submit", str(task), "--budget", "0.001").stdout)["id"]  # 10 s on the pool
    wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "stopped_budget", timeout=60)
    spent = json.loads(run("--json", "status", job_id).stdout)["spent"]["usd"]
    out = run("budget", job_id, "1").stdout
    # it saved no checkpoint (sleep 600): "from its last checkpoint" was said of it all the same
    assert out.strip() == f"{job_id}: budget $1.00 (spent {spent}); stopped at its budget: `broker resume {job_id}` " \
                          "continues it from the start (it saved no checkpoint)", out
    out = run("resume", job_id).stdout
    assert job_id in out
    out = run("budget", job_id, "2").stdout  # queued or running again: nothing to add
    assert out.strip().endswith(")") and "resume" not in out, out


REQUIRED_ENVS = """
name: needs-token
envs:
  MODEL: llama
  HF_TOKEN: null
secrets:
  WANDB_API_KEY: null
workdir: .
file_mounts:
  /data/train.txt: ./data/train.txt
  /remote: {source: ./data, mode: COPY}
  /bucket: s3://some-bucket/data
  /ckpt: broker:checkpoint
run: echo "model=$MODEL token=$HF_TOKEN wandb=$WANDB_API_KEY cwd=$(pwd)"
"""


def test_submit_wait_with_json_writes_the_ended_job_as_json_and_the_output_to_stderr(cli):
    """`broker --json submit t.yaml --wait` wrote the job's output and the human summary on stdout: a script's
    json.loads of it failed."""
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("name: hi\nresources: {cpus: 1}\nrun: echo hello-from-cli\n")
    out = run("--json", "submit", str(task), "--budget", "2", "--wait")
    assert json.loads(out.stdout)["state"] == "succeeded" and "hello-from-cli" in out.stderr, out.stdout
    task.write_text("name: hi\nresources: {cpus: 1}\nrun: exit 3\n")
    out = run("--json", "submit", str(task), "--budget", "2", "--wait", check=False)
    assert out.returncode == 3 and json.loads(out.stdout)["state"] == "failed", out.stdout  # 3: the job failed


def test_required_envs_and_secrets_are_given_at_submit_as_with_sky_launch(cli):
    run, tmp = cli
    project = tmp / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.txt").write_text("x")
    (project / "task.yaml").write_text(REQUIRED_ENVS)
    r = run("submit", "task.yaml", "--budget", "1", cwd=project, check=False)
    # before: accepted, and the job ran with the token unset
    assert r.returncode == 1 and r.stderr.strip().startswith("error [422]: envs.HF_TOKEN: has no value"), r.stderr
    assert "--env HF_TOKEN=" in r.stderr
    r = run("submit", "task.yaml", "--budget", "1", "--env", "HF_TOKEN=hf_x", cwd=project, check=False)
    assert r.returncode == 1 and "secrets.WANDB_API_KEY: has no value" in r.stderr and "--secret" in r.stderr
    out = run("submit", "task.yaml", "--budget", "1", "--env", "HF_TOKEN=hf_x", "--secret", "WANDB_API_KEY", "--wait",
              cwd=project, extra_env={"WANDB_API_KEY": "w-from-shell"}).stdout
    # the secret given from the shell reached the job (unset, "wandb=" printed nothing); its value is hidden in the logs
    assert f"model=llama token=hf_x wandb=*** cwd={project}" in out
    # relative local sources are the submitter's, as `sky launch` reads them, not the broker's directory
    (request,) = (tmp / "data" / "runs").glob("*/request.json")
    mounts = json.loads(request.read_text())["task"]["file_mounts"]
    assert mounts == {"/data/train.txt": str(project / "data" / "train.txt"),
                      "/remote": {"source": str(project / "data"), "mode": "COPY"},
                      "/bucket": "s3://some-bucket/data", "/ckpt": "broker:checkpoint"}
    r = run("submit", "task.yaml", "--env", "BROKER_TEST_UNSET_VARIABLE", cwd=project, check=False)
    assert r.returncode == 1 and "--env BROKER_TEST_UNSET_VARIABLE: no value given and none in this shell" in r.stderr


def test_a_workdir_under_home_runs_there_and_one_not_here_is_refused_before_the_submit(cli):
    """`workdir: ~/my-project` ran in the attempt's own folder (train.py not found), and a workdir with a typo was
    accepted and run from there too: `sky launch` expands the first and refuses the second."""
    run, tmp = cli
    home = tmp / "home"
    (home / "my-project").mkdir(parents=True)
    (home / "my-project" / "train.py").write_text("import os; print('trained in', os.getcwd())\n")
    task = tmp / "t.yaml"
    task.write_text("name: tilde\nworkdir: ~/my-project\nrun: python train.py\n")
    out = run("submit", str(task), "--budget", "1", "--wait", extra_env={"HOME": str(home)}).stdout
    assert f"trained in {home / 'my-project'}" in out, out
    task.write_text("name: typo\nworkdir: ~/my-projetc\nrun: python train.py\n")
    r = run("submit", str(task), "--budget", "1", check=False, extra_env={"HOME": str(home)})
    assert r.returncode == 1 and r.stderr.strip() == "error: workdir ~/my-projetc: no such directory", r.stderr
    assert [j["name"] for j in json.loads(run("--json", "status").stdout)] == ["tilde"]  # nothing submitted


def test_a_deadline_yaml_reads_as_a_time_is_sent_as_its_iso_text(cli):
    """`deadline: 2026-12-01T18:00:00Z` unquoted is a YAML timestamp: the CLI died with a traceback ("datetime is not
    JSON serializable"), where the same YAML posted to the API was read. A time without its timezone is still
    refused, as the broker refuses it."""
    from datetime import datetime, timedelta, timezone

    run, tmp = cli
    when = (datetime.now(timezone.utc) + timedelta(days=2)).replace(microsecond=0)
    task = tmp / "t.yaml"
    task.write_text(f"run: echo hi\nbroker: {{deadline: {when:%Y-%m-%dT%H:%M:%S}Z}}\n")
    assert json.loads(run("--json", "submit", str(task)).stdout)["deadline"] == f"{when:%Y-%m-%dT%H:%M:%S}Z"
    task.write_text(f"run: echo hi\nbroker: {{deadline: {when:%Y-%m-%d %H:%M:%S}}}\n")
    r = run("submit", str(task), check=False)
    assert r.returncode == 1 and "broker.deadline: has no timezone" in r.stderr and "Traceback" not in r.stderr


def test_the_cli_finds_a_broker_served_on_broker_port_without_broker_url(cli):
    run, tmp = cli
    port = run.url.rsplit(":", 1)[1]
    env = {k: v for k, v in os.environ.items() if k != "BROKER_URL"}
    env.update(BROKER_PORT=port, BROKER_TOKEN=ADMIN, COLUMNS="200")  # as `BROKER_PORT=... broker serve` was started
    r = subprocess.run([sys.executable, "-m", "broker.cli", "--json", "status"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr


def test_every_option_the_cli_sends_as_a_query_parameter_is_one_the_broker_takes(cli):
    """The broker refuses a query parameter a route does not take (a 422 naming it): each CLI option that becomes
    one, against the real broker, is answered by its route (a job it does not hold is that route's 404)."""
    run, _ = cli
    for args in (["status", "--state", "queued", "--team", "default"], ["queue", "--team", "default"],
                 ["costs", "--period", "24h", "--team", "default"],
                 ["costs", "--since", "2026-11-01", "--until", "2026-11-02T00:00Z"]):
        r = run("--json", *args, check=False)
        assert r.returncode == 0 and "error" not in json.loads(r.stdout), (args, r.stderr)
    for args in (["logs", "j-nope", "--attempt", "2"], ["resume", "j-nope", "--force"], ["ondemand", "j-nope", "--force"]):
        r = run(*args, check=False)
        assert r.returncode == 1 and r.stderr.strip() == "error [404]: no job j-nope", (args, r.stderr)


def test_errors_are_one_line_with_a_non_zero_exit(cli):
    run, tmp = cli
    r = run("status", "j-nope", check=False)
    assert r.returncode == 1 and r.stderr.strip() == "error [404]: no job j-nope"
    r = run("submit", str(tmp / "missing.yaml"), check=False)
    assert r.returncode == 1 and "no such file" in r.stderr and "Traceback" not in r.stderr
    bad = tmp / "bad.yaml"
    bad.write_text("run: x\nbroker: {budget_usd: nope}\n")
    r = run("submit", str(bad), check=False)
    assert r.returncode == 1 and "broker.budget_usd" in r.stderr
    broken = tmp / "broken.yaml"
    broken.write_text("run: x\nresources: {cpus: 1+\n")
    r = run("submit", str(broken), check=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: the task is not valid YAML at line 3"), r.stderr
    r = run("submit", str(tmp), check=False)
    assert r.returncode == 1 and "is a directory" in r.stderr and "Traceback" not in r.stderr
    r = run("--url", run.url.removeprefix("http://"), "status", check=False)
    assert r.returncode == 1 and "must start with http:// or https://" in r.stderr and "Traceback" not in r.stderr


def test_a_task_file_is_read_as_the_broker_reads_one(cli):
    """An unquoted YAML deadline time, or a date elsewhere, made `broker submit` a traceback (json could not write
    it); a key given twice was sent as the last one alone."""
    run, tmp = cli
    soon = (datetime.now(timezone.utc) + timedelta(days=2)).strftime("%Y-%m-%dT18:00:00Z")
    timed = tmp / "timed.yaml"
    timed.write_text(f"run: echo hi\nbroker:\n  deadline: {soon}\n")
    job = json.loads(run("--json", "submit", str(timed)).stdout)
    assert job["deadline"] == soon
    for text, field in [("run: echo hi\nenvs: {A: 2026-01-01}\n", "envs.A"),
                        ("run: echo hi\nbroker: {budget_usd: 1, budget_usd: 30}\n", "broker.budget_usd")]:
        bad = tmp / "bad.yaml"
        bad.write_text(text)
        r = run("--json", "submit", str(bad), check=False)
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        assert json.loads(r.stdout)["field"] == field
    assert [j["id"] for j in json.loads(run("--json", "status").stdout)] == [job["id"]]


def test_with_json_an_error_is_also_one_json_object_on_stdout(cli):
    """`broker --json submit ... | jq` read nothing when the broker refused: the error went to stderr alone."""
    run, tmp = cli
    bad = tmp / "bad.yaml"
    bad.write_text("run: x\nbroker: {budget_usd: nope}\n")
    r = run("--json", "submit", str(bad), check=False)
    assert r.returncode == 1 and json.loads(r.stdout) == {
        "error": "broker.budget_usd: must be an amount of dollars such as 20 or \"12.50\"", "status": 422,
        "field": "broker.budget_usd"}, r.stdout
    assert r.stderr.startswith("error [422]: broker.budget_usd: must be"), r.stderr  # the human line stays
    r = run("status", "j-nope", "--json", check=False)
    assert r.returncode == 1 and json.loads(r.stdout) == {"error": "no job j-nope", "status": 404, "field": "job_id"}, r.stdout
    r = run("--json", "submit", str(tmp / "missing.yaml"), check=False)  # refused here, before any request
    assert r.returncode == 1 and json.loads(r.stdout) == {"error": f"{tmp / 'missing.yaml'}: no such file"}, r.stdout
    r = run("status", "j-nope", check=False)
    assert r.returncode == 1 and r.stdout == "", r.stdout  # without --json, stdout stays empty


def test_with_json_a_refusal_of_one_option_names_it_as_the_field(cli):
    """The README promises `field` "when one option or field is to blame": refusals of the CLI's own options
    came without one (`--period` beside a job id, `--env NAME` unset here, `--attempt zero`)."""
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("run: echo hi\n")
    for argv, code, field in [(["costs", "j-nope", "--period", "7d"], 2, "--period"),
                              (["submit", str(task), "--env", "SPOT_BROKER_TEST_UNSET_VAR"], 1, "--env"),
                              (["logs", "j-nope", "--attempt", "zero"], 2, "--attempt"),
                              (["submit", str(task), "--budegt", "5", "--dedline", "2h"], 2, None)]:
        r = run("--json", *argv, check=False)
        assert r.returncode == code and "Traceback" not in r.stderr, r.stderr
        assert json.loads(r.stdout).get("field") == field, (argv, r.stdout)
    assert json.loads(run("--json", "status").stdout) == []  # nothing was submitted


def test_a_misspelt_option_is_named_with_the_one_meant_and_with_json_is_one_json_object_too(cli):
    """`broker submit t.yaml --budegt 5` said "unrecognized arguments" under the top-level usage, and with --json
    printed nothing on stdout: a script read an empty answer."""
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("run: echo hi\n")
    r = run("submit", str(task), "--budegt", "5", check=False)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("usage: broker submit"), r.stderr
    assert r.stderr.splitlines()[-1] == "broker submit: error: unrecognized arguments: --budegt 5 (did you mean --budget?)"
    r = run("--json", "submit", str(task), "--budegt=5", "--dedline", "2h", check=False)
    assert r.returncode == 2 and json.loads(r.stdout) == {"error": "unrecognized arguments: --budegt=5 --dedline 2h "
                                                          "(did you mean --budget for --budegt, --deadline for --dedline?)"}
    r = run("logs", "--json", check=False)  # argparse's own errors too
    assert r.returncode == 2 and json.loads(r.stdout) == {"error": "the following arguments are required: id"}
    assert json.loads(run("--json", "status").stdout) == []  # nothing was submitted


def test_a_local_admin_token_another_broker_wrote_is_named_with_how_to_point_the_cli_at_the_right_one(cli):
    """A first-day user who started `broker serve` with BROKER_DATA_DIR in one shell and ran the CLI in another
    got only 'the token is not valid': the CLI had sent the admin token of the default data dir, and said not so."""
    run, tmp = cli
    other = tmp / "other-data"
    other.mkdir()
    (other / "admin-token").write_text("a-token-another-broker-wrote\n")
    r = cli_runner(run.url, token=None)("status", check=False, extra_env={"BROKER_DATA_DIR": str(other)})
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"the token sent is the admin token in {other / 'admin-token'}" in r.stderr, r.stderr
    assert "set BROKER_DATA_DIR" in r.stderr and "BROKER_TOKEN" in r.stderr, r.stderr
    r = run("status", check=False, extra_env={"BROKER_TOKEN": "not-a-token", "BROKER_DATA_DIR": str(other)})
    assert r.returncode == 1 and "admin-token" not in r.stderr, r.stderr  # a token given is not blamed on the file


def test_a_refused_resume_names_the_cli_flag_that_forces_it(cli):
    run, tmp = cli
    task = tmp / "fails.yaml"
    task.write_text("name: f\nresources: {cpus: 1}\nrun: |\n  echo 'ValueError: bad label' >&2; exit 3\n")
    out = run("submit", str(task), "--budget", "2", "--wait", check=False)
    assert out.returncode != 0 and "failed" in out.stdout + out.stderr, out.stdout + out.stderr
    job_id = json.loads(run("--json", "status").stdout)[0]["id"]
    r = run("resume", job_id, check=False)
    assert r.returncode == 1 and f"with --force (broker resume {job_id} --force)" in r.stderr, r.stderr
    assert json.loads(run("--json", "resume", job_id, "--force").stdout)["state"] == "queued"


def test_a_submit_priced_per_hour_says_how_long_a_small_budget_runs_it(cli):
    """A $0.002 budget with no expected_hours was admitted at "$0.36/h" and stopped at it within seconds: the user
    learnt only then what it paid for. The submit says it; a budget that runs it a day or more says nothing more."""
    run, tmp = cli
    task = tmp / "short.yaml"
    task.write_text("name: short\nresources: {cpus: 1}\nrun: sleep 600\n")
    out = run("submit", str(task), "--budget", "0.002").stdout
    # each tier it may run on: the pool may be full, and spot runs it for less time
    # until the engine's budget stop: the clean stop (6 s here) is kept out of what the budget pays for
    assert "— the budget runs it for about 14 s on on-prem or 10 s on spot until its budget stop, a clean stop kept " \
           "out of it (give broker.expected_hours for an estimate of the whole run)" in out, out
    out = run("submit", str(task), "--budget", "0.50").stdout
    assert "the budget runs it for about 1.3 h on on-prem or 1.1 h on spot" in out, out
    out = run("submit", str(task), "--budget", "9").stdout  # 25 h on the pool, 21 h on spot: both said
    assert "the budget runs it for about 24.9 h on on-prem or 21.1 h on spot" in out, out
    out = run("submit", str(task), "--budget", "11").stdout  # over a day on each
    assert "runs it for" not in out, out
    task.write_text("name: long\nresources: {cpus: 1}\nrun: sleep 600\nbroker: {expected_hours: 0.01}\n")
    assert "runs it for" not in run("submit", str(task), "--budget", "0.05").stdout
    for job in json.loads(run("--json", "status").stdout):
        run("cancel", job["id"])


def test_lowering_a_running_jobs_budget_near_its_spend_says_how_long_it_runs_now(cli):
    """`broker budget J 0.0012` printed "budget $0.0012 (spent $0.0003)" and the job stopped at it a second later,
    unannounced. A running job's new budget that runs it under an hour says how long, and that it stops then."""
    run, tmp = cli
    task = tmp / "long.yaml"
    task.write_text("name: long\nresources: {cpus: 1}\nrun: sleep 600\n")
    job_id = json.loads(run("--json", "submit", str(task), "--budget", "5").stdout)["id"]
    try:
        wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "running", timeout=60)
        high = run("budget", job_id, "4").stdout
        assert "runs it" not in high, high  # 11 h at $0.36/h: nothing to say
        spent = Decimal(json.loads(run("--json", "status", job_id).stdout)["spent"]["micros"]) / 10**6
        low = run("budget", job_id, str(spent + Decimal("0.004"))).stdout
        assert "; at $0.36/h the budget left runs it about " in low and " s more, a clean stop included: it stops " \
               "at its budget then (resumable once the budget is raised)" in low, low
    finally:
        run("cancel", job_id)


def test_an_idempotency_key_says_what_it_did(cli):
    run, tmp = cli
    first, second = tmp / "first.yaml", tmp / "second.yaml"
    first.write_text("name: first\nrun: echo one\n")
    second.write_text("name: second\nrun: echo two\n")
    made = run("submit", str(first), "--idempotency-key", "k1").stdout
    assert made.startswith("submitted j-")
    again = run("submit", str(first), "--idempotency-key", "k1").stdout
    assert again.startswith("already submitted with this idempotency key: j-") and "nothing new" in again
    r = run("submit", str(second), "--idempotency-key", "k1", check=False)
    assert r.returncode == 1
    assert "was already used for job j-" in r.stderr and "different task" in r.stderr


def _queue_behind_a_blocker(run, tmp, blocker_yaml):
    """Run a job that fills the one-slot pool; return it and the path of a task that must wait for it."""
    blocker = tmp / "blocker.yaml"
    blocker.write_text(blocker_yaml)
    first = json.loads(run("--json", "submit", str(blocker)).stdout)
    wait_for(lambda: json.loads(run("--json", "status", first["id"]).stdout)["state"] == "running", timeout=30)
    nxt = tmp / "next.yaml"
    nxt.write_text("name: next\nresources: {cpus: 1, use_spot: false}\nrun: echo ran-after\n")  # the pool only
    return first, nxt


def _status_table(run, columns):
    env = {**os.environ, "BROKER_URL": run.url, "BROKER_TOKEN": ADMIN, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "broker.cli", "status"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60).stdout


def test_waiting_for_a_queued_job_says_why_it_waits_and_ids_stay_whole_at_80_columns(cli):
    run, tmp = cli
    go = tmp / "go"  # the blocker holds the pool until the waiting submit has said why it waits (not a guess in s)
    first, nxt = _queue_behind_a_blocker(
        run, tmp, f"name: blocker\nresources: {{cpus: 1}}\nrun: while [ ! -e {go} ]; do sleep 0.1; done\n")
    out, err = tmp / "wait.out", tmp / "wait.err"
    env = {**os.environ, "BROKER_URL": run.url, "BROKER_TOKEN": ADMIN, "COLUMNS": "200"}
    with open(out, "w") as stdout, open(err, "w") as stderr:
        waiting = subprocess.Popen([sys.executable, "-m", "broker.cli", "submit", str(nxt), "--wait"], env=env,
                                   cwd=REPO, stdout=stdout, stderr=stderr, text=True)
    try:
        wait_for(lambda: "full right now" in err.read_text(), timeout=60)
        go.touch()
        assert waiting.wait(60) == 0, err.read_text()
    finally:
        go.touch()
        if waiting.poll() is None:
            waiting.kill()
    assert "ran-after" in out.read_text()
    assert "queued, position 1 in the queue" in err.read_text(), err.read_text()
    table = _status_table(run, 80)
    assert first["id"] in table, table


def _on_a_terminal(run, columns: int, *args: str) -> str:
    """What ``broker ARGS`` shows on a terminal ``columns`` wide (a real pty; no COLUMNS in its environment)."""
    import fcntl
    import pty
    import re
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env.update(BROKER_URL=run.url, BROKER_TOKEN=ADMIN, TERM="xterm-256color")
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", *args], stdout=slave, stderr=subprocess.DEVNULL,
                            env=env, cwd=REPO)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the command ended and closed its side
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(60)
    os.close(master)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r\n", "\n")


def test_the_state_and_the_id_stay_whole_on_an_80_column_terminal_and_every_column_when_piped(cli):
    run, tmp = cli
    first, nxt = _queue_behind_a_blocker(
        run, tmp, "name: a-rather-long-job-name\nresources: {cpus: 1}\nrun: sleep 60\nbroker: {expected_hours: 0.5}\n")
    second = json.loads(run("--json", "submit", str(nxt), "--budget", "100").stdout)
    wait_for(lambda: json.loads(run("--json", "status", second["id"]).stdout).get("estimated_start"), timeout=30)
    # a terminal 80 wide: no line past it, the id and the state whole on the job's first line, as are the amounts;
    # the columns left out are named
    shown = _on_a_terminal(run, 80, "status")
    assert all(len(line) <= 80 for line in shown.splitlines()), shown
    rows = {j: next(line for line in shown.splitlines() if j in line) for j in (first["id"], second["id"])}
    assert " running " in rows[first["id"]] and " queued " in rows[second["id"]] and "$100.00" in rows[second["id"]], shown
    assert "without: starts ~" in shown, shown
    events = _on_a_terminal(run, 80, "events", first["id"])
    assert all(len(line) <= 80 for line in events.splitlines()), events
    assert any(" running " in line for line in events.splitlines()), events
    # piped (COLUMNS=80 or not): every column, each job on one line, so `broker status | grep running` finds it
    piped = _status_table(run, 80)
    line = next(x for x in piped.splitlines() if first["id"] in x)
    assert " running " in line and "a-rather-long-job-name" in line, piped
    line = next(x for x in piped.splitlines() if second["id"] in x)
    assert " queued " in line and "$100.00" in line and _minute_z(json.loads(run('--json', 'status', second['id']).stdout)['estimated_start']) in line, piped
    assert "without:" not in piped
    run("cancel", first["id"])


def test_the_status_table_says_roughly_when_a_waiting_job_starts(cli):
    run, tmp = cli
    first, nxt = _queue_behind_a_blocker(
        run, tmp, "name: blocker\nresources: {cpus: 1}\nrun: sleep 60\nbroker: {expected_hours: 0.5}\n")
    second = json.loads(run("--json", "submit", str(nxt)).stdout)
    waiting = wait_for(lambda: (j := json.loads(run("--json", "status", second["id"]).stdout)).get("estimated_start") and j,
                       timeout=30)
    table = _status_table(run, 160)
    row = next(line for line in table.splitlines() if second["id"] in line)
    start = waiting["estimated_start"]  # about 30 min from now, in UTC
    assert _minute_z(start) in row, table
    run("cancel", first["id"])


def test_the_queue_lists_the_waiting_jobs_in_the_order_they_start(cli):
    run, tmp = cli
    assert run("queue").stdout.strip() == "Nothing is waiting."
    # `broker status` with nothing to list printed an empty table's borders
    assert run("status").stdout.strip() == "No jobs yet: submit one with `broker submit task.yaml`."
    assert run("status", "--state", "failed").stdout.strip() == "No failed jobs."
    first, nxt = _queue_behind_a_blocker(
        run, tmp, "name: blocker\nresources: {cpus: 1}\nrun: sleep 60\nbroker: {expected_hours: 0.5}\n")
    ids = [json.loads(run("--json", "submit", str(nxt)).stdout)["id"] for _ in range(2)]
    # the logs of a job that has not started said nothing at all, and exited 0: it looked hung, or lost
    r = run("logs", ids[1])
    assert r.stdout == "" and f"[{ids[1]} queued, position 2 in the queue" in r.stderr, r.stderr
    assert "no output yet" in r.stderr and "broker logs -f" in r.stderr, r.stderr
    doomed = json.loads(run("--json", "submit", str(nxt)).stdout)["id"]  # cancelled before it runs: never will
    run("cancel", doomed)
    r = run("logs", doomed)
    assert "it ended before any attempt ran" in r.stderr and "broker logs -f" not in r.stderr, r.stderr
    assert run("costs", doomed).stdout.rstrip().endswith("no attempt has run, so it has cost nothing")
    # the first follows the blocker's expected end; the second follows a job of unknown length: no estimate
    queued = wait_for(lambda: len(q := json.loads(run("--json", "queue").stdout)) == 2 and q[0]["estimated_start"]
                      and q, timeout=30)
    assert [(j["id"], j["queue_position"]) for j in queued] == [(ids[0], 1), (ids[1], 2)]
    table = run("queue", extra_env={"COLUMNS": "200"}).stdout
    rows = [line for line in table.splitlines() if ids[0] in line or ids[1] in line]
    assert [ids[0] in rows[0], ids[1] in rows[1]] == [True, True], table
    assert first["id"] not in table and _minute_z(queued[0]['estimated_start']) in rows[0], table
    run("cancel", first["id"])


def submitted(cli, name: str, task: str, until: str, timeout: float = 30) -> dict:
    """Submit ``task`` (YAML text) with a $1 budget through the CLI and wait until the job is ``until``: its view."""
    run, tmp = cli
    path = tmp / f"{name}.yaml"
    path.write_text(task)
    job = json.loads(run("--json", "submit", str(path), "--budget", "1").stdout)
    return wait_for(lambda: (j := json.loads(run("--json", "status", job["id"]).stdout))["state"] == until and j,
                    timeout=timeout)


def test_fault_injection_preempts_a_job_on_a_simulated_zone(cli):
    run, tmp = cli
    job = submitted(cli, "spot", "name: s\nresources: {accelerators: A10G:1}\n"
                    "run: trap 'echo notice; exit 143' TERM; echo armed; for i in $(seq 300); do sleep 0.1; done\n",
                    "running")
    wait_for(lambda: "armed" in run("logs", job["id"]).stdout, timeout=30)  # bash has set its trap
    out = run("fault", "preempt", job["id"])
    assert out.stdout.startswith(f"preempt {job['id']}-a1: done")
    after = wait_for(lambda: (j := json.loads(run("--json", "status", job["id"]).stdout))["state"] == "queued"
                     and "blocked" in j["reason"] and j, timeout=30)
    assert after["attempt_list"][0]["state"] == "preempted"  # and its only zone is now blocked for this job
    assert "notice" in run("logs", job["id"], "--attempt", "1").stdout
    assert run("cancel", job["id"]).returncode == 0
    r = run("fault", "zone", "sim-b", "--down", check=False)  # a zone name mistyped: the zones there are
    assert r.returncode == 1 and r.stderr.strip() == "error [404]: zone: no simulated zone 'sim-b' (zones: sim-a)"


def test_fault_preempt_is_refused_for_a_job_on_an_on_prem_pool(cli):
    """`broker fault preempt` on a job on a pool was carried out, and the job's diagnosis then read "Spot capacity
    was preempted at step 43 in local": a pool has no spot capacity to take back. It is refused, saying why."""
    run, tmp = cli
    job = running = submitted(cli, "pool", "name: p\nresources: {cpus: 1}\n"
                              "run: for i in $(seq 100); do sleep 0.1; done\n", "running")
    assert running["attempt_list"][0]["placement"]["tier"] == "onprem"
    r = run("fault", "preempt", job["id"], check=False)
    assert r.returncode == 1 and r.stderr.strip() == (
        "error [409]: attempt 1 runs on the on-prem pool local: only a simulated spot zone's capacity is preempted "
        "(the kill fault simulates a lost node)"), r.stderr
    after = json.loads(run("--json", "status", job["id"]).stdout)
    assert after["state"] == "running" and after["attempt_list"][0]["state"] == "running", after
    assert run("cancel", job["id"]).returncode == 0


def test_logs_attempt_counts_from_one_and_follow_starts_at_the_attempt_given(cli):
    """`broker logs J --attempt 0` showed the newest attempt (0 read as "none given"), and `-f --attempt 1`
    ignored the attempt and followed only the newest: a retried job's first, failed attempt could not be followed."""
    run, tmp = cli
    job = submitted(cli, "retry", "name: r\nresources: {cpus: 1}\nrun: echo \"out of attempt $BROKER_ATTEMPT\"; "
                    "test \"$BROKER_ATTEMPT\" -ge 2\nbroker: {retry: {max_restarts_on_errors: 1}}\n", "succeeded",
                    timeout=60)
    following = run("logs", job["id"], "-f", "--attempt", "1")
    followed = following.stdout
    assert "out of attempt 1" in followed and "out of attempt 2" in followed, followed
    assert followed.index("out of attempt 1") < followed.index("out of attempt 2")
    # where one attempt's output ends and the next one's begins is said (the two ran on as one log)
    assert f"[{job['id']} attempt 1 failed on onprem " in following.stderr, following.stderr
    assert "; attempt 2 follows]" in following.stderr, following.stderr
    r = run("logs", job["id"], "--attempt", "0", check=False)
    assert r.returncode == 2 and "attempts count from 1" in r.stderr and not r.stdout, r.stderr


@pytest.mark.parametrize(
    "launcher, catalog, zones, message",
    [
        pytest.param("skypilot", "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,Region,"
                     "AvailabilityZone\ng5.xlarge,A10G,1,4,16,NaN,0.3,us-east-1,use1-az1\n", "[]",
                     "line 2: Price 'NaN' is not a price in dollars per hour",
                     id="a SkyPilot catalog with a NaN price stops serve at start naming the file, line and column"),
        pytest.param("local", "not,a,catalog\n", "[{name: sim-a, tier: spot, instance_type: g5.xlarge}]",
                     "not a SkyPilot v8 vms.csv: no column InstanceType",
                     id="a catalog with another header stops serve at start when a simulated zone is priced from it"),
        pytest.param("local", None, "[{name: sim-x, tier: spot, instance_type: g9.mega}]",
                     "zones[0].instance_type: 'g9.mega' is not an instance type of the aws price table; set price_per_hour",
                     id="a simulated zone with no price stops serve at start instead of failing each submit with a 500"),
    ],
)
@pytest.mark.parametrize("command", ["serve", "worker"])
def test_a_price_table_that_cannot_be_read_stops_the_broker_at_start_in_one_line(tmp_path, command, launcher, catalog,
                                                                                 zones, message):
    home = tmp_path / "home"
    (home / ".sky" / "catalogs" / "v8" / "aws").mkdir(parents=True)
    if catalog is not None:
        (home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv").write_text(catalog)
    config = tmp_path / "config.yaml"
    config.write_text(f"pools: [{{name: p, slots: 1, price_per_slot_hour: '0.10'}}]\nzones: {zones}\n")
    env = {**os.environ, "HOME": str(home), "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_LAUNCHER": launcher}
    args = ["--port", "9"] if command == "serve" else []
    r = subprocess.run([sys.executable, "-m", "broker.cli", command, "--config", str(config), *args], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
    if catalog is not None:
        assert str(home / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv") in r.stderr


def test_serve_start_line_does_not_print_the_stores_password(tmp_path):
    """BROKER_STORE_URL carries the Redis AUTH token (a secret in the cloud's secret store); the start-up
    line goes to the service's logs."""
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_STORE_URL": "rediss://:s3cret-auth-token@127.0.0.1:1/0"}
    # on a port of the system's choice: serve listens before it says where (a port it cannot take is its one line)
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", "0"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait(10)
    assert re.match(r"spot-broker on http://127\.0\.0\.1:[1-9]\d*  store=rediss://:\*\*\*@127\.0\.0\.1:1/0 ", first), first
    assert "s3cret" not in first


def serve_start_lines(tmp_path, env: dict, *args: str) -> str:
    """The lines `broker serve --port 0 ARGS` writes before it answers (it listens on a port of the system's
    choice and says which), once it answers; the broker is stopped then."""
    import httpx

    log = tmp_path / f"serve-{time.monotonic_ns()}.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", "0", "--no-engine", *args],
                                env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    try:
        def up():
            assert proc.poll() is None, log.read_text()
            m = re.search(r"spot-broker on (http://127\.0\.0\.1:(\d+)) ", log.read_text())
            if not m or m.group(2) == "0":
                return None
            try:
                return httpx.get(f"{m.group(1)}/v1/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return None

        wait_for(up, timeout=60)
        return log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_serve_says_where_the_admin_token_it_generated_is(tmp_path):
    """The dashboard and curl need the token a first start writes; the start-up lines say where it is (the path,
    never the token), and not when admins sign in with BROKER_ADMIN_TOKEN — then they warn that the file's token, no
    longer taken, is the admin's again for a start without the variable (QA INCIDENT: a stolen one came back)."""
    env = {k: v for k, v in os.environ.items() if k != "BROKER_ADMIN_TOKEN"}
    env.update(BROKER_DATA_DIR=str(tmp_path / "data"))
    lines = serve_start_lines(tmp_path, env)
    token = (tmp_path / "data" / "admin-token").read_text().strip()
    assert f"admin token in {tmp_path / 'data' / 'admin-token'}" in lines and token not in lines, lines
    lines = serve_start_lines(tmp_path, {**env, "BROKER_ADMIN_TOKEN": ADMIN})
    assert "admin token in" not in lines and token not in lines, lines
    assert f"warning: {tmp_path / 'data' / 'admin-token'} holds an admin token other than BROKER_ADMIN_TOKEN" in lines
    (tmp_path / "data" / "admin-token").unlink()  # retired, as the warning says: nothing more is said of it
    assert "admin token" not in serve_start_lines(tmp_path, {**env, "BROKER_ADMIN_TOKEN": ADMIN})


def test_serve_on_a_port_in_use_exits_before_its_engine_touches_the_store(tmp_path):
    """A second `broker serve` on a taken port (another broker already serves it) used to start its engine on the
    shared store and tick with its own config — budget-stopping a running job by its own stop grace — before the
    bind failed. It now says the port is taken and exits, its engine never started."""
    from broker.store import open_store

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    db = tmp_path / "b.db"
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_STORE_URL": f"sqlite://{db}"}
    try:
        done = subprocess.run([sys.executable, "-m", "broker.cli", "serve", "--port", str(port)], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        taken.close()
    assert done.returncode == 1
    assert f"127.0.0.1:{port} is already in use" in done.stderr and "--port" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert open_store(f"sqlite://{db}").beats() == {}  # no engine ticked: it would have said it was alive


def _ipv6_loopback_port() -> int | None:
    try:
        return free_port("::1")
    except OSError:
        return None


def test_serve_on_an_ipv6_address_names_it_in_brackets_and_jobs_report_to_a_url_that_parses(tmp_path):
    """`broker serve --host ::1` printed http://::1:PORT, and told its jobs to report progress to that URL, which
    no HTTP client parses: an IPv6 address in a URL takes brackets."""
    import httpx

    port = _ipv6_loopback_port()
    assert port is not None, "this test needs an IPv6 loopback (::1), which this machine and CI's have"
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    log = tmp_path / "serve.log"
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    env.pop("BROKER_PUBLIC_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--host", "::1", "--port", str(port),
                             "--config", str(config)], env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=open(log, "w"))
    url = f"http://[::1]:{port}"
    try:
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

        def up():
            try:
                return client.get("/v1/healthz").status_code == 200
            except httpx.HTTPError:
                assert proc.poll() is None, log.read_text()
                return False

        wait_for(up, timeout=30)
        assert log.read_text().startswith(f"spot-broker on {url}  store="), log.read_text()
        job = client.post("/v1/jobs", json={"name": "u", "resources": {"cpus": 1}, "broker": {"budget_usd": 1},
                                            "run": "echo \"$BROKER_PROGRESS_URL\""}).json()
        wait_for(lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded", timeout=30)
        said = client.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
        assert f"{url}/v1/jobs/{job['id']}/progress" in said, said
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


@pytest.mark.parametrize("url, shown", [
    ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
    ("redis://user:pw@host:6379/0?ssl_ca_certs=/ca.pem", "redis://user:***@host:6379/0?ssl_ca_certs=/ca.pem"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("sqlite:///var/lib/broker.db", "sqlite:///var/lib/broker.db"),
])
def test_redacted_url(url, shown):
    from broker.config import redacted_url

    assert redacted_url(url) == shown


@pytest.mark.parametrize("placement, shown", [
    ({"tier": "spot", "cloud": "gcp", "region": "us-central1", "zone": "us-central1-a",
      "instance_type": "n1-highmem-8+V100:1"}, "spot n1-highmem-8+V100:1 in gcp/us-central1-a"),
    ({"tier": "ondemand", "cloud": "aws", "region": "us-east-2", "zone": None, "instance_type": "m6i.2xlarge"},
     "ondemand m6i.2xlarge in aws/us-east-2"),
    ({"tier": "onprem", "cloud": "local", "region": "local", "zone": "local", "instance_type": "local-1slot"},
     "onprem local-1slot in local"),
    ({"tier": "spot", "cloud": "aws", "region": "us-east-1", "zone": "sim-a", "instance_type": "g5.xlarge",
      "simulated": True}, "spot g5.xlarge in aws/sim-a (simulated)"),
], ids=["a GCP attempt names its cloud", "an AWS one too", "a pool does not", "nor hides a simulated zone"])
def test_status_names_the_cloud_an_attempt_ran_in(placement, shown):
    from broker.cli import _where

    assert _where(placement) == shown


def test_ondemand_on_a_running_spot_job_says_the_running_attempt_stays_where_it_is(tmp_path):
    """`broker ondemand JOB` on a job running on spot answered "pinned to on-demand; running": read as "it runs on
    on-demand now", while the attempt on spot runs on and only the next one goes to on-demand."""
    config = CONFIG.replace("zones:\n", "zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}\n")
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'od.db'}", config=config)
    env = {**os.environ, "BROKER_URL": url, "BROKER_TOKEN": ADMIN, "COLUMNS": "200"}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "broker.cli", *args], env=env, cwd=REPO, capture_output=True,
                              text=True, timeout=60)

    try:
        task = tmp_path / "t.yaml"
        task.write_text("name: s\nresources: {accelerators: A10G:1}\nrun: sleep 30\n")
        job = json.loads(run("--json", "submit", str(task), "--budget", "1").stdout)["id"]
        wait_for(lambda: json.loads(run("--json", "status", job).stdout)["state"] == "running", timeout=30)
        r = run("ondemand", job)
        assert r.returncode == 0 and r.stdout.strip() == (
            f"{job}: pinned to on-demand; running (the attempt running now stays on spot; the next one runs on "
            "on-demand)"), r.stdout + r.stderr
        shown = run("status", job).stdout  # the pin was said only by an event
        assert "pinned to on-demand" in shown, shown
        r = run("ondemand", job, "--off")  # and there was no way back
        assert r.returncode == 0 and r.stdout.strip() == (
            f"{job}: not pinned; its next attempts go where it is cheapest; running"), r.stdout + r.stderr
        assert "pinned to" not in run("status", job).stdout
        run("cancel", job)
        task.write_text("name: s\nresources: {accelerators: A10G:1, use_spot: true}\nrun: sleep 30\n")
        job = json.loads(run("--json", "submit", str(task), "--budget", "1").stdout)["id"]
        r = run("ondemand", job)  # was told "none is configured for its resources", with sim-od right there
        assert r.returncode == 1 and "its task asks for spot only (resources.use_spot: true)" in r.stderr, r.stderr
        run("cancel", job)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def _offline(*args: str) -> subprocess.CompletedProcess:
    """``broker ARGS`` pointed at a port nothing listens on: for what the CLI must refuse before it calls the broker."""
    env = {**os.environ, "BROKER_URL": "http://127.0.0.1:9", "BROKER_TOKEN": ADMIN}
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("window", [["--period", "7d"], ["--since", "2026-11-01T00:00Z"], ["--until", "2026-11-02"],
                                    ["--team", "vision"]], ids=lambda w: w[0])
def test_costs_of_one_job_refuses_a_window_rather_than_ignore_it(window):
    r = _offline("costs", "j-3fa9c1b2e0", *window, "--json")
    assert r.returncode == 2 and "cannot reach" not in r.stderr, r.stderr
    error = json.loads(r.stdout)["error"]
    assert error.startswith(f"{window[0]}: a job's costs are its whole life") and "broker costs --period" in error
    assert f"broker costs: error: {error}" in r.stderr


def test_logs_follow_with_json_writes_json_lines_each_naming_its_attempt(cli):
    """`broker logs -f --json` wrote the plain text, which a script reading JSON could not parse."""
    run, tmp = cli
    job = submitted(cli, "retry", "name: r\nresources: {cpus: 1}\nrun: echo \"out of attempt $BROKER_ATTEMPT\"; "
                    "test \"$BROKER_ATTEMPT\" -ge 2\nbroker: {retry: {max_restarts_on_errors: 1}}\n", "succeeded",
                    timeout=60)
    out = run("logs", job["id"], "-f", "--attempt", "1", "--json").stdout
    chunks = [json.loads(line) for line in out.splitlines()]  # every line one JSON object
    assert {c["attempt"] for c in chunks} == {1, 2}, chunks
    for n in (1, 2):
        text = "".join(c["data"] for c in chunks if c["attempt"] == n)
        assert text == run("logs", job["id"], "--attempt", str(n)).stdout and f"out of attempt {n}" in text
        assert max(c["offset"] for c in chunks if c["attempt"] == n) == len(text.encode())


def test_what_a_job_or_its_log_wrote_is_printed_as_text_not_read_as_markup():
    # a diagnosis quoting torchrun's "[rank1]: ValueError" lost its "[rank1]" (read as a style), and a reason or
    # URI holding "[/x]" stopped the CLI with a MarkupError
    import io

    from rich.console import Console

    from broker import cli as broker_cli

    reason = "failed: [rank1]: ValueError: bad shape [/x] at step 3"
    con = Console(file=io.StringIO(), width=200)
    broker_cli._print_table(con, [("id", "whole"), "reason"], [["j-1", reason]])
    job = {"id": "j-1", "name": "n", "team": "t", "state": "failed", "reason": reason,
           "last_checkpoint": {"step": 3, "uri": "file:///c/[run]/3"}, "spent": {"usd": "$0.01"},
           "budget": {"usd": "$1"}, "attempt_list": [
               {"n": 1, "state": "failed", "placement": {"tier": "onprem", "zone": "local"},
                "price_per_hour": {"usd": "$0.20"}, "cost": {"usd": "$0.01"}, "reason": reason}]}
    broker_cli._show_job(con, job)
    out = con.file.getvalue()
    assert out.count("[rank1]: ValueError: bad shape [/x] at step 3") == 3, out
    assert "file:///c/[run]/3" in out


class _ScriptedBroker:
    """A fake of the broker's answers to a follower (the HTTP client's logs() and job()), in the order the race
    gives them: the attempt's last lines land after the follower's empty read and before the job reads ended."""

    def __init__(self, logs: list[tuple[int, str]], jobs: list[dict]):
        self.log_text = {}  # attempt → its whole log, as it grows
        self.script, self.jobs = list(logs), list(jobs)

    def logs(self, job_id, *, offset=0, attempt=None):
        if self.script:  # this read comes after the next write
            n, text = self.script.pop(0)
            self.log_text[n] = self.log_text.get(n, "") + text
        attempt = attempt or max(self.log_text)
        data = self.log_text.get(attempt, "")[offset:]
        return {"attempt": attempt, "data": data, "offset": offset + len(data)}

    def job(self, job_id):
        return self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0]


def test_following_a_preempted_job_says_where_its_attempt_ended_and_which_checkpoint_the_next_resumes(capsys):
    from broker.cli import _say_attempt_end

    job = {"id": "j-1", "attempt_list": [
        {"n": 1, "state": "preempted", "reason": "spot capacity was reclaimed",
         "placement": {"tier": "spot", "instance_type": "g5.xlarge", "zone": "sim-a", "simulated": True}},
        {"n": 2, "state": "launching", "resume_from": "file:///tmp/ck/j-1/step-000000000130-1764972000123"}]}
    _say_attempt_end(job, 1)
    assert capsys.readouterr().err == ("[j-1 attempt 1 preempted on spot g5.xlarge in sim-a (simulated): spot capacity "
                                       "was reclaimed; attempt 2 follows, from its checkpoint at step 130]\n")
    _say_attempt_end({"id": "j-1"}, 3)  # an answer with no attempt list: the line still says where the output ends
    assert capsys.readouterr().err == "[j-1 attempt 3; attempt 4 follows]\n"


@pytest.mark.parametrize("then", ["ended", "next attempt"])
def test_following_a_job_reads_the_lines_an_attempt_wrote_as_it_ended(then):
    """`broker logs -f` returned (or went to the next attempt) as soon as a read was empty and the job then read
    ended: lines written between the two calls — a run's last lines, a preempted attempt's 'saved checkpoint' —
    were never shown. The follower now reads the attempt once more before it moves on."""
    from broker.client import BrokerClient

    second = then == "next attempt"
    broker = _ScriptedBroker(
        logs=[(1, "step 1\n"), (1, ""), (1, "saved checkpoint at step 2\n")] + ([(2, "resumed at step 2\n")] * second),
        jobs=[{"state": "running", "attempts": 2} if second else {"state": "succeeded", "attempts": 1}] +
             [{"state": "succeeded", "attempts": 2}] * second)
    client = BrokerClient("http://127.0.0.1:9")
    client.logs, client.job = broker.logs, broker.job
    seen = [(c["attempt"], c["data"]) for c in client.follow_log_chunks("j-1", poll=0)]
    expected = [(1, "step 1\n"), (1, "saved checkpoint at step 2\n")] + [(2, "resumed at step 2\n")] * second
    assert seen == expected


def test_following_a_preempted_job_says_the_attempt_ended_before_where_the_next_one_stands():
    """`broker logs -f` printed "[j-1 launching: launching attempt 2 on spot sim-b, resuming from step 32]" before
    "[j-1 attempt 1 preempted …; attempt 2 follows]": the job read for its status had moved on already."""
    from broker.client import BrokerClient

    said: list[str] = []
    broker = _ScriptedBroker(
        logs=[(1, "step 1\n"), (1, ""), (1, ""), (2, ""), (2, "resumed at step 1\n")],
        jobs=[{"state": "launching", "attempts": 2, "reason": "launching attempt 2 on spot sim-b"}] * 2
        + [{"state": "succeeded", "attempts": 2}])
    client = BrokerClient("http://127.0.0.1:9")
    client.logs, client.job = broker.logs, broker.job
    list(client.follow_log_chunks("j-1", poll=0, on_status=lambda job: said.append(f"status {job['state']}"),
                                  on_attempt_end=lambda job, n: said.append(f"attempt {n} ended")))
    assert said[:2] == ["attempt 1 ended", "status launching"], said


@pytest.mark.parametrize("width, says", [
    (40, "(to fit 40 columns, without: reason; piped or --json: all)"),
    (20, "(33 columns wide, its ids, states, times and amounts whole, on 20, without: reason; piped or --json: all)"),
], ids=["dropping a column fits", "too narrow even then: the line says the table is wider, not that it fits"])
def test_the_line_under_a_narrowed_table_says_whether_it_fits(width, says):
    """At 50 columns `broker status` drew 61 and said "(to fit 50 columns, ...)"."""
    import io

    from rich.console import Console

    from broker import cli as broker_cli

    con = Console(file=io.StringIO(), width=width)
    broker_cli._print_table(con, [("id", "whole"), ("state", "whole"), "reason"],
                            [["j-0123456789", "stopped_budget", "the budget's limit came"]], drop=("reason",))
    out = con.file.getvalue()
    assert " ".join(out.split()).endswith(" " + says), out  # the console wraps that line at its width
    assert "j-0123456789" in out and "stopped_budget" in out


def test_the_queue_of_more_jobs_than_a_listing_holds_by_default_shows_those_that_start_first(tmp_path):
    """201 jobs waiting (no engine places them): `broker queue` showed the 200 newest, from position 2 on, and
    left out position 1, the job that starts next."""
    import httpx

    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'q.db'}", engine="off", config=CONFIG)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as client:
            for i in range(201):
                r = client.post("/v1/jobs", json={"name": f"q{i}", "resources": {"cpus": 1}, "run": "true",
                                                  "broker": {"budget_usd": "1"}})
                assert r.status_code == 201, r.text
        env = {**os.environ, "BROKER_URL": url, "BROKER_TOKEN": ADMIN, "COLUMNS": "200"}
        r = subprocess.run([sys.executable, "-m", "broker.cli", "--json", "queue"], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=60)
        queued = json.loads(r.stdout)
        assert [j["queue_position"] for j in queued] == list(range(1, 202)), r.stderr
        assert [j["name"] for j in queued[:2]] == ["q0", "q1"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_broker_serve_keeps_an_idle_connection_open_longer_than_a_load_balancer_keeps_its_own(tmp_path):
    """uvicorn's default closed an idle connection after 5 s, while an AWS load balancer keeps its connections to the
    broker 60 s and reuses them: a request sent on one the broker had just closed got a 502. The connection is still
    open after uvicorn's 5 s (checked by peeking at the socket: the server's close would read as b"")."""
    proc, url = start_broker(tmp_path, engine="off")
    try:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /v1/healthz HTTP/1.1\r\nHost: broker\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(4096)
            head, _, body = answer.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            while len(body) < length:  # the whole answer read: what is left to peek at is the server's close, or nothing
                body += sock.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
            time.sleep(7)  # past uvicorn's default 5 s
            sock.setblocking(False)
            try:
                closed = sock.recv(1, socket.MSG_PEEK) == b""
            except BlockingIOError:  # nothing to read, and not closed
                closed = False
            assert not closed, "broker serve closed an idle connection a load balancer would reuse"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize(("spent", "budget", "line"), [
    ({"micros": 2000, "usd": "$0.0020"}, {"micros": 2000, "usd": "$0.002"}, "spent $0.002 of $0.002"),
    ({"micros": 1250, "usd": "$0.0013"}, {"micros": 1250, "usd": "$0.00125"}, "spent $0.00125 of $0.00125"),
    ({"micros": 4500, "usd": "$0.0045"}, {"micros": 5_000_000, "usd": "$5.00"}, "spent $0.0045 of $5.00"),
    ({"usd": "$0.01"}, {"usd": "$1"}, "spent $0.01 of $1"),
], ids=["a budget of $0.002 all spent reads $0.002 of $0.002, not $0.0020 of $0.002",
        "a budget with five decimals all spent reads at five decimals on both sides",
        "a budget in whole cents leaves the spend as it reads alone",
        "a view without micro-dollars (an older broker) is shown as it reads"])
def test_status_shows_a_spend_beside_its_budget_at_the_budgets_decimals(spent, budget, line):
    import io

    from rich.console import Console

    from broker import cli as broker_cli

    job = {"id": "j-1", "name": "n", "team": "t", "state": "stopped_budget", "reason": "stopped at its budget",
           "spent": spent, "budget": budget, "attempt_list": []}
    con = Console(file=io.StringIO(), width=200)
    broker_cli._show_job(con, job)
    assert f"  {line}\n" in con.file.getvalue(), con.file.getvalue()
    # `broker status`'s table takes its spent and budget cells from the same pair
    assert broker_cli._spent_of(job) == tuple(line.removeprefix("spent ").split(" of "))


def test_the_status_table_says_how_far_a_running_job_has_got(cli):
    """The reason of a running job is its last change of state ("the attempt started"), hours old for a long run:
    the table leads it with the step the job last reported, as `broker status JOB` says it."""
    run, tmp = cli
    task = tmp / "progress.yaml"
    script = "import time; from checkpoint.progress import report; report(7, 20); time.sleep(60)"  # posts on a thread
    task.write_text(f"name: stepping\nresources: {{cpus: 1}}\nrun: {sys.executable} -c '{script}'\n")
    job = json.loads(run("--json", "submit", str(task), "--budget", "5").stdout)
    wait_for(lambda: (json.loads(run("--json", "status", job["id"]).stdout).get("progress") or {}).get("step") == 7,
             timeout=60)
    line = next(x for x in _status_table(run, 200).splitlines() if job["id"] in x)
    assert " running " in line and "step 7/20 · " in line, line
    run("cancel", job["id"])
    ended = wait_for(lambda: (j := json.loads(run("--json", "status", job["id"]).stdout))["state"] == "cancelled" and j,
                     timeout=60)
    line = next(x for x in _status_table(run, 200).splitlines() if job["id"] in x)
    assert "step 7/20 · " not in line and ended["reason"] in line, "an ended job's row is its reason alone"


def test_a_submit_behind_waiting_jobs_says_how_many_wait_ahead_of_it(cli):
    run, tmp = cli
    first, nxt = _queue_behind_a_blocker(
        run, tmp, "name: blocker\nresources: {cpus: 1}\nrun: sleep 60\nbroker: {expected_hours: 0.5}\n")
    said = [run("submit", str(nxt), "--budget", "1").stdout for _ in range(3)]
    assert "ahead of it" not in said[0], "first in line: nothing waits ahead of it (its reason says what it waits for)"
    assert "queued: 1 job waits ahead of it (position 2); `broker queue` shows roughly when it starts" in said[1], said
    assert "queued: 2 jobs wait ahead of it (position 3)" in said[2], said
    assert "ahead of it" not in json.dumps(json.loads(run("--json", "submit", str(nxt), "--budget", "1").stdout))
    run("cancel", first["id"])


def test_a_job_that_failed_for_a_token_it_lacked_goes_on_with_broker_resume_secret(cli):
    run, tmp = cli
    out = tmp / "token.txt"
    task = tmp / "token.yaml"
    task.write_text("name: token\nresources: {cpus: 1, use_spot: false}\n"
                    "run: |\n  [ -n \"$HF_TOKEN\" ] || { echo 'wandb.errors.UsageError: api_key not configured'; "
                    "exit 1; }\n"
                    f"  printf %s \"$HF_TOKEN\" > {out}\n")
    job = json.loads(run("--json", "submit", str(task), "--budget", "1").stdout)
    failed = wait_for(lambda: (j := json.loads(run("--json", "status", job["id"]).stdout))["state"] == "failed" and j,
                      timeout=60)
    assert failed["diagnosis"]["class"] == "credentials", failed["diagnosis"]
    shown = run("status", job["id"]).stdout
    # the secrets the diagnosis names, one --secret each (NAME from a broker whose diagnosis names none)
    flags = " ".join(f"--secret {name}" for name in failed["diagnosis"].get("secrets") or ["NAME"])
    assert f"next: `broker resume {job['id']} {flags}`" in " ".join(shown.split()), shown
    r = run("resume", job["id"], "--secret", "HF_TOKEN", check=False)  # none in this shell: said, nothing sent
    assert r.returncode == 1 and "--secret HF_TOKEN: no value given and none in this shell" in r.stderr, r.stderr
    r = run("resume", job["id"], "--secret", "HF_TOKEN", extra_env={"HF_TOKEN": "hf_from_the_shell"})
    assert f"{job['id']}: queued" in r.stdout and "secrets HF_TOKEN set" in r.stdout, r.stdout
    wait_for(lambda: json.loads(run("--json", "status", job["id"]).stdout)["state"] == "succeeded", timeout=60)
    assert out.read_text() == "hf_from_the_shell"
    assert "hf_from_the_shell" not in run("--json", "events", job["id"]).stdout


def test_a_file_mount_whose_source_is_not_here_is_refused_before_the_submit_naming_the_entry(cli):
    """`file_mounts: {/tmp/x/mnt: ./nope.txt}` was accepted by a broker on this host and the job ran without it (and
    could "succeed"), while a missing workdir was refused, and --upload-workdir refused the same mount."""
    run, tmp = cli
    home = tmp / "home"
    home.mkdir()
    task = tmp / "t.yaml"
    for source in ("./nope.txt", "~/no-such.yaml"):
        task.write_text(f"name: typo\nrun: echo hi\nfile_mounts:\n  /tmp/x/mnt: {source}\n")
        r = run("submit", str(task), "--budget", "1", check=False, extra_env={"HOME": str(home)})
        assert r.returncode == 1 and r.stderr.strip() == \
            f"error: file_mounts /tmp/x/mnt: {source}: no such file or directory", r.stderr
        r = run("--json", "submit", str(task), "--budget", "1", check=False, extra_env={"HOME": str(home)})
        assert r.returncode == 1 and json.loads(r.stdout) == {
            "error": f"file_mounts /tmp/x/mnt: {source}: no such file or directory",
            "field": "file_mounts./tmp/x/mnt"}, r.stdout
    assert json.loads(run("--json", "status").stdout) == []  # nothing submitted
    # a bucket and the broker's checkpoint mount are no paths here; a source that is here goes as it did
    (tmp / "tok.txt").write_text("tok\n")
    task.write_text(f"name: fine\nrun: cat {tmp}/mnt/tok.txt\nfile_mounts:\n  {tmp}/mnt/tok.txt: {tmp}/tok.txt\n"
                    "  /data: s3://some-bucket/data\n  /ckpt: broker:checkpoint\n")
    out = run("submit", str(task), "--budget", "1", "--wait", extra_env={"HOME": str(home)}).stdout
    assert "tok" in out.splitlines(), out


def _serve_on_all_addresses(tmp):
    """A real `broker serve` listening on every address of this host, and this host's address that is not
    loopback (the one a route out leaves from); stopped by the caller."""
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.123", 9))  # nothing is sent: only the route is looked up
        address = probe.getsockname()[0]
    assert not address.startswith("127."), address
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp / "wide-data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_ENGINE": "off"}
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--host", "0.0.0.0", "--port", str(port)],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://{address}:{port}"
    import httpx

    def up():
        try:
            return httpx.get(f"{url}/v1/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            assert proc.poll() is None, "broker serve exited"
            return False

    wait_for(up, timeout=30)
    return proc, url


def test_no_token_on_this_host_says_to_point_broker_data_dir_at_the_brokers_own(cli):
    """A broker started with another BROKER_DATA_DIR: the hint named only the default data dir's token file, and
    a user on the same host had no way on."""
    run, tmp = cli
    elsewhere = tmp / "empty-data"
    elsewhere.mkdir()
    from broker.client import MADE_ITS_OWN

    hint = MADE_ITS_OWN  # (not "or set BROKER_DATA_DIR to ...": a broker given its admin token keeps it in no file)
    for url in (run.url, run.url.replace("127.0.0.1", "localhost")):
        r = cli_runner(url, token=None)("status", check=False, extra_env={"BROKER_DATA_DIR": str(elsewhere)})
        assert r.returncode == 1 and r.stderr.startswith("error [401]: "), r.stderr
        assert f"(no token was sent: set BROKER_TOKEN or --token to the admin token the broker was given, or a " \
               f"team token; {hint})" in r.stderr, r.stderr
    proc, url = _serve_on_all_addresses(tmp)
    try:  # a broker on another host reads no data dir of this one
        r = cli_runner(url, token=None)("status", check=False, extra_env={"BROKER_DATA_DIR": str(elsewhere)})
        assert r.returncode == 1 and "no token was sent" in r.stderr and "BROKER_DATA_DIR" not in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_following_a_queued_job_says_a_new_line_only_when_it_changes_in_substance(cli):
    """`broker logs -f` on a job queued behind one running past its expected length printed a line a second: the
    reason's "running 9 s past its expected 3 s" ticked on. The first line and a change of state come at once."""
    run, tmp = cli
    first, nxt = _queue_behind_a_blocker(
        run, tmp, "name: blocker\nresources: {cpus: 1}\nrun: sleep 60\nbroker: {expected_hours: 0.0003}\n")
    queued = json.loads(run("--json", "submit", str(nxt), "--budget", "1").stdout)
    wait_for(lambda: "past its expected" in json.loads(run("--json", "status", queued["id"]).stdout)["reason"],
             timeout=60)
    err = tmp / "follow.err"
    env = {**os.environ, "BROKER_URL": run.url, "BROKER_TOKEN": ADMIN, "COLUMNS": "200"}
    with open(err, "w") as stderr:
        following = subprocess.Popen([sys.executable, "-m", "broker.cli", "logs", "-f", queued["id"]], env=env,
                                     cwd=REPO, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    try:
        wait_for(lambda: "past its expected" in err.read_text(), timeout=30)
        reasons = [json.loads(run("--json", "status", queued["id"]).stdout)["reason"]]
        time.sleep(6)  # the reason ticks on each second meanwhile
        reasons.append(json.loads(run("--json", "status", queued["id"]).stdout)["reason"])
        lines = err.read_text().splitlines()
        assert len(lines) == 1 and "queued, position 1" in lines[0], lines
        run("cancel", queued["id"])
        assert following.wait(30) is not None
    finally:
        if following.poll() is None:
            following.kill()
        run("cancel", first["id"], check=False)
    lines = err.read_text().splitlines()
    assert len(lines) == 2 and f"[{queued['id']} cancelled" in lines[1], lines
    assert reasons[0] != reasons[1] and "past its expected" in reasons[1], reasons  # it did tick


def test_serve_and_worker_say_at_start_which_config_file_they_read_or_that_none_was(tmp_path):
    """A `broker worker` started without the API's BROKER_CONFIG placed jobs on the built-in pool `local` at its price,
    beside the API's quotes on the pools it knew; its log said nothing of the kind, and serve's named no config."""
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    env.pop("BROKER_CONFIG", None)
    cfg = tmp_path / "broker.yaml"
    cfg.write_text("pools: [{name: dgx, slots: 2, price_per_slot_hour: '1.10'}]\n"
                   "zones: [{name: sim-a, tier: spot, instance_type: g5.xlarge, price_per_hour: '0.42'}]\n")
    worker = subprocess.run([sys.executable, "-m", "broker.cli", "worker", "--burst", "--config", str(cfg)], env=env,
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert worker.returncode == 0, worker.stderr
    assert f"config={cfg}  pools: dgx; zones: sim-a" in worker.stderr, worker.stderr
    bare = subprocess.run([sys.executable, "-m", "broker.cli", "worker", "--burst"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert "config=none (the defaults; BROKER_CONFIG or --config names a file)  pools: local" in bare.stderr, bare.stderr
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", "0", "--config", str(cfg)], env=env,
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
    finally:
        proc.kill()
        proc.wait(10)
    assert first.rstrip().endswith(f"engine=on  config={cfg}"), first


def _minute_z(iso: str) -> str:
    """An estimated start as the tables show it: to the nearest minute, UTC ("…T00:34:55Z" is "00:35Z")."""
    from datetime import datetime, timedelta

    when = datetime.fromisoformat(iso.replace("Z", "+00:00")) + timedelta(seconds=30)
    return when.strftime("%H:%M") + "Z"


def test_a_submit_and_its_dry_run_say_the_deadline_the_broker_read(cli):
    """The deadline went unsaid at submit and in the dry run: a misread unit or time zone showed only when the job
    ran late. Both now say it in UTC and from now."""
    run, tmp = cli
    task = tmp / "due.yaml"
    task.write_text("name: due\nresources: {cpus: 1}\nrun: sleep 600\n")
    when = datetime.now(timezone.utc) + timedelta(days=2)
    berlin = when.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M")
    utc = when.strftime("%Y-%m-%d %H:%MZ")
    out = run("submit", str(task), "--budget", "5", "--deadline", f"{berlin} Europe/Berlin", "--dry-run").stdout
    assert re.search(rf"budget \$5\.00, deadline {utc} \(in (47\.9|48\.0) h\)", out), out  # to the nearest tenth
    out = run("submit", str(task), "--budget", "5", "--deadline", "6h").stdout
    assert re.search(r"budget \$5\.00, deadline \d{4}-\d\d-\d\d \d\d:\d\dZ \(in 6\.0 h\), estimate", out), out  # not 5.9
    assert "deadline" not in run("submit", str(task), "--budget", "5").stdout


def test_status_shows_a_due_column_where_a_job_not_ended_has_a_deadline(cli):
    run, tmp = cli
    task = tmp / "due.yaml"
    task.write_text("name: train\nresources: {cpus: 1}\nrun: sleep 600\n")
    run("submit", str(task), "--budget", "5")
    header = run("status").stdout.splitlines()[0]
    assert " due " not in f" {header} ", header  # no job has a deadline: no column
    job = json.loads(run("--json", "submit", str(task), "--budget", "5", "--deadline", "6h").stdout)
    out = run("status").stdout
    assert " due " in f" {out.splitlines()[0]} ", out
    due = datetime.fromisoformat(job["deadline"].replace("Z", "+00:00"))  # cut to its minute, never shown later
    assert due.strftime("%H:%MZ") in next(line for line in out.splitlines() if job["id"] in line), out


def test_a_deadline_in_a_table_is_cut_to_its_minute_where_a_start_is_rounded():
    """A deadline of 21:20:58 read "due 21:21Z" beside its reason's "too late for its deadline at 21:20Z"."""
    from broker.cli import _short_time

    assert _short_time("2026-12-06T21:20:58Z", "2026-12-06", cut=True) == "21:20Z"
    assert _short_time("2026-12-06T21:20:58Z", "2026-12-06") == "21:21Z"  # an estimated start, to the nearest


def test_serve_warns_of_a_token_short_enough_to_guess(tmp_path):
    """A one-character team token was taken without a word."""
    proc, _ = start_broker(tmp_path, f"sqlite://{tmp_path / 'w.db'}",
                           env_extra={"BROKER_TEAM_TOKENS": json.dumps({"vision": "v", "nlp": "n" * 40})})
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)
    log = "".join(p.read_text() for p in tmp_path.glob("broker-*.log"))
    assert ("warning: team vision's token is shorter than 16 characters, which anyone who reaches this port may "
            "guess: give it 32 random characters (`openssl rand -hex 16`)") in log, log
    assert "nlp" not in log


def test_serve_warns_of_a_data_directory_other_users_may_read(tmp_path):
    """The broker makes its data directory 0700, but one that existed before kept its mode (0755 from a `mkdir`):
    every job's output and checkpoints were readable by any user of the host, without a word."""
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    data.chmod(0o755)
    proc, _ = start_broker(tmp_path, f"sqlite://{tmp_path / 'd.db'}")
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)
    log = "".join(p.read_text() for p in tmp_path.glob("broker-*.log"))
    assert f"warning: the data directory {data} is mode 0755: other users of this host may read" in log, log
    assert f"`chmod 700 {data}`" in log
    data.chmod(0o700)
    proc, _ = start_broker(tmp_path, f"sqlite://{tmp_path / 'd.db'}")
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)
    logs = "".join(p.read_text() for p in tmp_path.glob("broker-*.log"))  # both starts' logs
    assert logs.count("warning: the data directory") == 1, logs  # the first start's only: 0700 is not warned of
