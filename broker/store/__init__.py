"""Job stores: pick one by URL (``sqlite:///path`` or ``redis://host:port/db``)."""

from __future__ import annotations

import logging

from broker.store.base import (Change, DuplicateJob, Expired, ForeignRecord, JobStore, Pruned, PrunedCosts, StoreError,
                               StoreUnavailable, VersionConflict, check_writable)

log = logging.getLogger("broker.store")

__all__ = ["Change", "DuplicateJob", "Expired", "ForeignRecord", "JobStore", "Pruned", "PrunedCosts", "StoreError",
           "StoreUnavailable", "VersionConflict", "check_writable", "open_store"]


def open_store(url: str) -> JobStore:
    """Open the store named by ``url``; Redis support is imported only when asked for."""
    if url.startswith("sqlite://"):
        from broker.store.sqlite import SqliteStore

        path = url[len("sqlite://"):]  # sqlite:///abs/path.db → /abs/path.db
        return SqliteStore(":memory:" if path in ("", "/:memory:", ":memory:") else path)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from broker.store.redis import RedisStore

        store = RedisStore(url)
        warning = store.durability_warning()
        if warning:
            log.warning("%s (docs/architecture.md, 'Several broker processes')", warning)
        return store
    raise ValueError(f"unknown store URL {url!r}: use sqlite:///path/to/broker.db or redis://host:6379/0")
