"""A submit asking an accelerator no offer has is refused naming ``resources.accelerators`` (where it is written),
with the likely name meant: ``accelerators: A1000:1`` was refused naming ``resources``, "no offer has 1x A1000
(accelerators offered: A100, A10G)", the typo not pointed at."""

from __future__ import annotations

import pytest

from broker.admission import Refused, admit
from broker.spec import parse
from pricing.offers import Offer, Tier

OFFERS = [Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "p4d.24xlarge", "A100", 8, 32_000_000, vcpus=96),
          Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "g5.xlarge", "A10G", 1, 1_006_000, vcpus=4),
          Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", "m6i.xlarge", None, 0, 192_000, vcpus=4)]


def refused(resources) -> Refused:
    spec = parse({"run": "python train.py", "resources": resources, "broker": {"expected_hours": 1}}, now=0.0)
    with pytest.raises(Refused) as caught:
        admit(spec, job_id="j-1", team="ml", budget=500_000_000, offers=OFFERS, now=0.0, actor="t",
              checkpoint_uri="file:///tmp/x", idempotency_key=None)
    return caught.value


@pytest.mark.parametrize("resources, field, says", [
    ({"accelerators": "A1000:1"}, "resources.accelerators",
     "no offer has 1x A1000 (did you mean A100? accelerators offered: A100, A10G)"),
    ({"accelerators": "TPU:1"}, "resources.accelerators", "no offer has 1x TPU (accelerators offered: A100, A10G)"),
    ({"accelerators": "A100:2"}, "resources.accelerators", "no offer has 2x A100 (an offer here has 8 A100)"),
    ({"accelerators": ["A1000", "H100"]}, "resources.accelerators", "no offer has 1x A1000"),
    ({"any_of": [{"accelerators": "A10G", "cpus": 64}, {"accelerators": "A1000"}]}, "resources", "no offer has"),
    ({"any_of": [{"accelerators": "A1000"}, {"accelerators": "H100"}]}, "resources", "no offer has"),
    ({"ordered": [{"accelerators": "A1000"}]}, "resources.ordered[0].accelerators", "did you mean A100?"),
    ({"accelerators": "A10G", "cpus": 64}, "resources", "no offer has 1x A10G"),
], ids=["a typo of a name offered: its field, and the name likely meant",
        "a name like none offered: its field and the names offered",
        "a count of a name offered that no offer has: its field",
        "every accelerator of a list unknown: the list's field",
        "one alternative has its accelerator, the other not: the resources, not one field",
        "two entries each with an unknown one: the resources, not one field",
        "one ordered entry's unknown accelerator: that entry's field",
        "an accelerator offered with a size no offer has: the resources, not its accelerators"])
def test_a_job_whose_accelerator_no_offer_has_is_refused_naming_where_it_is_written(resources, field, says):
    error = refused(resources)
    assert (error.field, says in str(error)) == (field, True), (error.field, str(error))


@pytest.mark.parametrize("asked, offered, meant", [
    ("A1000", ["A100", "A10G"], "A100"), ("a10", ["A10G", "V100"], "A10G"), ("A100", ["A10G"], None),
    ("L4", ["L40", "A100"], None), ("H100", ["A100"], None),
], ids=["A1000 is likely A100", "a10 is likely A10G, whatever its case", "A100 is another GPU than A10G, not a typo",
        "L4 is another GPU than L40", "H100 is another GPU than A100"])
def test_the_name_likely_meant_is_offered_only_for_a_typo_not_for_another_gpu(asked, offered, meant):
    from pricing.offers import JobRequest, ResourceRequest
    from pricing.placement import why_no_offer

    offers = [Offer(Tier.ONDEMAND, "aws", "r", "z", f"t-{n}", n, 1, 1_000_000) for n in offered]
    said = why_no_offer(JobRequest((ResourceRequest(accelerator=asked, accelerator_count=1),)), offers)
    assert ("did you mean" in said, meant and f"did you mean {meant}?" in said) == (bool(meant), meant and True), said
