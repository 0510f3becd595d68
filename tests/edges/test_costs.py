"""The cost report: exact money, the on-demand-equivalent rule, windows, and who sees what."""

from __future__ import annotations

import pytest

from broker import costs
from broker.api.schema import CostReport, JobCosts
from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth

DAY = 86_400


def _one_attempt(placement, *, cost, seconds, quote_od=None, start=10 * DAY):
    j = world.job("j-x", "t", JobState.SUCCEEDED, submitted=start, budget=10**9, spent=cost, attempts=1,
                  quote_od=quote_od)
    a = world.attempt("j-x", 1, AttemptState.SUCCEEDED, placement, start=start, seconds=seconds, cost=cost)
    return j, a


@pytest.mark.parametrize("placement, quote_od, expected", [
    (world.spot("z", 500_000, od=2_000_000), None, 2_000_000),
    (world.ondemand(3_000_000), 9_999_999, 3_000_000),
    (world.onprem(200_000), 1_000_000, 1_000_000),
    (world.onprem(200_000), None, 200_000),
], ids=[
    "spot with the placement's on-demand price → that price",
    "on-demand attempt → its own price, whatever the quote says",
    "on-prem with an on-demand tier in the quote → the quote's price",
    "nothing to compare with → the attempt's own price (saves $0)",
])
def test_ondemand_price_rule(placement, quote_od, expected):
    j, a = _one_attempt(placement, cost=1, seconds=3600, quote_od=quote_od)
    assert costs.ondemand_price(a, j) == expected


def test_on_demand_work_saves_exactly_nothing():
    j, a = _one_attempt(world.ondemand(3_000_000), cost=1_234_567, seconds=1481)
    assert costs.ondemand_equivalent(a, j) == 1_234_567


@pytest.mark.parametrize("cost, seconds, offset", [
    (1_000_001, 3 * DAY + 17, 5 * 3600 + 0.5),
    (7, 2 * DAY, 0),
    (999_999_999, 29 * DAY + 3, 23 * 3600 + 59),
], ids=["odd micros over three days and a bit", "seven micros over two days", "a large cost over a month"])
def test_days_add_up_exactly_to_the_window_and_windows_to_the_cost(cost, seconds, offset):
    start = 100 * DAY + offset
    j, a = _one_attempt(world.spot("z", 1), cost=cost, seconds=seconds, start=start)
    win = costs.Window(start - 3 * DAY, start + seconds + DAY, "custom")
    r = costs.report([j], {j.id: [a]}, win=win, now=win.until, positions={}, team=None)
    assert sum(d["total"]["micros"] for d in r["by_day"]) == r["totals"]["spent"]["micros"] == cost
    mid = start + seconds // 3
    left = costs.report([j], {j.id: [a]}, win=costs.Window(win.since, mid, "x"), now=mid, positions={}, team=None)
    right = costs.report([j], {j.id: [a]}, win=costs.Window(mid, win.until, "x"), now=mid, positions={}, team=None)
    assert left["totals"]["spent"]["micros"] + right["totals"]["spent"]["micros"] == cost
    assert 0 < left["totals"]["spent"]["micros"] < cost


@pytest.mark.parametrize("kwargs, field", [
    ({"period": "1y"}, "period"),
    ({"since": "yesterday"}, "since"),
    ({"since": "2025-02-01", "until": "2025-01-01"}, "since"),
    ({"period": "7d", "since": "2025-01-01"}, "period"),
], ids=["an unknown period", "a since that is not ISO", "since after until", "both period and since"])
def test_bad_windows_name_the_field(kwargs, field):
    with pytest.raises(costs.CostQueryError) as exc:
        costs.window(now=1_800_000_000, **kwargs)
    assert exc.value.field == field


@pytest.mark.parametrize("kwargs, says", [
    ({"since": "2030-01-01"}, "since: is not in the past: with no until, the window ends now"),
    ({"since": "2025-02-01", "until": "2025-01-01"}, "since: must be before until"),
], ids=["a since in the future, no until (was told 'must be before until', a bound never given)", "since after until"])
def test_an_empty_window_is_explained_in_the_terms_the_caller_used(kwargs, says):
    with pytest.raises(costs.CostQueryError, match=f"^{says}$"):
        costs.window(now=1_800_000_000, **kwargs)  # 2027-01-15


