"""``/metrics``: what Prometheus scrapes agrees with the API, and labels stay low-cardinality."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from . import world
from .conftest import auth


def scrape(client) -> dict[tuple[str, tuple], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for fam in text_string_to_metric_families(r.text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_scrape_matches_the_api(client):
    client.get("/v1/jobs", headers=auth(world.ADMIN))  # one API call, so latency has a sample
    m = scrape(client)
    costs = client.get("/v1/costs?period=90d", headers=auth(world.ADMIN)).json()
    for team in costs["by_team"]:
        for tier, money in team["by_tier"].items():
            got = m[("broker_spend_dollars_total", (("team", team["team"]), ("tier", tier)))]
            assert round(got * 1_000_000) == money["micros"]
        equiv = m[("broker_ondemand_equivalent_dollars_total", (("team", team["team"]),))]
        assert round(equiv * 1_000_000) == team["ondemand_equivalent"]["micros"]
        saved = m[("broker_saved_vs_ondemand_dollars", (("team", team["team"]),))]
        assert round(saved * 1_000_000) == team["saving"]["micros"]
    jobs = client.get("/v1/jobs", headers=auth(world.ADMIN)).json()["jobs"]
    for job in jobs:
        key = ("broker_jobs", (("state", job["state"]), ("team", job["team"])))
        assert m[key] == sum(1 for j in jobs if (j["state"], j["team"]) == (job["state"], job["team"]))
    assert m[("broker_jobs", (("state", "cancelled"), ("team", "team-a")))] == 0
    assert m[("broker_preemptions_total", (("tier", "spot"), ("zone", "us-east-1a")))] == 1
    assert m[("broker_recovery_seconds_count", ())] == 1
    assert m[("broker_recovery_seconds_sum", ())] == 3660
    assert m[("broker_recovery_seconds_bucket", (("le", "3600.0"),))] == 0
    assert m[("broker_recovery_seconds_bucket", (("le", "14400.0"),))] == 1
    # three jobs launched: waits of 10 min (a1, b1: 0 s and 600 s) and a2 (2 h - 31 min)
    assert m[("broker_queue_wait_seconds_count", ())] == 3
    lat = m[("broker_http_request_duration_seconds_count",
             (("method", "GET"), ("route", "/v1/jobs"), ("status", "2xx")))]
    assert lat >= 1


def test_labels_never_carry_job_ids_or_raw_paths(client):
    for i in range(5):
        client.get(f"/no/such/path/{i}")
        client.get(f"/v1/jobs/j-nope{i}", headers=auth(world.ADMIN))
    text = client.get("/metrics").text
    assert "j-a1" not in text and "j-nope" not in text and "/no/such" not in text
    assert 'route="/v1/jobs/{job_id}"' in text and 'route="other"' in text


def test_a_metrics_token_is_required_when_configured(tmp_path, store, seeded, monkeypatch):
    from fastapi.testclient import TestClient

    from .conftest import build_app

    monkeypatch.setenv("BROKER_METRICS_TOKEN", "scrape-me")
    app = build_app(world.settings(tmp_path), store)
    with TestClient(app) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers=auth("wrong")).status_code == 401
        assert c.get("/metrics", headers=auth("scrape-me")).status_code == 200
        # a header is latin-1: a token outside ASCII was a 500 and a traceback in the log per request, not a 401
        assert c.get("/metrics", headers={"Authorization": "Bearer \u00e9t\u00e9".encode("latin-1")}).status_code == 401


def test_installing_the_edges_twice_changes_nothing(app):
    from broker.api.edges import install_edges

    routes = len(app.routes)
    install_edges(app, app.state.service, app.state.settings)
    assert len(app.routes) == routes


def test_a_later_scrape_reads_only_live_and_recent_jobs_and_still_sees_every_change(app, store, seeded):
    import time
    from dataclasses import replace

    from fastapi.testclient import TestClient

    from broker.lifecycle import AttemptState, JobState
    from broker.store import Change

    read = []
    cost_page = store.cost_page

    def spy(**kw):  # the collector's reads: a page of cost records at a time
        out = cost_page(**kw)
        read.append((kw.get("active_since"), sorted(j.id for j in out[0])))
        return out

    store.cost_page = spy
    with TestClient(app) as client:
        first = scrape(client)
        # between scrapes: the running on-demand job is billed more and then cancelled
        a2 = store.get_job("j-a2")
        (att,) = store.attempts("j-a2")
        store.commit(Change(job=replace(a2, state=JobState.CANCELLED, updated_at=time.time()), expected_version=a2.version,
                            attempts=[replace(att, state=AttemptState.STOPPED, cost=att.cost + 250_000)]))
        second = scrape(client)
    assert len(read) == 2
    assert read[0] == (None, ["j-a1", "j-a2", "j-a3", "j-b1"])  # the first scrape reads everything
    since, ids = read[1]
    assert since is not None and ids == ["j-a2", "j-a3"]  # later: live or just changed; days-old history is not read
    spent = ("broker_spend_dollars_total", (("team", "team-a"), ("tier", "ondemand")))
    assert round((second[spent] - first[spent]) * 1_000_000) == 250_000
    assert second[("broker_jobs", (("state", "cancelled"), ("team", "team-a")))] == 1
    assert second[("broker_jobs", (("state", "running"), ("team", "team-a")))] == 0
    # finished jobs kept from the first scrape still count
    assert second[("broker_jobs", (("state", "failed"), ("team", "team-b")))] == 1
    assert second[("broker_spend_dollars_total", (("team", "team-b"), ("tier", "onprem")))] == 0.4


def test_a_method_no_route_knows_is_one_label_value(tmp_path, store, seeded):
    """Served by uvicorn's h11 parser (uvicorn's own, when httptools is not installed), any token is an HTTP method:
    each made-up one was a new ``method`` label value, kept for good, so a scan grew every scrape without bound."""
    import httpx

    from testports import free_port

    from .conftest import build_app, serving

    port = free_port()
    with serving(build_app(world.settings(tmp_path), store), port, http="h11") as url, httpx.Client(base_url=url) as c:
        for i in range(5):
            assert c.request(f"SCAN{i}", "/v1/jobs", headers=auth(world.ADMIN)).status_code == 405
        assert c.request("PATCH", "/v1/jobs", headers=auth(world.ADMIN)).status_code == 405
        assert c.get("/v1/jobs", headers=auth(world.ADMIN)).status_code == 200
        text = c.get("/metrics").text
    methods = {s.labels["method"] for fam in text_string_to_metric_families(text)
               if fam.name == "broker_http_request_duration_seconds" for s in fam.samples}
    assert methods == {"GET", "PATCH", "other"}


COUNTERS = ("broker_spend_dollars_total", "broker_ondemand_equivalent_dollars_total", "broker_preemptions_total",
            "broker_saved_vs_ondemand_dollars", "broker_attempts_ended_total")


def counters(m: dict) -> dict:
    return {k: v for k, v in m.items() if k[0] in COUNTERS}


def test_a_prune_that_lands_while_a_scrape_reads_is_counted_once_neither_lost_nor_twice(app, store, seeded):
    """The figures of the jobs kept and the store's totals of those pruned are taken between two reads of the pruned
    count that agree: a job deleted in between is read again, not dropped from the figures before its part reached
    the totals the scrape read (the spend would dip for one scrape: a counter reset to Prometheus)."""
    from fastapi.testclient import TestClient

    existing, landed = store.existing, []

    def racing(ids):
        if not landed:  # another broker prunes j-a1 just before this scrape reads which jobs are left
            landed.append(store.prune([store.get_job("j-a1")]))
        return existing(ids)

    with TestClient(app) as client:
        before = scrape(client)
        assert store.prune([store.get_job("j-b1")]) == ["j-b1"]  # a prune between scrapes: the next one checks
        store.existing = racing
        after = scrape(client)
    assert landed == [["j-a1"]] and store.pruned() == 2
    assert counters(after) == counters(before)
    assert after[("broker_spend_dollars_total", (("team", "team-a"), ("tier", "spot")))] == 5.0  # j-a1's, once
    assert after[("broker_preemptions_total", (("tier", "spot"), ("zone", "us-east-1a")))] == 1
    assert after[("broker_jobs", (("state", "succeeded"), ("team", "team-a")))] == 0
    assert after[("broker_jobs_pruned_total", ())] == 2


def test_a_scrape_that_keeps_meeting_prunes_leaves_the_counters_out_then_the_next_has_them_whole(
        app, store, seeded, monkeypatch):
    """Prunes landing at every try: the counters are left out of that scrape (a gap Prometheus skips) rather than
    reported short; the next scrape has every job once, the pruned ones from the store's totals."""
    from fastapi.testclient import TestClient

    from broker.api.metrics import StoreCollector

    monkeypatch.setattr(StoreCollector, "SETTLE_TRIES", 2)
    existing, due = store.existing, ["j-a1", "j-b1"]

    def racing(ids):
        if due:
            store.prune([store.get_job(due.pop(0))])
        return existing(ids)

    store.existing = racing
    with TestClient(app) as client:
        first = scrape(client)
        second = scrape(client)
    assert due == [] and counters(first) == {}
    assert first[("broker_store_up", ())] == 1 and first[("broker_jobs_pruned_total", ())] == 2
    for team, want in world.EXPECTED.items():
        for tier in ("onprem", "ondemand", "spot"):
            got = second[("broker_spend_dollars_total", (("team", team), ("tier", tier)))]
            assert round(got * 1_000_000) == want[tier]
        equiv = second[("broker_ondemand_equivalent_dollars_total", (("team", team),))]
        assert round(equiv * 1_000_000) == want["ondemand_equivalent"]
    assert second[("broker_preemptions_total", (("tier", "spot"), ("zone", "us-east-1a")))] == 1
    assert second[("broker_jobs", (("state", "failed"), ("team", "team-b")))] == 0


