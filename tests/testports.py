"""Loopback ports for the servers the tests start (redis-server, moto, the GCS emulator, uvicorn, broker
processes, SkyPilot's API server).

A test picks a port, then a server binds it a moment later. Asking the kernel for a free one (``bind(0)``)
leaves that moment open: the port comes from the ephemeral range, which the kernel also hands out as the
source port of every outgoing connection and to every other ``bind(0)``, so a busy neighbour (the other
pytest-xdist worker, with its own servers and clients) can take it first, and the server then fails with
"address already in use". Here each worker takes ports from a slice of its own *below* the ephemeral range,
where the kernel never picks one, walking up from a random point so that a port is not handed out twice in
a session; a port something already listens on (or that a closed connection still holds) is skipped.
"""

from __future__ import annotations

import os
import random
import socket

_SLICES = 8  # workers with a slice of their own (gw0…gw7); more wrap around and share one


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _slice() -> range:
    low = _ephemeral_low()
    start = max(1024, low - 12288)
    if low - start < 2048:  # the ephemeral range starts too low to leave room below it
        return range(0)
    size = (low - start) // _SLICES
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    return range(start + index * size, start + (index + 1) * size)


_PORTS = _slice()
_next = random.randrange(len(_PORTS)) if _PORTS else 0


def bindable(host: str, port: int, *, reuse_address: bool = False) -> bool:
    """Whether a server could bind ``port`` on ``host`` now. Without ``reuse_address`` a port a closed connection
    still holds (TIME_WAIT) is not free either; with it, as for a server that sets ``SO_REUSEADDR`` itself."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        if reuse_address:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port on ``host`` that nothing listens on, that this process has not handed out before (until its
    slice of a few thousand wraps around), and that no other worker's ``free_port`` gives."""
    global _next
    for _ in range(len(_PORTS)):
        port = _PORTS[_next % len(_PORTS)]
        _next += 1
        if bindable(host, port):
            return port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:  # no room below the ephemeral range: the kernel's choice, as before
        s.bind((host, 0))
        return s.getsockname()[1]
