"""A team's monthly cap as a user meets it on the CLI, against a real ``broker serve`` (engine on, real runners).

A QA walk found: ``broker budget`` on a budget-stopped job said "`broker resume` continues it" where the team's cap then
refused the resume; the job's reason promised "it resumes once that covers it" (nothing resumes a stopped job by
itself) with figures that went stale, undated; the resume's refusal said "wait for the team's jobs to end" to a team
with none holding anything; and ``submit --budget`` was told to "give broker.budget_usd at most $X".
"""

from __future__ import annotations

import json
import re
import signal

import pytest

from broker_testing import ADMIN, cli_runner, start_broker, wait_for

NLP, VISION = "nlp-token-for-cap-tests-0123456789", "vision-token-for-cap-tests-0123456"
CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "3.6"}
default_budget_usd: "0.01"
stop_grace_seconds: 1
tick_seconds: 0.1
teams:
  nlp: {monthly_budget_usd: "1.00"}
  vision: {monthly_budget_usd: "2.00"}
"""


@pytest.fixture
def broker(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'cap.db'}", config=CONFIG,
                             env_extra={"BROKER_TEAM_TOKENS": json.dumps({"nlp": NLP, "vision": VISION})})
    task = tmp_path / "burn.yaml"
    task.write_text("name: burn\nresources: {cpus: 1}\nrun: sleep 600\n")
    yield url, task
    for token in (NLP, VISION):  # no runner left behind
        cli_runner(url, token=token)("cancel", "--all", "--yes", check=False)
    admin = cli_runner(url, token=ADMIN)
    wait_for(lambda: all(j["state"] in ("cancelled", "stopped_budget", "failed", "succeeded")
                         for j in json.loads(admin("--json", "status").stdout)), timeout=30)
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_a_raise_past_the_cap_says_the_resume_is_refused_and_what_lets_it(broker):
    url, task = broker
    run = cli_runner(url, token=NLP)
    job_id = json.loads(run("--json", "submit", str(task), "--budget", "0.01").stdout)["id"]
    wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "stopped_budget", timeout=60)

    # nothing is held by a stopped job: the raise is taken (a resume is weighed instead), and its answer says that
    # the cap refuses the resume now, as of when, and what lets it; never "`broker resume` continues it"
    said = run("budget", job_id, "5").stdout
    assert "a resume is refused while team nlp's monthly cap has no room for its $4.99 unspent (as of " in said, said
    assert " UTC: " in said and "of a $1.00 monthly cap" in said, said
    assert f"`broker resume {job_id}` continues it" not in said, said
    assert "it does not resume by itself" in said and "it resumes once" not in said, said
    assert "an admin raises teams.nlp.monthly_budget_usd" in said, said
    lower = re.search(r"lower its budget to (\$[0-9.]+) first", said)
    assert lower, said
    job = json.loads(run("--json", "status", job_id).stdout)
    assert (job["state"], job["budget"]["usd"]) == ("stopped_budget", "$5.00") and job["reason"] in said

    # the resume is refused as said; no job of the team holds anything, so it is not told to wait for them to end
    refused = run("resume", job_id, check=False)
    assert refused.returncode != 0 and "error [409]: not resumed" in refused.stderr, refused.stderr
    assert "wait for the team's jobs to end" not in refused.stderr, refused.stderr
    assert f"lower its budget to {lower.group(1)} first" in refused.stderr, refused.stderr

    # the figure given lets it: the answer then names the command that continues it, and that command does
    said = run("budget", job_id, lower.group(1).removeprefix("$")).stdout
    assert f"`broker resume {job_id}` continues it" in said, said
    resumed = run("resume", job_id)
    assert f"{job_id}: queued" in resumed.stdout, resumed.stdout


def test_the_cap_refusal_of_a_submit_names_the_option_that_set_the_budget(broker, tmp_path):
    url, _ = broker
    run = cli_runner(url, token=VISION)
    task = tmp_path / "ybud.yaml"
    task.write_text("name: ybud\nresources: {cpus: 1}\nrun: sleep 600\nbroker: {budget_usd: '2.50'}\n")
    by_option = run("submit", str(task), "--budget", "2.4", "--dry-run", check=False)
    assert by_option.returncode != 0, by_option.stdout
    assert "error [422]: --budget: this job's $2.40 budget would let team vision's jobs spend more than its monthly cap" \
        in by_option.stderr, by_option.stderr
    assert "give --budget at most $2.00" in by_option.stderr and "broker.budget_usd" not in by_option.stderr, \
        by_option.stderr
    # from the file, the file's field is named
    by_file = run("submit", str(task), "--dry-run", check=False)
    assert "error [422]: broker.budget_usd: " in by_file.stderr, by_file.stderr
    assert "give broker.budget_usd at most $2.00" in by_file.stderr, by_file.stderr


@pytest.mark.parametrize("spent, held, holders, says", [
    (0, 0, 0, "an admin raises teams.t.monthly_budget_usd"),
    (5, 0, 0, "a new month begins (2027-01-01 UTC) or an admin raises teams.t.monthly_budget_usd"),
    (0, 5, 1, "the team's jobs end (or one is cancelled or has its budget lowered) or an admin raises "
              "teams.t.monthly_budget_usd"),
    (5, 5, 2, "the team's jobs end (or one is cancelled or has its budget lowered), a new month begins (2027-01-01 "
              "UTC) or an admin raises teams.t.monthly_budget_usd"),
])
def test_what_makes_room_later_is_only_what_would(spent, held, holders, says):
    from datetime import datetime, timezone

    from broker.team_budget import TeamMonth, month_of, room_later

    month = month_of(datetime(2026, 12, 7, tzinfo=timezone.utc).timestamp())
    assert room_later(TeamMonth("t", 10, month, spent, held, holders)) == says
