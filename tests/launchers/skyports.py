"""Ports for SkyPilot API servers started by the launcher tests (shared by conftest and the server test)."""

from __future__ import annotations

from testports import bindable, free_port


def sky_queue_port(api_port: int) -> int:
    """The port SkyPilot 0.14.1's API server gives its request-queue manager: it moves with the
    API port (sky/server/requests/queues/mp_queue.py, ``get_queue_manager_port``), inside
    [50000, 60000) — the ephemeral range, where a live client socket may hold it."""
    return 50000 + (50011 - 50000 + api_port - 46580) % 10000


def sky_api_port() -> int:
    """A free port for a SkyPilot API server whose queue-manager port is free too (a server whose
    queue port is taken exits at start: "port … is already in use by another process")."""
    for _ in range(100):
        port = free_port()
        queue = sky_queue_port(port)
        # the queue manager (a multiprocessing Listener) binds with SO_REUSEADDR
        if queue != port and bindable("127.0.0.1", queue, reuse_address=True):
            return port
    raise RuntimeError("no port pair free for a SkyPilot API server")


def clear_server_caches() -> None:
    """Forget the API server the SDK found (its URL, whether it is local, its last health answer): cached for the
    process, they would keep pointing at the server of the environment before."""
    from sky.server import common

    common.get_server_url.cache_clear()
    common.is_api_server_local.cache_clear()
    common.get_api_server_status_response.cache_clear()
