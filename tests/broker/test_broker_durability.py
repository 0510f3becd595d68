"""A kill -9 of the broker never loses an accepted job, nor launches an attempt twice.

Real subprocesses: ``broker serve`` on SQLite and on a redis-server of our own
with AOF (``appendfsync always``).
"""

import signal
import time

import httpx
import pytest

from broker.store import open_store

from broker_testing import ADMIN, free_port, start_broker, wait_for


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request, tmp_path, redis_server):
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'broker.db'}"
    # a database number of its own on the durable test server
    db = int(time.monotonic_ns() % 15) + 1
    import redis

    redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + f"/{db}").flushdb()
    return redis_server.url.rsplit("/", 1)[0] + f"/{db}"


def test_kill_9_right_after_a_201_loses_no_job(tmp_path, store_url):
    accepted = []
    for round_ in range(3):
        proc, url = start_broker(tmp_path, store_url, free_port(), engine="off")
        r = httpx.post(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {ADMIN}"},
                       json={"name": f"durable-{round_}", "run": "true", "broker": {"budget_usd": 1}})
        assert r.status_code == 201, r.text
        proc.send_signal(signal.SIGKILL)  # no shutdown, no flush: the answer alone must be enough
        proc.wait()
        accepted.append(r.json()["id"])
    store = open_store(store_url)
    try:
        for job_id in accepted:
            job = store.get_job(job_id)
            assert job is not None, f"{job_id} was answered 201 and then lost"
            assert [e.event for e in store.events(job_id)] == ["submit"]
    finally:
        store.close()


def test_a_broker_killed_while_a_job_runs_readopts_it_without_a_second_launch(tmp_path, store_url):
    marker = tmp_path / "runs.txt"
    proc, url = start_broker(tmp_path, store_url, free_port())
    headers = {"Authorization": f"Bearer {ADMIN}"}
    r = httpx.post(f"{url}/v1/jobs", headers=headers, json={
        "name": "long", "run": f"echo started >> {marker}; sleep 3; echo done",
        "broker": {"budget_usd": 1}})
    job_id = r.json()["id"]
    wait_for(lambda: httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()["state"] == "running")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc, url = start_broker(tmp_path, store_url, free_port())
    try:
        final = wait_for(lambda: (j := httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json())["state"]
                         in ("succeeded", "failed") and j, timeout=30)
        assert final["state"] == "succeeded"
        assert final["attempts"] == 1
        assert marker.read_text().count("started") == 1
    finally:
        proc.terminate()
        proc.wait(10)
