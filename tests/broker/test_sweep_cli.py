"""A sweep from the CLI, as SkyPilot's and Slurm's users run one: each run named at submit (``--name``), the
runs listed and cancelled by the start of their names, several states at once, and a failed run on one line."""

import json
import signal

import httpx
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


@pytest.mark.parametrize("name", ["-x", "bad name", "a/b", "x" * 129, "caf\u00e9"])
def test_submit_name_is_held_to_a_tasks_name_rules_before_anything_is_sent(cli, name):
    run, task = cli
    r = run("--json", "submit", str(task), f"--name={name}", "--env", "LR=1", check=False)
    assert r.returncode == 2, r.stderr
    assert "argument --name: " in r.stderr and "ASCII letters (a-z, A-Z), digits, '-', '_' or '.'" in r.stderr
    assert json.loads(r.stdout)["field"] == "--name"
    assert json.loads(run("--json", "status").stdout) == []


def test_submit_name_given_twice_is_refused(cli):
    run, task = cli
    r = run("submit", str(task), "--name", "a", "--name", "b", check=False)
    assert r.returncode == 2 and "--name: given twice (a, then b): give it once" in r.stderr


def _submit(run, task, *names, team=None):
    ids = []
    for name in names:
        extra = ["--team", team] if team else []
        ids.append(json.loads(run("--json", "submit", str(task), "--name", name, "--env", "LR=1", "--budget", "1",
                                  *extra).stdout)["id"])
    return ids


def test_status_and_queue_list_the_jobs_whose_name_begins_so(cli):
    run, task = cli
    a, b, other, c = _submit(run, task, "sweep3-lr0.1", "sweep3-lr0.3", "other", "sweep3-lr1")
    run("cancel", b)
    assert [j["id"] for j in json.loads(run("--json", "status", "--name", "sweep3-").stdout)] == [c, b, a]
    listed = run("status", "--name", "sweep3")
    out = listed.stdout  # piped: one line a job
    assert [line.split()[0] for line in out.splitlines()[1:]] == [c, b, a] and "other" not in out
    # what the sweep's runs cost together, on stderr beside the table (nothing has run: $0.00 of three $1 budgets)
    assert "3 jobs named sweep3*: $0.00 spent in all, of $3.00 of budgets" in listed.stderr, listed.stderr
    assert [j["id"] for j in json.loads(run("--json", "status", "--name", "sweep3-", "--state", "queued").stdout)] == [c, a]
    assert [j["id"] for j in json.loads(run("--json", "queue", "--name", "sweep3-").stdout)] == [a, c]  # start order
    assert run("status", "--name", "nope").stdout.strip() == "No jobs named nope*."
    assert run("queue", "--name", "nope").stdout.strip() == "No job named nope* is waiting."
    r = run("--json", "status", "--name", "bad name", check=False)
    assert r.returncode == 1 and json.loads(r.stdout)["field"] == "name"
    r = run("status", "--name", "a", "--name", "b", check=False)
    assert r.returncode == 2 and "--name: given twice (a, then b): give it once" in r.stderr


def test_status_state_takes_several_states_with_commas(cli):
    run, task = cli
    a, b = _submit(run, task, "one", "two")
    run("cancel", b)
    assert [j["id"] for j in json.loads(run("--json", "status", "--state", "queued,cancelled").stdout)] == [b, a]
    assert run("status", "--state", "running,failed").stdout.strip() == "No running or failed jobs."
    r = run("status", "--state", "queued,runing", check=False)
    assert r.returncode == 1 and "'runing' is not a job state" in r.stderr, r.stderr


def test_cancel_takes_several_ids_and_skips_a_job_already_ended(cli):
    run, task = cli
    a, b, c = _submit(run, task, "s-a", "s-b", "s-c")
    run("cancel", a)
    r = run("cancel", a, b, c)  # a second time over a: skipped, not an error (set -e scripts go on)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"{b} (s-b): cancelled", f"{c} (s-c): cancelled",
                                     f"{a} (s-a): had already ended (cancelled); skipped",
                                     "cancelled 2 jobs; 1 had already ended"]
    assert run("cancel", a).stdout.strip() == f"{a} (s-a): had already ended (cancelled); skipped"
    # a job that is not there is refused, the others cancelled all the same; exit 1
    d, = _submit(run, task, "s-d")
    r = run("--json", "cancel", d, "j-0000000000", check=False)
    assert r.returncode == 1
    body = json.loads(r.stdout)
    assert [j["id"] for j in body["cancelled"]] == [d] and body["already_ended"] == []
    assert body["refused"] == [{"id": "j-0000000000", "detail": "no job j-0000000000"}]


