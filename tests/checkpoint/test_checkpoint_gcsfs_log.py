"""gcsfs logs a request that fails for good as an ERROR with a ~60-line traceback (``logger.exception``), on
fsspec's IO thread, also during an outage the library then retries and recovers from: while the library's own GCS
calls run, that is one WARNING line."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from testports import free_port

from checkpoint.storage import TransferOptions, open_storage


class Refuses(BaseHTTPRequestHandler):
    """A GCS endpoint that answers every request 400 (gcsfs does not retry it: it logs its traceback at once)."""

    def _answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": {"code": 400, "message": "refused by the test server"}}'
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *_):
        pass


@pytest.fixture
def refusing_gcs(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()
    server.server_close()


def test_a_gcs_request_that_fails_for_good_is_one_warning_line_not_a_traceback(refusing_gcs, caplog):
    storage = open_storage("gs://refused/run", transfer=TransferOptions(retries=1))
    with caplog.at_level(logging.DEBUG, logger="gcsfs"), pytest.raises(Exception, match="refused by the test"):
        storage.write("step-1/x", b"1")
    said = [r for r in caplog.records if r.name == "gcsfs" and r.levelno >= logging.WARNING]
    assert said, "gcsfs logged nothing"
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in said)
    assert "refused by the test server" in said[0].getMessage()


def test_gcsfs_errors_outside_the_librarys_calls_are_left_as_they_are(caplog):
    with caplog.at_level(logging.DEBUG, logger="gcsfs"):
        try:
            raise ValueError("a user's own gcsfs call")
        except ValueError:
            logging.getLogger("gcsfs").exception("failed")
    assert [(r.levelno, r.exc_info is not None) for r in caplog.records] == [(logging.ERROR, True)]


def test_a_gcs_request_gcsfs_cancels_itself_is_not_said_as_one_that_got_no_answer(make_uri, caplog):
    """gcsfs's ``_info`` asks for an object and lists its prefix at once and cancels the one it no longer needs: each
    read (and ``checkpoint ls``) logged "GCS GET … got no answer: CancelledError: ; gcsfs tries again" although the
    store answered everything, and a user reading it took the store for unhealthy."""
    storage = open_storage(make_uri("gcs"))
    with caplog.at_level(logging.DEBUG, logger="checkpoint"):
        storage.write("step-1/x", b"1" * 3_000_000)
        for _ in range(3):
            assert storage.read("step-1/x") == b"1" * 3_000_000
        assert storage.list() == ["step-1/x"]
    said = [r.getMessage() for r in caplog.records if r.name == "checkpoint" and r.levelno >= logging.WARNING]
    assert said == []
