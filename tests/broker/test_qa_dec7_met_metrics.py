"""``/metrics`` as a real ``broker serve`` starts it: the scrape token as an operator sets it, and the HELP of the
queue-age gauge. Ports 18700-18709."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
from broker_testing import ADMIN, REPO, start_broker, stop_broker


def _serve(tmp_path, port: int, token: str) -> subprocess.CompletedProcess:
    """``broker serve`` with ``BROKER_METRICS_TOKEN`` set to ``token``, expected to stop by itself."""
    env = {**os.environ, "BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
           "BROKER_METRICS_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "broker.cli", "serve", "--port", str(port)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_an_empty_metrics_token_stops_serve_with_one_line_naming_it(tmp_path):
    # read as unset, `BROKER_METRICS_TOKEN=$UNSET_VAR broker serve` served every team's spend to anyone, unsaid
    for port, token in ((18701, ""), (18702, "  \n")):
        done = _serve(tmp_path, port, token)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert lines[-1].startswith("error: BROKER_METRICS_TOKEN is set but empty"), done.stderr
        assert "unset BROKER_METRICS_TOKEN" in lines[-1] and "Traceback" not in done.stderr


def test_a_metrics_token_with_a_trailing_newline_is_what_prometheus_sends(tmp_path):
    # Prometheus strips its credentials_file; the broker kept the newline, and refused every scrape for ever
    proc, url = start_broker(tmp_path, port=18703, env_extra={"BROKER_METRICS_TOKEN": "tok-abc-123456789\n"})
    try:
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 401
        scraped = httpx.get(f"{url}/metrics", headers={"Authorization": "Bearer tok-abc-123456789"}, timeout=10)
        assert scraped.status_code == 200
    finally:
        stop_broker(proc, url)


def test_the_queue_age_help_says_a_resumed_job_waits_from_its_resume(tmp_path):
    # the gauge counts from when a job last entered the queue (a resume too, as docs/slack.md says); its HELP said
    # "since its last attempt ended (..., a resume)", so a job resumed after days read as if waiting since then
    proc, url = start_broker(tmp_path, port=18704)
    try:
        text = httpx.get(f"{url}/metrics", timeout=10).text
        (help_line,) = [line for line in text.splitlines() if line.startswith("# HELP broker_queue_oldest_seconds ")]
        assert "since it last entered the queue (its submit, its resume" in help_line
        assert "since its last attempt ended" not in help_line
    finally:
        stop_broker(proc, url)
