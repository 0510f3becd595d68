"""A body sent in chunks (no Content-Length) is read only up to ``max_body_bytes``. The middleware's check reads the
header, which a chunked request has none of; routes that read the whole body first held every byte an unknown caller
sent in memory before refusing it: a progress report with any bearer (checked after the body), a Slack request
(signed over the body, so read before it is checked)."""

from __future__ import annotations

import asyncio
import json

import pytest

from . import world
from .conftest import build_app

CHUNK = 64 * 1024
SENT = 64 * 1024 * 1024  # what the caller offers: far over the 1 MB limit


def post_chunked(app, path: str, headers: dict[str, str]) -> tuple[int, dict, int]:
    """POST a body of SENT bytes in chunks, as a client without Content-Length does; (status, body, bytes the app
    read)."""
    pulled = {"bytes": 0}
    sent: list[dict] = []

    async def receive():
        if pulled["bytes"] >= SENT:
            return {"type": "http.disconnect"}
        pulled["bytes"] += CHUNK
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": pulled["bytes"] < SENT}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in
                         {**headers, "Transfer-Encoding": "chunked"}.items()],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body or b"{}"), pulled["bytes"]


@pytest.mark.parametrize("path, headers", [
    ("/v1/jobs/j-none/progress", {"Authorization": "Bearer not-a-job-token", "Content-Type": "application/json"}),
    ("/v1/jobs/j-none/budget", {"Authorization": f"Bearer {world.ADMIN}", "Content-Type": "application/json"}),
    ("/slack/commands", {"X-Slack-Request-Timestamp": "1", "X-Slack-Signature": "v0=0"}),
], ids=["progress, any bearer", "budget", "slack, unsigned"])
def test_a_chunked_body_is_read_only_up_to_the_limit(tmp_path, store, path, headers):
    app = build_app(world.settings(tmp_path, slack={"signing_secret": world.SIGNING_SECRET}), store)
    status, body, read = post_chunked(app, path, headers)
    assert status == 413 and "larger than" in body["detail"]
    assert read <= 1_000_000 + CHUNK  # not the 64 MiB offered
