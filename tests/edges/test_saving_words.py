"""A saving against on-demand on every edge: rounded down, consistent with the figures beside it, "nothing to
compare" when there is none; and a budget typed with an exponent is refused on every edge.

The auditor's broker: `broker costs j-…` printed "spent $0.0001; the same work on on-demand: $0.0003; saved $0.0003
(80%)" for an exact 56 / 280 / 224 micro-dollars, a Slack notice "Cost $0.0047; saved $0.0063 against on-demand
($0.0109)" for 4610 / 10899 / 6289: each saving rounded up, as a cost is, so overstated. An empty broker's
`broker costs` said "saved $0.00", and a job billed 0 s "saved $0.00 against on-demand ($0.00)" in its notice and
on the dashboard, where the Saved card says "nothing to compare with on-demand". `/broker budget j-… 1e3` set
$1,000.00.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from testports import free_port

from broker.lifecycle import AttemptState, JobState
from pricing.money import shown, to_micros

from . import world
from .conftest import auth, build_app, serving, serving_world
from .test_dashboard import chromium
from .test_slack import command, engine_event, slack, slack_app, stub, text_of  # noqa: F401  (fixtures, reused)

NOTHING = "nothing to compare with on-demand"


def _job(store, now: float, job_id: str, *, spent: int, equivalent: int, seconds: int = 1) -> None:
    """A finished spot job of team A, one attempt of ``seconds`` that cost ``spent`` and whose on-demand equivalent
    is ``equivalent`` (its placement's on-demand price makes it so, exactly)."""
    od = equivalent * 3600 // max(seconds, 1)
    job = world.job(job_id, "team-a", JobState.SUCCEEDED, submitted=now - 7200, budget=1_000_000, spent=spent,
                    attempts=1, updated=now - 3600)
    world._commit(store, job, [world.attempt(job_id, 1, AttemptState.SUCCEEDED,
                                             world.spot("us-east-1a", spent * 3600 // max(seconds, 1), od=od),
                                             start=now - 7000, seconds=seconds, cost=spent)])


def _auditors(store, now: float) -> None:
    _job(store, now, "j-s1", spent=56, equivalent=280)
    _job(store, now, "j-s2", spent=4_610, equivalent=10_899)
    _job(store, now, "j-z", spent=0, equivalent=0, seconds=0)  # billed 0 s: nothing to compare


@pytest.fixture
def server(tmp_path, store, seeded):
    _auditors(store, seeded.now)
    with serving_world(tmp_path, store) as url:
        yield url


def test_the_api_keeps_exact_micros_and_writes_the_saving_rounded_down(server):
    got = {}
    for job_id in ("j-s1", "j-s2", "j-z"):
        got[job_id] = httpx.get(f"{server}/v1/costs/jobs/{job_id}", headers=auth(world.ADMIN)).json()
    s1, s2, z = got["j-s1"], got["j-s2"], got["j-z"]
    assert (s1["spent"], s1["ondemand_equivalent"], s1["saving"], s1["saving_percent"]) == (
        {"micros": 56, "usd": "$0.0001"}, {"micros": 280, "usd": "$0.0003"}, {"micros": 224, "usd": "$0.0002"}, 80)
    assert (s2["spent"]["usd"], s2["ondemand_equivalent"]["usd"], s2["saving"], s2["saving_percent"]) == (
        "$0.0047", "$0.0109", {"micros": 6_289, "usd": "$0.0062"}, 57)
    assert (z["saving"], z["saving_percent"]) == ({"micros": 0, "usd": "$0.00"}, None)


def _shown_add_up(row: dict) -> None:
    spent = row["total"] if "total" in row else row["spent"]
    saving, equivalent = row["saving"], row["ondemand_equivalent"]
    assert saving["micros"] == equivalent["micros"] - spent["micros"], row  # exact on the wire
    if saving["micros"] >= 0 and not saving["usd"].startswith("under "):
        value = to_micros(saving["usd"], exact=True)
        assert value <= saving["micros"], row  # never overstated
        assert to_micros(spent["usd"], exact=True) + value <= to_micros(equivalent["usd"], exact=True), row
        assert to_micros(spent["usd"], exact=True) == shown(spent["micros"]), row


def test_every_saving_in_the_report_reads_no_more_than_its_spend_and_on_demand_figures_leave(server):
    r = httpx.get(f"{server}/v1/costs?period=7d&team=team-a", headers=auth(world.ADMIN)).json()
    rows = [r["totals"], *r["by_day"], *r["by_team"], *r["top_jobs"]]
    for row in rows:
        _shown_add_up(row)
    top = {j["id"]: j for j in r["top_jobs"]}
    assert top["j-s1"]["saving"]["usd"] == "$0.0002" and top["j-s2"]["saving"]["usd"] == "$0.0062"


def test_the_cli_says_the_saving_rounded_down_and_nothing_to_compare_for_a_job_billed_0_s(server, capsys):
    from broker.cli import main

    said = {}
    for job_id in ("j-s1", "j-s2", "j-z"):
        assert main(["costs", "--url", server, "--token", world.ADMIN, job_id]) == 0
        said[job_id] = capsys.readouterr().out
    assert "spent $0.0001; the same time on on-demand: $0.0003; saved $0.0002 (80%)" in said["j-s1"], said["j-s1"]
    assert "spent $0.0047; the same time on on-demand: $0.0109; saved $0.0062 (57%)" in said["j-s2"], said["j-s2"]
    # nothing to compare: no on-demand figure is named beside it
    assert f"spent $0.00; {NOTHING}" in said["j-z"] and "the same time on on-demand" not in said["j-z"], said["j-z"]
    assert "saved $0.00" not in said["j-z"]


def test_an_empty_broker_s_costs_say_nothing_to_compare(tmp_path, store, capsys):
    from broker.cli import main

    with serving_world(tmp_path, store) as url:
        assert main(["costs", "--url", url, "--token", world.ADMIN]) == 0
    out = capsys.readouterr().out
    assert f"spent $0.00; {NOTHING}" in out and "the same time on on-demand" not in out, out
    assert "saved $0.00" not in out


def test_slack_says_the_saving_rounded_down_and_nothing_to_compare(slack_app, slack, store, stub):  # noqa: F811
    _auditors(store, store.get_job("j-a1").submitted_at + 3 * 86_400)
    reply = text_of(command(slack, "costs j-s2").json())
    assert "Saved $0.0062 (57%) against the same time on on-demand ($0.0109)." in reply, reply
    zero = text_of(command(slack, "costs j-z").json())
    assert NOTHING in zero.lower() and "saved $0.00" not in zero.lower(), zero

    for job_id in ("j-s2", "j-z"):
        job = store.get_job(job_id)
        slack_app.state.notifier.handle(engine_event(job, "succeed", attempt=1), job)
    first, second = (text_of(m) for m in stub.wait_for("/api/chat.postMessage", 2))
    assert "Cost $0.0047; saved $0.0062 (57%) against on-demand ($0.0109)" in first, first
    assert f"Cost $0.00; {NOTHING}" in second and "saved $0.00" not in second, second


def test_the_dashboard_s_job_panel_says_the_saving_as_the_cli_does(server):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server}/dashboard?token={world.ADMIN}#job=j-z")
        page.wait_for_selector("#job:not([hidden]) #attempts tbody tr")
        zero = page.text_content("#job-summary")
        page.goto(f"{server}/dashboard?token={world.ADMIN}#job=j-s1")
        page.wait_for_selector("#job:not([hidden]) #attempts tbody tr")
        page.wait_for_function("document.getElementById('job-title').textContent.includes('j-s1')")
        s1 = page.text_content("#job-summary")
    assert f"of $1.00 · {NOTHING}" in zero and "saved $0.00" not in zero and "would have cost" not in zero, zero
    assert "the same time on on-demand would have cost $0.0003, saved $0.0002 (80%)" in s1, s1


def test_the_dashboard_s_saving_words_agree_with_the_cli_s(server):
    """dashboard.js savingWords against broker.views.saving_words, on the cases that differ."""
    from broker.views import money, saving_words

    cases = [(224, 80), (0, None), (0, 0), (-4_600, None), (-100_000, -10), (-4_600, -449_900)]
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        said = page.evaluate("cases => cases.map(([m, usd, p]) => savingWords({micros: m, usd}, p))",
                             [[m, money(m)["usd"], p] for m, p in cases])
    assert said == [saving_words(money(m), p) for m, p in cases]
    assert said[1] == NOTHING and said[2] == "saved $0.00 (0%)"


def test_the_dashboard_s_durations_read_as_the_cli_s():
    """dashboard.js duration against broker.views.duration: 4,500 s read 1.3 h there (toFixed rounds half up) and
    1.2 h in the CLI (Python's format rounds half to even); both now read whole tenths, rounded down."""
    from broker.views import duration

    seconds = [0, 59, 60, 3599, 3600, 4500, 4499, 8100, 5400, 35999, 36000, 360000 - 1]
    with chromium() as browser:
        page = browser.new_page()
        source = (Path(__file__).resolve().parents[2] / "broker/api/static/dashboard.js").read_text()
        body = source[source.index("function duration(seconds)"):]
        body = body[:body.index("\n}\n") + 3]
        said = page.evaluate(f"(xs) => {{ {body}; return xs.map(duration); }}", seconds)
    assert said == [duration(s) for s in seconds]
    assert said[5] == "1.2 h" and said[7] == "2.2 h" and said[-1] == "99.9 h"


# -- a budget with an exponent ------------------------------------------------------------------------


def test_a_budget_typed_with_an_exponent_is_refused_on_every_edge(tmp_path, store, seeded, capsys,
                                                                   slack):  # noqa: F811
    from broker.cli import main

    with TestClient(build_app(world.settings(tmp_path), store)) as client:
        for typed in ("1e3", "nan", "inf"):
            r = client.post("/v1/jobs/j-a2/budget", json={"budget_usd": typed}, headers=auth(world.TOKENS["team-a"]))
            assert r.status_code == 422 and r.json()["field"] == "budget_usd", r.text
            r = client.post("/v1/jobs", json={"run": "echo hi", "broker": {"budget_usd": typed}},
                            headers=auth(world.TOKENS["team-a"]))
            assert r.status_code == 422 and r.json()["field"] == "broker.budget_usd", r.text
        assert store.get_job("j-a2").budget == 2_000_000
        # JSON numbers are numbers: 5 and 5.5 still set a budget
        for number, micros in ((5, 5_000_000), (5.5, 5_500_000)):
            r = client.post("/v1/jobs/j-a2/budget", json={"budget_usd": number}, headers=auth(world.TOKENS["team-a"]))
            assert r.status_code == 200 and r.json()["budget"]["micros"] == micros, r.text

        port = free_port()
        with serving(client.app, port) as url:
            assert main(["budget", "--url", url, "--token", world.TOKENS["team-a"], "j-a2", "1e3"]) != 0
        out = capsys.readouterr()
        assert "budget_usd" in out.out + out.err
        assert store.get_job("j-a2").budget == 5_500_000

    reply = text_of(command(slack, "budget j-a2 1e3").json())
    assert "`1e3` is not an amount of dollars" in reply and "Budget raised" not in reply, reply
    assert store.get_job("j-a2").budget == 5_500_000


# -- on-prem spend alone: nothing to compare, in the headline and in the team table alike ---------------------------


def _onprem_job(store, now: float, job_id: str, team: str, cost: int) -> None:
    """A finished job of ``team`` that ran one hour on an on-prem pool, quoted no on-demand price: nothing to compare."""
    job = world.job(job_id, team, JobState.SUCCEEDED, submitted=now - 7200, budget=10_000_000, spent=cost,
                    attempts=1, updated=now - 3600)
    world._commit(store, job, [world.attempt(job_id, 1, AttemptState.SUCCEEDED, world.onprem(cost),
                                             start=now - 7000, seconds=3600, cost=cost)])


@pytest.fixture
def onprem_only(tmp_path, store):
    import time

    now = time.time()
    _onprem_job(store, now, "j-op1", "team-a", 2_640_000)
    _onprem_job(store, now, "j-op2", "team-b", 1_390_000)
    with serving_world(tmp_path, store, lifespan="on") as url:
        yield url


def test_the_cli_s_team_table_names_no_on_demand_figure_where_the_headline_says_nothing_to_compare(onprem_only,
                                                                                                    capsys):
    from broker.cli import main

    assert main(["costs", "--url", onprem_only, "--token", world.ADMIN]) == 0
    out = capsys.readouterr().out
    assert f"spent $4.03; {NOTHING}" in out, out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("team-")}
    # the "same time on-demand" column repeated the spend ($2.64, $1.39) under "nothing to compare"
    assert rows == {"team-a": ["team-a", "$2.64", "—", "—"], "team-b": ["team-b", "$1.39", "—", "—"]}, out


def test_the_dashboard_s_team_table_names_no_on_demand_figure_where_the_card_says_nothing_to_compare(onprem_only):
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{onprem_only}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#teams tbody tr td")
        note = page.text_content("#total-ondemand-note")
        rows = page.eval_on_selector_all("#teams tbody tr", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    assert note == NOTHING
    assert rows == [["team-a", "$2.64", "—", "—"], ["team-b", "$1.39", "—", "—"]], rows
