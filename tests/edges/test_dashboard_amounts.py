"""Amounts as people read them on the dashboard, and the same amounts in ``broker costs`` and Slack's ``costs``.

A budget burn read "$0.0020 / $0.002" (the spend rounded up to a hundredth of a cent, the cap exact); the "Saved"
columns read "-$0.40" for a team that paid more than on-demand, and a job whose on-demand equivalent is a few
micro-dollars "(-19757%)"; rows rounded one by one did not add up to the total shown above them, with no word
of why. The page runs in Debian's headless Chromium (the fixtures of ``test_dashboard``).
"""

from __future__ import annotations

import httpx
import pytest

from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth
from .test_dashboard import _choose, chromium, server  # noqa: F401  (server: the fixture, reused)

H = 3600


def _more(store, now: float) -> None:
    """Beside the seeded world (its 7 days): two running jobs of team A on budgets of $0.002, one all spent; a job of
    team B on-prem at $0.20/h against an on-demand quote of $0.10/h (it paid more); a short job of the default team
    whose on-demand equivalent is 23 micro-dollars; a job of team C that ran at no price (nothing to compare)."""
    for job_id, spent in (("j-c1", 2_000), ("j-c2", 1_234)):
        j = world.job(job_id, "team-a", JobState.RUNNING, submitted=now - 900, budget=2_000, spent=spent, attempts=1,
                      placement=world.onprem(200_000), updated=now - 60)
        world._commit(store, j, [world.attempt(job_id, 1, AttemptState.RUNNING, world.onprem(200_000),
                                               start=now - 600, seconds=36, cost=spent, running=True)])
    dear = world.job("j-b3", "team-b", JobState.SUCCEEDED, submitted=now - 2 * 86_400, budget=9_000_000,
                     spent=4_000_001, attempts=1, quote_od=100_000, updated=now - 86_400)
    world._commit(store, dear, [world.attempt("j-b3", 1, AttemptState.SUCCEEDED, world.onprem(200_000),
                                              start=now - 2 * 86_400, seconds=20 * H, cost=4_000_001)])
    tiny = world.job("j-d1", "default", JobState.SUCCEEDED, submitted=now - 7200, budget=1_000_000, spent=4_567,
                     attempts=1, updated=now - 3600)
    world._commit(store, tiny, [world.attempt("j-d1", 1, AttemptState.SUCCEEDED,
                                              {**world.onprem(200_000), "ondemand_price_per_hour": 1_000},
                                              start=now - 7200, seconds=82, cost=4_567)])
    free = world.job("j-e1", "team-c", JobState.SUCCEEDED, submitted=now - 7200, budget=1_000_000, spent=0,
                     attempts=1, updated=now - 3600)
    world._commit(store, free, [world.attempt("j-e1", 1, AttemptState.SUCCEEDED, world.onprem(0),
                                              start=now - 7200, seconds=600, cost=0)])


