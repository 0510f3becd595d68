"""``/metrics`` for alerting: series known from the config at 0 from the first scrape, and the per-team gauges an
alert needs (oldest queued job, jobs near their budget, budgets and spend of jobs not ended)."""

from __future__ import annotations

from dataclasses import replace

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from broker.lifecycle import JobState
from launchers.simzones import SimZone

from . import world
from .conftest import build_app
from .test_metrics import scrape


def _settings(tmp_path):
    return replace(world.settings(tmp_path), zones=(SimZone("sim-spot-a", "spot"), SimZone("sim-od", "ondemand")))


def test_every_configured_zone_and_pool_has_its_preemption_and_lost_series_at_zero_from_the_first_scrape(
        tmp_path, store, seeded):
    """The series of a zone appeared only with its first preemption, at 1: increase() and rate() saw no jump, so a
    preemption-storm alert missed the first events of a zone."""
    with TestClient(build_app(_settings(tmp_path), store)) as c:
        m = scrape(c)
    assert m[("broker_preemptions_total", (("tier", "spot"), ("zone", "sim-spot-a")))] == 0
    assert m[("broker_preemptions_total", (("tier", "ondemand"), ("zone", "sim-od")))] == 0
    for zone, tier in (("sim-spot-a", "spot"), ("sim-od", "ondemand"), ("local", "onprem")):
        assert m[("broker_attempts_lost_total", (("tier", tier), ("zone", zone)))] == 0
    # a pool is never preempted: no series that can only read 0
    assert ("broker_preemptions_total", (("tier", "onprem"), ("zone", "local"))) not in m
    # the zones that had preemptions keep their counts
    assert m[("broker_preemptions_total", (("tier", "spot"), ("zone", "us-east-1a")))] == 1


def test_a_configured_zones_first_preemption_is_counted_on_the_series_it_already_had(tmp_path, store, seeded):
    import time

    with TestClient(build_app(_settings(tmp_path), store)) as c:
        before = scrape(c)
        now = time.time()
        j = world.job("j-z1", "team-a", JobState.QUEUED, submitted=now - 900, budget=5_000_000, spent=100_000,
                      attempts=1)
        from broker.lifecycle import AttemptState
        place = {**world.spot("sim-spot-a", 400_000), "zone": "sim-spot-a", "location": "sim-spot-a"}
        world._commit(store, j, [world.attempt("j-z1", 1, AttemptState.PREEMPTED, place, start=now - 800,
                                               seconds=600, cost=100_000)])
        after = scrape(c)
    key = ("broker_preemptions_total", (("tier", "spot"), ("zone", "sim-spot-a")))
    assert (before[key], after[key]) == (0, 1)


def test_the_oldest_queued_job_and_the_jobs_near_their_budget_are_scraped_per_team(tmp_path, store, seeded):
    """No series said how long the queue had held a job, nor how many jobs were about to be stopped at their
    budget: neither "stuck in the queue" nor "budget nearly used" could be alerted on."""
    now = seeded.now
    # team A: a running job at 90% of its budget (j-a2 is at 75%: not near)
    hot = world.job("j-a4", "team-a", JobState.RUNNING, submitted=now - 3600, budget=1_000_000, spent=900_000,
                    attempts=1)
    world._commit(store, hot, [])
    with TestClient(build_app(world.settings(tmp_path), store)) as c:
        m = scrape(c)
    oldest = m[("broker_queue_oldest_seconds", (("team", "team-a"),))]
    assert 300 <= oldest < 400  # j-a3, queued 5 min ago
    assert m[("broker_queue_oldest_seconds", (("team", "team-b"),))] == 0  # nothing queued: 0, not absent
    assert m[("broker_jobs_near_budget", (("team", "team-a"),))] == 1
    assert m[("broker_jobs_near_budget", (("team", "team-b"),))] == 0
    # jobs not ended: j-a2 ($2 budget, $1.50 spent), j-a3 ($5, $0), j-a4 ($1, $0.90); team B's only job failed
    assert m[("broker_team_active_budget_dollars", (("team", "team-a"),))] == 8.0
    assert round(m[("broker_team_active_spent_dollars", (("team", "team-a"),))] * 1_000_000) == 2_400_000
    assert m[("broker_team_active_budget_dollars", (("team", "team-b"),))] == 0
    assert m[("broker_team_active_spent_dollars", (("team", "team-b"),))] == 0


