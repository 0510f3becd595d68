"""Small fixes (Dec 6): a client that goes away mid-body, concurrent on-demand pins, times shown in `broker queue`,
a job's submitted/updated times."""

from __future__ import annotations

import logging
import socket
import time

from test_serve_socket import served

from broker.api.app import create_app
from broker.config import load_settings


def _half_sent(url: str, path: str) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer adm\r\n"
                   "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n").encode() + b'{"run":"')
        time.sleep(0.3)  # the route is reading the body when the socket closes


def test_a_client_gone_mid_body_is_one_plain_line_not_an_unexpected_error_with_tracebacks(tmp_path, caplog):
    app = create_app(load_settings({"BROKER_DATA_DIR": str(tmp_path), "BROKER_ADMIN_TOKEN": "adm"}), engine=False)
    caplog.set_level(logging.INFO)
    with served(app, log_level="info") as (_, url):
        for path in ("/v1/jobs", "/v1/jobs/j-nope/budget", "/v1/jobs/j-nope/resume"):
            _half_sent(url, path)
        time.sleep(0.5)
    records = [r for r in caplog.records if r.name.startswith(("broker", "uvicorn.error"))]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records if r.exc_info]
    assert not [r for r in records if "unexpected error" in r.getMessage() or r.levelno >= logging.ERROR]
    gone = [r for r in records if "client went away" in r.getMessage()]
    assert len(gone) == 3 and all(r.levelno <= logging.WARNING for r in gone)


# -- concurrent moves to on-demand ------------------------------------------------------------------------------

import threading  # noqa: E402

import pytest  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from broker.store import open_store  # noqa: E402
from broker_testing import ADMIN  # noqa: E402

ZONED = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
default_budget_usd: "10"
teams:
  vision: {default_budget_usd: "30"}
zones:
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
"""
ADMIN_AUTH = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
def zoned(make_settings, tmp_path):
    app = create_app(make_settings(config=ZONED), store=open_store(f"sqlite://{tmp_path / 'z.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c, app.state.service


def _queued(client) -> str:
    r = client.post("/v1/jobs", json={"run": "echo", "resources": {"cpus": 1},
                                      "broker": {"budget_usd": "5", "expected_hours": "0.1"}}, headers=ADMIN_AUTH)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def _pins(client, job_id: str) -> list:
    events = client.get(f"/v1/jobs/{job_id}/events", headers=ADMIN_AUTH).json()["events"]
    return [e for e in events if e["event"] == "switch_tier"]


def test_a_move_to_on_demand_that_lost_the_race_to_its_twin_sees_the_pin_and_records_no_second_event(zoned):
    client, service = zoned
    job_id = _queued(client)
    stale = service.store.get_job(job_id)  # what the second call read before the first one's write
    real_get, reads = service.get, []

    def get(principal, jid):
        reads.append(jid)
        return stale if len(reads) == 1 else real_get(principal, jid)

    assert client.post(f"/v1/jobs/{job_id}/ondemand", headers=ADMIN_AUTH).status_code == 200
    assert len(_pins(client, job_id)) == 1
    service.get = get
    try:
        r = client.post(f"/v1/jobs/{job_id}/ondemand", headers=ADMIN_AUTH)
    finally:
        service.get = real_get
    assert r.status_code == 200 and r.json()["pinned_tier"] == "ondemand", r.text
    assert len(reads) == 2, "the version conflict was not retried on a fresh read"
    assert len(_pins(client, job_id)) == 1


def test_concurrent_moves_to_on_demand_record_one_pin(zoned):
    client, _ = zoned
    job_id = _queued(client)
    answers, start = [], threading.Barrier(4)

    def move():
        start.wait()
        answers.append(client.post(f"/v1/jobs/{job_id}/ondemand", headers=ADMIN_AUTH))

    threads = [threading.Thread(target=move) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r.status_code for r in answers] == [200] * 4, [r.text for r in answers]
    assert all(r.json()["pinned_tier"] == "ondemand" for r in answers)
    assert len(_pins(client, job_id)) == 1


# -- times and hours as shown -----------------------------------------------------------------------------------

def test_broker_queue_rounds_a_start_to_the_nearest_minute():
    from broker.cli import _short_time

    day = "2026-12-06"
    assert _short_time("2026-12-06T00:34:55Z", day) == "00:35Z"  # was 00:34Z
    assert _short_time("2026-12-06T00:34:29Z", day) == "00:34Z"
    assert _short_time("2026-12-06T00:34:30Z", day) == "00:35Z"
    assert _short_time("2026-12-06T23:59:50Z", day) == "12-07 00:00Z"  # onto the next day
    assert _short_time("2026-12-05T10:00:00Z", day) == "12-05 10:00Z"
    assert _short_time(None) == "" and _short_time("soon") == "soon"


def test_hours_left_keeps_two_significant_figures_under_an_hour_rounded_down():
    from decimal import Decimal

    from broker.costs import _hours_left

    assert _hours_left(Decimal(1_383_000) / Decimal(7_200_000)) == "0.19"  # was "0.1"
    assert _hours_left(Decimal("0.0523")) == "0.052"
    assert _hours_left(Decimal("12.37")) == "12.3" and _hours_left(Decimal("1.99")) == "1.9"
    assert _hours_left(Decimal(0)) == "0.0"


def test_a_job_updated_by_a_tick_that_began_before_its_submit_never_reads_as_updated_before_it(zoned):
    from dataclasses import replace

    from broker.store import Change

    client, service = zoned
    job_id = _queued(client)
    job = service.store.get_job(job_id)
    submitted = float(int(job.submitted_at)) + 0.05  # just past a second; the tick began just before it
    service.store.commit(Change(job=replace(job, submitted_at=submitted, updated_at=submitted - 0.1),
                                expected_version=job.version))
    shown = client.get(f"/v1/jobs/{job_id}", headers=ADMIN_AUTH).json()
    assert shown["updated_at"] >= shown["submitted_at"], shown  # was a second earlier
    assert shown["updated_at"] == shown["submitted_at"]