def test_cancel_name_cancels_the_jobs_not_ended_whose_name_begins_so(cli):
    run, task = cli
    a, b, other, c = _submit(run, task, "sweep3-lr0.1", "sweep3-lr0.3", "sweep30", "sweep3-lr1")
    run("cancel", b)
    r = run("cancel", "--name", "sweep3-", "--yes")
    assert r.stdout.splitlines() == [f"{c} (sweep3-lr1): cancelled", f"{a} (sweep3-lr0.1): cancelled",
                                     "cancelled 2 jobs"], r.stdout
    assert json.loads(run("--json", "status", other).stdout)["state"] == "queued"
    assert run("cancel", "--name", "sweep3-", "--yes").stdout.strip() == (
        "nothing to cancel: no job named sweep3-* is waiting or running")
    r = run("--json", "cancel", "--name", "sweep3", "--yes")
    assert json.loads(r.stdout) == {"cancelled": [{"id": other, "name": "sweep30", "state": "cancelled"}],
                                    "already_ended": [], "refused": [], "already_cancelling": []}


def test_cancel_all_takes_the_callers_team_and_an_admin_must_name_one(cli):
    run, task = cli
    mine = _submit(run, task, "v1", "v2", team="vision")
    theirs, = _submit(run, task, "n1", team="nlp")
    r = run("--json", "cancel", "--all", "--yes", check=False)  # the admin's token: every team's jobs, by one slip
    assert r.returncode == 1 and json.loads(r.stdout)["field"] == "team"
    assert "an admin cancelling all must name the team (--team T)" in r.stderr
    team_run = cli_runner(run.url, token="vision-token")
    assert team_run("cancel", "--all", "--yes").stdout.splitlines()[-1] == "cancelled 2 jobs"
    assert json.loads(run("--json", "status", theirs).stdout)["state"] == "queued"
    assert {json.loads(run("--json", "status", j).stdout)["state"] for j in mine} == {"cancelled"}
    r = team_run("cancel", "--all", "--team", "nlp", "--yes", check=False)  # not its team
    assert r.returncode == 1 and "you can see only your team's jobs (vision)" in r.stderr
    assert run("cancel", "--all", "--team", "nlp", "--yes").stdout.splitlines()[-1] == "cancelled 1 job"


def test_an_admins_cancel_all_without_a_team_is_refused_while_one_team_alone_has_jobs(cli):
    """With one team's jobs not ended, the admin's `cancel --all --yes` cancelled them, unnamed: the CLI guessed the
    admin from two teams in the list. It now asks the broker who the token is (`GET /v1/whoami`)."""
    run, task = cli
    mine = _submit(run, task, "v1", "v2", team="vision")
    r = run("cancel", "--all", "--yes", check=False)
    assert r.returncode == 1 and "an admin cancelling all must name the team (--team T)" in r.stderr, r.stderr
    assert {json.loads(run("--json", "status", j).stdout)["state"] for j in mine} == {"queued"}
    assert httpx.get(f"{run.url}/v1/whoami", headers={"Authorization": "Bearer vision-token"}).json() == {
        "name": "team:vision", "team": "vision", "admin": False}
    assert cli_runner(run.url, token="vision-token")("cancel", "--all", "--yes").stdout.splitlines()[-1] == \
        "cancelled 2 jobs"


@pytest.mark.parametrize("argv, says", [
    ([], "give the jobs to cancel: their ids, --name PREFIX or --all"),
    (["j-1", "--all"], "ID and --all each pick the jobs to cancel: give one"),
    (["--name", "x", "--all"], "--name and --all each pick the jobs to cancel: give one"),
    (["j-1", "--team", "vision"], "--team: is for --name or --all"),
])
def test_cancel_is_given_one_way_to_pick_its_jobs(cli, argv, says):
    run, _ = cli
    r = run("cancel", *argv, check=False)
    assert r.returncode == 2 and says in r.stderr, r.stderr