def test_the_jobs_gauge_says_it_counts_ended_jobs_until_they_are_pruned(client):
    text = client.get("/metrics").text
    (fam,) = [f for f in text_string_to_metric_families(text) if f.name == "broker_jobs"]
    assert "ended ones included" in fam.documentation and "pruned" in fam.documentation


def test_every_engine_loop_is_counted_in_a_histogram_not_only_the_last(tmp_path, store, seeded):
    """``broker_engine_tick_seconds`` held the last loop only: a slow loop between two scrapes was never seen, and no
    p99 could be drawn. Each loop of a real engine now lands in ``broker_engine_tick_duration_seconds``."""
    from broker.engine.reconcile import TICK_BUCKETS, Engine

    settings = _settings(tmp_path)
    app = build_app(settings, store)
    with TestClient(app) as c:
        from broker.runtime import open_launcher
        engine = Engine(settings, store, open_launcher(settings))
        for _ in range(3):
            engine.tick()
        engine.tick_durations.add(7.0)  # a slow loop, as a stuck store makes one
        app.state.engine = engine
        families = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    hist = families["broker_engine_tick_duration_seconds"]
    samples = {(s.name, s.labels.get("le")): s.value for s in hist.samples}
    assert samples[("broker_engine_tick_duration_seconds_count", None)] == 4
    assert samples[("broker_engine_tick_duration_seconds_bucket", "+Inf")] == 4
    assert samples[("broker_engine_tick_duration_seconds_bucket", "5.0")] == 3  # the 7 s loop is above 5 s
    assert samples[("broker_engine_tick_duration_seconds_bucket", "10.0")] == 4
    assert samples[("broker_engine_tick_duration_seconds_sum", None)] >= 7.0
    assert len([s for s in hist.samples if s.name.endswith("_bucket")]) == len(TICK_BUCKETS) + 1


def test_ended_attempts_are_counted_by_team_and_how_with_every_teams_series_from_the_first_scrape(tmp_path, store,
                                                                                                 seeded):
    """A failure alert had only the broker_jobs gauge, which falls when a job is resumed or pruned. Attempts that
    ended are counted by team and state, as the store holds them, and each configured team has each state's series
    at 0 before its first such end, so increase() sees the first failure."""
    from collections import Counter

    from broker.api.metrics import ENDED_ATTEMPT_STATES

    settings = _settings(tmp_path)
    with TestClient(build_app(settings, store)) as c:
        m = scrape(c)
    jobs = store.list_jobs(limit=10_000)
    expected = Counter((j.team, a.state.value) for j in jobs for a in store.attempts(j.id) if a.state.is_final)
    assert sum(expected.values()) > 0  # the seeded world has ended attempts
    for team in settings.teams:
        for state in ENDED_ATTEMPT_STATES:
            assert m[("broker_attempts_ended_total", (("state", state), ("team", team)))] == expected.get((team, state),
                                                                                                          0)
    for (team, state), n in expected.items():
        assert m[("broker_attempts_ended_total", (("state", state), ("team", team)))] == n


def test_a_job_resumed_long_after_it_was_submitted_is_not_an_old_queued_job(tmp_path, store, seeded):
    """broker_queue_oldest_seconds counted a job resumed today from its submit (or last attempt's end) days ago: a
    stuck-queue alert fired at every resume. It counts from when the job last entered the queue."""
    from dataclasses import replace as dc_replace

    now = seeded.now
    back = dc_replace(world.job("j-b9", "team-b", JobState.QUEUED, submitted=now - 5 * 86_400, budget=1_000_000,
                                spent=0, attempts=1), queued_at=now - 60)
    world._commit(store, back, [])
    with TestClient(build_app(world.settings(tmp_path), store)) as c:
        m = scrape(c)
    assert 50 <= m[("broker_queue_oldest_seconds", (("team", "team-b"),))] < 200
