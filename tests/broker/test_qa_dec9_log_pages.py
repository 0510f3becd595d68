"""Reading a job's output through the API (``GET /v1/jobs/{id}/logs``, :meth:`BrokerService.logs`): a page of at
most 1 MiB that ended in the middle of a UTF-8 character decoded it as U+FFFD at the end of that page and again at the
start of the next, and the character was lost; an older attempt's output was "not done" for ever, so a client
following one attempt never stopped. Real parts: the engine, a SQLite store and the local launcher's runner
processes."""

import pytest

from broker.auth import Principal
from broker.service import _partial_utf8_tail

from broker_testing import local_broker, run_until

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.36"}
stop_grace_seconds: 1
tick_seconds: 0.05
"""


@pytest.fixture
def broker(make_settings, tmp_path):
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        try:
            yield service, engine, store
        finally:
            for run in launcher.runs_dir.glob("j-*"):
                launcher.kill(run.name)


def _submit(service, run: str, **broker):
    return service.submit(ADMIN, {"name": "t", "run": run, "resources": {"cpus": 1},
                                  "broker": {"budget_usd": 1, **broker}})[0]


def _pages(service, job_id: str, attempt: int | None = None) -> list[dict]:
    pages, offset = [], 0
    while True:
        page = service.logs(ADMIN, job_id, attempt=attempt, offset=offset)
        pages.append(page)
        if not page["data"]:
            return pages
        offset = page["offset"]


def test_pages_of_a_long_output_end_on_whole_characters_and_read_it_back_exactly(broker):
    service, engine, store = broker
    # 1 + 2 × 700,000 bytes: the first 1 MiB page ends on the first byte of an "é"
    job = _submit(service, "python3 -c \"import sys; sys.stdout.write('x' + '\\u00e9' * 700000 + '\\nEND\\n')\"")
    run_until(engine, store, job.id, {"succeeded"}, timeout=60)
    pages = _pages(service, job.id)
    text = "".join(p["data"] for p in pages)
    assert text == "x" + "\u00e9" * 700000 + "\nEND\n", (len(text), text.count("\ufffd"))
    assert len(pages) >= 3 and pages[0]["offset"] == (1 << 20) - 1, [p["offset"] for p in pages]


def test_an_older_attempts_output_is_done_once_a_newer_attempt_ran(broker):
    service, engine, store = broker
    job = _submit(service, 'echo "attempt $BROKER_ATTEMPT"; test "$BROKER_ATTEMPT" -ge 2',
                  retry={"max_restarts_on_errors": 1})
    run_until(engine, store, job.id, {"succeeded"}, timeout=60)
    first = _pages(service, job.id, attempt=1)
    assert "".join(p["data"] for p in first) == "attempt 1\n"
    assert first[-1]["data"] == "" and first[-1]["done"] is True, first[-1]
    newest = _pages(service, job.id)
    assert newest[0]["attempt"] == 2 and newest[-1]["done"] is True


@pytest.mark.parametrize("data, cut", [
    pytest.param(b"", 0, id="nothing is no partial character"),
    pytest.param("a\u00e9".encode(), 0, id="a page ending on a whole two-byte character keeps it"),
    pytest.param("a\u00e9".encode()[:-1], 1, id="the first byte of a two-byte character is left to the next read"),
    pytest.param("a\u20ac".encode()[:-1], 2, id="two bytes of a three-byte character are left"),
    pytest.param("\U0001f600".encode()[:-1], 3, id="three bytes of a four-byte character are left"),
    pytest.param(b"a\xff", 0, id="a byte that is not UTF-8 is not waited on"),
    pytest.param(b"\x80\x80\x80\x80", 0, id="continuation bytes alone are not waited on"),
])
def test_the_partial_character_at_the_end_of_a_page_is_found(data, cut):
    assert _partial_utf8_tail(data) == cut