def test_admin_sees_every_team_and_the_hand_worked_totals(client):
    r = client.get("/v1/costs?period=7d", headers=auth(world.ADMIN))
    assert r.status_code == 200, r.text
    body = r.json()
    by_team = {t["team"]: t for t in body["by_team"]}
    for team, exp in world.EXPECTED.items():
        assert by_team[team]["spent"]["micros"] == exp["spent"]
        assert by_team[team]["ondemand_equivalent"]["micros"] == exp["ondemand_equivalent"]
        for tier in costs.TIERS:
            assert by_team[team]["by_tier"][tier]["micros"] == exp[tier]
    total = sum(e["spent"] for e in world.EXPECTED.values())
    assert body["totals"]["spent"] == {"micros": total, "usd": "$6.90"}
    assert body["totals"]["saving"]["micros"] == sum(e["ondemand_equivalent"] - e["spent"]
                                                     for e in world.EXPECTED.values())
    assert sum(d["total"]["micros"] for d in body["by_day"]) == total
    for tier in costs.TIERS:
        assert sum(d[tier]["micros"] for d in body["by_day"]) == body["totals"]["by_tier"][tier]["micros"]
    assert [j["id"] for j in body["top_jobs"]] == ["j-a1", "j-a2", "j-b1"]
    assert body["preemptions"]["count"] == 1
    assert body["preemptions"]["by_zone"] == [{"zone": "us-east-1a", "count": 1}]
    # preempted at t0+4h, the next attempt started at t0+5h+60s
    assert body["preemptions"]["recovery_seconds"] == 3600 + 60
    assert [(b["id"], b["percent"]) for b in body["budget_burn"]] == [("j-a2", 75)]
    assert body["budget_burn"][0]["hours_left"] == "0.16"  # $0.50 left at $3/h: 0.167 h, rounded down
    assert [(q["id"], q["position"]) for q in body["queue"]] == [("j-a3", 1)]
    assert "no capacity for 8x H100" in body["queue"][0]["reason"]
    CostReport.model_validate_json(r.text, strict=True)  # the shape /openapi.json documents, on a report with every part filled


def test_a_team_sees_only_its_own_spend(client):
    r = client.get("/v1/costs", headers=auth(world.TOKENS["team-b"])).json()
    assert r["team"] == "team-b" and r["teams"] == ["team-b"]
    assert r["totals"]["spent"]["micros"] == world.EXPECTED["team-b"]["spent"]
    assert [t["team"] for t in r["by_team"]] == ["team-b"]
    assert r["queue"] == [] and r["budget_burn"] == []
    refused = client.get("/v1/costs?team=team-a", headers=auth(world.TOKENS["team-b"]))
    assert refused.status_code == 403 and refused.json()["field"] == "team"
    assert client.get("/v1/costs").status_code == 401


def test_one_day_given_as_since_and_until_says_until_is_the_start_of_its_day(client):
    """`broker costs --since 2026-12-05 --until 2026-12-05` answered only "since: must be before until"."""
    r = client.get("/v1/costs", params={"since": "2026-12-05", "until": "2026-12-05"}, headers=auth(world.ADMIN))
    assert r.status_code == 422 and r.json()["field"] == "since", r.text
    assert "a date is the start of its day, so one day is since=D until=the day after" in r.json()["detail"]
    day = client.get("/v1/costs", params={"since": "2026-12-05", "until": "2026-12-06"}, headers=auth(world.ADMIN))
    assert day.status_code == 200 and len(day.json()["by_day"]) == 1, day.text


def test_a_window_before_the_work_shows_nothing(client, seeded):
    r = client.get("/v1/costs", params={"since": "2001-01-01", "until": "2001-01-08"},
                   headers=auth(world.ADMIN)).json()
    assert r["totals"]["spent"]["micros"] == 0 and len(r["by_day"]) == 7
    bad = client.get("/v1/costs?period=1y", headers=auth(world.ADMIN))
    assert bad.status_code == 422 and bad.json()["field"] == "period"


@pytest.mark.parametrize("params, field", [
    ({"since": "9999-12-31", "until": "9999-12-31T12:00Z"}, "until"),
    ({"since": "9999-12-31T00:00Z", "until": "9999-12-31T23:00-14:00"}, "until"),
    ({"since": "0001-01-01T00:00+14:00", "until": "0001-01-02"}, "since"),
], ids=["a window on the last day a date can have", "an until past the last date there is",
        "a since before the first date there is"])
def test_a_window_at_the_ends_of_the_calendar_is_a_422_naming_its_bound(client, params, field):
    """Such a window was a 500 (OverflowError: the report's days ran past year 9999, or a time with its offset
    fell before year 1) with a traceback in the log."""
    r = client.get("/v1/costs", params=params, headers=auth(world.ADMIN))
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert "out of range" in r.json()["detail"]


