"""What an audit of the CLI against real brokers found, each checked the way a user meets it: `broker status` that
listed only the 200 newest jobs, an empty `--token`/`BROKER_TOKEN` that went as this host's admin, a BROKER_PORT
that made every command a traceback, an idempotency key a header cannot carry, `serve --port` out of range or 0,
a task file that is not UTF-8, an option given twice, and a value that begins with '-'."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from broker_testing import ADMIN, REPO, cli_runner, start_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
DASH_TOKEN = "-a-token-that-begins-with-a-dash"  # secrets.token_urlsafe gives one such in 64


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker with no engine (nothing runs, the jobs stay queued), an admin token and a team token with a dash
    first; and a data dir whose admin-token file holds the admin token, as a local `broker serve` writes it."""
    tmp = tmp_path_factory.mktemp("audit")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'a.db'}", engine="off", config=CONFIG,
                             env_extra={"BROKER_TEAM_TOKENS": json.dumps({"ml": DASH_TOKEN})})
    local = tmp / "local-data"
    local.mkdir()
    (local / "admin-token").write_text(ADMIN + "\n")
    task = tmp / "t.yaml"
    task.write_text("name: t\nresources: {cpus: 1}\nrun: echo hi\n")
    yield url, tmp, local, task
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def broker_cli(*args, env: dict, timeout: float = 60):
    """``broker ARGS`` with exactly the BROKER_* variables of ``env`` (none from this process)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    full.update(COLUMNS="200", **env)
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], env=full, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def job_ids(url: str) -> list[str]:
    r = httpx.get(f"{url}/v1/jobs", params={"limit": 1000}, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    return [j["id"] for j in r.json()["jobs"]]


# -- 1. `broker status` lists every job, not the broker's default 200 -----------------------------------------------


def test_status_lists_every_job_not_the_200_newest(tmp_path):
    """201 jobs: `broker status` showed the 200 newest, so `broker status | grep` missed the first one submitted."""
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 's.db'}", engine="off", config=CONFIG)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30) as client:
            for i in range(201):
                r = client.post("/v1/jobs", json={"name": f"s{i}", "resources": {"cpus": 1}, "run": "true",
                                                  "broker": {"budget_usd": "1"}})
                assert r.status_code == 201, r.text
        run = cli_runner(url)
        listed = json.loads(run("--json", "status").stdout)
        assert len(listed) == 201 and listed[-1]["name"] == "s0"
        r = run("status")
        assert sum(1 for line in r.stdout.splitlines() if " s0 " in line) == 1, r.stdout
        assert r.stderr == ""  # nothing left out, nothing to say
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


def _job(i: int, state: str) -> dict:
    usd = {"usd": "$1.00", "micros": 1_000_000}
    return {"id": f"j-{i:010d}", "name": f"n{i}", "team": "default", "state": state, "reason": "",
            "queue_position": None, "estimated_start": None, "spent": {"usd": "$0.00", "micros": 0}, "budget": usd,
            "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_790_000_000 - 60 * i))}


# newest first: 1150 jobs that ended, then 50 running since before them all
MANY = [_job(i, "succeeded" if i < 1150 else "running") for i in range(1200)]


class _ManyJobs(BaseHTTPRequestHandler):
    """A broker holding more jobs than it lists at once, as `GET /v1/jobs` answers: newest first, ``limit`` at most
    1000 (200 by default), ``state`` one state."""

    def do_GET(self):
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        limit = int(query.get("limit", ["200"])[0])
        if url.path != "/v1/jobs" or limit > 1000:
            self.send_error(422 if url.path == "/v1/jobs" else 404)
            return
        state = query.get("state", [None])[0]
        body = json.dumps({"jobs": [j for j in MANY if state in (None, j["state"])][:limit]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def many_jobs():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ManyJobs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_status_of_more_jobs_than_the_broker_lists_at_once_shows_every_job_not_ended_and_says_what_is_left_out(
        many_jobs):
    env = {"BROKER_URL": many_jobs, "BROKER_TOKEN": ADMIN}
    running = [j["id"] for j in MANY if j["state"] == "running"]
    r = broker_cli("status", env=env)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if " running " in line]
    assert sorted(line.split()[0] for line in lines) == running, r.stdout  # `broker status | grep running`: all
    # a broker from before cursors (no next_cursor): the newest page and each live state, and the note says so
    assert "shown are the 1000 newest jobs and every job that has not ended" in r.stderr, r.stderr
    r = broker_cli("--json", "status", env=env)
    listed = json.loads(r.stdout)  # stdout stays JSON: the note is on stderr
    assert [j["id"] for j in listed] == [j["id"] for j in MANY[:1000]] + running
    assert "older jobs that ended are left out" in r.stderr, r.stderr
    r = broker_cli("--json", "status", "--state", "succeeded", env=env)
    assert len(json.loads(r.stdout)) == 1000
    assert "these are the 1000 newest succeeded jobs" in r.stderr, r.stderr


# -- 2. an empty token or URL is refused, never read as "not given" -------------------------------------------------


def test_an_empty_token_is_refused_not_sent_as_this_hosts_admin(broker):
    url, _, local, _ = broker
    env = {"BROKER_URL": url, "BROKER_DATA_DIR": str(local)}  # the admin token file of this host's broker
    assert broker_cli("--json", "status", env=env).returncode == 0  # no token given: the local admin's, as before
    r = broker_cli("--token", "", "status", env=env)  # `--token "$TEAM_TOKEN"` with the variable unset
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.splitlines()[-1] == "broker: error: argument --token: is empty: give it a value, or leave it " \
                                        "out for the default", r.stderr
    r = broker_cli("status", "--token", " ", env=env)
    assert r.returncode == 2 and "argument --token: is empty" in r.stderr and r.stdout == "", r.stderr
    r = broker_cli("--json", "status", env={**env, "BROKER_TOKEN": ""})
    assert r.returncode == 1, r.stdout
    said = "BROKER_TOKEN is set but empty: give it your token, or unset it (unset BROKER_TOKEN) for the admin " \
           "token of a broker on this host"
    assert r.stderr.strip() == f"error: {said}" and json.loads(r.stdout) == {"error": said}


def test_a_submit_with_an_empty_token_is_not_made_as_admin(broker):
    url, _, local, task = broker
    before = job_ids(url)
    r = broker_cli("submit", str(task), env={"BROKER_URL": url, "BROKER_DATA_DIR": str(local), "BROKER_TOKEN": ""})
    assert r.returncode == 1 and "BROKER_TOKEN is set but empty" in r.stderr, r.stderr
    assert job_ids(url) == before


def test_an_empty_broker_url_is_refused_not_read_as_the_broker_on_this_host(broker):
    url, _, local, _ = broker
    port = url.rsplit(":", 1)[1]
    env = {"BROKER_PORT": port, "BROKER_TOKEN": ADMIN}  # a broker on this host, on that port
    assert broker_cli("--json", "status", env=env).returncode == 0
    r = broker_cli("--json", "status", env={**env, "BROKER_URL": ""})  # BROKER_URL=$PROD_URL, unset
    assert r.returncode == 1, r.stdout
    assert r.stderr.strip() == "error: BROKER_URL is set but empty: give it the broker's URL, or unset it (unset " \
                               "BROKER_URL) for the broker on this host", r.stderr
    r = broker_cli("--url", "", "status", env=env)
    assert r.returncode == 2 and "argument --url: is empty" in r.stderr and r.stdout == "", r.stderr


def test_the_python_client_refuses_an_empty_token_or_url(broker, monkeypatch):
    from broker.client import BrokerClient, BrokerError

    url, _, local, _ = broker
    monkeypatch.setenv("BROKER_DATA_DIR", str(local))
    monkeypatch.delenv("BROKER_TOKEN", raising=False)
    with pytest.raises(BrokerError, match=r"the token \(--token\) is empty"):
        BrokerClient(url, "")
    with pytest.raises(BrokerError, match=r"the broker URL \(--url\) is empty"):
        BrokerClient("", ADMIN)
    with BrokerClient(url) as client:  # neither given: the local admin token, as before
        assert client.jobs() is not None


# -- 3. BROKER_PORT that is not a port -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "abc"])
def test_a_broker_port_that_is_not_a_port_does_not_break_every_command(value, tmp_path):
    r = broker_cli("--help", env={"BROKER_PORT": value})
    assert r.returncode == 0 and "Traceback" not in r.stderr and "usage: broker" in r.stdout, r.stderr
    r = broker_cli("status", "--help", env={"BROKER_PORT": value})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def test_a_broker_port_that_is_not_a_port_is_one_line_where_it_is_used(tmp_path):
    env = {"BROKER_PORT": "abc", "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}
    r = broker_cli("serve", env=env)
    assert r.returncode == 1 and r.stderr == "error: BROKER_PORT='abc' is not a port number (0 to 65535): give one, " \
                                             "or unset it for 8000\n", r.stderr
    r = broker_cli("status", env={**env, "BROKER_TOKEN": ADMIN})  # no BROKER_URL: the broker on this host, that port
    assert r.returncode == 1 and r.stderr.startswith("error: BROKER_PORT='abc' is not a port number") \
        and r.stderr.count("\n") == 1, r.stderr


# -- 4. an idempotency key a header cannot carry -----------------------------------------------------------------------


@pytest.mark.parametrize("key, says", [
    ("ключ", "holds a character that is not ASCII, 'к', at position 1"),
    (" k2 ", "begins with a space"),
    ("k2 ", "ends with a space"),
    ("a\tb", "holds a control character, '\\t', at position 2"),
    ("k" * 201, "is 201 characters long: the broker takes at most 200"),
])
def test_an_idempotency_key_a_header_cannot_carry_is_refused_before_anything_is_sent(broker, key, says):
    url, _, _, task = broker
    before = job_ids(url)
    started = time.monotonic()
    r = broker_cli("submit", str(task), "--idempotency-key", key, env={"BROKER_URL": url, "BROKER_TOKEN": ADMIN})
    took = time.monotonic() - started
    assert r.returncode == 2, r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f"broker submit: error: argument --idempotency-key: {says}"), r.stderr
    assert "Traceback" not in r.stderr and "may have been stored" not in r.stderr
    assert took < 3.0, took  # no retry: it was retried three times, 3.5 s
    assert job_ids(url) == before


def test_the_client_refuses_such_a_key_without_retrying_and_a_request_it_cannot_write_is_not_an_unknown_outcome(
        broker):
    from broker.client import BrokerClient, BrokerError

    url, _, _, _ = broker
    before = job_ids(url)
    with BrokerClient(url, ADMIN) as client:
        started = time.monotonic()
        with pytest.raises(BrokerError) as refused:
            client.submit({"run": "echo hi", "resources": {"cpus": 1}}, idempotency_key=" k2 ")
        assert time.monotonic() - started < 0.4  # no retry
        assert not refused.value.unknown_outcome and refused.value.detail.startswith("the idempotency key begins "
                                                                                     "with a space")
        # a header HTTP cannot carry, found as the request is written: nothing was sent, so nothing may have been done
        with pytest.raises(BrokerError) as unsent:
            client._request("POST", "/v1/jobs", json={"run": "echo hi"}, headers={"Idempotency-Key": " k3 "})
        assert not unsent.value.unknown_outcome and "nothing was sent" in unsent.value.detail, unsent.value.detail
        with pytest.raises(BrokerError) as unsent:
            client._request("GET", "/v1/jobs", headers={"X-Note": "ключ"})
        assert not unsent.value.unknown_outcome and "nothing was sent" in unsent.value.detail, unsent.value.detail
    assert job_ids(url) == before


# -- 6. `broker serve --port` out of range, or 0 -----------------------------------------------------------------------


@pytest.mark.parametrize("port", ["99999", "-1", "65536", "x"])
def test_serve_on_a_port_out_of_range_is_a_usage_error(port, tmp_path):
    r = broker_cli("serve", "--port", port, env={"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    shown = repr(port) if port == "x" else port
    assert r.stderr.splitlines()[-1] == f"broker serve: error: argument --port: {shown} is not a port number (0 to " \
                                        "65535)", r.stderr


def test_serve_on_port_0_says_the_port_it_took_and_its_jobs_report_progress_there(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    # a BROKER_PORT that --port overrides is not read (it refused the serve: the config pasted it into the URL)
    env.update(BROKER_DATA_DIR=str(tmp_path / "data"), BROKER_ADMIN_TOKEN=ADMIN, BROKER_PORT="abc")
    with open(log, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "broker.cli", "serve", "--port", "0", "--config", str(config)],
                                env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    try:
        def started():
            assert proc.poll() is None, log.read_text()
            return re.search(r"^spot-broker on http://127\.0\.0\.1:(\d+)  ", log.read_text())

        port = int(wait_for(started, timeout=60).group(1))
        assert port != 0, log.read_text()
        url = f"http://127.0.0.1:{port}"
        client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)

        def up():
            try:
                return client.get("/v1/healthz").status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=30)
        job = client.post("/v1/jobs", json={"name": "p", "resources": {"cpus": 1}, "broker": {"budget_usd": 1},
                                            "run": "echo \"$BROKER_PROGRESS_URL\""}).json()
        wait_for(lambda: client.get(f"/v1/jobs/{job['id']}").json()["state"] == "succeeded", timeout=30)
        said = client.get(f"/v1/jobs/{job['id']}/logs").json()["data"]
        assert f"{url}/v1/jobs/{job['id']}/progress" in said, said
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


# -- 7. a task file that is not UTF-8 ----------------------------------------------------------------------------------


def test_a_task_file_that_is_not_utf8_is_named_so_with_the_byte_and_its_offset(tmp_path):
    task = tmp_path / "latin1.yaml"
    task.write_bytes("name: café\nrun: echo hi\n".encode("latin-1"))
    r = broker_cli("submit", str(task), env={"BROKER_URL": "http://127.0.0.1:9", "BROKER_TOKEN": ADMIN})
    assert r.returncode == 1, r.stderr
    assert r.stderr == f"error: {task} is not UTF-8 (byte 0xe9 at offset 9): save the task's YAML as UTF-8\n", r.stderr
    task.write_bytes(b"\xef\xbb\xbfname: caf\xe9\n")  # after a byte-order mark: the offset is still the file's
    r = broker_cli("submit", str(task), env={"BROKER_URL": "http://127.0.0.1:9", "BROKER_TOKEN": ADMIN})
    assert r.stderr == f"error: {task} is not UTF-8 (byte 0xe9 at offset 12): save the task's YAML as UTF-8\n", r.stderr


# -- 8. an option given twice --------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["submit", "T", "--team", "a", "--team", "b"], "broker submit: error: argument --team: given twice (a, then b)"),
    (["submit", "T", "--budget", "1", "--budget", "2"], "broker submit: error: argument --budget: given twice (1, then 2)"),
    (["submit", "T", "--deadline", "1h", "--deadline", "2h"], "broker submit: error: argument --deadline: given twice"),
    (["submit", "T", "--idempotency-key", "a", "--idempotency-key", "b"],
     "broker submit: error: argument --idempotency-key: given twice"),
    (["status", "--state", "queued", "--state", "running"], "broker status: error: argument --state: given twice"),
    (["costs", "--period", "7d", "--period", "30d"], "broker costs: error: argument --period: given twice"),
    (["logs", "j-x", "--attempt", "1", "--attempt", "2"], "broker logs: error: argument --attempt: given twice (1, then 2)"),
    (["--url", "URL", "--url", "http://127.0.0.1:9", "status"], "broker: error: argument --url: given twice"),
    (["status", "--token", "t1", "--token", "t2"], "broker status: error: argument --token: given twice: give it once"),
])
def test_a_single_valued_option_given_twice_is_refused_naming_it(broker, args, says):
    url, _, _, task = broker
    args = [str(task) if a == "T" else url if a == "URL" else a for a in args]
    before = job_ids(url)
    r = broker_cli(*args, env={"BROKER_URL": url, "BROKER_TOKEN": ADMIN})
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1].startswith(says), r.stderr
    assert "t1" not in r.stderr and "t2" not in r.stderr  # a token is not echoed
    r = broker_cli("--json", *args, env={"BROKER_URL": url, "BROKER_TOKEN": ADMIN})
    assert json.loads(r.stdout)["field"] == says.split("argument ")[1].split(":")[0]
    assert job_ids(url) == before


def test_options_meant_to_repeat_and_a_client_option_given_again_after_the_command_still_go(broker):
    url, _, _, task = broker
    env = {"BROKER_URL": url, "BROKER_TOKEN": ADMIN}
    r = broker_cli("--json", "submit", str(task), "--env", "A=1", "--env", "B=2", env=env)
    assert r.returncode == 0, r.stderr
    r = broker_cli("--url", "http://127.0.0.1:9", "--json", "status", "--url", url, env=env)  # after the command: wins
    assert r.returncode == 0, r.stderr


# -- 9. a value that begins with '-' --------------------------------------------------------------------------------


def test_a_value_that_begins_with_a_dash_is_read_as_the_value_not_as_an_option(broker):
    url, _, _, task = broker
    env = {"BROKER_URL": url, "BROKER_TOKEN": ADMIN}
    before = job_ids(url)
    r = broker_cli("submit", str(task), "--deadline", "-1h", env=env)
    assert r.returncode == 1, r.stderr  # refused as the other bad deadlines are, not a usage error (exit 2)
    assert r.stderr.splitlines()[-1] == "error: --deadline: -1h is negative: a deadline is " \
                                        "a duration from now (6h, 1d12h) or a time to come with its timezone " \
                                        "(2026-12-01T18:00Z)", r.stderr
    r = broker_cli("submit", str(task), "--budget", "-5", env=env)  # the broker's own refusal, naming the option
    assert r.returncode == 1 and r.stderr.startswith("error [422]: --budget: "), r.stderr
    assert job_ids(url) == before
    r = broker_cli("--token", DASH_TOKEN, "--json", "status", env={"BROKER_URL": url})  # a token may begin with '-'
    assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
    r = broker_cli("status", "--team", "--state", "queued", env=env)  # a value left out is still said so
    assert r.returncode == 2 and r.stderr.splitlines()[-1].endswith("argument --team: expected one argument"), r.stderr


@pytest.mark.parametrize("url, shown", [
    ("http://alice:p4ss-Wd@127.0.0.1:{port}", "http://alice:***@127.0.0.1:{port}"),
    ("http://alice:p4ss-Wd@[::1", "http://alice:***@[::1"),
], ids=["a broker it cannot reach", "a URL that does not parse"])
def test_a_password_in_the_broker_url_is_not_said_back(url, shown):
    """A proxy's basic auth in --url (http://user:password@host) came back whole in "cannot reach the broker at ...",
    on a terminal or in a CI log; the broker's own store URL was already said that way."""
    from testports import free_port

    port = free_port()
    r = broker_cli("--url", url.format(port=port), "--token", "x", "--json", "status", env={})
    assert r.returncode == 1 and "p4ss-Wd" not in r.stdout + r.stderr, (r.stdout, r.stderr)
    assert shown.format(port=port) in r.stderr, r.stderr