def _cells(page, table: str) -> dict[str, list[str]]:
    """Each row of a table by its first cell (a team, or a job's "name (id)")."""
    rows = page.eval_on_selector_all(f"#{table} tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    return {r[0]: r for r in rows}


def test_burn_saved_and_totals_read_as_a_person_expects_on_the_page(server, store, seeded):  # noqa: F811
    _more(store, seeded.now)
    report = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        burn = _cells(page, "burn")
        team_rows = _cells(page, "teams")
        top = _cells(page, "top")
        note = page.evaluate("() => { const n = document.getElementById('rounding-note');"
                             " return n && [n.textContent, !n.hidden]; }")
        spent = page.text_content("#total-spent")

        page.click("#burn tbody tr:has-text('j-c1')")  # the job's line: its spend beside its budget, alike
        page.wait_for_selector("#job:not([hidden])")
        summary = page.text_content("#job-summary")

        _choose(page, "default", "7d")  # only the tiny job: over 10 times its on-demand equivalent
        card = [page.text_content(s) for s in ("#total-saving-label", "#total-saving", "#total-saving-pct")]
        _choose(page, "team-b", "24h")  # nothing ran for team B that day: nothing to weigh
        empty = [page.text_content(s) for s in ("#total-saving", "#total-saving-pct")]

    # a budget all spent reads the same twice; part of it, both to a hundredth of a cent; cents stay cents
    assert burn["train-j-c1 (j-c1)"][2] == "$0.002 / $0.002"
    assert burn["train-j-c2 (j-c2)"][2] == "$0.0013 / $0.0020"
    assert burn["train-j-a2 (j-a2)"][2] == "$1.50 / $2.00"
    assert "spent $0.002 of $0.002" in summary, summary

    # a saving column never shows a signed amount or a share in the thousands of percent
    assert team_rows["team-b"][3] == "paid $0.4001 (11%) more"
    assert team_rows["team-c"][3] == "—"  # ran at no price: no on-demand figure
    assert team_rows["default"][3] == "paid $0.0046 more, over 10 times the on-demand cost"
    assert team_rows["team-a"][3].startswith("saved $")
    assert top["train-j-d1 (j-d1)"][4] == "paid $0.0046 more, over 10 times the on-demand cost"
    assert not [c for row in [*team_rows.values(), *top.values()] for c in row if c.startswith("-$") or "(-" in c]
    from broker.views import saving_cell

    teams = {r["team"]: r for r in report["by_team"]}
    assert teams["team-c"]["saving_percent"] is None and teams["default"]["saving_percent"] < -900
    for r in report["by_team"]:
        assert team_rows[r["team"]][3] == saving_cell(r["saving"], r["saving_percent"])  # as the CLI says it
    for j in report["top_jobs"]:
        assert top[f"{j['name']} ({j['id']})"][4] == saving_cell(j["saving"], j["saving_percent"])

    # rows rounded up one by one: $0.0046 + $6.51 + $4.41 + $0.00 shown, the exact sum's $10.91 above them
    assert spent == "$10.91" and [team_rows[t][1] for t in ("default", "team-a", "team-b", "team-c")] == \
        ["$0.0046", "$6.51", "$4.41", "$0.00"]
    assert note == [report["rounding_note"], True] and "rounded up on its own" in note[0]

    assert card == ["Paid more than on-demand", "$0.0046", "over 10 times the cost of all on-demand"]
    assert empty == ["—", "nothing to compare with on-demand"]


def test_a_report_whose_rows_add_up_has_no_rounding_note(client):
    """The seeded world's amounts are whole cents: nothing to explain, and the page shows no note."""
    assert client.get("/v1/costs?period=7d", headers=auth(world.ADMIN)).json()["rounding_note"] is None


def test_the_cli_and_slack_say_the_same_amounts_as_the_page(server, store, seeded, capsys):  # noqa: F811
    from broker.cli import main
    from broker.slack import blocks

    _more(store, seeded.now)
    report = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    assert main(["costs", "--url", server, "--token", world.ADMIN, "--period", "7d"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if len(line.split("   ")) > 3}  # piped: plain columns
    assert "paid $0.4001 (11%) more" in lines["team-b"] and "over 10 times the on-demand cost" in lines["default"]
    assert "—" in lines["team-c"] and "-$" not in out and "(-" not in out, out
    from broker.views import saving_cell

    for r in report["by_team"]:  # word for word as the page says it
        assert saving_cell(r["saving"], r["saving_percent"]) in lines[r["team"]], out
    assert report["rounding_note"] in " ".join(out.split()), out

    reply = blocks.costs_reply(report, "http://x/dashboard")
    assert report["rounding_note"] in str(reply.blocks)

    job = store.get_job("j-c1")
    one = httpx.get(f"{server}/v1/costs/jobs/j-c1", headers=auth(world.ADMIN)).json()
    assert one["spent_of_budget"] == {"spent": "$0.002", "budget": "$0.002"}
    assert "$0.002 of its $0.002 budget" in str(blocks.job_costs_reply(job, one, "http://x/dashboard").blocks)
    assert "spent $0.002 of $0.002" in blocks.job_line(job)


@pytest.mark.parametrize("spent, budget, says", [
    pytest.param(2_000, 2_000, "($0.002 of $0.002)", id="a $0.002 budget all spent: $0.002 of $0.002, not $0.0020"),
    pytest.param(1_250, 1_250, "($0.00125 of $0.00125)", id="never a spend shown above its cap ($0.0013 of $0.00125)"),
    pytest.param(1_500_000, 2_000_000, "($1.50 of $2.00)", id="a budget in cents reads as it did"),
])
def test_a_budget_warning_in_slack_says_the_spend_beside_the_budget_alike(spent, budget, says):
    from broker.models import Event
    from broker.slack.messages import notification

    job = world.job("j-w", "team-a", JobState.RUNNING, submitted=0, budget=budget, spent=spent, attempts=0)
    event = Event(job_id="j-w", time=60.0, event="budget_warning", from_state="running", to_state="running",
                  reason="", actor="engine", data={"percent": spent * 100 // budget})
    text = str(notification(event, job, [], [], dashboard_url="http://x/dashboard"))
    assert says in text, text


@pytest.mark.parametrize("spent, budget, says", [
    pytest.param(3_600_000, 3_604_000, "was stopped: it spent its budget ($3.600 of $3.604).",
                 id="all but a hundredth spent: it spent its budget"),
    pytest.param(900, 1_200, "was stopped: it spent $0.0009 of its $0.0012 budget, and what is left ($0.0003) does not "
                             "pay for more running and a clean stop.", id="a quarter left: said, not 'spent its budget'"),
])
def test_a_budget_stop_in_slack_says_what_is_left_when_it_is_more_than_a_hundredth(spent, budget, says):
    from broker.models import Event
    from broker.slack.messages import notification

    job = world.job("j-w", "team-a", JobState.STOPPED_BUDGET, submitted=0, budget=budget, spent=spent, attempts=1)
    event = Event(job_id="j-w", time=60.0, event="ended", from_state="stopping", to_state="stopped_budget",
                  reason="", actor="engine", data={})
    text = str(notification(event, job, [], [], dashboard_url="http://x/dashboard"))
    assert says in text, text


@pytest.mark.parametrize("pinned", [None, "ondemand"])
def test_a_job_already_pinned_to_on_demand_is_not_offered_a_switch_there(pinned):
    from dataclasses import replace

    from broker.slack.messages import continue_buttons

    job = replace(world.job("j-w", "team-a", JobState.STOPPED_BUDGET, submitted=0, budget=1_200, spent=900,
                            attempts=1), force_tier=pinned)
    labels = [b["text"]["text"] for b in continue_buttons(job, 40, 50)["elements"]]
    assert ("Switch to on-demand" in labels) is (pinned is None), labels
    assert "Resume from step 40" in labels