@pytest.mark.parametrize("field", ["since", "until"])
def test_a_window_bound_at_a_time_without_its_timezone_is_refused_as_a_deadline_is(client, field):
    """`since=2026-11-30T10:00` was read as UTC (hours off for most people) while a deadline so written is refused:
    both refuse it now, saying to add Z or an offset. A date alone is still that day in UTC (the report's days)."""
    params = {"since": "2026-11-29T00:00Z", "until": "2026-11-30T10:00Z", field: "2026-11-30T10:00"}
    if field == "since":
        params["since"], params["until"] = "2026-11-30T10:00", "2026-12-01T00:00Z"
    r = client.get("/v1/costs", params=params, headers=auth(world.ADMIN))
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert "has no timezone: write 2026-11-30T10:00Z for UTC, or its offset such as 2026-11-30T10:00+01:00" in r.json()["detail"]
    ok = client.get("/v1/costs", params={**params, field: "2026-11-30T10:00+01:00"}, headers=auth(world.ADMIN))
    assert ok.status_code == 200, ok.text
    day = costs.window(now=2e9, since="2026-11-30", until="2026-12-01")
    assert day == costs.window(now=2e9, since="2026-11-30T00:00Z", until="2026-12-01T00:00+00:00")


def test_job_detail_has_attempts_cost_and_the_loss_curve(client):
    r = client.get("/v1/costs/jobs/j-a1", headers=auth(world.TOKENS["team-a"]))
    assert r.status_code == 200
    body = r.json()
    assert [(a["n"], a["tier"], a["zone"], a["cost"]["micros"]) for a in body["attempts"]] == [
        (1, "spot", "us-east-1a", 2_000_000), (2, "spot", "us-east-1b", 3_000_000)]
    assert body["saving"]["micros"] == 20_000_000 - 5_000_000 and body["saving_percent"] == 75
    assert len(body["metrics"]) == 59 and body["metrics"][0]["metrics"]["loss"] == 1.25
    JobCosts.model_validate_json(r.text, strict=True)  # as /openapi.json documents it
    assert client.get("/v1/costs/jobs/j-a1", headers=auth(world.TOKENS["team-b"])).status_code == 404


def test_a_long_window_apportions_each_attempt_only_over_its_own_days_and_exactly_as_over_all_days():
    # The report skips days outside an attempt's billed span (a 90-day report read every day for
    # every attempt: ~10 s for 15,000 jobs). Check against the definition — every attempt's share of
    # every day — on attempts with fractional window edges, zero-second spans and spans on day edges.
    import random

    rng = random.Random(3)
    since = 200 * DAY + 0.25
    win = costs.Window(since, since + 90 * DAY, "90d")
    jobs, attempts = [], {}
    for i in range(300):
        midnight = rng.randrange(200, 292) * DAY
        start = rng.choice([since + rng.uniform(-5 * DAY, 95 * DAY), midnight, midnight - 1, midnight - 2, since - 1])
        seconds = rng.choice([0, 1, 2, 3, 59, 3600, DAY, DAY - 1, rng.randrange(1, 20 * DAY)])
        j = world.job(f"j{i}", "t", JobState.SUCCEEDED, submitted=start, budget=10**12, spent=0, attempts=1)
        a = world.attempt(f"j{i}", 1, AttemptState.SUCCEEDED, world.spot("z", 700_001, od=2_100_007),
                          start=int(start), seconds=seconds, cost=rng.randrange(0, 10**9))
        jobs.append(j)
        attempts[j.id] = [a]
    r = costs.report(jobs, attempts, win=win, now=win.until, positions={}, team=None)
    expected: dict[str, dict[str, int]] = {}
    for j in jobs:
        a = attempts[j.id][0]
        equiv = costs.ondemand_equivalent(a, j)
        for key, lo, hi in costs._days(win):
            day = expected.setdefault(key, {"spot": 0, "ondemand_equivalent": 0})
            day["spot"] += costs.share(a.cost, a, lo, hi)
            day["ondemand_equivalent"] += costs.share(equiv, a, lo, hi)
    got = {d["date"]: {"spot": d["spot"]["micros"], "ondemand_equivalent": d["ondemand_equivalent"]["micros"]} for d in r["by_day"]}
    assert got == expected
    assert sum(d["spot"] for d in expected.values()) == r["totals"]["spent"]["micros"] > 0


