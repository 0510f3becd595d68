"""What a walk through the cost views found (Dec 6), on the API, the CLI and the dashboard.

A job with no on-demand price to weigh against (an on-prem pool with no cloud shape like it, no on-demand tier in its
quote) read "saved $0.00 (0%)" among the most expensive jobs while its own costs said "nothing to compare", and its
attempts still named an "on-demand would be" figure: its own cost. The saving line said "the same work on on-demand"
for the same *billed time*, time redone after a preemption included. The time to recover was rounded down per
preemption ("18 s to recover" beside /metrics' 20.54 s; "0 s" for 0.4 s). The job panel said "succeeded — succeeded:
the run command exited 0".
"""

from __future__ import annotations

import re
from dataclasses import replace

import httpx
import pytest

from broker import costs
from broker.api.schema import CostReport
from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth, serving_world
from .test_dashboard import chromium

NOTHING = "nothing to compare with on-demand"


def _pool_job(store, now: float) -> None:
    """Team B's most expensive job: two hours on an on-prem pool, no on-demand tier in its quote (nothing to
    compare), ended with the reason the engine gives a success."""
    job = world.job("j-p0", "team-b", JobState.SUCCEEDED, submitted=now - 4 * 3600, budget=5_000_000, spent=700_000,
                    attempts=1, reason="succeeded: the run command exited 0", updated=now - 3600)
    att = world.attempt("j-p0", 1, AttemptState.SUCCEEDED, world.onprem(350_000), start=now - 3 * 3600,
                        seconds=2 * 3600, cost=700_000)
    att.reason = "succeeded: the run command exited 0"
    world._commit(store, job, [att])


@pytest.fixture
def server(tmp_path, store, seeded):
    _pool_job(store, seeded.now)
    with serving_world(tmp_path, store) as url:
        yield url


def test_a_top_job_with_nothing_to_compare_has_no_saving_percent_as_its_own_costs_say(server):
    r = httpx.get(f"{server}/v1/costs?period=7d&team=team-b", headers=auth(world.ADMIN))
    assert r.status_code == 200, r.text
    CostReport.model_validate_json(r.text, strict=True)
    top = {j["id"]: j for j in r.json()["top_jobs"]}
    assert top["j-p0"]["saving_percent"] is None, top["j-p0"]
    assert top["j-b1"]["saving_percent"] == 80  # on-prem with an on-demand tier in its quote: compared
    own = httpx.get(f"{server}/v1/costs/jobs/j-p0", headers=auth(world.ADMIN)).json()
    assert own["saving_percent"] is None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().split("   ") if c.strip()]  # piped: plain columns, 3 spaces apart


def test_the_cli_shows_a_dash_for_a_top_job_and_for_attempts_with_nothing_to_compare(server, capsys):
    from broker.cli import main

    assert main(["costs", "--url", server, "--token", world.ADMIN, "--team", "team-b"]) == 0
    team = capsys.readouterr().out
    (row,) = [_cells(line) for line in team.splitlines() if "j-p0" in line]
    assert row[-1] == "—" and "saved $0.00" not in team, team
    assert "the same time on on-demand: $2.70; saved $1.60 (59%)" in team, team  # not "the same work"

    assert main(["costs", "--url", server, "--token", world.ADMIN, "j-p0"]) == 0
    job = capsys.readouterr().out
    assert f"spent $0.70; {NOTHING}" in job, job
    (attempt,) = [_cells(line) for line in job.splitlines() if _cells(line)[:1] == ["1"]]
    # its own cost ($0.70) was named again in the on-demand column, under a line saying there is nothing to compare
    assert attempt[-2:] == ["$0.70", "—"], job
    assert "same time on-demand" in job and "on-demand would be" not in job, job

    assert main(["costs", "--url", server, "--token", world.ADMIN, "j-b1"]) == 0
    compared = capsys.readouterr().out
    (attempt,) = [_cells(line) for line in compared.splitlines() if _cells(line)[:1] == ["1"]]
    assert attempt[-2:] == ["$0.40", "$2.00"], compared  # compared: its on-demand figure stays