HISTOGRAMS = ("broker_recovery_seconds_bucket", "broker_recovery_seconds_count", "broker_recovery_seconds_sum",
              "broker_queue_wait_seconds_bucket", "broker_queue_wait_seconds_count", "broker_queue_wait_seconds_sum")


def histograms(m: dict) -> dict:
    return {k: v for k, v in m.items() if k[0] in HISTOGRAMS}


def test_the_histograms_keep_a_pruned_jobs_observations_in_a_broker_started_after_the_prune(tmp_path, store, seeded):
    """A pruned job's recovery and queue wait stay in the histograms for good, as the counters do: kept with the
    store's totals, not only in the memory of the process that had read the job (a restart made the histograms'
    counts fall: a reset to Prometheus, and the job's observations gone)."""
    from fastapi.testclient import TestClient

    from .conftest import build_app

    with TestClient(build_app(world.settings(tmp_path), store)) as client:
        before = histograms(scrape(client))
    assert before[("broker_recovery_seconds_count", ())] == 1 and before[("broker_queue_wait_seconds_count", ())] == 3
    done = [j for j in store.list_jobs(limit=100) if j.state.is_final]
    assert "j-a1" in {j.id for j in done}  # the job with the recovery goes
    assert sorted(store.prune(done)) == sorted(j.id for j in done)
    with TestClient(build_app(world.settings(tmp_path), store)) as client:  # a broker started after the prune
        after = histograms(scrape(client))
    assert after == before