def test_a_waiting_job_has_the_same_start_estimate_in_the_job_the_cost_report_and_the_job_costs(client, store, seeded):
    start = world.wait_behind_a_running_job(store, seeded)
    expected = costs._iso_out(start)
    a = auth(world.TOKENS["team-a"])
    assert client.get("/v1/jobs/j-a3", headers=a).json()["estimated_start"] == expected
    report = client.get("/v1/costs", headers=a)
    assert [(q["id"], q["position"], q["estimated_start"]) for q in report.json()["queue"]] == [("j-a3", 1, expected)]
    CostReport.model_validate_json(report.text, strict=True)
    job = client.get("/v1/costs/jobs/j-a3", headers=a).json()["job"]
    assert (job["queue_position"], job["estimated_start"]) == (1, expected)
    # team B's running job is what j-a3 waits for; team A still sees none of B's jobs or spend
    assert "j-b2" not in report.text


def test_the_admin_can_filter_on_the_default_team_its_own_jobs_go_to(client):
    job = client.post("/v1/jobs", json={"name": "by-admin", "run": "echo hi", "resources": {"cpus": 1},
                                        "broker": {"budget_usd": 1}}, headers=auth(world.ADMIN)).json()
    assert job["team"] == "default"
    everyone = client.get("/v1/costs", headers=auth(world.ADMIN)).json()
    assert everyone["teams"] == ["default", "team-a", "team-b"]  # what the dashboard's team filter offers
    mine = client.get("/v1/costs?team=default", headers=auth(world.ADMIN)).json()
    assert [q["id"] for q in mine["queue"]] == [job["id"]]


@pytest.mark.parametrize("micros, percent, versus, words", [
    (15_000_000, 75, "on-demand ($20.00)", "saved $15.00 (75%) against on-demand ($20.00)"),
    (0, 0, "", "saved $0.00 (0%)"),
    (-100_000, -10, "on-demand ($1.00)", "paid $0.10 (10%) more than on-demand ($1.00)"),
    (-4_600, None, "", "paid $0.0046 more"),
], ids=["a saving reads as saved, with its share", "nothing saved still reads as saved",
        "work that cost more than on-demand reads as paid more, not 'saved -$0.10 (-10%)'",
        "no share when there is no on-demand figure"])
def test_a_saving_is_said_in_words_the_cli_and_slack_share(micros, percent, versus, words):
    from broker.cli import _saving_line
    from broker.views import money, saving_words

    assert saving_words(money(micros), percent, versus) == words
    line = _saving_line(money(1_100_000), money(1_000_000), money(micros), percent)
    assert line.endswith(saving_words(money(micros), percent)) and "-$" not in line and "(-" not in line


def test_a_preempted_job_that_ended_without_resuming_stops_counting_time_lost_when_it_ended(client, store, seeded):
    """A spot job preempted, then cancelled while it waited (or stopped at its budget): its preemption read
    "(waiting)" and its time lost ran on to now, growing with every report days after the job had ended ("72 h lost
    waiting to resume" for a job nobody waited on). The wait ends with the job."""
    now = seeded.now
    job = world.job("j-c1", "team-b", JobState.CANCELLED, submitted=now - 6 * 3600, budget=5_000_000, spent=500_000,
                    attempts=1, reason="cancelled", updated=now - 2 * 3600)  # cancelled three hours after
    world._commit(store, job, [world.attempt("j-c1", 1, AttemptState.PREEMPTED, world.spot("us-east-1c", 500_000),
                                             start=now - 6 * 3600, seconds=3600, cost=500_000)])  # preempted at -5 h
    r = client.get("/v1/costs?period=7d&team=team-b", headers=auth(world.ADMIN))
    assert r.status_code == 200, r.text
    CostReport.model_validate_json(r.text, strict=True)
    (event,) = r.json()["preemptions"]["events"]
    assert (event["recovery_seconds"], event["recovered"], event["waiting"]) == (3 * 3600, False, False)
    assert r.json()["preemptions"]["recovery_seconds"] == 3 * 3600
    # team A's preemption was resumed an hour and a minute later: neither waiting nor cut short
    a = client.get("/v1/costs?period=7d&team=team-a", headers=auth(world.ADMIN)).json()["preemptions"]["events"]
    assert [(e["recovery_seconds"], e["recovered"], e["waiting"]) for e in a] == [(3660, True, False)]


@pytest.mark.parametrize("seconds, words", [(0, "0 s"), (40, "40 s"), (59.9, "59 s"), (60, "1 min"), (3599, "59 min"),
                                            (3660, "1.0 h"), (6 * 3600, "6.0 h")])
def test_a_time_to_recover_under_a_minute_reads_in_seconds_not_0_min(seconds, words):
    """`broker costs` and Slack's `costs` said "1 preemption(s), 0 min to recover" for every recovery under a minute
    (each of the demo's): the same words as an attempt's billed time now."""
    from broker.views import duration

    assert duration(seconds) == words
