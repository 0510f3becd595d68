"""Prices agree with SkyPilot: for the same request over the same catalog rows, the broker's
cheapest spot and on-demand choices (``load_price_table`` + ``place``) are SkyPilot's optimizer's.

Both read the catalog subset from the temporary ``~/.sky/catalogs/v8``, including the zone-id
mapping SkyPilot fetched from (moto's) EC2, so a zone means the same to both.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from broker.spec import parse
from pricing.loading import load_price_table
from pricing.money import to_micros
from pricing.placement import Placement, place

REQUESTS = [
    ("8x A100", {"accelerators": "A100:8"}),
    ("8x A100-80GB", {"accelerators": "A100-80GB:8"}),
    ("4x V100", {"accelerators": "V100:4"}),
    ("8x V100-32GB", {"accelerators": "V100-32GB:8"}),
    ("1x T4", {"accelerators": "T4:1"}),
    ("1x A10G", {"accelerators": "A10G:1"}),
    ("4x A10G", {"accelerators": "A10G:4"}),
    ("8x H100", {"accelerators": "H100:8"}),
    ("8x A100 in us-west-2 only", {"accelerators": "A100:8", "infra": "aws/us-west-2"}),
]

CASES = [
    pytest.param({**res, "use_spot": spot}, id=name)
    for base, res in REQUESTS for spot in (True, False)
    for name in [f"{base} on {'spot' if spot else 'on-demand'}"]
]


def skypilot_choice(sky, resources):
    from sky import dag as dag_lib
    from sky import optimizer

    task = sky.Task.from_yaml_config({"resources": dict(resources), "run": "true"})
    with dag_lib.Dag() as dag:
        dag.add(task)
    optimizer.Optimizer.optimize(dag, quiet=True)
    best = task.best_resources
    return best, to_micros(Decimal(repr(best.get_cost(3600))))


@pytest.mark.parametrize("resources", CASES)
def test_the_broker_and_skypilot_choose_the_same_offer_at_the_same_price(sky, sky_env, resources):
    theirs, their_price = skypilot_choice(sky, resources)  # first: SkyPilot writes its zone mapping

    offers = load_price_table(sky_env["catalog"], clouds=("aws",))
    spec = parse({"resources": dict(resources), "run": "true"}, now=0.0)
    ours = place(spec.request, offers)

    assert isinstance(ours, Placement), ours
    assert ours.offer.tier.value == ("spot" if resources["use_spot"] else "ondemand")
    assert (ours.offer.instance_type, ours.offer.price_per_hour) == (theirs.instance_type, their_price)
    equally_cheap = {(o.region, o.zone) for o in offers
                     if o.tier is ours.offer.tier and o.instance_type == ours.offer.instance_type
                     and o.price_per_hour == ours.offer.price_per_hour}
    assert (theirs.region, theirs.zone) in equally_cheap or (
        theirs.zone is None and theirs.region in {r for r, _ in equally_cheap}
    ), f"SkyPilot chose {theirs.region}/{theirs.zone}, the broker's equally cheap offers are {sorted(equally_cheap)}"