def test_a_histogram_count_kept_under_a_bound_no_longer_used_counts_at_every_bound_above_it():
    """Counts are kept by bound, so a change of the bounds after a prune misplaces no observation: one kept under
    45 s (not a bound now) counts at 60 s and above, never below; one under +Inf only in the total."""
    from broker import totals

    sums: dict = {}
    for seconds in (0.0, 25.0, 31.0, 10**6):
        totals.observe(sums, totals.RECOVERY, seconds)
    assert sums[(totals.RECOVERY, "10.0")] == 1 and sums[(totals.RECOVERY, "30.0")] == 1
    assert sums[(totals.RECOVERY, "60.0")] == 1 and sums[(totals.RECOVERY, "+Inf")] == 1
    assert sums[(totals.RECOVERY, "sum")] == (25 + 31 + 10**6) * 1_000_000
    sums[(totals.RECOVERY, "45.0")] = 2  # stored when 45 s was a bound
    buckets, total = totals.histogram(sums, totals.RECOVERY)
    got = dict(buckets)
    assert (got["10.0"], got["30.0"], got["60.0"], got["14400.0"], got["+Inf"]) == (1, 2, 5, 5, 6)
    assert total == 25 + 31 + 10**6


def test_a_configured_team_with_no_job_yet_has_its_series_at_zero(tmp_path, store, seeded):
    """The series were built from the stored jobs only: a team configured but with no job had none, so
    ``increase(broker_spend_dollars_total[1h])`` missed its first spend (a series appearing is no increase) and its
    Grafana panels read "no data" rather than 0."""
    from dataclasses import replace

    from fastapi.testclient import TestClient

    from broker.config import Team

    from .conftest import build_app

    base = world.settings(tmp_path)
    settings = replace(base, teams={**base.teams, "team-new": Team("team-new", frozenset())})
    with TestClient(build_app(settings, store)) as c:
        m = scrape(c)
    for tier in ("onprem", "ondemand", "spot"):
        assert m[("broker_spend_dollars_total", (("team", "team-new"), ("tier", tier)))] == 0
    assert m[("broker_ondemand_equivalent_dollars_total", (("team", "team-new"),))] == 0
    assert m[("broker_saved_vs_ondemand_dollars", (("team", "team-new"),))] == 0
    assert m[("broker_jobs", (("state", "queued"), ("team", "team-new")))] == 0
    assert m[("broker_jobs", (("state", "running"), ("team", "team-new")))] == 0
    # the teams with jobs keep theirs
    assert m[("broker_spend_dollars_total", (("team", "team-a"), ("tier", "spot")))] == 5.0


