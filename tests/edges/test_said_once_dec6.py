"""Four things the edges said that were not quite true (Dec 6).

Slack's submit reply gave the job's place in the whole queue ("#2 in queue") as if it started after those ahead of
it, though the scheduler starts a job past jobs that wait for capacity it does not need. ``broker status`` and Slack's
status printed a state beside a reason that began with it ("succeeded │ succeeded: the run command exited 0"). A team,
or the totals, whose spend had no on-demand price to weigh against read "saved $0.00 (0%)".
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from broker import costs
from broker.lifecycle import AttemptState, JobState
from broker.store.base import PrunedCosts
from broker.views import NOTHING_TO_COMPARE

from . import world
from .conftest import serving_world
from .test_slack import command, slack, slack_app, stub, text_of  # noqa: F401  (fixtures)

# -- Slack's submit reply: the place in the queue, and that it may not hold ---------------------------------------


def test_a_slack_submit_behind_a_waiting_job_says_it_may_start_sooner(slack, store):
    # j-a3 waits for 8x H100; a job that does not need them is placed past it at the engine's next tick
    reply = text_of(command(slack, "submit budget=$4\nname: behind\nrun: echo hi").json())
    assert "#2 in queue; it may start sooner on capacity the job ahead of it does not use" in reply, reply


def test_the_submit_replys_queue_words_first_in_line_and_behind_several():
    from broker.slack.dispatch import _queue_words

    assert _queue_words(None) == ""
    assert _queue_words(1) == " · #1 in queue"  # first in line: nothing ahead of it to skip
    assert _queue_words(4) == " · #4 in queue; it may start sooner on capacity the jobs ahead of it do not use"


# -- a state beside a reason that begins with it: said once --------------------------------------------------------


@pytest.fixture
def server(tmp_path, store, seeded):
    with serving_world(tmp_path, store) as url:
        yield url


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().split("   ") if c.strip()]  # piped: plain columns, 3 spaces apart


def test_broker_status_says_a_state_once_beside_a_reason_that_begins_with_it(server, capsys):
    from broker.cli import main

    assert main(["status", "--url", server, "--token", world.ADMIN]) == 0
    listed = capsys.readouterr().out
    (a1,) = [_cells(line) for line in listed.splitlines() if "j-a1" in line]
    assert a1[-1] == "the run command exited 0" and "succeeded" in a1, listed
    (b1,) = [_cells(line) for line in listed.splitlines() if "j-b1" in line]
    assert b1[-1] == "the run command exited with code 1", listed
    (a3,) = [_cells(line) for line in listed.splitlines() if "j-a3" in line]
    assert a3[-1].startswith("waiting: no capacity"), listed  # a reason led by no state word is kept whole

    assert main(["status", "--url", server, "--token", world.ADMIN, "j-a1"]) == 0
    one = capsys.readouterr().out
    assert "state=succeeded" in one and "succeeded: the run" not in one, one
    assert "\n  the run command exited 0\n" in one, one


def test_an_attempt_and_a_reason_in_the_one_job_view_keep_a_reason_that_only_begins_with_the_word():
    from broker.cli import _reason_cell, _show_job

    job = {"id": "j-x", "name": "x", "team": "t", "state": "failed", "reason": "failed: exit 1", "spent": {"usd": "$0"},
           "budget": {"usd": "$1"}, "attempt_list": [
               {"n": 1, "state": "failed", "reason": "failed for a reason of its own", "cost": {"usd": "$0"},
                "price_per_hour": {"usd": "$1"}, "placement": {"tier": "spot", "instance_type": "g5", "zone": "z"}}]}
    out = io.StringIO()
    _show_job(Console(file=out, width=200), job)
    assert "\n  exit 1\n" in out.getvalue() and "    failed for a reason of its own" in out.getvalue(), out.getvalue()
    assert _reason_cell({"state": "running", "reason": "running: x", "progress": {"step": 5}}) == "step 5 · x"


def test_slack_status_says_a_state_once_beside_a_reason_that_begins_with_it(slack, store):
    reply = text_of(command(slack, "status j-a1").json())
    # "— succeeded" on the job's line, then "_succeeded: the run command exited 0_" under it; the attempt likewise
    assert "succeeded: the run" not in reply and "_the run command exited 0_" in reply, reply
    assert "— succeeded" in reply, reply


# -- the cost report: a team, or the totals, with nothing to compare ----------------------------------------------


def _pool_only(now: float):
    """Team C: on-prem jobs on a pool with no on-demand price for their shape (none in their quotes)."""
    job = world.job("j-c1", "team-c", JobState.SUCCEEDED, submitted=now - 4 * 3600, budget=5_000_000, spent=700_000,
                    attempts=1, updated=now - 3600)
    att = world.attempt("j-c1", 1, AttemptState.SUCCEEDED, world.onprem(350_000), start=now - 3 * 3600,
                        seconds=2 * 3600, cost=700_000)
    return job, [att]


def _report(store, seeded, team: str | None, ledger: PrunedCosts | None = None) -> dict:
    now = seeded.now
    if store.get_job("j-c1") is None:
        world._commit(store, *_pool_only(now))
    jobs = [j for j in store.list_jobs() if team is None or j.team == team]
    win = costs.Window(now - 7 * 86400, now, "7d")
    return costs.report(jobs, {j.id: store.attempts(j.id) for j in jobs}, win=win, now=now, positions={}, team=team,
                        ledger=ledger)


def test_a_team_with_nothing_to_compare_has_no_saving_percent_and_the_totals_of_it_none(store, seeded):
    r = _report(store, seeded, None)
    teams = {t["team"]: t for t in r["by_team"]}
    assert teams["team-c"]["saving_percent"] is None and teams["team-c"]["saving"]["micros"] == 0, teams
    assert teams["team-b"]["saving_percent"] == 80  # on-prem with an on-demand tier in its quote: compared
    assert r["totals"]["saving_percent"] is not None  # other teams' spend was compared

    alone = _report(store, seeded, "team-c")["totals"]
    assert alone["saving_percent"] is None and alone["saving"]["micros"] == 0, alone


def test_the_cli_and_slack_say_nothing_to_compare_for_such_a_team(store, seeded):
    from broker.cli import _saving_line
    from broker.slack.blocks import costs_reply
    from broker.views import saving_cell

    r = _report(store, seeded, "team-c")
    t = r["totals"]
    assert _saving_line(t["spent"], t["ondemand_equivalent"], t["saving"], t["saving_percent"]) == \
        f"  spent $0.70; {NOTHING_TO_COMPARE}"
    assert saving_cell(r["by_team"][0]["saving"], r["by_team"][0]["saving_percent"]) == "—"
    said = costs_reply(r, "http://x/dashboard").text
    assert NOTHING_TO_COMPARE in said and "saved $0.00" not in said, said


@pytest.mark.parametrize("tier, equiv, compared", [
    ("onprem", 700_000, False),  # its equivalent is its cost: an on-prem pool with no on-demand shape
    ("onprem", 2_000_000, True),  # an equivalent of its own: it was weighed against on-demand
    # on-demand is its own equivalent: nothing to compare with on-demand, "—" as a job that ran there shows
    ("ondemand", 300_000, False),
], ids=["pruned on-prem, equivalent = cost → nothing compared", "pruned on-prem with an on-demand price → compared",
        "pruned on-demand → nothing compared"])
def test_a_pruned_jobs_ledger_entry_counts_as_compared_when_its_equivalent_differs_and_it_did_not_run_on_demand(
        store, seeded, tier, equiv, compared):
    hour = int(seeded.now - 2 * 86400) // 3600 * 3600
    cost = 700_000 if tier == "onprem" else 300_000
    ledger = PrunedCosts(pruned=1, ledger_jobs=1, buckets=[("team-c", tier, hour, cost, equiv)])
    r = _report(store, seeded, "team-c", ledger)
    assert (r["totals"]["saving_percent"] is not None) is compared, r["totals"]
    assert (r["by_team"][0]["saving_percent"] is not None) is compared, r["by_team"]


def test_the_api_answers_such_a_team_with_a_null_saving_percent(tmp_path, store, seeded):
    import httpx

    from broker.api.schema import CostReport

    from .conftest import auth

    world._commit(store, *_pool_only(seeded.now))
    with serving_world(tmp_path, store) as url:
        r = httpx.get(f"{url}/v1/costs?period=7d&team=team-c", headers=auth(world.ADMIN))
    assert r.status_code == 200, r.text
    CostReport.model_validate_json(r.text, strict=True)
    assert r.json()["totals"]["saving_percent"] is None and r.json()["by_team"][0]["saving_percent"] is None


def test_a_followed_jobs_status_lines_say_a_state_once(capsys):
    from broker.cli import _say_attempt_end, _say_status

    _say_status({"id": "j-x", "state": "failed", "reason": "failed: the run command exited with code 1"})
    _say_attempt_end({"id": "j-x", "attempt_list": [
        {"n": 1, "state": "failed", "reason": "failed: exit 3", "placement": {}}]}, 1)
    err = capsys.readouterr().err
    assert "[j-x failed: the run command exited with code 1]" in err, err
    assert "[j-x attempt 1 failed: exit 3; attempt 2 follows]" in err, err
