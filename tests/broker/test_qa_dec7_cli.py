"""What QA found in the CLI against live brokers (7 December): a follower that ended at a proxy's 502 or the broker's
503, exit 1 where the reader went away (rich's own exit), tracebacks with stdout closed or full, a Ctrl-C during a slow
submit that said nothing, a summary glued onto output with no last line end, an indented error in a JSON Lines stream,
job ids not trimmed or lowered, a queue unreadable at a sweep's size, a sweep's total over its newest 1,000 runs,
`broker --json` with no JSON, a loopback name read as remote,
and `broker events` at 40 columns drawing its reason zero wide.

A real ``broker serve`` (SQLite, the local pool) and the CLI as a user runs it, in a subprocess; a proxy of a few lines
in front of it where a load balancer stands in production."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from broker_testing import ADMIN, POOL_AND_SPOT, REPO, cli_runner, start_broker, stop_broker, wait_for
from broker import cli

PORTS = range(18900, 18950)
"""The ports these tests start servers on: a slice of its own to each pytest-xdist worker (up to 4), so that two
workers never pick the same free port a moment before each binds it."""

_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
_MINE = PORTS[(int(_WORKER) % 4 if _WORKER.isdigit() else 0) * 12:][:12]
_NEXT = [0]


def _port() -> int:
    """A port of this worker's slice of :data:`PORTS` nothing listens on, taken in turn (not the one a server of the
    test before just closed)."""
    for k in range(len(_MINE)):
        port = _MINE[(_NEXT[0] + k) % len(_MINE)]
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _NEXT[0] += k + 1
        return port
    raise AssertionError(f"no free port in {_MINE}")


@pytest.fixture
def served(tmp_path):
    """A real broker (one pool slot, one simulated spot zone): yields (run, url), ``run`` the CLI against it."""
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'c.db'}", port=_port(), config=POOL_AND_SPOT)
    yield cli_runner(url), url
    stop_broker(proc, url)


class Proxy:
    """A load balancer's stand-in in front of a broker: passes each request on, answers 502 (an HTML page, as an ALB
    does) while the broker behind it cannot be reached, and while ``answer`` is set answers that instead
    ``(status, headers, body)``. ``delay_posts``: seconds it holds a submit before passing it on (a slow broker).
    ``asked`` is when each request came, with its method and path; ``keys`` each submit's Idempotency-Key."""

    def __init__(self, backend: str):
        self.backend, self.answer, self.delay_posts = backend, None, 0.0
        self.asked: list[tuple[float, str, str]] = []
        self.keys: list[str] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _pass(self):
                proxy.asked.append((time.monotonic(), self.command, self.path))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "POST" and self.path.startswith("/v1/jobs"):
                    proxy.keys.append(self.headers.get("Idempotency-Key", ""))
                    time.sleep(proxy.delay_posts)
                if proxy.answer is not None:
                    return self._send(*proxy.answer)
                try:
                    r = httpx.request(self.command, proxy.backend + self.path, content=body, timeout=30,
                                      headers={k: v for k, v in self.headers.items()
                                               if k.lower() not in ("host", "content-length", "connection")})
                except httpx.TransportError:
                    return self._send(502, {"Content-Type": "text/html"},
                                      b"<html><body><h1>502 Bad Gateway</h1></body></html>")
                self._send(r.status_code, {"Content-Type": r.headers.get("content-type", "application/json")},
                           r.content)

            def _send(self, status, headers, body):
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _pass

        self.server = ThreadingHTTPServer(("127.0.0.1", _port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _env(url: str, **extra) -> dict:
    env = {**os.environ, "BROKER_URL": url, "BROKER_TOKEN": ADMIN, "COLUMNS": "200", **extra}
    return env


def _task(tmp_path, run: str, name: str = "t") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nresources: {{cpus: 1}}\nrun: {json.dumps(run)}\n")
    return str(path)


def _submitted(url: str, name: str) -> list[str]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}) as http:
        return [j["id"] for j in http.get("/v1/jobs", params={"name": name}).json()["jobs"]]


# -- 1. a follower rides out a proxy's 502 and the broker's 503 --------------------------------------------------------


