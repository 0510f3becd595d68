"""A team's monthly cap as a team lead reads it: the dashboard (headless Chromium), ``broker costs`` and Slack's
``costs`` say this month's spend, what the team's jobs not ended hold and what is free, the figures of
``GET /v1/costs``' ``monthly_caps`` and ``/metrics``; a team without a cap shows none."""

from __future__ import annotations

from dataclasses import replace

import httpx

from broker.config import Team
from broker.team_budget import month_of
from testports import free_port

from . import world
from .conftest import auth, build_app, serving
from .test_dashboard import _choose, chromium


def test_the_page_the_cli_and_slack_say_where_a_capped_team_stands(tmp_path, store, seeded, capsys):
    from broker.cli import main
    from broker.slack import blocks

    port = free_port()
    base = world.settings(tmp_path, public_url=f"http://127.0.0.1:{port}")
    teams = {**base.teams, "team-a": replace(base.teams["team-a"], monthly_budget=50_000_000)}
    with serving(build_app(replace(base, teams=teams), store), port, lifespan="on") as url:
        report = httpx.get(f"{url}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
        [cap] = report["monthly_caps"]
        month = month_of(seeded.now)
        # the seeded world's team A: its running job holds $0.50 of its $2.00 budget, its queued job all of its own
        held = sum(j.budget - j.spent for j in store.list_jobs(team="team-a", limit=100) if not j.state.is_final)
        assert (cap["team"], cap["month"], cap["held"]["micros"]) == ("team-a", month.name, held)
        assert cap["free"]["micros"] == 50_000_000 - cap["spent"]["micros"] - held
        assert cap["text"].startswith(f"{cap['spent']['usd']} spent in {month.name} and {cap['held']['usd']} held by")
        assert cap["text"].endswith(f"of a $50.00 monthly cap: {cap['free']['usd']} free")
        team_b = httpx.get(f"{url}/v1/costs", headers=auth(world.TOKENS["team-b"])).json()
        assert team_b["monthly_caps"] == []

        with chromium() as browser:
            page = browser.new_page(viewport={"width": 1400, "height": 1400})
            page.goto(f"{url}/dashboard?token={world.ADMIN}")
            page.wait_for_selector("#total-spent[data-micros]")
            shown = page.eval_on_selector_all("#monthly-caps p", "ps => ps.map(p => p.textContent)")
            visible = page.is_visible("#monthly-caps")
            _choose(page, "team-b", "7d")
            page.wait_for_function("() => document.getElementById('monthly-caps').hidden")
        assert visible and shown == [f"Team team-a: {cap['text']}"]

        # /metrics: the same figures, for an alert before a team's submits are refused
        from prometheus_client.parser import text_string_to_metric_families

        scraped = {(smp.name, tuple(smp.labels.items())): smp.value
                   for fam in text_string_to_metric_families(httpx.get(f"{url}/metrics").text) for smp in fam.samples}
        for name, key in (("broker_team_monthly_cap_dollars", "cap"), ("broker_team_month_spent_dollars", "spent"),
                          ("broker_team_month_held_dollars", "held")):
            assert round(scraped[(name, (("team", "team-a"),))] * 1_000_000) == cap[key]["micros"], name
            assert (name, (("team", "team-b"),)) not in scraped  # no cap, no series

        assert main(["costs", "--url", url, "--token", world.ADMIN, "--period", "7d"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert f"team team-a: {cap['text']}" in out, out
    assert f"Team team-a: {cap['text']}" in str(blocks.costs_reply(report, "http://x/dashboard").blocks)


def test_slacks_costs_says_where_a_capped_team_stands(tmp_path, store, seeded):
    """Slack's `costs` never set the report's monthly_caps, so its cap line, which the reply renders, never showed."""
    from fastapi.testclient import TestClient

    from .test_slack import SlackStub, command, slack_settings, text_of

    stub = SlackStub()
    try:
        base = slack_settings(tmp_path, stub)
        teams = {**base.teams, "team-a": replace(base.teams["team-a"], monthly_budget=50_000_000)}
        app = build_app(replace(base, teams=teams), store)
        with TestClient(app) as client:
            [cap] = client.get("/v1/costs", headers=auth(world.ADMIN)).json()["monthly_caps"]
            reply = text_of(command(client, "costs", user="U_A").json())
            other = text_of(command(client, "costs", user="U_B").json())
        app.state.notifier.close()
    finally:
        stub.close()
    assert f"Team team-a: {cap['text']}" in reply, reply
    assert "monthly cap" not in other, other