def test_a_failed_job_in_the_status_table_is_its_diagnosis_first_sentence(tmp_path):
    from broker_testing import POOL_AND_SPOT, wait_for

    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'f.db'}", config=POOL_AND_SPOT)
    try:
        run = cli_runner(url)
        task = tmp_path / "nan.yaml"
        task.write_text("name: sweep-nan\nresources: {cpus: 1}\n"
                        "run: python3 -c \"raise FloatingPointError('loss is nan at step 3')\"\n")
        job_id = json.loads(run("--json", "submit", str(task), "--budget", "1").stdout)["id"]
        wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "failed", timeout=60)
        job = json.loads(run("--json", "status", job_id).stdout)
        assert job["diagnosis"]["class"] == "diverged" and job["diagnosis"]["hint"], job["diagnosis"]
        r = run("status", "--state", "failed")  # piped: one line a job, the reason whole
        row = r.stdout.splitlines()[1]
        assert row.startswith(job_id) and row.endswith(job["diagnosis"]["sentence"]), row
        assert job["diagnosis"]["hint"][:30] not in r.stdout
        assert "`broker status ID` says the rest and what to do" in r.stderr
        # the job alone still says it all, and so does --json
        assert job["diagnosis"]["hint"][:30] in " ".join(run("status", job_id).stdout.split())
        assert json.loads(run("--json", "status").stdout)[0]["reason"] == job["reason"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_cancel_by_name_or_all_asks_first_and_off_a_terminal_needs_yes(cli):
    """As `sky jobs cancel --all` asks: a prefix too short, or --all on a team's token (every job of the team, whoever
    submitted it), cancels more than meant, and a cancelled job does not resume with a click."""
    import os
    import pty
    import subprocess
    import sys

    run, task = cli
    a, b = _submit(run, task, "sweep4-a", "sweep4-b")
    r = run("cancel", "--name", "sweep4", check=False)  # a script: no terminal to ask on
    assert r.returncode == 2 and "--name cancels every job it matches: add --yes" in r.stderr, r.stderr
    assert {json.loads(run("--json", "status", j).stdout)["state"] for j in (a, b)} == {"queued"}

    def on_a_terminal(answer: str) -> tuple[int, str, str]:
        leader, follower = pty.openpty()
        env = {**os.environ, "BROKER_URL": run.url, "BROKER_TOKEN": ADMIN}
        proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "cancel", "--name", "sweep4"], stdin=follower,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        os.close(follower)
        os.write(leader, answer.encode())
        out, err = proc.communicate(timeout=60)
        os.close(leader)
        return proc.returncode, out, err

    code, out, err = on_a_terminal("n\n")
    assert code == 1 and "nothing cancelled" in err, (out, err)
    assert f"2 jobs of team default's named sweep4*, whoever submitted them: {b} (sweep4-b), {a} (sweep4-a)" in err
    assert {json.loads(run("--json", "status", j).stdout)["state"] for j in (a, b)} == {"queued"}
    code, out, err = on_a_terminal("y\n")
    assert code == 0 and out.splitlines()[-1] == "cancelled 2 jobs", (out, err)
    assert {json.loads(run("--json", "status", j).stdout)["state"] for j in (a, b)} == {"cancelled"}


def test_the_sweeps_total_adds_each_runs_exact_spend_and_budget():
    from broker.cli import _spent_together

    runs = [{"spent": {"micros": m, "usd": "x"}, "budget": {"micros": 1_000_500, "usd": "y"}}
            for m in (48_330, 48_284, 1)]
    assert _spent_together(runs, "sweep2") == "3 jobs named sweep2*: $0.0967 spent in all, of $3.0015 of budgets"


def test_a_failed_jobs_short_reason_keeps_the_users_own_message_whole():
    """Cut at its first full stop, "The training script raised ValueError: Learning rate 3e-4 too high." lost the
    message's "Use at most 1e-4.", the part that says what to do."""
    from broker.cli import _short_failure

    sentence = "The training script raised ValueError: Learning rate 3e-4 too high. Use at most 1e-4."
    job = {"state": "failed", "diagnosis": {"sentence": sentence}}
    assert _short_failure(job, f"failed: {sentence} Fix the error in the code; the log shows the traceback.") == sentence
    assert _short_failure(job, "failed: something else") is None


def test_a_sweeps_total_over_a_listing_that_left_older_jobs_out_says_so():
    from broker.cli import _spent_together

    runs = [{"spent": {"micros": 0, "usd": "x"}, "budget": {"micros": 1_000_000, "usd": "y"}}] * 2
    assert _spent_together(runs, "huge", listed_only=True) == (
        "the 2 jobs listed named huge*: $0.00 spent together, of $2.00 of budgets (not the older ended ones left "
        "out: list them with --state)")


def test_status_of_one_job_with_a_filter_is_a_usage_error_not_a_filter_dropped(cli):
    run, task = cli
    (a,) = _submit(run, task, "one")
    r = run("status", a, "--state", "running", "--name", "zzz", check=False)
    assert r.returncode == 2, r.stderr
    assert "--state, --name: filter the list of jobs; a job given by its id is shown whatever they say" in r.stderr


def test_a_cancels_summary_does_not_count_as_its_own_the_jobs_another_cancel_was_stopping():
    """Two bulk cancels at once had said "cancelled 113 jobs" and "cancelled 21 jobs" of 132: the jobs the other
    was already stopping are said apart (``already_cancelling`` in the broker's answer)."""
    from argparse import Namespace

    from broker.cli import _cancel_summary

    args = Namespace(name="sweep", team=None)
    assert _cancel_summary(args, 19, 102, 0, 2) == ("cancelled 19 jobs; 2 were already being cancelled; "
                                                    "102 had already ended")
    assert _cancel_summary(args, 0, 0, 0, 1) == "cancelled 0 jobs; 1 was already being cancelled"
    assert _cancel_summary(args, 3, 0, 0) == "cancelled 3 jobs"