def test_the_dashboard_shows_a_dash_for_a_top_job_and_an_attempt_with_nothing_to_compare(server):
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#top tbody tr")
        top = {r.query_selector("td").inner_text(): [c.inner_text() for c in r.query_selector_all("td")]
               for r in page.query_selector_all("#top tbody tr")}
        card = page.locator(".card", has=page.locator("#total-ondemand")).inner_text()
        page.goto(f"{server}/dashboard?token={world.ADMIN}#job=j-p0")
        expect(page.locator("#job-title")).to_contain_text("j-p0")
        page.wait_for_selector("#job:not([hidden]) #attempts tbody tr")
        summary = page.text_content("#job-summary")
        (cells,) = [[c.inner_text() for c in r.query_selector_all("td")]
                    for r in page.query_selector_all("#attempts tbody tr")]
        page.goto(f"{server}/dashboard?token={world.ADMIN}#job=j-a1")
        expect(page.locator("#job-title")).to_contain_text("j-a1")
        a1 = page.text_content("#job-summary")
    job_row = next(v for k, v in top.items() if "j-p0" in k)
    assert job_row[-1] == "—" and "saved $0.00" not in " ".join(job_row), top
    assert "The same time on on-demand" in card, card
    assert NOTHING in summary and "would have cost" not in summary, summary
    assert cells[-2:] == ["$0.70", "—"], cells
    # the state said once: "succeeded — succeeded: the run command exited 0" read it twice
    assert cells[3] == "succeeded: the run command exited 0", cells
    assert "the same time on on-demand would have cost $20.00" in a1, a1


# -- the time to recover: summed exactly, rounded once, up ---------------------------------------------------------


def _tries(gaps: list[float], *, t0: float = 1_000_000.0) -> tuple:
    """A spot job preempted once per gap, each attempt resuming ``gap`` seconds (exact floats) after the last ended."""
    job = world.job("j-r", "team-a", JobState.SUCCEEDED, submitted=t0, budget=10**9, spent=0, attempts=len(gaps) + 1,
                    updated=t0 + 10_000)
    tries, start = [], t0
    for n in range(1, len(gaps) + 2):
        state = AttemptState.PREEMPTED if n <= len(gaps) else AttemptState.SUCCEEDED
        att = world.attempt("j-r", n, state, world.spot("z", 500_000, od=2_000_000), start=start, seconds=100, cost=1)
        att.started_at = start
        tries.append(att)
        if n <= len(gaps):
            start = att.ended_at + gaps[n - 1]
    return job, tries


@pytest.mark.parametrize("gaps, each, total", [
    ([10.27, 10.27], [11, 11], 21),  # rounded down each: 10 + 10 = 20 s, beside 20.54 s in /metrics
    ([0.4], [1], 1),  # "0 s" for a recovery that took 0.4 s
    ([3.0, 4.0], [3, 4], 7),  # whole seconds stay as they are
], ids=["two of 10.27 s: 21 s", "0.4 s: 1 s", "whole seconds"])
def test_the_time_to_recover_is_the_exact_sum_rounded_up_once(gaps, each, total):
    job, tries = _tries(gaps)
    win = costs.Window(job.submitted_at - 10, job.submitted_at + 10_000, "custom")
    pre = costs.report([job], {job.id: tries}, win=win, now=win.until, positions={}, team=None)["preemptions"]
    assert sorted(e["recovery_seconds"] for e in pre["events"]) == each
    assert pre["recovery_seconds"] == total
    assert total - 1 < sum(costs.recoveries(tries)) <= total  # what /metrics sums, exactly
    assert all(set(e) == {"job_id", "team", "attempt", "zone", "tier", "state", "time", "recovery_seconds",
                          "recovered", "waiting"} for e in pre["events"])


