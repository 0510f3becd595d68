"""The pruned-cost ledger: a job the retention policy deletes leaves its attempts' cost and on-demand equivalent, by
team, tier and UTC hour, in the same atomic write (``JobStore.prune``, ``JobStore.pruned_costs``), and a cost report
counts the hours in its window (``broker/costs.py``): its totals, days, teams and tiers are the same, to the micro-
dollar, before and after the prune. On both stores, and the two agree."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from broker import costs
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job
from broker.retention import DAY, Retention
from broker.store import Change

HOUR = 3600
NOW = 1_800_000_000.0  # a report's "now": every time below is before it
MIDNIGHT = NOW - NOW % DAY - 60 * DAY  # a UTC midnight 60 days before


def finished(store, job_id: str, team: str, attempts: list[tuple[str, float, float, int, int | None]]) -> Job:
    """A succeeded job with ``attempts`` — (tier, start, end, cost, on-demand price per hour or None) each — last
    updated as its last one ends."""
    submitted = attempts[0][1] - 600
    job = Job(id=job_id, name="train", team=team, state=JobState.QUEUED, spec={"run": "echo"}, budget=500_000_000,
              priority=0, submitted_at=submitted, updated_at=submitted)
    job = store.commit(Change(job=job, expected_version=None))
    tries = []
    for n, (tier, start, end, cost, ondemand) in enumerate(attempts, 1):
        place = {"tier": tier, "zone": "sim-a"} | ({"ondemand_price_per_hour": ondemand} if ondemand else {})
        state = AttemptState.SUCCEEDED if n == len(attempts) else AttemptState.PREEMPTED
        tries.append(Attempt(id=f"{job_id}-a{n}", job_id=job_id, n=n, state=state, launcher="local", placement=place,
                             price_per_hour=1_234_567, created_at=start, started_at=start + 5, ended_at=end,
                             billed_until=end, cost=cost))
    end = attempts[-1][2]
    return store.commit(Change(job=replace(job, state=JobState.SUCCEEDED, updated_at=end, attempts=len(tries),
                                           spent=sum(a.cost for a in tries)),
                               expected_version=job.version, attempts=tries))


def history(store):
    """An old job whose spot attempt crosses hours and a day boundary (an odd cost, a dearer on-demand price), then
    an on-demand attempt; one of another team within an hour; and a recent one, never pruned."""
    finished(store, "j-old", "vision", [
        ("spot", MIDNIGHT - 1.5 * HOUR + 17, MIDNIGHT + 2.3 * HOUR, 7_777_777, 9_999_991),
        ("ondemand", MIDNIGHT + 3 * HOUR + 1, MIDNIGHT + 3.5 * HOUR, 1_000_003, None),
    ])
    finished(store, "j-nlp", "nlp", [("onprem", MIDNIGHT + 40 * HOUR + 10, MIDNIGHT + 40 * HOUR + 10, 333, None)])
    finished(store, "j-new", "vision", [("spot", NOW - 2 * DAY, NOW - 2 * DAY + 5 * HOUR, 5_000_001, 8_000_000)])


def report(store, *, period: str = "90d", team: str | None = None, days: float | None = 30) -> dict:
    win = costs.window(now=NOW, period=period)
    read = costs.gather(store, team=team, win=win, retention_days=days)
    return costs.report(read.jobs, read.attempts, win=win, now=NOW, positions={}, team=team, ledger=read.ledger,
                        retention_days=read.retention_days)


WHOLE = ("totals", "by_day", "by_team")


# -- pure -------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("total, start, seconds", [
    (7_777_777, 1_000_000_017, 13_663), (1, 1_000_000_000, 1), (0, 5, 10), (999, 3600 * 10, 0), (999, 3600 * 10 + 7, 0),
    (10**12 + 7, 1_799_999_999, 400 * 86_400), (5, 3599, 2),
])
def test_the_hours_of_an_attempt_add_up_to_its_cost_and_to_each_days_share(total, start, seconds):
    parts = costs.hour_parts(total, start, seconds)
    assert sum(parts.values()) == total and all(h % HOUR == 0 and v for h, v in parts.items())
    for day in {h - h % DAY for h in parts}:  # each UTC day: its hours are its share as the report splits days
        share = costs._part(total, start, seconds, day + DAY) - costs._part(total, start, seconds, day)
        assert sum(v for h, v in parts.items() if day <= h < day + DAY) == share


def test_a_jobs_ledger_is_each_attempts_cost_and_equivalent_by_team_tier_and_hour(store):
    history(store)
    job = store.get_job("j-old")
    tries = store.attempts("j-old")
    ledger = costs.ledger_of(job, tries)
    for a in tries:
        tier = costs.tier_of(a)
        assert sum(v for (k, _, t, _), v in ledger.items() if k == costs.COST and t == tier) == a.cost
        assert sum(v for (k, _, t, _), v in ledger.items() if k == costs.ODEQ and t == tier) == \
            costs.ondemand_equivalent(a, job)
    assert {team for _, team, _, _ in ledger} == {"vision"}
    # the spot attempt spans five hours, two days
    assert len({h for k, _, t, h in ledger if k == costs.COST and t == "spot"}) == 5


# -- on the stores ----------------------------------------------------------------------------------------------------


def test_a_90_day_report_is_the_same_to_the_micro_dollar_after_the_prune(store):
    history(store)
    before = {team: report(store, team=team) for team in (None, "vision", "nlp")}
    assert before[None]["retention_note"] is None
    assert Retention(store, days=30, pause=0).prune(NOW) == 2
    assert store.get_job("j-old") is None and store.get_job("j-new") is not None
    for team, was in before.items():
        now = report(store, team=team)
        for part in WHOLE:
            assert now[part] == was[part], (team, part)
        assert [j["id"] for j in now["top_jobs"]] == [j["id"] for j in was["top_jobs"] if j["id"] == "j-new"]
    after = report(store)
    pruned = 7_777_777 + 1_000_003 + 333
    assert after["totals"]["spent"]["micros"] == pruned + 5_000_001
    assert after["retention_note"].startswith(f"Includes {costs.fmt(pruned)} spent in this window by jobs since "
                                              "pruned (job_retention_days: finished jobs are deleted 30 days after "
                                              "they end)"), after["retention_note"]
    # the day boundary the spot attempt crossed: both days hold their part, as before
    days = {d["date"]: d for d in after["by_day"]}
    first, second = (costs._iso_out(MIDNIGHT - DAY)[:10], costs._iso_out(MIDNIGHT)[:10])
    assert days[first]["spot"]["micros"] > 0 and days[second]["spot"]["micros"] > 0
    assert days[first]["spot"]["micros"] + days[second]["spot"]["micros"] == 7_777_777
    # the nlp team sees its own pruned spend only
    nlp = report(store, team="nlp")
    assert nlp["totals"]["spent"]["micros"] == 333 and "$0.0004" in nlp["retention_note"], nlp["retention_note"]


def test_a_window_after_the_pruned_spend_holds_none_of_it_and_says_nothing(store):
    history(store)
    week = report(store, period="7d")
    Retention(store, days=30, pause=0).prune(NOW)
    after = report(store, period="7d")
    for part in WHOLE:
        assert after[part] == week[part]
    assert after["totals"]["spent"]["micros"] == 5_000_001 and after["retention_note"] is None
    ledger = store.pruned_costs(team=None, since=NOW - 7 * DAY, until=NOW)
    assert ledger.buckets == [] and ledger.pruned == ledger.ledger_jobs == 2


def test_a_window_counts_the_hours_that_begin_in_it(store):
    history(store)
    Retention(store, days=30, pause=0).prune(NOW)
    # from the midnight the spot attempt crossed: its hours after it, and the on-demand attempt
    win = costs.Window(MIDNIGHT, MIDNIGHT + DAY, "custom")
    read = costs.gather(store, team="vision", win=win, retention_days=30)
    got = costs.report(read.jobs, read.attempts, win=win, now=NOW, positions={}, team="vision", ledger=read.ledger,
                       retention_days=read.retention_days)
    start, seconds = int(MIDNIGHT - 1.5 * HOUR + 17), int(3.8 * HOUR) - 17
    spot = costs._part(7_777_777, start, seconds, MIDNIGHT + DAY) - costs._part(7_777_777, start, seconds, MIDNIGHT)
    assert got["totals"]["by_tier"]["spot"]["micros"] == spot
    assert got["totals"]["by_tier"]["ondemand"]["micros"] == 1_000_003


def test_two_brokers_pruning_the_same_job_count_it_once(store, tmp_path, redis_server):
    from broker.store import open_store
    from broker.store.redis import RedisStore

    history(store)
    other = open_store(f"sqlite://{tmp_path / 'store.db'}") if not isinstance(store, RedisStore) else \
        RedisStore(redis_server.url, prefix=store.keys.prefix)
    try:
        before = WHOLE_OF(report(store))
        mine = store.expired(before=NOW - 30 * DAY, limit=10)
        theirs = other.expired(before=NOW - 30 * DAY, limit=10)
        assert {j.id for j in mine} == {j.id for j in theirs} == {"j-old", "j-nlp"}
        tries = {j.id: store.attempts(j.id) for j in mine}
        assert sorted(store.prune(mine) + other.prune(theirs)) == ["j-nlp", "j-old"]  # each once, by one of them
        assert other.prune(theirs) == [] and store.prune(mine) == []
        ledger = store.pruned_costs(team=None, since=costs.FIRST, until=costs.LAST)
        assert ledger == other.pruned_costs(team=None, since=costs.FIRST, until=costs.LAST)
        assert ledger.pruned == ledger.ledger_jobs == 2
        expected: dict = {}
        for job in mine:
            for key, value in costs.ledger_of(job, tries[job.id]).items():
                expected[key] = expected.get(key, 0) + value
        got = {}
        for team, tier, hour, cost, equiv in ledger.buckets:
            got.update({(costs.COST, team, tier, hour): cost, (costs.ODEQ, team, tier, hour): equiv})
        assert {k: v for k, v in got.items() if v} == expected
        assert WHOLE_OF(report(store)) == WHOLE_OF(report(other)) == before
    finally:
        other.close()


def WHOLE_OF(r: dict) -> dict:
    return {part: r[part] for part in WHOLE}


def test_the_redis_and_sqlite_ledgers_agree(tmp_path, redis_server):
    from broker.store import open_store
    from broker.store.redis import RedisStore

    stores = [open_store(f"sqlite://{tmp_path / 'agree.db'}"), RedisStore(redis_server.url, prefix="agree-ledger")]
    try:
        for s in stores:
            history(s)
            assert Retention(s, days=30, pause=0).prune(NOW) == 2
        for team in (None, "vision", "nlp", "nobody"):
            sqlite_ledger, redis_ledger = (s.pruned_costs(team=team, since=costs.FIRST, until=costs.LAST)
                                           for s in stores)
            assert sqlite_ledger.pruned == redis_ledger.pruned == 2
            assert list(map(tuple, sqlite_ledger.buckets)) == list(map(tuple, redis_ledger.buckets))
            assert bool(sqlite_ledger.buckets) == (team != "nobody")
            assert report(stores[0], team=team) == report(stores[1], team=team)
    finally:
        for s in stores:
            s.close()


def test_jobs_pruned_before_the_ledger_are_still_said_to_be_missing(store):
    from broker.store.redis import RedisStore

    history(store)
    Retention(store, days=30, pause=0).prune(NOW)
    # a broker of an earlier version pruned one more job, and kept no ledger of it
    if isinstance(store, RedisStore):
        store._r.incr(store.keys.pruned())
    else:
        with store._lock:
            store._db.execute("UPDATE counters SET value = value + 1 WHERE name = 'pruned'")
    note = report(store)["retention_note"]
    assert note.startswith("Includes ") and "Totals leave out 1 finished job pruned before their costs were kept" in \
        note, note
    assert report(store, period="7d")["retention_note"] is None  # within the horizon: nothing missing, nothing there


# -- Redis: the ledger by team and month ------------------------------------------------------------------------------


@pytest.mark.parametrize("team, when, part, start", [
    ("vision", 1_800_000_000, "2027-01:vision", 1_798_761_600),
    ("a:b%c", 1_798_761_599, "2026-12:a%3Ab%25c", 1_796_083_200),  # the last second of a year, a team escaped
    ("nlp", 0, "1970-01:nlp", 0),
    ("x", costs.FIRST, "0001-01:x", int(costs.FIRST)),  # a report's earliest start sorts before every part
], ids=["an hour in January", "the last second of December, a team with a colon and a percent sign",
        "the epoch", "the first day of year 1"])
def test_an_entry_goes_in_the_part_of_its_team_and_utc_month(team, when, part, start):
    from broker.store.redis_keys import ledger_part, month_start

    assert ledger_part(team, when) == (part, start) and month_start(when) == start


def _parts(store) -> dict[str, dict[str, str]]:
    return {part: store._r.hgetall(store.keys.pruned_costs_part(part))
            for part in store._r.zrange(store.keys.pruned_costs_parts(), 0, -1)}


def test_redis_keeps_the_ledger_by_team_and_month_and_a_report_reads_only_its_months_and_team(redis_server):
    """The ledger was one hash that every cost report read whole: a store kept for years made a week's report read
    every hour of every team. Each team's month is a part now, and a report reads the parts of its window only."""
    from broker.store.redis import RedisStore

    store = RedisStore(redis_server.url, prefix=f"parts-{time.monotonic_ns()}")
    try:
        history(store)
        before = {team: report(store, team=team) for team in (None, "vision", "nlp")}
        Retention(store, days=30, pause=0).prune(NOW)
        month = time.strftime("%Y-%m", time.gmtime(MIDNIGHT))
        parts = _parts(store)
        assert sorted(parts) == [f"{month}:nlp", f"{month}:vision"]
        assert store._r.hgetall(store.keys.pruned_costs()) == {"jobs": "2"}  # the count only
        assert sum(int(v) for f, v in parts[f"{month}:vision"].items() if f.startswith('["cost"')) == \
            7_777_777 + 1_000_003
        for team, was in before.items():
            assert WHOLE_OF(report(store, team=team)) == WHOLE_OF(was)
        # a part the window does not reach, and another team's, are not read: made unreadable, nothing notices
        for unread in ("2020-01:vision", f"{month}:other"):
            store._r.hset(store.keys.pruned_costs_part(unread), "not a ledger field", "x")
            store._r.zadd(store.keys.pruned_costs_parts(), {unread: 1_577_836_800 if unread[:4] == "2020" else
                                                            store._r.zscore(store.keys.pruned_costs_parts(),
                                                                            f"{month}:nlp")})
        for team in ("vision", "nlp"):
            assert WHOLE_OF(report(store, team=team)) == WHOLE_OF(before[team])
        with pytest.raises(ValueError):  # read when the window reaches it: the corrupt field is decoded
            report(store, team=None)
    finally:
        store.close()


