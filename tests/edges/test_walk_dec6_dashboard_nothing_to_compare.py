"""The dashboard's total cards for spend that had no on-demand price, beside what ``broker costs`` says of it.

A team whose only spend was on a pool with no cloud shape like it (no on-demand price found, none in its quote) has
``saving_percent`` null: its "on-demand equivalent" is its own cost. ``broker costs`` said "spent $0.10; nothing to
compare with on-demand"; the dashboard's card said "The same time on on-demand $0.10", as if on-demand would have
cost the same. The page runs in Debian's headless Chromium (the fixtures of ``test_dashboard``).
"""

from __future__ import annotations

import httpx

from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth
from .test_dashboard import _choose, chromium, server  # noqa: F401  (server: the fixture, reused)

H = 3600


def _uncompared(store, now: float) -> None:
    """A job of team C that ran half an hour on a pool at $0.20/h, with no on-demand price anywhere to weigh it."""
    j = world.job("j-n1", "team-c", JobState.SUCCEEDED, submitted=now - 2 * H, budget=1_000_000, spent=100_000,
                  attempts=1, updated=now - H)
    world._commit(store, j, [world.attempt("j-n1", 1, AttemptState.SUCCEEDED, world.onprem(200_000),
                                           start=now - 2 * H, seconds=1800, cost=100_000)])


def test_the_on_demand_card_says_there_is_nothing_to_compare_as_the_cli_does(server, store, seeded,  # noqa: F811
                                                                             capsys):
    from broker.cli import main

    _uncompared(store, seeded.now)
    report = httpx.get(f"{server}/v1/costs?period=7d&team=team-c", headers=auth(world.ADMIN)).json()
    totals = report["totals"]
    assert totals["saving_percent"] is None and totals["saving"]["micros"] == 0
    assert totals["spent"]["usd"] == totals["ondemand_equivalent"]["usd"] == "$0.10"

    assert main(["costs", "--url", server, "--token", world.ADMIN, "--period", "7d", "--team", "team-c"]) == 0
    cli = capsys.readouterr().out
    assert "spent $0.10; nothing to compare with on-demand" in cli, cli

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        compared = [page.text_content(s) for s in ("#total-ondemand", "#total-ondemand-note")]
        _choose(page, "team-c", "7d")
        cards = [page.text_content(s) for s in ("#total-spent", "#total-ondemand", "#total-ondemand-note",
                                               "#total-saving", "#total-saving-pct")]
        _choose(page, "", "7d")  # back to every team: the figure comes back, the note goes
        again = [page.text_content(s) for s in ("#total-ondemand", "#total-ondemand-note")]

    assert cards == ["$0.10", "—", "nothing to compare with on-demand", "—", "nothing to compare with on-demand"]
    assert compared[0].startswith("$") and compared[1] == "", compared
    assert again == compared
