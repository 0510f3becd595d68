"""Ports for SkyPilot API servers started by the launcher tests (shared by conftest and the server test)."""

from __future__ import annotations

import socket

from testports import free_port


def sky_queue_port(api_port: int) -> int:
    """The port SkyPilot 0.14.1's API server gives its request-queue manager: it moves with the
    API port (sky/server/requests/queues/mp_queue.py, ``get_queue_manager_port``), inside
    [50000, 60000) — the ephemeral range, where a live client socket may hold it."""
    return 50000 + (50011 - 50000 + api_port - 46580) % 10000


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def sky_api_port() -> int:
    """A free port for a SkyPilot API server whose queue-manager port is free too (a server whose
    queue port is taken exits at start: "port … is already in use by another process")."""
    for _ in range(100):
        port = free_port()
        queue = sky_queue_port(port)
        if queue != port and _bindable(queue):
            return port
    raise RuntimeError("no port pair free for a SkyPilot API server")