def test_the_float_noise_of_a_difference_of_timestamps_adds_no_second():
    job, tries = _tries([3.0])
    tries[1].started_at = tries[0].ended_at + 3.0000000004
    win = costs.Window(job.submitted_at - 10, job.submitted_at + 10_000, "custom")
    assert costs.report([job], {job.id: tries}, win=win, now=win.until, positions={},
                        team=None)["preemptions"]["recovery_seconds"] == 3



# -- a job of two nodes billed for 16.9201335 s (QA, Dec 7) -----------------------------------------------------------
# `broker costs JOB` printed the exact billed seconds raw ("16.9201335"), and no cost view said how many nodes an
# attempt held, beside a $/h for all of them next to "g5.xlarge".

BILLED = 16.9201335


def _two_node_job(store, now: float) -> None:
    job = world.job("j-n2", "team-b", JobState.SUCCEEDED, submitted=now - 600,
                    budget=5_000_000, spent=4_000 + 2_400, attempts=2, updated=now - 60)
    place = {**world.spot("sim-a", 849_200, od=2_012_000), "num_nodes": 2}
    first = world.attempt("j-n2", 1, AttemptState.PREEMPTED, place, start=now - 500, seconds=17, cost=4_000)
    first = replace(first, billed_until=now - 500 + BILLED, ended_at=now - 500 + BILLED)
    second = world.attempt("j-n2", 2, AttemptState.SUCCEEDED, {**place, "zone": "sim-b", "location": "sim-b"},
                           start=now - 400, seconds=10, cost=2_400)
    world._commit(store, job, [first, second])


@pytest.fixture
def two_nodes(tmp_path, store, seeded):
    _two_node_job(store, seeded.now)
    with serving_world(tmp_path, store) as url:
        yield url


def test_an_attempts_exact_seconds_and_its_nodes_are_said_by_the_api_and_the_cli(two_nodes, capsys):
    from broker.cli import main

    r = httpx.get(f"{two_nodes}/v1/costs/jobs/j-n2", headers=auth(world.ADMIN))
    assert r.status_code == 200, r.text
    rows = r.json()["attempts"]
    assert [(a["num_nodes"], a["seconds"]) for a in rows] == [(2, pytest.approx(BILLED)), (2, 10)], rows
    assert all(a["price_per_hour"]["usd"] == "$0.8492" for a in rows)
    one = httpx.get(f"{two_nodes}/v1/costs/jobs/j-b1", headers=auth(world.ADMIN)).json()["attempts"]
    assert {a["num_nodes"] for a in one} == {1}

    assert main(["costs", "--url", two_nodes, "--token", world.ADMIN, "j-n2"]) == 0
    out = capsys.readouterr().out
    assert "16.92" not in out, out  # the exact seconds, printed raw
    lines = [_cells(line) for line in out.splitlines() if _cells(line)[:1] in (["1"], ["2"])]
    assert lines[0][:8] == ["1", "preempted", "spot", "sim-a", "g5.xlarge", "2", "$0.8492", "16 s"], out
    assert lines[1][6:8] == ["$0.8492", "10 s"], out
    assert "for all the nodes of an attempt together" in out, out
    # a job of one node: no nodes column, and its seconds as a span too
    assert main(["costs", "--url", two_nodes, "--token", world.ADMIN, "j-b1"]) == 0
    single = capsys.readouterr().out
    (attempt,) = [_cells(line) for line in single.splitlines() if _cells(line)[:1] == ["1"]]
    assert "nodes" not in single and re.fullmatch(r"[0-9]+ (s|min)|[0-9]+\.[0-9] h", attempt[6]), single


def test_the_dashboards_job_panel_says_an_attempts_nodes_and_its_exact_seconds_as_a_span(two_nodes):
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{two_nodes}/dashboard?token={world.ADMIN}#job=j-n2")
        expect(page.locator("#job-title")).to_contain_text("j-n2")
        page.wait_for_selector("#job:not([hidden]) #attempts tbody tr")
        cells = [[c.inner_text() for c in r.query_selector_all("td")]
                 for r in page.query_selector_all("#attempts tbody tr")]
    assert cells[0][2] == "2 nodes of g5.xlarge in sim-a" and cells[0][4] == "16 s", cells
