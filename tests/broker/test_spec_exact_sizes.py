"""A task's ``cpus`` and ``memory``, from its YAML to the instance type it is placed and quoted on, read as SkyPilot
reads them: ``cpus: 16`` exactly 16 vCPUs, ``cpus: 16+`` at least 16, ``memory`` the same after its unit. The
SkyPilot launcher pins the placement's instance type, and SkyPilot refuses one of another size than an exact one
asked (``sky.Resources._try_validate_cpus_mem``): a job placed there failed at launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from decimal import Decimal

import pytest

from broker.admission import Refused, admit
from broker.spec import parse
from pricing.money import to_micros
from pricing.offers import Offer, Tier
from pricing.placement import matches

NOW = 1_790_000_000.0

SHAPES = [("n1-standard-2", 2, 7.5), ("m6i.xlarge", 4, 16), ("m6i.2xlarge", 8, 32), ("r6i.2xlarge", 8, 64),
          ("m6i.4xlarge", 16, 64), ("c6i.8xlarge", 32, 64), ("m6i.8xlarge", 32, 128), ("x.tiny", 0.5, 0.5)]
"""Catalog rows (instance type, vCPUs, MemoryGiB), fractional ones included."""
CPUS = [None, 16, "16", "16+", 8, "8+", 0.5, "0.5+", "2.0", 32]
MEMORY = [None, 64, "64", "64+", "64GB", "64GB+", "65536MB", "64Gi", "0.0625TB", 7.5, "7680MB", "7.5+", "512MB"]
"""Sizes as a task's YAML holds them (a number, or text with '+' or a unit), every pair of which is checked."""

SKYPILOT_FILTER = """
import json, sys
import pandas as pd
from sky.catalog import common
from sky.utils import resources_utils
shapes, requests = json.load(sys.stdin)
df = pd.DataFrame({"InstanceType": [s[0] for s in shapes], "vCPUs": [float(s[1]) for s in shapes],
                   "MemoryGiB": [float(s[2]) for s in shapes]})
out = []
for cpus, memory in requests:
    # as sky.Resources keeps them (_set_cpus: str(cpus); _set_memory: parse_memory_resource), then its catalog filters
    cpus = None if cpus is None else str(cpus)
    if memory is not None:
        memory = resources_utils.parse_memory_resource(str(memory), "memory", ret_type=float, allow_plus=True,
                                                       allow_x=True)
    kept = common._filter_with_mem(common._filter_with_cpus(df, cpus), memory)
    out.append(sorted(kept["InstanceType"]))
print(json.dumps(out))
"""


def test_the_instance_types_a_size_matches_are_those_skypilots_catalog_filters_keep(tmp_path):
    """SkyPilot's own filters (``sky/catalog/common.py``: ``_filter_with_cpus``, ``_filter_with_mem``), run in a
    process of their own (``sky`` is imported in this one only under the launchers' tests' HOME), against what
    placement matches, for every pair of sizes: exact, at least, with units, fractional."""
    requests = [(c, m) for c in CPUS for m in MEMORY if (c, m) != (None, None)]
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path),
           "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run([sys.executable, "-c", SKYPILOT_FILTER], input=json.dumps([SHAPES, requests]), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    skypilots = json.loads(done.stdout)
    offers = [Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1a", name, None, 0, 1_000_000,
                    vcpus=Decimal(str(cpus)), memory_gib=Decimal(str(memory))) for name, cpus, memory in SHAPES]
    ours = []
    for cpus, memory in requests:
        resources = {k: v for k, v in (("cpus", cpus), ("memory", memory)) if v is not None}
        alt, = parse({"run": "x", "resources": resources}, now=NOW).request.alternatives
        ours.append(sorted(o.instance_type for o in offers if matches(o, alt)))
    differ = [(r, s, o) for r, s, o in zip(requests, skypilots, ours) if s != o]
    assert not differ, f"(cpus, memory), SkyPilot's, ours: {differ}"
    assert sum(map(len, skypilots)) > 0 and any(len(s) == 1 for s in skypilots)  # the check is of something


def offer(name, vcpus, memory, price, tier=Tier.ONDEMAND):
    return Offer(tier, "aws", "us-east-1", "us-east-1a", name, None, 0, price, vcpus=Decimal(vcpus),
                 memory_gib=Decimal(memory))


OFFERS = [offer("m6i.4xlarge", 16, 64, 768_000), offer("c6i.8xlarge", 32, 64, 1_360_000),
          offer("c6i.8xlarge", 32, 64, 600_000, tier=Tier.SPOT)]


def submitted(resources):
    spec = parse({"run": "python train.py", "resources": resources, "broker": {"expected_hours": 2}}, now=NOW)
    return admit(spec, job_id="j-0123456789", team="ml", budget=to_micros("20"), offers=OFFERS, now=NOW,
                 actor="alice", checkpoint_uri="file:///tmp/ckpt", idempotency_key=None).job


@pytest.mark.parametrize("resources, quoted", [
    pytest.param({"cpus": 16}, [("ondemand", "m6i.4xlarge", 1_536_000)],
                 id="cpus: 16 is quoted at the 16-vCPU type's price only, not the cheaper 32-vCPU spot one"),
    pytest.param({"cpus": "16+"}, [("spot", "c6i.8xlarge", 1_200_000), ("ondemand", "m6i.4xlarge", 1_536_000)],
                 id="cpus: 16+ is quoted at the cheapest type with at least 16 vCPUs, spot"),
    pytest.param({"cpus": 32, "memory": "64GB"}, [("spot", "c6i.8xlarge", 1_200_000),
                                                  ("ondemand", "c6i.8xlarge", 2_720_000)],
                 id="cpus: 32 with memory: 64GB is quoted on the type of exactly that shape"),
])
def test_the_admission_quote_prices_the_size_skypilot_will_launch(resources, quoted):
    job = submitted(resources)
    assert [(t["tier"], t["offer"].split()[2], t["estimate"]) for t in job.quote["tiers"]] == quoted


def test_a_submit_whose_exact_size_no_instance_type_has_is_refused_saying_to_write_plus():
    with pytest.raises(Refused) as refused:
        submitted({"cpus": 12})
    assert refused.value.field == "resources"
    assert str(refused.value) == ("cannot place this job: no instance type has exactly 12 vCPUs (the ones that fit "
                                  "otherwise have 16 or 32 vCPUs); write cpus: 12+ for at least 12 vCPUs")
    assert submitted({"cpus": "12+"}).quote["tiers"][0]["tier"] == "spot"  # as the sentence says
