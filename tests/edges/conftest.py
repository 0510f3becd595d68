"""Fixtures for the edge tests: an app over a seeded SQLite store, with the edges installed."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.api.edges import install_edges
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


def build_app(settings, store, *, service_class=None):
    """The app with the edges installed; ``service_class`` swaps in a service with more methods."""
    app = create_app(settings, store=store, launcher=FakeLauncher(), engine=False)
    service = app.state.service
    if service_class is not None:
        service = service_class(settings, store, service.launcher)
    install_edges(app, service, settings)
    return app


@pytest.fixture
def app(tmp_path, store, seeded):
    return build_app(world.settings(tmp_path), store)


@pytest.fixture
def client(app):
    with TestClient(app) as c:
        yield c


def auth(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}