def test_logs_f_goes_on_through_the_502s_a_proxy_answers_while_the_broker_behind_it_restarts(served, tmp_path):
    run, url = served
    steps = "for i in $(seq 1 12); do echo step $i; sleep 0.5; done"
    job_id = json.loads(run("--json", "submit", _task(tmp_path, steps), "--budget", "2").stdout)["id"]
    proxy = Proxy(url)
    try:
        follower = subprocess.Popen([sys.executable, "-m", "broker.cli", "logs", "-f", job_id], env=_env(proxy.url),
                                    cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(lambda: any(p.startswith(f"/v1/jobs/{job_id}/logs") for _, _, p in proxy.asked), timeout=30)
        proxy.backend = "http://127.0.0.1:9"  # the broker behind it gone: the proxy answers 502
        time.sleep(3)
        proxy.backend = url  # back
        out, err = follower.communicate(timeout=60)
    finally:
        proxy.close()
    assert follower.returncode == 0, err  # was 1: "error [502]: ... is a proxy in front of it failing?"
    assert [int(n) for n in re.findall(r"^step (\d+)$", out, re.M)] == list(range(1, 13)), out
    assert "answered 502 Bad Gateway" in err and "asking again for up to 120 s" in err, err
    assert "[the broker answers again; following on]" in err, err


def test_a_follower_waits_as_long_as_the_brokers_503_asks_and_no_longer_than_its_own_wait(served, tmp_path):
    run, url = served
    job_id = json.loads(run("--json", "submit", _task(tmp_path, "sleep 600"), "--budget", "2").stdout)["id"]
    proxy = Proxy(url)
    proxy.answer = (503, {"Content-Type": "application/json", "Retry-After": "2"},
                    b'{"detail": "the job store did not answer: retry in a moment"}')
    told = []
    try:
        from broker.client import BrokerClient, BrokerError

        client = BrokerClient(proxy.url, ADMIN)
        with pytest.raises(BrokerError) as raised:
            list(client.follow_logs(job_id, poll=0.1, on_unreachable=told.append, reconnect_seconds=5))
    finally:
        proxy.close()
    # asked again (was raised at the first 503), each time after the 2 s its Retry-After asks, until the wait is over
    times = [t for t, _, _ in proxy.asked]
    assert raised.value.status == 503 and 3 <= len(times) <= 5, times
    assert all(b - a >= 1.9 for a, b in zip(times, times[1:-1])), times  # the last: when the wait is over
    assert told == [f"the broker at {proxy.url} answered 503: the job store did not answer: retry in a moment"], told


# -- 2. the reader gone: 141 for rich's output too; a submit says the job it stored ------------------------------------


def _into_closed_pipe(url: str, *args: str) -> subprocess.CompletedProcess:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (`broker status J | true`)
    try:
        return subprocess.run([sys.executable, "-m", "broker.cli", *args], stdout=write, stderr=subprocess.PIPE,
                              env=_env(url), cwd=REPO, text=True, timeout=60)
    finally:
        os.close(write)


def test_every_command_whose_reader_went_away_exits_141_and_a_submit_names_the_job_it_stored(served, tmp_path):
    run, url = served
    task = _task(tmp_path, "echo hi")
    job_id = json.loads(run("--json", "submit", task, "--budget", "2").stdout)["id"]
    for args in (("status", job_id), ("costs",), ("costs", job_id), ("submit", task, "--dry-run")):
        r = _into_closed_pipe(url, *args)
        assert r.returncode == 141 and "Traceback" not in r.stderr, (args, r.returncode, r.stderr)  # was 1
    r = _into_closed_pipe(url, "submit", task, "--name", "piped")
    stored = _submitted(url, "piped")
    assert r.returncode == 141 and len(stored) == 1, (r.returncode, r.stderr)  # was 1, saying nothing
    assert f"the job was submitted all the same, as {stored[0]}" in r.stderr, r.stderr


# -- 3. stdout closed or full: one error line, no traceback; a stored job named ---------------------------------------


def _stdout_closed(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.cli", *args], stderr=subprocess.PIPE, env=_env(url),
                          cwd=REPO, text=True, timeout=60, preexec_fn=lambda: os.close(1))  # `>&-`


def _stdout_full(url: str, *args: str) -> subprocess.CompletedProcess:
    with open("/dev/full", "w") as full:
        return subprocess.run([sys.executable, "-m", "broker.cli", *args], stdout=full, stderr=subprocess.PIPE,
                              env=_env(url), cwd=REPO, text=True, timeout=60)


def test_a_closed_stdout_is_one_error_line_before_anything_is_done(served, tmp_path):
    run, url = served
    task = _task(tmp_path, "echo hi")
    job_id = json.loads(run("--json", "submit", task, "--budget", "2").stdout)["id"]
    for args in (("status",), ("status", job_id), ("submit", task, "--name", "closed1"),
                 ("--json", "submit", task, "--name", "closed2")):
        r = _stdout_closed(url, *args)
        lines = r.stderr.splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: the output (stdout) is closed"), \
            (args, r.stderr)
    assert _submitted(url, "closed") == []  # a job stored, then a traceback, before


def test_a_full_stdout_is_one_error_line_and_a_submit_names_the_job_it_stored(served, tmp_path):
    run, url = served
    run("--json", "submit", _task(tmp_path, "echo hi"), "--budget", "2")
    r = _stdout_full(url, "--json", "status")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "During handling" not in r.stderr, r.stderr
    assert r.stderr.strip() == ("error: cannot write the output (stdout): No space left on device; send it where it "
                                "can be written (a file on a disk with room, or a pipe)"), r.stderr
    r = _stdout_full(url, "--json", "submit", _task(tmp_path, "echo hi"), "--name", "full")
    stored = _submitted(url, "full")
    assert r.returncode == 1 and len(stored) == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1 and f"submitted all the same, as {stored[0]}" in r.stderr, r.stderr


# -- 4. Ctrl-C during a slow submit names the key a retry takes --------------------------------------------------------


def test_ctrl_c_during_a_slow_submit_says_it_may_be_stored_and_the_key_that_retries_it_once(served, tmp_path):
    run, url = served
    proxy = Proxy(url)
    proxy.delay_posts = 30
    try:
        submit = subprocess.Popen([sys.executable, "-m", "broker.cli", "submit", _task(tmp_path, "echo hi")],
                                  env=_env(proxy.url), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        wait_for(lambda: proxy.keys, timeout=30)
        submit.send_signal(signal.SIGINT)
        _, err = submit.communicate(timeout=30)
    finally:
        proxy.close()
    assert submit.returncode == 130, err
    assert err.strip() == (f"interrupted: the submit may have been stored; retrying with --idempotency-key "
                           f"{proxy.keys[0]} (Idempotency-Key header) cannot submit it twice"), err  # was nothing


# -- 5. submit --wait: the summary on a line of its own ----------------------------------------------------------------


def test_submit_wait_puts_its_summary_on_a_line_of_its_own_after_output_with_no_last_line_end(served, tmp_path):
    run, _ = served
    out = run("submit", _task(tmp_path, "printf 'no newline at end'"), "--wait").stdout
    assert "no newline at end\n" in out, out  # was "no newline at endj-ed053b8f20 …"


# -- 6. logs -f --json: an error is one line of the JSON Lines stream --------------------------------------------------


def test_logs_f_json_says_an_error_in_one_line_of_its_json_lines(served):
    run, _ = served
    r = run("--json", "logs", "-f", "j-0000000000", check=False)
    assert r.returncode == 1 and len(r.stdout.splitlines()) == 1, r.stdout  # was an indented object over 5 lines
    assert json.loads(r.stdout)["status"] == 404


# -- 7. job ids as pasted: spaces, a line end, capitals ----------------------------------------------------------------


def test_a_job_id_is_taken_with_the_spaces_and_line_end_a_paste_brings_and_in_capitals(served, tmp_path):
    run, _ = served
    job_id = json.loads(run("--json", "submit", _task(tmp_path, "echo hi"), "--budget", "2").stdout)["id"]
    for given in (f"{job_id} ", f"{job_id}\n", f"{job_id}\r\n", f" {job_id.upper()}"):
        r = run("--json", "status", given, check=False)
        assert r.returncode == 0 and json.loads(r.stdout)["id"] == job_id, (given, r.stderr)  # each was a 404
    r = run("--json", "events", job_id.upper(), check=False)
    assert r.returncode == 0 and json.loads(r.stdout)[0]["event"] == "submit", r.stderr


# -- 8. broker queue on a terminal: a row to a line --------------------------------------------------------------------


def _on_a_terminal(url: str, columns: int, *args: str) -> str:
    """The CLI's output on a terminal ``columns`` wide (a pseudo-terminal), without colours."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in _env(url, NO_COLOR="1").items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "broker.cli", *args], stdout=follower, stderr=follower, env=env,
                            cwd=REPO)
    os.close(follower)
    out = b""
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the process ended and closed its end
            break
        if not data:
            break
        out += data
    proc.wait(60)
    os.close(leader)
    return out.decode().replace("\r\n", "\n")


def test_the_queue_on_a_terminal_is_a_row_to_a_line_its_long_explanation_said_once_under_it(served, tmp_path):
    run, url = served
    task = tmp_path / "q.yaml"  # on the pool alone (the spot zone is over the price): one runs, the rest wait
    task.write_text('name: q\nresources: {cpus: 1}\nbroker: {max_price_per_hour: "0.40"}\nrun: sleep 600\n')
    for i in range(6):
        run("--json", "submit", str(task), "--name", f"q{i}", "--budget", "5")
    wait_for(lambda: all("no start estimate" in (j["reason"] or "")
                         for j in json.loads(run("--json", "queue").stdout)) and
             len(json.loads(run("--json", "queue").stdout)) == 5, timeout=30)
    shown = _on_a_terminal(url, 100, "queue")
    rows = [line for line in shown.splitlines() if re.match(r"│ \d ", line)]
    assert len(rows) == 5 and all("pool local full" in r for r in rows), shown  # each wrapped over 5 to 9 lines
    assert "no expected length: a job gives no broker.expected_hours" in shown, shown
    assert shown.count("gives no broker.expected_hours, so when it ends cannot be told") == 1, shown
    piped = run("queue").stdout  # piped: each reason whole, as the broker says it
    assert piped.count("no start estimate: ") == 5 and "when that ends cannot be told" in piped, piped


# -- 9. status --name: every run of the sweep, the real total -----------------------------------------------------------


def test_status_by_name_reads_every_page_of_a_sweep_of_more_than_1000_and_totals_them_all(served, tmp_path):
    from broker.lifecycle import JobEvent, JobState
    from broker.models import Event, Job
    from broker.store import Change, open_store

    run, _ = served
    store = open_store(f"sqlite://{tmp_path / 'c.db'}")
    try:
        for i in range(1003):  # a sweep of ended runs, written where the broker reads them, ended from the start (a
            t = 1000.0 + i     # queued one is the engine's to move, under the test's feet)
            job = Job(id=f"j-{i:010x}", name=f"big-{i}", team="default", state=JobState.SUCCEEDED,
                      spec={"run": "echo"}, budget=5_000_000, priority=0, submitted_at=t, updated_at=t)
            store.commit(Change(job=job, expected_version=None, events=[Event(
                job_id=job.id, time=t, event=JobEvent.SUBMIT.value, from_state=None, to_state="succeeded",
                reason="r", actor="test")]))
    finally:
        store.close()
    r = run("status", "--name", "big")
    assert len([line for line in r.stdout.splitlines() if line.startswith("j-")]) == 1003, r.stderr
    assert "1003 jobs named big*: $0.00 spent in all, of $5,015.00 of budgets" in r.stderr, r.stderr  # "the 1000 listed"


# -- 11. usage: --json with no command, a command's option before it --------------------------------------------------


def test_json_with_no_command_prints_a_json_error_and_a_commands_option_before_it_is_said_where_it_goes(capsys):
    assert cli.main(["--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "give a command (broker --json status, ...): `broker --help` lists them"}, out
    assert cli.main(["--team", "x", "status"]) == 2
    err = capsys.readouterr().err
    assert "(--team is an option of `broker status`: give it after the command, as `broker status --team x`)" in err


# -- 12. a URL host that reaches this machine is read as this host ------------------------------------------------------


@pytest.mark.parametrize("url", ["http://0.0.0.0:18900", "http://[::]:18900", "http://localhost:18900"],
                         ids=["0.0.0.0", "::", "localhost as before"])
def test_a_broker_url_whose_host_is_this_machine_is_read_as_local(url):
    assert cli._on_this_host(url)


def test_a_broker_url_of_another_machine_is_still_remote():
    assert not cli._on_this_host("http://10.11.12.13:18900")


def test_a_submit_to_0_0_0_0_uploads_no_workdir(served, tmp_path):
    run, url = served
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    task = tmp_path / "w.yaml"
    task.write_text(f"name: w\nresources: {{cpus: 1}}\nworkdir: {work}\nrun: python train.py\n")
    r = run("--url", url.replace("127.0.0.1", "0.0.0.0"), "submit", str(task), "--budget", "2")
    assert "packed" not in r.stderr, r.stderr  # was "workdir …: 1 file, … packed, uploaded"


# -- 13. broker events at 40 columns keeps its reason ------------------------------------------------------------------


def test_events_at_40_columns_keeps_the_reason_and_its_footer_says_what_it_left_out(served, tmp_path):
    run, url = served
    job_id = json.loads(run("--json", "submit", _task(tmp_path, "echo hi"), "--budget", "2").stdout)["id"]
    wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "succeeded", timeout=60)
    shown = _on_a_terminal(url, 40, "events", job_id)
    lines = shown.splitlines()
    assert [c.strip() for c in lines[1].strip("┃").split("┃")] == ["event", "reason"], shown
    assert all(len(line) <= 40 for line in lines), shown  # the reason was drawn zero wide
    assert "│ submit  │ submitted (budget $2.00;" in shown, shown
    footer = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("└"))) + 1:])
    assert footer == "(to fit 40 columns, without: by, from, #, to, time; piped or --json: all)", shown