def test_a_ledger_a_broker_before_the_parts_wrote_is_counted_and_then_moved_to_them(redis_server):
    """A store upgraded in place: the ledger's entries are in its one hash as an earlier broker wrote them. Reports
    count them where they are; the next prune moves them to their parts, and the reports are the same."""
    from broker.store.redis import RedisStore

    store = RedisStore(redis_server.url, prefix=f"moved-{time.monotonic_ns()}")
    try:
        history(store)
        Retention(store, days=30, pause=0).prune(NOW)
        after = {team: report(store, team=team) for team in (None, "vision", "nlp", "nobody")}
        parts = _parts(store)
        for part, fields in parts.items():  # written back as the earlier broker kept them
            store._r.hset(store.keys.pruned_costs(), mapping=fields)
            store._r.delete(store.keys.pruned_costs_part(part))
        store._r.delete(store.keys.pruned_costs_parts())
        assert store._r.hlen(store.keys.pruned_costs()) > 10
        for team, was in after.items():
            assert report(store, team=team) == was, team
        assert store.prune([]) == []
        assert _parts(store) == parts and store._r.hgetall(store.keys.pruned_costs()) == {"jobs": "2"}
        for team, was in after.items():
            assert report(store, team=team) == was, team
    finally:
        store.close()


def test_an_attempt_across_a_month_boundary_is_in_both_months_parts_and_reports(store):
    """On both stores: the hours before a UTC month's first midnight in the one month, those after in the next."""
    first = MIDNIGHT + 15 * DAY  # 2026-12-01, the month after MIDNIGHT's
    assert time.gmtime(first).tm_mday == 1 and time.gmtime(first - 1).tm_mday != 1
    finished(store, "j-cross", "vision", [("spot", first - 1.5 * HOUR, first + 2.5 * HOUR, 4_000_000, None)])
    whole = report(store, period="90d", team="vision")
    Retention(store, days=30, pause=0).prune(NOW)
    assert WHOLE_OF(report(store, period="90d", team="vision")) == WHOLE_OF(whole)
    december = costs.Window(first, NOW, "custom")
    read = costs.gather(store, team="vision", win=december, retention_days=30)
    assert sum(c for _, _, _, c, _ in read.ledger.buckets) == 2_500_000  # 2.5 of its 4 hours
    november = costs.Window(first - 30 * DAY, first, "custom")
    read = costs.gather(store, team="vision", win=november, retention_days=30)
    assert sum(c for _, _, _, c, _ in read.ledger.buckets) == 1_500_000


