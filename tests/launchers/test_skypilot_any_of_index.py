"""The ``any_of`` / ``ordered`` alternative launched is the one the placement was made from (its index, carried in
the placement as ``alternative``), not a guess from the placement's location and accelerator: two alternatives of
one accelerator in one region, told apart by placement on ``cpus``, each launch with their own ``disk_size``."""

from __future__ import annotations

import pytest
from test_skypilot_task import SPOT_A100, request

from broker.offers import placed_alternative, placement_record
from broker.spec import parse
from launchers.skypilot import attempt_config, build_task
from pricing.placement import place

TWO_SIZES = {"resources": {"any_of": [
    {"infra": "aws/us-east-1", "accelerators": "A10G:1", "cpus": 4, "disk_size": 50},
    {"infra": "aws/us-east-1", "accelerators": "A10G:1", "cpus": 32, "disk_size": 600},
]}, "run": "python train.py"}


def test_the_alternative_placed_on_its_size_launches_with_its_own_settings(sky, sky_env):
    from pricing.loading import load_price_table

    spec = parse(TWO_SIZES, now=1_800_000_000.0)
    offers = [o for o in load_price_table(home=sky_env["home"], clouds=("aws",))
              if o.region == "us-east-1" and o.instance_type == "g5.8xlarge"]  # the 4-vCPU g5.xlarge has no room
    placed = place(spec.request, offers)
    index = placed_alternative(TWO_SIZES, spec.request, placed.offer)
    assert index == 1
    placement = placement_record(placed.offer, 1, alternative=index)
    assert placement["alternative"] == 1
    config = attempt_config(request(TWO_SIZES, placement))
    assert (config["resources"]["cpus"], config["resources"]["disk_size"]) == (32, 600)
    [built] = list(build_task(config).resources)  # a real sky.Task: SkyPilot takes the pinned g5.8xlarge
    assert (built.instance_type, built.disk_size) == ("g5.8xlarge", 600)


SAME_PLACE = {"resources": {"any_of": [{"accelerators": "A100:8", "disk_size": 100},
                                       {"accelerators": "A100:8", "disk_size": 2000}]}, "run": "python train.py"}


@pytest.mark.parametrize("index, disk", [(0, 100), (1, 2000)])
def test_the_placements_index_decides_between_alternatives_alike_to_placement(sky, index, disk):
    config = attempt_config(request(SAME_PLACE, {**SPOT_A100, "alternative": index}))
    [built] = list(build_task(config).resources)
    assert built.disk_size == disk


@pytest.mark.parametrize("extra", [{}, {"alternative": 7}, {"alternative": True}],
                         ids=["stored before", "out of range", "not an index"])
def test_a_placement_without_a_usable_index_falls_back_to_the_location_and_accelerator(sky, extra):
    """Guard (kept behaviour): a placement stored before it carried an index launches as before."""
    task = {"resources": {"any_of": [{"accelerators": "T4:1", "disk_size": 50},
                                     {"accelerators": "A100:8", "disk_size": 700}]}, "run": "python train.py"}
    assert attempt_config(request(task, {**SPOT_A100, **extra}))["resources"]["disk_size"] == 700


def test_a_task_without_alternatives_gets_no_index():
    task = {"resources": {"accelerators": "A100:8"}, "run": "python train.py"}
    spec = parse(task, now=1_800_000_000.0)
    from pricing.offers import Offer, Tier

    offer = Offer(tier=Tier.SPOT, cloud="aws", region="us-east-1", zone="us-east-1b", instance_type="p4d.24xlarge",
                  accelerator="A100", accelerator_count=8, price_per_hour=2_465_500)
    assert placed_alternative(task, spec.request, offer) is None
    assert "alternative" not in placement_record(offer, 1, alternative=None)
