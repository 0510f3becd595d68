"""`broker costs`: a job that ran on on-demand read "saved $0.00 (0%)" against on-demand, while on-prem jobs with
nothing to compare read "—". On-demand has nothing to compare with on-demand: its saving is "—" too
(``saving_percent`` null), in the report's rows, its own costs and every edge that words them; its on-demand
equivalent stays its own cost, so the figures and the totals are what they were (``broker/costs.py``)."""

from __future__ import annotations

from edges import world

from broker import costs
from broker.cli import _saving_line
from broker.lifecycle import AttemptState, JobState
from broker.views import NOTHING_TO_COMPARE, saving_cell

DAY = 86_400
START = 10 * DAY


def _ran(job_id, team, placement, cost):
    j = world.job(job_id, team, JobState.SUCCEEDED, submitted=START, budget=10**9, spent=cost, attempts=1)
    a = world.attempt(job_id, 1, AttemptState.SUCCEEDED, placement, start=START, seconds=3600, cost=cost)
    return j, a


# as the scheduler stores an on-demand placement (broker.offers.placement_record): its own price as its on-demand one
ONDEMAND = {**world.ondemand(3_000_000), "ondemand_price_per_hour": 3_000_000}


def test_an_on_demand_job_has_nothing_to_compare_as_an_on_prem_job_with_no_cloud_shape_has():
    j, a = _ran("j-od", "t", ONDEMAND, 3_000_000)
    c = costs.job_costs(j, [a])
    assert c["saving_percent"] is None
    # the figures stay: its equivalent is its own cost, its saving exactly $0
    assert c["ondemand_equivalent"]["micros"] == 3_000_000 and c["saving"]["micros"] == 0
    assert _saving_line(c["spent"], c["ondemand_equivalent"], c["saving"], c["saving_percent"]) == \
        f"  spent $3.00; {NOTHING_TO_COMPARE}"
    # also without the placement's on-demand price (a placement stored before it was kept)
    j, a = _ran("j-od2", "t", world.ondemand(3_000_000), 3_000_000)
    assert costs.job_costs(j, [a])["saving_percent"] is None


def test_among_the_most_expensive_jobs_an_on_demand_one_reads_a_dash_and_the_totals_keep_its_equivalent():
    od, od_a = _ran("j-od", "a", ONDEMAND, 3_000_000)
    pool, pool_a = _ran("j-pool", "a", world.onprem(200_000), 200_000)  # no cloud shape: nothing to compare
    sp, sp_a = _ran("j-spot", "b", world.spot("z", 500_000, od=2_000_000), 500_000)
    win = costs.Window(START - DAY, START + 2 * DAY, "custom")
    r = costs.report([od, pool, sp], {"j-od": [od_a], "j-pool": [pool_a], "j-spot": [sp_a]}, win=win, now=win.until,
                     positions={}, team=None)
    cells = {j["id"]: saving_cell(j["saving"], j["saving_percent"]) for j in r["top_jobs"]}
    assert cells == {"j-od": "—", "j-pool": "—", "j-spot": "saved $1.50 (75%)"}, cells
    teams = {t["team"]: t for t in r["by_team"]}
    assert teams["a"]["saving_percent"] is None and saving_cell(teams["a"]["saving"], None) == "—"
    # the totals weigh the spot job against on-demand, the on-demand job's cost counted on both sides as before
    t = r["totals"]
    assert t["ondemand_equivalent"]["micros"] == 3_000_000 + 200_000 + 2_000_000
    assert t["spent"]["micros"] == 3_000_000 + 200_000 + 500_000
    assert t["saving"]["micros"] == 1_500_000 and t["saving_percent"] == 28  # 1.5 of 5.2, rounded down
