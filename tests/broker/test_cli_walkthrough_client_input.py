"""What a new user types wrong into the CLI — a job id with a '/' or a '?', a URL that is not one, a token with the
line break of the file it was copied from, the URL of something that is not the broker — is said in one line,
and never reaches another job or route."""

import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from broker_testing import ADMIN, cli_runner, start_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""


def broker_cli(*args, url: str, token: str | None = ADMIN):
    return cli_runner(url, token=token)(*args, check=False)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("walkthrough")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=CONFIG)
    yield url, tmp
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_a_job_id_with_a_slash_is_refused_not_sent_as_the_path_of_another_job(broker):
    # `broker cancel j-typo/../<id>` was sent as /v1/jobs/j-typo/../<id>/cancel, which the HTTP client made
    # /v1/jobs/<id>/cancel: it cancelled a job the user did not name
    url, tmp = broker
    task = tmp / "sleeper.yaml"
    task.write_text("name: sleeper\nresources: {cpus: 1}\nrun: sleep 60\n")
    job_id = json.loads(broker_cli("--json", "submit", str(task), "--budget", "1", url=url).stdout)["id"]
    try:
        r = broker_cli("cancel", f"j-typo/../{job_id}", url=url)
        assert r.returncode == 1, r.stdout
        assert r.stderr.strip() == f"error: no job 'j-typo/../{job_id}': a job id is one word with no '/', like " \
                                   "j-3fa9c1b2e0", r.stderr
        state = json.loads(broker_cli("--json", "status", job_id, url=url).stdout)["state"]
        assert state not in ("cancelling", "cancelled"), state
        # a '?' or '#' is part of the id asked for, not a query string or a fragment cut off
        r = broker_cli("status", "?state=failed", url=url)
        assert (r.returncode, r.stderr.strip()) == (1, "error [404]: no job ?state=failed"), r.stderr
        r = broker_cli("status", f"{job_id}#x", url=url)
        # (two characters off the job's id: named as the one likely meant)
        assert (r.returncode, r.stderr.strip()) == (1, f"error [404]: no job {job_id}#x (did you mean {job_id}?)"), \
            r.stderr
    finally:
        broker_cli("cancel", job_id, url=url)


def test_a_broker_url_that_is_not_a_url_is_one_line_not_a_traceback():
    r = broker_cli("status", url="http://[::1")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: the broker URL 'http://[::1' is not a URL") and r.stderr.count("\n") == 1


def test_a_token_copied_with_its_line_break_is_sent_without_it(broker):
    url, _ = broker
    r = broker_cli("--json", "status", url=url, token=ADMIN + "\r\n")  # a token file written on Windows
    assert r.returncode == 0 and isinstance(json.loads(r.stdout), list), r.stderr


def test_a_passphrase_token_with_spaces_inside_is_sent_as_it_is(tmp_path):
    """The broker takes any token a team is given, a passphrase too: the CLI refused one with a space inside."""
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'p.db'}", config=CONFIG, engine="off",
                             env_extra={"BROKER_TEAM_TOKENS": json.dumps({"ml": "correct horse battery staple"})})
    try:
        r = broker_cli("--json", "status", url=url, token=" correct horse battery staple\n")
        assert r.returncode == 0 and json.loads(r.stdout) == [], r.stderr
        r = broker_cli("--json", "status", url=url, token="correct horse battery")  # another token: refused there
        assert r.returncode == 1 and "401" in r.stderr, r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)


@pytest.mark.parametrize("token, says", [
    ("abc\ndef", "holds a control character at position 4"),
    ("abc\tdef", "holds a control character at position 4"),
    ("abcdéf", "holds a character that is not ASCII at position 5"),
], ids=["a line break inside", "a tab", "a letter a header cannot carry"])
def test_a_token_a_header_cannot_carry_is_refused_in_a_sentence_that_does_not_show_it(broker, token, says):
    # a line break was "the connection to the broker dropped before it answered" (and a submit was retried for
    # 3.5 s, then said it "may have been stored"); a non-ASCII letter "'ascii' codec can't encode character"
    url, tmp = broker
    task = tmp / "t.yaml"
    task.write_text("name: t\nresources: {cpus: 1}\nrun: echo hi\n")
    r = broker_cli("submit", str(task), "--budget", "1", url=url, token=token)
    assert r.returncode == 1
    assert r.stderr.strip() == f"error: the token (--token or BROKER_TOKEN) {says}, which a token cannot hold: " \
                               "copy it again", r.stderr
    assert "abc" not in r.stderr  # the token is a secret: never echoed


class _NotTheBroker(BaseHTTPRequestHandler):
    """Another web server on the port the user gave: HTML for everything."""

    def do_GET(self):
        status = 200 if self.path.split("?")[0] == "/v1/jobs" else 404  # `broker status` asks ?limit=
        body = b"<!DOCTYPE html><html><body><h1>Welcome to the team wiki</h1>" + b"<p>...</p>" * 50 + b"</body></html>"
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = b"no POST here\n"
        self.send_response(405)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def not_the_broker():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotTheBroker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_that_is_not_the_brokers_json_says_so_in_one_line(not_the_broker):
    url = not_the_broker
    said = f"{url} answered {{}} with text/html, not the broker's JSON: is {url} the broker's address " \
           "(BROKER_URL, --url), or is a proxy in front of it failing?"
    # a 200 of HTML was "error: Expecting value: line 1 column 1 (char 0)"
    r = broker_cli("status", url=url)
    assert (r.returncode, r.stderr.strip()) == (1, "error: " + said.format("200 OK")), r.stderr
    # a 404 of HTML was the whole page, as the error's "line"
    r = broker_cli("status", "j-0123456789", url=url)
    assert (r.returncode, r.stderr.strip()) == (1, "error [404]: " + said.format("404 Not Found")), r.stderr
    r = broker_cli("--json", "status", "j-0123456789", url=url)
    assert json.loads(r.stdout) == {"error": said.format("404 Not Found"), "status": 404}
    # a line of plain text is kept: it may say what is wrong
    r = broker_cli("cancel", "j-0123456789", url=url)
    assert r.stderr.strip() == "error [405]: " + said.format("405 Method Not Allowed").replace(
        "with text/html", "with text/plain ('no POST here')"), r.stderr
