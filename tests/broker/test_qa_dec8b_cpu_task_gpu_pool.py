"""A CPU-only task with ``infra: local`` (or ``local/gpu2``, or ``local/gpu9``, a pool that does not exist) on a broker
whose only pool has GPUs was refused saying "no offer is priced in local at all: the broker cannot price local … (a
pool is `infra: local` …)": the broker dropped the GPU pool's offers for a CPU task before the sentence looked at
them. It says the pool has GPUs, which such a task does not take, and names the pools there are."""

from __future__ import annotations

import pytest

from broker.auth import Principal
from broker.service import BrokerService
from broker.store import open_store

POOL = 'pools: [{name: gpu2, slots: 2, accelerator: A100, price_per_slot_hour: "1.00"}]\n'
ZONES = "zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}\n"
HAS_GPUS = ("(the pool here (gpu2) has GPUs, which a task asking for no accelerator does not take: ask for one "
            "(accelerators: A100:1), or add a CPU pool)")


@pytest.mark.parametrize("zones", [pytest.param("", id="the pool alone"), pytest.param(ZONES, id="with a zone")])
@pytest.mark.parametrize("infra, said", [
    pytest.param("local", HAS_GPUS, id="infra local is told the pool has GPUs"),
    pytest.param("local/gpu2", HAS_GPUS, id="infra local slash gpu2 is told the pool has GPUs"),
    # refused on resources.infra before placement (broker.spec.local_pool_refusal), in placement's words
    pytest.param("local/gpu9", "there is no pool gpu9 here: the only pool is gpu2",
                 id="a pool that does not exist is said not to, naming the pool there is"),
])
def test_a_cpu_task_on_a_broker_of_a_gpu_pool_is_told_why_not_to_write_what_it_wrote(make_settings, tmp_path, zones,
                                                                                       infra, said):
    settings = make_settings(config=POOL + zones)
    store = open_store(f"sqlite://{tmp_path / 'e.db'}")
    try:
        service = BrokerService(settings, store, None)
        with pytest.raises(Exception) as caught:
            service.submit(Principal("admin", None, admin=True),
                           {"name": "t", "run": "true", "resources": {"infra": infra}, "broker": {"budget_usd": 1}})
        message = str(caught.value)
        assert message.endswith(said), message
        assert "cannot price local" not in message
        # and a task asking for the pool's GPU is taken
        job = service.submit(Principal("admin", None, admin=True),
                             {"name": "t", "run": "true", "resources": {"infra": "local/gpu2", "accelerators": "A100:1"},
                              "broker": {"budget_usd": 1}})[0]
        assert job.id
    finally:
        store.close()
