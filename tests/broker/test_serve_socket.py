"""`broker serve`'s listening socket turns Nagle off on every connection, whatever event loop uvicorn runs.

A plain `pip install spot-broker` has no uvloop, so uvicorn runs asyncio's own loop, which sets TCP_NODELAY only on
sockets whose proto reads IPPROTO_TCP. The listener used to be made with proto 0, which its accepted connections
inherit: every answer then waited ~40 ms for the client's delayed ACK (a submit took 47 ms instead of 4 in
`benchmarks/api.py` without uvloop). These tests run real uvicorn on the plain asyncio loop over `_listen`'s socket
and read the option off the connection the server holds."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import contextmanager

import httpx
import pytest
import uvicorn

from broker.cli import _listen


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture(autouse=True)
def _asyncio_policy():
    """asyncio's default loop policy for the test: another test in this process may have installed uvloop's."""
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(None)
    yield
    asyncio.set_event_loop_policy(policy)


@contextmanager
def served(app, host: str = "127.0.0.1", **config):
    """Real uvicorn serving ``app`` over `broker serve`'s own listener (``_listen``) in a thread: (the server, its
    base URL), stopped after."""
    listener = _listen(host, 0)
    server = uvicorn.Server(uvicorn.Config(app, **{"log_level": "warning", **config}))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        url_host = f"[{host}]" if ":" in host else host
        yield server, f"http://{url_host}:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)


def _nodelay_of_served_connection(host: str, http: str) -> int:
    with served(_app, host, loop="asyncio", http=http) as (server, url):
        with httpx.Client(base_url=url, timeout=10) as client:
            assert client.get("/").text == "ok"
            (connection,) = server.server_state.connections  # the client keeps its connection alive
            # asyncio's own transport, not uvloop's (which sets TCP_NODELAY whatever the proto says)
            assert type(connection.transport).__module__.startswith("asyncio."), type(connection.transport)
            sock = connection.transport.get_extra_info("socket")
            return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@pytest.mark.parametrize("http", ["h11", "httptools"], ids=["uvicorn's h11 parser", "uvicorn's httptools parser"])
def test_a_connection_to_broker_serve_on_the_plain_asyncio_loop_has_nagle_off(http):
    assert _nodelay_of_served_connection("127.0.0.1", http) != 0


def test_an_ipv6_listener_gets_nagle_off_too():
    if not socket.has_ipv6:
        pytest.fail("this host has no IPv6 support; the test needs ::1")
    assert _nodelay_of_served_connection("::1", "h11") != 0
