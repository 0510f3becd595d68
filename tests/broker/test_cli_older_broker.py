"""The CLI against a broker older than itself (a laptop's CLI upgraded first, a rolling upgrade): `broker costs`
stopped at ``KeyError: 'saving_percent'`` on an answer whose ``by_team`` rows had no such field yet, and a query
parameter the older broker does not take was refused without a word on why the CLI sent it.

The older broker is a small real HTTP server answering, for each path, the JSON that broker answered (the shape of
``broker/costs.py`` before ``saving_percent`` was added to its rows); the CLI runs as a user runs it, in a subprocess.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from testports import free_port

from broker_testing import cli_runner


def _money(micros: int, usd: str) -> dict:
    return {"micros": micros, "usd": usd}


def _tiers(onprem: int = 0, ondemand: int = 0, spot: int = 0) -> dict:
    return {"onprem": _money(onprem, f"${onprem / 1e6:.2f}"), "ondemand": _money(ondemand, f"${ondemand / 1e6:.2f}"),
            "spot": _money(spot, f"${spot / 1e6:.2f}")}


OLD_COSTS = {
    # /v1/costs as the older broker answered it: by_team and top_jobs rows without saving_percent, no monthly_caps,
    # no rounding_note nor retention_note, preemptions without lost
    "team": None,
    "window": {"since": "2026-11-30T00:00:00Z", "until": "2026-12-07T00:00:00Z", "period": "7d"},
    "currency": "USD",
    "totals": {"spent": _money(6_030_000, "$6.03"), "ondemand_equivalent": _money(12_030_000, "$12.03"),
               "saving": _money(6_000_000, "$6.00"), "saving_percent": 49,
               "by_tier": _tiers(onprem=2_640_000, spot=3_390_000)},
    "by_day": [],
    "by_team": [
        {"team": "nlp", "spent": _money(3_390_000, "$3.39"), "ondemand_equivalent": _money(9_390_000, "$9.39"),
         "saving": _money(6_000_000, "$6.00"), "by_tier": _tiers(spot=3_390_000)},
        {"team": "vision", "spent": _money(2_640_000, "$2.64"), "ondemand_equivalent": _money(2_640_000, "$2.64"),
         "saving": _money(0, "$0.00"), "by_tier": _tiers(onprem=2_640_000)},
    ],
    "top_jobs": [
        {"id": "j-0a1b2c3d4e", "name": "bert-ft", "team": "nlp", "state": "succeeded",
         "spent": _money(3_390_000, "$3.39"), "ondemand_equivalent": _money(9_390_000, "$9.39"),
         "saving": _money(6_000_000, "$6.00"), "attempts": 2},
        {"id": "j-1b2c3d4e5f", "name": "resnet", "team": "vision", "state": "succeeded",
         "spent": _money(2_640_000, "$2.64"), "ondemand_equivalent": _money(2_640_000, "$2.64"),
         "saving": _money(0, "$0.00"), "attempts": 1},
    ],
    "preemptions": {"count": 1, "recovery_seconds": 42, "by_zone": [{"zone": "us-east-1a", "count": 1}],
                    "events": [{"job_id": "j-0a1b2c3d4e", "team": "nlp", "attempt": 1, "zone": "us-east-1a",
                                "tier": "spot", "state": "preempted", "time": "2026-12-05T10:00:00Z",
                                "recovery_seconds": 42, "recovered": True, "waiting": False}]},
    "budget_burn": [],
    "queue": [],
}

OLD_JOBS_REFUSAL = {
    # GET /v1/jobs?name=... to a broker from before ?name=: its words (broker/api/query.py unknown_query_refusal)
    "detail": "name: is not a query parameter of GET /v1/jobs; it takes state, team, limit", "field": "name"}


class _OlderBroker(BaseHTTPRequestHandler):
    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path == "/v1/costs":
            self._answer(200, OLD_COSTS)
        elif path == "/v1/jobs" and "name=" in query:
            self._answer(422, OLD_JOBS_REFUSAL)
        else:
            self._answer(404, {"detail": f"no route {path}"})

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def older_broker():
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _OlderBroker)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield cli_runner(f"http://127.0.0.1:{server.server_address[1]}")
    server.shutdown()
    server.server_close()


def _cells(out: str, first: str) -> list[str]:
    """The cells of the table row that begins with ``first``, split on the table's rules or runs of spaces."""
    line = next(line for line in out.splitlines() if line.strip(" │|").startswith(first))
    return [c.strip() for c in line.replace("│", "  ").split("  ") if c.strip()]


def test_costs_from_a_broker_whose_team_rows_have_no_saving_percent_show_the_tables_not_a_traceback(older_broker):
    r = older_broker("costs", check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "KeyError" not in r.stderr, r.stderr
    assert "spent $6.03; the same time on on-demand: $12.03; saved $6.00 (49%)" in r.stdout, r.stdout
    # the percent worked out from the exact amounts the row has, as the broker works it out (6.00 / 9.39: 63%)
    assert _cells(r.stdout, "nlp") == ["nlp", "$3.39", "$9.39", "saved $6.00 (63%)"], r.stdout
    # on-prem work, its equivalent the spend itself: nothing to compare, not "saved $0.00 (0%)" nor its spend again
    assert _cells(r.stdout, "vision") == ["vision", "$2.64", "—", "—"], r.stdout
    assert _cells(r.stdout, "j-0a1b2c3d4e")[-1] == "saved $6.00 (63%)", r.stdout
    assert "1 preemption" in r.stdout


def test_a_query_parameter_an_older_broker_does_not_take_says_the_broker_may_be_older_than_the_cli(older_broker):
    from importlib.metadata import version

    r = older_broker("status", "--name", "sweep3", check=False)
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip()
    assert line.startswith("error [422]: name: is not a query parameter of GET /v1/jobs; it takes state, team, "
                           "limit. The broker may be older than this CLI"), line
    assert f"(spot-broker {version('spot-broker')})" in line and len(line.splitlines()) == 1, line


def test_any_other_422_says_nothing_of_versions():
    from broker.cli import _older_broker_hint
    from broker.client import BrokerError

    assert _older_broker_hint(BrokerError(422, "budget_usd: must be more than 0", "budget_usd")) == ""
    assert _older_broker_hint(BrokerError(404, OLD_JOBS_REFUSAL["detail"])) == ""
