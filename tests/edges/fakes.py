"""Fakes we own: a launcher whose attempts do what the test says, and a local stand-in for Slack's Web API."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from launchers.base import AttemptStatus, Capabilities, Phase


class FakeLauncher:
    """Launches nothing. ``status`` answers what the test put in ``statuses`` (default: gone);
    ``logs`` serves what it put in ``output``; ``launched`` and ``stopped`` record the engine's calls."""

    name = "fake"
    capabilities = Capabilities(simulated=True)

    def __init__(self):
        self.output: dict[str, bytes] = {}
        self.statuses: dict[str, AttemptStatus] = {}
        self.launched: list[str] = []
        self.stopped: list[tuple[str, str]] = []

    def launch(self, request) -> None:
        self.launched.append(request.attempt_id)

    def status(self, attempt_id: str) -> AttemptStatus:
        return self.statuses.get(attempt_id, AttemptStatus(Phase.GONE))

    def stop(self, attempt_id: str, *, grace_seconds: float = 30.0, reason: str = "") -> None:
        self.stopped.append((attempt_id, reason))

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        data = self.output.get(attempt_id, b"")
        return data[offset:offset + limit], min(len(data), offset + limit)


class SlackStub:
    """Slack's Web API (``chat.postMessage``), incoming webhooks and response URLs on 127.0.0.1.

    Records every request as ``(path, parsed body)``. ``fail_next[path] = n``
    answers the next ``n`` requests to ``path`` with HTTP 500; ``delay`` slows
    every answer; ``files`` serves GET bodies (spec URLs), and ``gets`` records them.
    """

    def __init__(self):
        self.requests: list[tuple[str, dict]] = []
        self.fail_next: dict[str, int] = {}
        self.delay = 0.0
        self.files: dict[str, str] = {}
        self.gets: list[tuple[str, str | None]] = []  # (path, Host header) of every GET
        self.cond = threading.Condition()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                with stub.cond:
                    stub.gets.append((self.path, self.headers.get("Host")))
                body = stub.files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write((body or "not found").encode())

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                if "json" in (self.headers.get("Content-Type") or ""):
                    body = json.loads(raw)
                else:
                    body = {k: v[0] for k, v in parse_qs(raw).items()}
                    for k in ("blocks",):
                        if isinstance(body.get(k), str):
                            body[k] = json.loads(body[k])
                time.sleep(stub.delay)
                with stub.cond:
                    failing = stub.fail_next.get(self.path, 0)
                    if failing:
                        stub.fail_next[self.path] = failing - 1
                    else:
                        stub.requests.append((self.path, body))
                    stub.cond.notify_all()
                self.send_response(500 if failing else 200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"ok": false, "error": "internal_error"}' if failing else
                                 b'{"ok": true, "channel": "C1", "ts": "1.2"}')

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def wait_for(self, path: str, n: int = 1, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(self.posts(path)) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {n} request(s) to {path}, got {self.requests}")
                self.cond.wait(left)
            return self.posts(path)

    def posts(self, path: str) -> list[dict]:
        return [b for p, b in self.requests if p == path]

    def close(self):
        self.server.shutdown()
        self.server.server_close()
