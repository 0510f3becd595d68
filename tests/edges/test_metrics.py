"""``/metrics``: what Prometheus scrapes agrees with the API, and labels stay low-cardinality."""

from __future__ import annotations

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
    list_jobs = store.list_jobs

    def spy(**kw):
        out = list_jobs(**kw)
        if not kw.get("states"):  # the collector's reads (the queue view asks for states)
            read.append((kw.get("active_since"), sorted(j.id for j in out)))
        return out

    store.list_jobs = spy
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
