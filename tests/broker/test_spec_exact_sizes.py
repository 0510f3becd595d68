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
from pricing.catalog import parse_vms_csv
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



def in_skypilot(script: str, payload, tmp_path, *, timeout: float = 120):
    """``script`` run by a Python of its own with ``payload`` as JSON on its stdin, and what it printed as JSON:
    ``sky`` imported under a HOME of the test's (in this process only the launchers' tests' HOME may import it)."""
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path),
           "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run([sys.executable, "-c", script], input=json.dumps(payload), env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)

def test_the_instance_types_a_size_matches_are_those_skypilots_catalog_filters_keep(tmp_path):
    """SkyPilot's own filters (``sky/catalog/common.py``: ``_filter_with_cpus``, ``_filter_with_mem``), run in a
    process of their own (``sky`` is imported in this one only under the launchers' tests' HOME), against what
    placement matches, for every pair of sizes: exact, at least, with units, fractional."""
    requests = [(c, m) for c in CPUS for m in MEMORY if (c, m) != (None, None)]
    skypilots = in_skypilot(SKYPILOT_FILTER, [SHAPES, requests], tmp_path)
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


def _n1_catalog() -> str:
    """A GCP ``vms.csv``: every n1 VM GCP lists (us-central1 prices: $/vCPU-hour by family), a cheaper n2 VM and an
    n1-megamem that carry no such GPU, and GPU rows priced apart, in us-central1-a and (4x P100 only) us-east1-c."""
    families = {"n1-standard": (3.75, 0.0475, (1, 2, 4, 8, 16, 32, 64, 96)),
                "n1-highmem": (6.5, 0.0592, (2, 4, 8, 16, 32, 64, 96)),
                "n1-highcpu": (0.9, 0.03545, (2, 4, 8, 16, 32, 64, 96))}
    vms = [(f"{family}-{n}", n, memory * n, price * n) for family, (memory, price, sizes) in families.items()
           for n in sizes] + [("n2-standard-2", 2, 8, 0.01), ("n1-megamem-96", 96, 1433.6, 10.67)]
    lines = ["InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,"
             "SpotPrice"]
    for region, zone, gpus in GCP_ZONES:
        lines += [f"{name},{cpus},{memory:g},,,,{region},{zone},{price:.6f},{price / 5:.6f}"
                  for name, cpus, memory, price in vms]
        lines += [f",,,{acc},{count},{acc},{region},{zone},{0.5 * count},{0.2 * count}" for acc, count in gpus]
    return "\n".join(lines) + "\n"


GCP_ZONES = [("us-central1", "us-central1-a", [("T4", 1), ("T4", 4), ("V100", 1), ("V100", 8), ("P4", 1), ("K80", 8)]),
             ("us-east1", "us-east1-c", [("P100", 4)])]
GCP_CPUS = [None, 1, 2, "2+", 8, "8+", 16, 32, "48+", 64]
GCP_MEMORY = [None, 3.75, 7.5, "8+", 15, 52, "60+", 104, 208, "300+"]
"""Sizes as a task's YAML holds them, every pair of which is asked with each GPU of :data:`GCP_ZONES`."""

