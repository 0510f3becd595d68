"""Fixtures for the edge tests: the real app (``create_app`` installs the edges) over a seeded SQLite store."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.store.sqlite import SqliteStore

from . import world
from .fakes import FakeLauncher


@pytest.fixture
def store(tmp_path):
    s = SqliteStore(tmp_path / "broker.db")
    yield s
    s.close()


@pytest.fixture
def seeded(store):
    return world.seed(store)


def build_app(settings, store, *, launcher=None, engine=False):
    """``create_app`` with a :class:`FakeLauncher`. With ``engine=True`` the app has its real engine (wired to
    the Slack notifier) in ``app.state.engine``; it runs only when a test calls ``tick()``, as long as the
    test does not enter the app's lifespan (``with TestClient(app)``)."""
    return create_app(settings, store=store, launcher=launcher or FakeLauncher(), engine=engine)


@pytest.fixture
def app(tmp_path, store, seeded):
    return build_app(world.settings(tmp_path), store)


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def serving(app, port: int, **config) -> Iterator[str]:
    """``app`` served by a real uvicorn on loopback ``port`` (``config``: more of uvicorn's settings) in a thread,
    for a browser or a raw HTTP client; its URL while the block runs, stopped after."""
    import uvicorn

    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **{"log_level": "warning", **config}))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30  # a loaded host's thread start and app start-up
        while not srv.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(5)


@contextmanager
def serving_world(tmp_path, store, **config) -> Iterator[str]:
    """The test world's broker on ``store`` served by :func:`serving` on a free loopback port, its ``public_url`` that
    port's URL (``config``: more of uvicorn's settings, ``lifespan="on"`` for the page's start-up)."""
    from testports import free_port

    port = free_port()
    with serving(build_app(world.settings(tmp_path, public_url=f"http://127.0.0.1:{port}"), store), port,
                 **config) as url:
        yield url


class Said(logging.Handler):
    """The ``broker.slack`` logger's lines, caught on the logger itself (the CLI stops the ``broker`` loggers from
    passing lines on to the root logger, where pytest's caplog listens)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def lines(self, level: int = logging.WARNING) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]

    @property
    def entries(self) -> list[str]:
        """Every line, as ``LEVEL message``."""
        return [f"{r.levelname} {r.getMessage()}" for r in self.records]

    @property
    def text(self) -> str:
        return "\n".join(r.getMessage() for r in self.records)


@pytest.fixture
def said():
    logger = logging.getLogger("broker.slack")
    handler, level = Said(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)
