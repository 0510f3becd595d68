"""An ops QA walk (Dec 8) of what the broker and its CLI say: where the admin token is for the CLI when the config
file set the data dir, the 401's hint for a broker given its admin token, a store outage logged once a tick, a
preemption whose job still waits said "to recover", and a task file's budget quoted other than written."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from broker_testing import POOL_AND_SPOT, cli_runner, start_broker, stop_broker, wait_for
from testports import free_port

REPO = Path(__file__).parents[2]


# -- the admin token's file, and the 401's hint ------------------------------------------------------------------

def test_a_data_dir_from_the_config_file_is_said_at_start_with_the_variable_the_cli_needs_to_find_its_token(tmp_path):
    """`admin token in /tmp/x/dd/admin-token (the CLI on this host reads it...)`, and then every command was a 401:
    the CLI looks in BROKER_DATA_DIR or the default data dir, and knows nothing of the server's config file."""
    data = tmp_path / "dd"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(POOL_AND_SPOT + f"data_dir: {data}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("BROKER_DATA_DIR", "BROKER_ADMIN_TOKEN", "BROKER_TOKEN", "XDG_DATA_HOME", "BROKER_CONFIG")}
    env["HOME"] = str(tmp_path / "home")
    port = free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", str(port), "--config", str(cfg)],
                            env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        wait_for(lambda: "admin token in" in log.read_text() or proc.poll() is not None, timeout=60)
        line, = [x for x in log.read_text().splitlines() if x.startswith("admin token in")]
        assert line.startswith(f"admin token in {data / 'admin-token'} (the data dir is the config file's data_dir: "
                               f"for the CLI on this host to read it, set BROKER_DATA_DIR={data};"), line
        assert "the CLI on this host reads it" not in line, line
        run = cli_runner(f"http://127.0.0.1:{port}", token=None)
        wait_for(lambda: run("status", check=False, extra_env={"HOME": env["HOME"],
                                                               "BROKER_DATA_DIR": str(data)}).returncode == 0,
                 timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def test_the_start_line_says_the_cli_reads_the_token_by_itself_where_it_looks_there(tmp_path, monkeypatch):
    from broker.cli import _cli_reads_it

    monkeypatch.setenv("BROKER_DATA_DIR", str(tmp_path / "data"))
    assert _cli_reads_it(tmp_path / "data") == "the CLI on this host reads it"
    assert _cli_reads_it(tmp_path / "other") == ("the data dir is the config file's data_dir: for the CLI on this "
                                                 f"host to read it, set BROKER_DATA_DIR={tmp_path / 'other'}")


def test_a_401_with_no_token_says_the_data_dir_only_as_where_a_broker_that_made_its_own_token_keeps_it(tmp_path):
    """A broker given its admin token (admin_token_sha256) writes no file, yet the hint said "or set BROKER_DATA_DIR
    to the data dir the broker was started with", as if it had."""
    digest = "0" * 64
    proc, url = start_broker(tmp_path, config=POOL_AND_SPOT + f'admin_token_sha256: ["{digest}"]\n',
                             env_extra={"BROKER_ADMIN_TOKEN": ""})
    try:
        r = cli_runner(url, token=None)("status", check=False, extra_env={"BROKER_DATA_DIR": str(tmp_path / "data")})
        assert r.returncode == 1 and r.stderr.startswith("error [401]: "), r.stderr
        assert "or set BROKER_DATA_DIR to the data dir the broker was started with" not in r.stderr, r.stderr
        assert ("no token was sent: set BROKER_TOKEN or --token to the admin token the broker was given, or a team "
                "token; or, if the broker made its own admin token (it was given none: no BROKER_ADMIN_TOKEN, no "
                "admin_token_sha256), set BROKER_DATA_DIR to the data dir it was started with, where it keeps that "
                "token") in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


# -- a store that does not answer --------------------------------------------------------------------------------

def test_a_store_outage_is_logged_when_it_starts_once_a_minute_while_it_lasts_and_when_it_ends(make_settings,
                                                                                             caplog):
    """Each broker logged `engine tick skipped: the job store did not answer ...` every tick: 39 lines in 28 s."""
    from broker.engine.reconcile import Engine
    from broker.store import StoreUnavailable, open_store
    from launchers.local import LocalLauncher

    settings = make_settings(config="tick_seconds: 0.5\n")
    store = open_store(settings.store_url)
    clock = [1000.0]
    engine = Engine(settings, store, LocalLauncher(settings.data_dir / "runs"), monotonic=lambda: clock[0])
    down = [True]
    real_tick = engine.tick

    def tick():
        if down[0]:
            raise StoreUnavailable("the job store did not answer (redis: connection refused)")
        return real_tick()

    engine.tick = tick
    try:
        with caplog.at_level(logging.INFO, logger="broker.engine"):
            for _ in range(100):  # 50 s at tick_seconds 0.5
                engine.tick_safely()
                clock[0] += 0.5
            said = [r.getMessage() for r in caplog.records if r.name == "broker.engine"]
            assert len([m for m in said if "engine tick skipped" in m]) == 1, said
            for _ in range(30):  # past a minute: said again, with how long and how many
                engine.tick_safely()
                clock[0] += 0.5
            skipped = [r.getMessage() for r in caplog.records if "engine tick skipped" in r.getMessage()]
            assert len(skipped) == 2, skipped
            assert skipped[1].endswith("(the store has not answered for 60 s: 121 ticks skipped)"), skipped
            down[0] = False
            engine.tick_safely()
            engine.tick_safely()
        back = [r.getMessage() for r in caplog.records if "engine ticks resumed" in r.getMessage()]
        assert back == ["engine ticks resumed: the job store answers again, after 65 s without it (130 ticks "
                        "skipped)"], back
    finally:
        store.close()


# -- broker costs: a preemption whose job still waits -----------------------------------------------------------

def _pre(*events, lost: int = 0):
    return {"count": len(events) - lost, "lost": lost, "recovery_seconds": sum(e[0] for e in events),
            "by_zone": [{"zone": "sim-a", "count": len(events) - lost}] if len(events) > lost else [],
            "events": [{"recovery_seconds": s, "recovered": r, "waiting": w} for s, r, w in events]}


@pytest.mark.parametrize("pre, said", [
    pytest.param(_pre((14, False, True)), "1 preemption, waiting 14 s so far to resume (sim-a 1)",
                 id="a job still queued after its preemption waits, not recovers"),
    pytest.param(_pre((14, True, False)), "1 preemption, 14 s to recover (sim-a 1)",
                 id="a job that resumed recovered"),
    pytest.param(_pre((10, True, False), (20, True, False)), "2 preemptions, 30 s to recover (sim-a 2)",
                 id="two recovered are said in the plural"),
    pytest.param(_pre((10, True, False), (20, False, True), (5, False, False)),
                 "3 preemptions (sim-a 3): 1 recovered in 10 s, 1 waiting 20 s so far, 1 ended without resuming",
                 id="recovered, waiting and ended are said apart"),
    pytest.param(_pre(), "no preemptions or lost nodes", id="none is said as none"),
])
def test_broker_costs_says_recovery_only_of_a_job_recovered_and_that_a_waiting_one_waits(pre, said):
    from broker.cli import _preemptions_line

    assert _preemptions_line(pre) == said


def test_broker_costs_says_a_waiting_preemption_waits_against_a_real_broker(tmp_path):
    """A job preempted on the only zone, which then has no capacity, is queued again: `broker costs` said
    "1 preemption(s), N s to recover" of it."""
    import httpx

    from broker_testing import ADMIN

    config = "pools: []\nzones:\n  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 1}\n" \
             "tick_seconds: 0.2\nstop_grace_seconds: 1\n"
    proc, url = start_broker(tmp_path, config=config)
    run = cli_runner(url)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    try:
        task = tmp_path / "t.yaml"
        task.write_text("name: t\nresources: {cpus: 1}\nrun: sleep 60\nbroker: {budget_usd: '5'}\n")
        job_id = run("--json", "submit", str(task)).stdout
        import json

        job_id = json.loads(job_id)["id"]
        wait_for(lambda: httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()["state"] == "running",
                 timeout=60)
        fault = {"kind": "zone", "zone": "sim-a", "available": False}
        assert httpx.post(f"{url}/v1/admin/faults", headers=headers, json=fault).status_code == 200
        r = httpx.post(f"{url}/v1/admin/faults", headers=headers, json={"kind": "preempt", "job_id": job_id})
        assert r.status_code == 200 or "not running" in r.json()["detail"], r.text  # (or the zone took it already)
        wait_for(lambda: httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers).json()["state"] == "queued",
                 timeout=60)
        data = httpx.get(f"{url}/v1/costs?period=24h", headers=headers).json()["preemptions"]
        assert data["count"] == 1 and [e["waiting"] for e in data["events"]] == [True], data
        out = run("costs").stdout
        assert "1 preemption, waiting " in out and "so far to resume" in out and "to recover" not in out, out
    finally:
        stop_broker(proc, url)


# -- the overrides note ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("written, shown", [("1.00", "$1.00"), ("2", "$2.00"), ("0.5", "$0.50"), ("'1.00'", "'1.00'")])
def test_the_overrides_note_quotes_the_files_budget_as_money_or_as_written_not_as_a_float(written, shown, capsys):
    """`note: --budget 5 overrides the task's broker.budget_usd 1.0` for a file that says `1.00`."""
    from broker.cli import _say_overridden
    from broker.task_text import load_text

    task = load_text(f"name: t\nresources: {{cpus: 1}}\nrun: echo\nbroker: {{budget_usd: {written}}}\n")
    _say_overridden(task, argparse.Namespace(budget="5", team=None, deadline=None))
    assert capsys.readouterr().err == f"note: --budget 5 overrides the task's broker.budget_usd {shown}\n"
