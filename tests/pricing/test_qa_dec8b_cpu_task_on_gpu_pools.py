"""A task asking for no accelerator on a broker whose pools all have GPUs: such a task never takes a pool's GPU slot,
but the rule lived where the broker dropped those offers before placement saw them, so the sentence said "no offer is
priced in local at all: the broker cannot price local … (a pool is `infra: local` …)" — to write what the task had
written. The rule is the shape's (:func:`pricing.placement.matches`), and the sentence names the pools and why; a pool
that does not exist is said not to, naming those that do."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, candidates, matches, place, why_no_offer


def _pool(name: str, slots: int, accelerator: str | None, price: int = 1_000_000) -> list[Offer]:
    return [Offer(Tier.ONPREM, "local", name, name, f"{name}-{k}slot", accelerator, k if accelerator else 0,
                  price * k, vcpus=Decimal(4 * k), memory_gib=Decimal(16 * k)) for k in range(1, slots + 1)]


GPU2 = _pool("gpu2", 2, "A100")
ZONE = [Offer(Tier.ONDEMAND, "aws", "sim-od", "sim-od", "g5.xlarge", "A10G", 1, 1_006_000, simulated=True)]


def _cpu(**where) -> JobRequest:
    return JobRequest(alternatives=(ResourceRequest(**where),))


def test_a_task_asking_for_no_accelerator_never_matches_a_pools_gpu_slot_but_a_gpu_task_does():
    assert not any(matches(o, ResourceRequest()) for o in GPU2)
    assert not any(matches(o, ResourceRequest(instance_type="gpu2-1slot")) for o in GPU2)
    assert matches(GPU2[0], ResourceRequest(accelerator="A100", accelerator_count=1))
    assert candidates(_cpu(), _pool("cpu", 2, None)) == _pool("cpu", 2, None)  # a CPU pool still takes it


@pytest.mark.parametrize("where", [
    pytest.param({"cloud": "local"}, id="infra local"),
    pytest.param({"cloud": "local", "region": "gpu2"}, id="infra local slash the gpu pool"),
])
@pytest.mark.parametrize("offers", [pytest.param(GPU2, id="the pool alone"),
                                    pytest.param(GPU2 + ZONE, id="with a simulated zone")])
def test_a_cpu_task_on_gpu_pools_alone_is_told_the_pools_have_gpus_and_what_to_ask(where, offers):
    said = why_no_offer(_cpu(**where), offers)
    assert said.endswith("(the pool here (gpu2) has GPUs, which a task asking for no accelerator does not take: ask "
                         "for one (accelerators: A100:1), or add a CPU pool)"), said
    assert "cannot price local" not in said
    fit = place(_cpu(**where), offers, budget_left=10_000_000)
    assert isinstance(fit, NoFit) and fit.reason == said


def test_a_cpu_task_naming_no_place_where_only_gpu_pools_are_is_told_the_same():
    assert why_no_offer(_cpu(), GPU2).endswith("(the pool here (gpu2) has GPUs, which a task asking for no accelerator "
                                               "does not take: ask for one (accelerators: A100:1), or add a CPU pool)")


def test_several_gpu_pools_are_named_with_each_of_their_gpus():
    said = why_no_offer(_cpu(cloud="local"), GPU2 + _pool("h", 1, "H100"))
    assert said.endswith("(the pools here (gpu2, h) have GPUs, which a task asking for no accelerator does not take: "
                         "ask for one (accelerators: A100:1 or H100:1), or add a CPU pool)"), said


@pytest.mark.parametrize("alt", [
    pytest.param({}, id="a cpu task"),
    pytest.param({"accelerator": "A100", "accelerator_count": 1}, id="a gpu task"),
])
def test_a_pool_that_does_not_exist_is_said_not_to_naming_the_pools_there_are(alt):
    said = why_no_offer(_cpu(cloud="local", region="gpu9", **alt), GPU2 + ZONE)
    assert said.endswith("(there is no pool gpu9 here: the only pool is gpu2)"), said
    said = why_no_offer(_cpu(cloud="local", region="gpu9", **alt), GPU2 + _pool("cpu8", 1, None) + ZONE)
    assert said.endswith("(there is no pool gpu9 here: did you mean local/gpu2? the pools are cpu8 and gpu2)"), said


def test_infra_local_with_no_pool_at_all_says_there_is_none_not_that_local_cannot_be_priced():
    said = why_no_offer(_cpu(cloud="local"), ZONE)
    assert "`infra: local` names the broker's on-prem pools, and it has none: add one to `pools` in its config" \
        in said and "cannot price local" not in said, said