SKYPILOT_GCP_HOSTS = """
import functools, io, json, sys
import pandas as pd
from sky import exceptions
from sky.catalog import common, gcp_catalog
from sky.utils import resources_utils
text, requests = json.load(sys.stdin)
gcp_catalog._df = pd.read_csv(io.StringIO(text))
gcp_catalog.list_accelerators = functools.cache(gcp_catalog.list_accelerators)  # the same answer per GPU, once
real = common.get_instance_type_for_cpus_mem_impl
kept = []
def spy(df, cpus, memory, *args, **kwargs):
    # the n1 hosts and the sizes gcp_catalog.get_instance_type_for_accelerator derived, through its own filters
    kept.extend(common._filter_with_mem(common._filter_with_cpus(df, cpus), memory)["InstanceType"])
    return real(df, cpus, memory, *args, **kwargs)
common.get_instance_type_for_cpus_mem_impl = spy
attachable = {}
def attaches(vm, acc, count, zone):
    # what SkyPilot checks of every pinned instance type before a launch (GCP's limit per GPU count, by zone)
    if (vm, acc, count, zone) not in attachable:
        try:
            gcp_catalog.check_accelerator_attachable_to_host(vm, {acc: count}, zone)
            attachable[vm, acc, count, zone] = True
        except exceptions.ResourcesMismatchError:
            attachable[vm, acc, count, zone] = False
    return attachable[vm, acc, count, zone]
out = []
for acc, count, zone, cpus, memory in requests:
    # as sky.Resources keeps them (_set_cpus: str(cpus); _set_memory: parse_memory_resource)
    cpus = None if cpus is None else str(cpus)
    if memory is not None:
        memory = resources_utils.parse_memory_resource(str(memory), "memory", ret_type=float, allow_plus=True,
                                                       allow_x=True)
    kept.clear()
    picked, _ = gcp_catalog.get_instance_type_for_accelerator(acc, count, cpus=cpus, memory=memory, zone=zone)
    out.append({"accepted": sorted(vm for vm in set(kept) if attaches(vm, acc, count, zone)),
                "picked": picked[0] if picked else None,
                "picked_attaches": bool(picked) and attaches(picked[0], acc, count, zone)})
print(json.dumps(out))
"""


def test_the_n1_hosts_a_gcp_gpu_task_matches_are_those_skypilot_picks_from_and_can_attach(tmp_path):
    """For each GPU that rides an n1 VM and every pair of sizes, the hosts placement matches are the ones SkyPilot's
    own rule keeps (``gcp_catalog.get_instance_type_for_accelerator``: its default host size when no size is asked,
    4 GiB per vCPU with ``cpus`` alone, the n1 families; its filters run, in a process of their own, on a catalog
    of every n1 shape) and can attach the GPUs to (``check_accelerator_attachable_to_host``, which SkyPilot runs on
    the instance type the launcher pins); and the cheapest of them is the host SkyPilot itself picks."""
    text = _n1_catalog()
    requests = [(acc, count, zone, cpus, memory) for _, zone, gpus in GCP_ZONES for acc, count in gpus
                for cpus in GCP_CPUS for memory in GCP_MEMORY]
    skypilots = in_skypilot(SKYPILOT_GCP_HOSTS, [text, requests], tmp_path, timeout=300)
    offers = [o for o in parse_vms_csv(text, "gcp") if o.accelerator and o.tier is Tier.ONDEMAND]
    differ, cheapest = [], []
    for (acc, count, zone, cpus, memory), skypilot in zip(requests, skypilots):
        resources = {"infra": f"gcp/{zone.rsplit('-', 1)[0]}/{zone}", "accelerators": f"{acc}:{count}",
                     **{k: v for k, v in (("cpus", cpus), ("memory", memory)) if v is not None}}
        alt, = parse({"run": "x", "resources": resources}, now=NOW).request.alternatives
        ours = sorted((o for o in offers if matches(o, alt)), key=lambda o: o.price_per_hour)
        hosts = sorted(o.instance_type.split("+")[0] for o in ours)
        if hosts != skypilot["accepted"]:
            differ.append((acc, count, cpus, memory, skypilot["accepted"], hosts))
        if skypilot["picked_attaches"]:
            cheapest.append((skypilot["picked"], ours[0].instance_type.split("+")[0] if ours else None))
    assert not differ, f"(GPU, count, cpus, memory, SkyPilot's hosts, ours): {differ}"
    assert all(skypilot == ours for skypilot, ours in cheapest), [c for c in cheapest if c[0] != c[1]]
    accepted = [len(s["accepted"]) for s in skypilots]
    assert min(accepted) == 0 and max(accepted) > 10 and accepted.count(1) > 20  # the check is of something
    assert len(cheapest) > len(requests) / 3