def test_a_server_at_its_maxmemory_still_prunes_with_an_earlier_brokers_ledger_left_to_move(tmp_path):
    """Moving the earlier broker's entries adds data, which a full server refuses: the prune goes on without it (it
    is how a full store gets back under its limit), and a later one moves them."""
    import redis

    from broker.store.redis import RedisStore
    from broker_testing import RedisServer

    server = RedisServer(tmp_path / "redis").start()
    store = RedisStore(server.url)
    admin = redis.Redis(port=server.port)
    try:
        history(store)
        store._r.hset(store.keys.pruned_costs(), mapping={
            json.dumps(["cost", f"t{i}", "spot", MIDNIGHT - (i + 1) * DAY]): "1" for i in range(200)})
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", admin.info("memory")["used_memory"])
        assert Retention(store, days=30, pause=0).prune(NOW) == 2
        assert store.get_job("j-old") is None
        admin.config_set("maxmemory", 0)
        assert store._r.hlen(store.keys.pruned_costs()) > 200  # not moved yet
        assert store.prune([]) == []
        assert store._r.hgetall(store.keys.pruned_costs()) == {"jobs": "2"}
        assert len(_parts(store)) == 200 + 2
        assert store.pruned_costs(team="t7", since=costs.FIRST, until=costs.LAST).buckets == [
            ("t7", "spot", MIDNIGHT - 8 * DAY, 1, 0)]
    finally:
        admin.close()
        store.close()
        server.stop()
