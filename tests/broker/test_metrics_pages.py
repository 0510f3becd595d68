"""``/metrics``' first read of the store goes a page at a time (``StoreCollector.PAGE``), on both stores: the figures
it keeps are those of one read of every job, none twice and none left out, jobs submitted in the same second
included (a page ends inside such a run)."""

from __future__ import annotations

import pytest

from broker.api.metrics import StoreCollector
from broker.auth import Principal
from broker.service import BrokerService

CONFIG = "pools:\n  - {name: box, slots: 1, price_per_slot_hour: '0.50'}\n"


@pytest.mark.parametrize("page", [1, 3, 1000])
def test_the_first_read_a_page_at_a_time_keeps_every_job_once(store, make_settings, monkeypatch, page):
    settings = make_settings(config=CONFIG)
    clock = [1_800_000_000.0]
    service = BrokerService(settings, store, clock=lambda: clock[0])
    admin = Principal("admin", None, admin=True)
    ids = []
    for i in range(10):
        if i % 4 == 0:
            clock[0] += 1  # runs of jobs submitted in one second: a page may end inside one
        ids.append(service.submit(admin, {"name": f"j{i}", "run": "echo", "resources": {"cpus": 1},
                                          "broker": {"budget_usd": 1}})[0].id)
    monkeypatch.setattr(StoreCollector, "PAGE", page)
    collector = StoreCollector(service, settings=settings)
    figures, _ = collector._refresh()
    assert sorted(collector._figures) == sorted(ids)
    assert len(figures) == 10 and all(f.state == "queued" for f in figures)
