"""Brokers sharing a Redis store measure their host's clock against the store's (Redis ``TIME``), at start and at
every beat: ``broker_clock_offset_seconds`` on ``/metrics``, a warning in the log past a few seconds, and beyond
``BROKER_MAX_CLOCK_OFFSET_S`` an engine that does not tick — it would stamp false times (a ``deadline_passed`` note on
every deadline job, the queue in the wrong order, budgets billed up to a future time) — until the clock is back.
Before, a broker 2 h ahead ran on without a word. SQLite (one process, one clock) is unaffected.

A broker process with a skewed clock runs under libfaketime, its offset read from a file the test rewrites; an
in-process engine takes the clock it is given."""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from broker_testing import ADMIN, REPO, RedisServer, wait_for
from testports import bindable

from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.service import BrokerService
from broker.store import open_store
from broker.store.redis import RedisStore
from launchers.local import LocalLauncher

CONFIG = ("pools:\n  - {name: local, slots: 2, price_per_slot_hour: \"0.10\"}\n"
          "tick_seconds: 0.1\nowner_timeout_seconds: 8\n")
HEADERS = {"Authorization": f"Bearer {ADMIN}"}
FAKETIME = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1") + glob.glob("/usr/lib/faketime/*MT.so.1"))
"""libfaketime for threaded programs (Debian's package `faketime`), preloaded into a broker to skew its clock."""


def _port() -> int:
    """A loopback port from a range of this file's own (19500-19599), apart from the xdist workers' slices."""
    for port in range(19500, 19600):
        if bindable("127.0.0.1", port):
            return port
    raise RuntimeError("no free port in 19500-19599")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = RedisServer(tmp_path_factory.mktemp("redis-clock"))
    server.port = _port()
    server.start()
    yield server.url
    server.stop()


def _serve(tmp_path, url: str, *, skew_file=None):
    """``broker serve`` on ``url``'s store; with ``skew_file``, under libfaketime reading its offset from that file."""
    port = _port()
    cfg = tmp_path / f"config-{port}.yaml"
    cfg.write_text(CONFIG)
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / f"data-{port}"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_STORE_URL": url}
    if skew_file is not None:
        env.update(LD_PRELOAD=FAKETIME[0], FAKETIME_TIMESTAMP_FILE=str(skew_file), FAKETIME_NO_CACHE="1",
                   DONT_FAKE_MONOTONIC="1")  # a monotonic clock faked too: the engine's wait slept the whole skew
    log = tmp_path / f"broker-{port}.log"
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", str(port), "--config", str(cfg)],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(f"{base}/v1/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            if proc.poll() is not None:
                pytest.fail(log.read_text())
            return False

    wait_for(up, timeout=30)
    return proc, httpx.Client(base_url=base, headers=HEADERS, timeout=10), log


def _stop(proc, client) -> None:
    for job in client.get("/v1/jobs").json()["jobs"]:
        if job["state"] in ("queued", "placed", "launching", "running"):
            client.post(f"/v1/jobs/{job['id']}/cancel")
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def _metric(text: str, name: str, **labels) -> float | None:
    where = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{where}}} (\S+)$" if where else rf"^{name} (\S+)$", text, re.M)
    return None if m is None else float(m.group(1))


def test_a_broker_whose_clock_is_ahead_of_the_store_stops_ticking_says_why_and_resumes_once_synced(tmp_path,
                                                                                                   redis_url):
    assert FAKETIME, "libfaketime is not installed: `make test` installs Debian's faketime (apt-get install faketime)"
    store = RedisStore(redis_url)
    skew = tmp_path / "skew"
    skew.write_text("+120s\n")
    proc, client, log = _serve(tmp_path, redis_url, skew_file=skew)
    try:
        wait_for(lambda: "beyond BROKER_MAX_CLOCK_OFFSET_S" in log.read_text(), timeout=20)
        said = log.read_text()
        assert re.search(r"1[12]\d\.\d s ahead of the job store's", said) and "Sync the clock (NTP" in said, said
        offset = _metric(client.get("/metrics").text, "broker_clock_offset_seconds")
        assert offset is not None and 115 < offset < 125, offset
        ready = client.get("/v1/readyz")  # a load balancer stops sending it work
        assert ready.status_code == 503 and "ahead of the job store's" in ready.json()["detail"], ready.text
        assert ready.headers["Retry-After"] == "30"
        job = client.post("/v1/jobs", json={"name": "j", "run": "echo hi", "broker": {"budget_usd": 1,
                                                                                     "deadline": "30m"}}).json()
        time.sleep(3)  # 30 ticks' worth: the engine ticks none of them
        assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "queued", "an engine 2 min ahead placed a job"
        assert not [e for e in store.events(job["id"]) if e.event == "place"]
        skew.write_text("+0s\n")  # chrony steps the clock back: it ticks again by itself, at its next beat
        wait_for(lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] != "queued", timeout=20)
        assert "the engine ticks again" in log.read_text()
        offset = _metric(client.get("/metrics").text, "broker_clock_offset_seconds")
        assert offset is not None and abs(offset) < 2, offset
        assert client.get("/v1/readyz").status_code == 200
    finally:
        _stop(proc, client)
        store.close()


def test_metrics_say_how_long_ago_a_dead_broker_ahead_of_this_one_last_beat(tmp_path, redis_url):
    # A broker 2 h ahead beat once more, then died: its last beat's timestamp stays 2 h in the future, so
    # `time() - max(broker_engine_last_beat_timestamp_seconds) > 120` could not fire. The age, counted on this
    # broker's clock from when it saw the beat change, grows from its death on.
    store = RedisStore(redis_url)
    store.beat("local#dead-and-ahead", time.time() + 7200)
    proc, client, _ = _serve(tmp_path, redis_url)
    try:
        time.sleep(3)
        text = client.get("/metrics").text
        assert _metric(text, "broker_engine_last_beat_timestamp_seconds", domain="local#dead-and-ahead") > time.time()
        first = _metric(text, "broker_engine_beat_age_seconds", domain="local#dead-and-ahead")
        assert first is not None and first >= 2, text
        own = [float(v) for d, v in re.findall(r'^broker_engine_beat_age_seconds\{domain="([^"]+)"\} (\S+)$', text,
                                               re.M) if d != "local#dead-and-ahead"]
        assert own and min(own) < 5  # its own engine beats: min() over the domains stays low while one lives
        time.sleep(2)
        later = _metric(client.get("/metrics").text, "broker_engine_beat_age_seconds", domain="local#dead-and-ahead")
        assert later >= first + 1.5
        offset = _metric(text, "broker_clock_offset_seconds")
        assert offset is not None and abs(offset) < 2
    finally:
        _stop(proc, client)
        store.close()


def _world(tmp_path, make_settings, url, skew, **env):
    settings = make_settings(url, config=CONFIG, **env)
    store = open_store(url)
    if isinstance(store, RedisStore):
        store._r.flushdb()
    launcher = LocalLauncher(tmp_path / "runs")
    def host() -> float:  # this host's clock, skewed
        return time.time() + skew[0]

    engine = Engine(settings, store, launcher, clock=host, host_clock=host)
    service = BrokerService(settings, store, launcher)
    job = service.submit(Principal("admin", None, admin=True),
                         {"name": "j", "run": "echo hi", "broker": {"budget_usd": 1}})[0]
    return store, engine, job


def test_an_engine_beyond_the_limit_does_not_tick_and_ticks_again_once_within_it(tmp_path, make_settings, redis_url):
    skew = [45.0]
    store, engine, job = _world(tmp_path, make_settings, redis_url, skew)
    engine.tick()
    assert 44 < engine.clock_offset < 46
    refusal = engine.clock_refusal()
    assert refusal is not None and "45.0 s ahead of the job store's" in refusal and "(30 s)" in refusal
    assert store.get_job(job.id).state.value == "queued"
    skew[0] = -45.0  # behind is as wrong as ahead
    engine._last_beat = float("-inf")  # its next beat now (else within BEAT_SECONDS)
    engine.tick()
    assert "45.0 s behind the job store's" in engine.clock_refusal()
    assert store.get_job(job.id).state.value == "queued"
    skew[0] = 10.0  # within the limit, past the tolerance: a warning, and it ticks
    engine._last_beat = float("-inf")
    engine.tick()
    assert engine.clock_refusal() is None
    assert store.get_job(job.id).state.value != "queued"


@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf", "nan"])
def test_a_limit_that_is_no_number_of_seconds_is_refused_naming_it(make_settings, value):
    from broker.config import ConfigError

    with pytest.raises(ConfigError, match=f"BROKER_MAX_CLOCK_OFFSET_S: must be a number of seconds more than 0, "
                                          f"not '{value}'"):
        make_settings(BROKER_MAX_CLOCK_OFFSET_S=value)


def test_the_limit_is_a_setting(tmp_path, make_settings, redis_url):
    skew = [45.0]
    store, engine, job = _world(tmp_path, make_settings, redis_url, skew, BROKER_MAX_CLOCK_OFFSET_S="60")
    assert engine.settings.max_clock_offset_seconds == 60
    engine.tick()
    assert engine.clock_refusal() is None and store.get_job(job.id).state.value != "queued"


def test_a_broker_on_sqlite_has_one_clock_and_is_never_held(tmp_path, make_settings):
    skew = [7200.0]
    store, engine, job = _world(tmp_path, make_settings, f"sqlite://{tmp_path / 'b.db'}", skew)
    engine.tick()
    assert engine.clock_offset is None and engine.clock_refusal() is None
    assert store.get_job(job.id).state.value != "queued"


def test_the_readiness_check_names_the_offset_and_the_fix(tmp_path, redis_url):
    from broker.api.probe import clock_refusal

    store = RedisStore(redis_url)
    try:
        refusal = clock_refusal(store, lambda: time.time() + 300, 30)
        assert refusal is not None and "300.0 s ahead" in refusal and "Sync the clock (NTP" in refusal
        assert clock_refusal(store, time.time, 30) is None
        assert clock_refusal(open_store(f"sqlite://{tmp_path / 's.db'}"), lambda: time.time() + 300, 30) is None
    finally:
        store.close()
