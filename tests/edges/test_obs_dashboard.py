"""The dashboard after the monitoring walkthrough: recent failures and budget stops, in headless Chromium, and the
display nits (the total's decimals, a long job name, ids kept whole, the legend on a phone)."""

from __future__ import annotations

import time
from dataclasses import replace

import httpx
import pytest
from fastapi.testclient import TestClient

from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth, serving_world
from .test_dashboard import chromium


def _failed(store, job_id, team, state, *, ended, spent=0, reason="", diagnosis=None, name=None):
    j = world.job(job_id, team, state, submitted=ended - 600, budget=1_000_000, spent=spent, attempts=0,
                  reason=reason, updated=ended, diagnosis=diagnosis)
    if name:
        j = replace(j, name=name, spec={**j.spec, "name": name})
    world._commit(store, j, [])


def test_the_costs_report_lists_the_newest_failures_and_budget_stops_bounded(client, store, seeded):
    now = seeded.now
    for i in range(12):  # failed at once, having spent nothing: in no other table
        _failed(store, f"j-f{i:02d}", "team-a", JobState.FAILED, ended=now - 3600 + i, reason="failed: exit 1")
    _failed(store, "j-s1", "team-a", JobState.STOPPED_BUDGET, ended=now - 60, spent=1_000_000,
            reason="stopped_budget: spent $1.00 of its $1.00 budget")
    body = client.get("/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    f = body["failures"]
    assert f["count"] == 14 and len(f["jobs"]) == 10  # 12 + the budget stop + j-b1 (seeded): ten listed
    first = f["jobs"][0]
    assert (first["id"], first["state"], first["spent"]["usd"]) == ("j-s1", "stopped_budget", "$1.00")
    assert first["reason"] == "spent $1.00 of its $1.00 budget"
    assert [j["id"] for j in f["jobs"][1:4]] == ["j-f11", "j-f10", "j-f09"]  # newest end first
    assert f["jobs"][1]["spent"]["micros"] == 0
    # team B's failure: its diagnosis in plain words; a team's token sees its own only
    b = client.get("/v1/costs?period=7d", headers=auth(world.TOKENS["team-b"])).json()["failures"]
    assert b["count"] == 1 and b["jobs"][0]["id"] == "j-b1"
    assert b["jobs"][0]["reason"].startswith("Out of GPU memory at step 450")
    # a failure older than the window is not listed
    day = client.get("/v1/costs?period=24h&team=team-b", headers=auth(world.ADMIN)).json()["failures"]
    assert day == {"count": 0, "jobs": []}


@pytest.fixture
def server(tmp_path, store, seeded):
    with serving_world(tmp_path, store, lifespan="on") as url:
        yield url


def test_the_page_shows_recent_failures_and_budget_stops(server, store, seeded):
    """A failed job that spent $0 appeared nowhere on the page; one that spent something only among the ten most
    expensive."""
    now = seeded.now
    _failed(store, "j-f0", "team-a", JobState.FAILED, ended=now - 120, reason="failed: the run command exited with "
            "code 2")
    _failed(store, "j-s1", "team-a", JobState.STOPPED_BUDGET, ended=now - 60, spent=1_000_000,
            reason="stopped_budget: spent $1.00 of its $1.00 budget")
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#failures tbody tr.clickable")
        rows = page.locator("#failures tbody tr").all_text_contents()
        assert len(rows) == 3, rows
        assert "j-s1" in rows[0] and "Stopped at its budget: spent $1.00 of its $1.00 budget" in rows[0]
        assert "j-f0" in rows[1] and "Failed: the run command exited with code 2" in rows[1] and "$0.00" in rows[1]
        assert "j-b1" in rows[2] and "Out of GPU memory" in rows[2] and "$0.40" in rows[2]
        page.select_option("#team", "team-b")
        expect(page.locator("#failures tbody tr")).to_have_count(1)
        page.click("#failures tbody tr:has-text('j-b1')")  # opens the job
        page.wait_for_selector("#job:not([hidden])")
        assert "j-b1" in page.text_content("#job-title")


LONG = "finetune-" + "-".join(["llama3-70b-instruct-lora-r64-alpha128"] * 3) + "-s07"  # 126 letters


def _small_world(store, now):
    """One team-a job under a dollar whose total rounds to a whole cent ($0.09 for 89,942 micro-dollars) while its
    on-demand equivalent does not; named with 126 letters."""
    assert len(LONG) == 126
    j = world.job("j-small", "team-a", JobState.SUCCEEDED, submitted=now - 4000, budget=1_000_000, spent=89_942,
                  attempts=1, updated=now - 100)
    j = replace(j, name=LONG, spec={**j.spec, "name": LONG})
    world._commit(store, j, [world.attempt("j-small", 1, AttemptState.SUCCEEDED,
                                           world.spot("us-east-1a", 179_884, od=471_209), start=now - 3900,
                                           seconds=1860, cost=89_942)])


@pytest.fixture
def small(tmp_path, store):
    _small_world(store, time.time())
    with serving_world(tmp_path, store, lifespan="on") as url:
        yield url


def test_the_total_long_names_ids_and_the_legend_read_cleanly(small):
    totals = httpx.get(f"{small}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()["totals"]
    assert totals["spent"]["usd"] == "$0.09" and len(totals["ondemand_equivalent"]["usd"]) == len("$0.2357")
    with chromium() as browser:
        for width in (1280, 390):
            page = browser.new_page(viewport={"width": width, "height": 1000})
            page.goto(f"{small}/dashboard?token={world.ADMIN}")
            page.wait_for_selector("#top tbody tr.clickable")
            # the total to the same decimals as the cards beside it
            assert page.text_content("#total-spent") == "$0.0900", width
            assert page.get_attribute("#total-spent", "data-micros") == "89942"
            # a 126-letter name: one line, cut, the whole in its title; the id unbroken beside it
            name = page.locator("#top tbody tr:first-child .jobname")
            assert name.get_attribute("title") == LONG
            line = page.evaluate("parseFloat(getComputedStyle(document.body).lineHeight)")
            box = name.bounding_box()  # (the row itself is as tall as its saving cell, wrapped on a phone)
            assert box["height"] < 1.5 * line and box["width"] <= width / 2 + 24, (width, box)
            ident = page.locator("#top tbody tr:first-child .jobid").bounding_box()
            assert ident["height"] < 1.5 * line, (width, ident)
            assert "(j-small)" in page.text_content("#top tbody tr:first-child")
            # the legend's items on one line: never "spot" alone on a line of its own
            tops = page.eval_on_selector_all(".legend > span", "s => s.map(e => Math.round(e.getBoundingClientRect().top))")
            assert len(tops) == 3 and len(set(tops)) == 1, (width, tops)
            assert page.evaluate("document.documentElement.scrollWidth") <= width, width
            page.close()