def test_no_created_series_reads_as_a_family_of_its_own(client):
    """prometheus_client wrote the latency histogram's creation time as
    ``broker_http_request_duration_seconds_created``, which the text format declares as one more gauge family, in no
    table of the docs and on no panel."""
    client.get("/v1/jobs", headers=auth(world.ADMIN))
    text = client.get("/metrics").text
    names = {fam.name for fam in text_string_to_metric_families(text)}
    samples = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert "broker_http_request_duration_seconds" in names
    assert not [n for n in names | samples if n.endswith("_created")], sorted(names | samples)


def test_each_engines_last_beat_is_scraped_so_no_engine_running_can_be_alerted_on(client, store):
    """An API with BROKER_ENGINE=off whose `broker worker` was down answered healthz and readyz as healthy, and no
    series said that nothing placed or watched the jobs."""
    assert not any(name == "broker_engine_last_beat_timestamp_seconds" for name, _ in scrape(client))
    store.beat("local#worker-1", 1_700_000_000.5)
    store.beat("skypilot#api", 1_700_000_060.0)
    m = scrape(client)
    assert m[("broker_engine_last_beat_timestamp_seconds", (("domain", "local#worker-1"),))] == 1_700_000_000.5
    assert m[("broker_engine_last_beat_timestamp_seconds", (("domain", "skypilot#api"),))] == 1_700_000_060.0


def test_a_first_scrape_read_a_page_at_a_time_counts_every_job_once(tmp_path, store, seeded, monkeypatch):
    """The first scrape after a start reads the store in pages (a store of 50,000 jobs was held whole, about 1 GB
    more, which the process kept): read two jobs at a time, every series is what one read of all gives."""
    from fastapi.testclient import TestClient

    from broker.api.metrics import StoreCollector

    from .conftest import build_app

    def store_series(m):
        return {k: v for k, v in m.items() if not k[0].startswith(("broker_http", "python_", "process_"))
                and "engine" not in k[0] and k[0] != "broker_queue_oldest_seconds"}  # (that one counts from now)

    with TestClient(build_app(world.settings(tmp_path), store)) as c:
        whole = store_series(scrape(c))
    pages = []
    real = store.cost_page
    monkeypatch.setattr(store, "cost_page", lambda **kw: pages.append(kw.get("before")) or real(**kw))
    monkeypatch.setattr(StoreCollector, "PAGE", 2)
    with TestClient(build_app(world.settings(tmp_path), store)) as c:
        paged = store_series(scrape(c))
    assert len([p for p in pages if p is not None]) >= 2, pages  # read in pages, each after the last one's end
    assert paged == whole


def test_each_pools_size_and_the_slots_its_jobs_hold_now_are_scraped(tmp_path, store, seeded):
    """An admin of an on-prem pool could tell how full it was only by adding up job placements: each configured pool
    now has its size and the slots its jobs hold (placed to stopping, as placement counts them), at 0 when none."""
    from fastapi.testclient import TestClient

    from broker.lifecycle import JobState
    from broker.store import Change

    from .conftest import build_app

    with TestClient(build_app(world.settings(tmp_path), store)) as c:
        before = scrape(c)
        assert before[("broker_pool_slots", (("pool", "local"),))] == 2
        assert before[("broker_pool_slots_in_use", (("pool", "local"),))] == 0
        world.wait_behind_a_running_job(store, seeded)  # team B's job holds both slots of the pool `local`
        assert scrape(c)[("broker_pool_slots_in_use", (("pool", "local"),))] == 2
        running = store.get_job("j-b2")
        store.commit(Change(job=replace(running, state=JobState.SUCCEEDED, updated_at=running.updated_at + 1),
                            expected_version=running.version))
        assert scrape(c)[("broker_pool_slots_in_use", (("pool", "local"),))] == 0
