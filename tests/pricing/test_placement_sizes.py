"""Placement of ``cpus`` and ``memory`` as SkyPilot reads them, as a table of cases.

SkyPilot takes ``cpus: 16`` as exactly 16 vCPUs and ``cpus: 16+`` as at least 16, and ``memory`` the same way
(``sky/catalog/common.py``, ``_filter_with_cpus`` / ``_filter_with_mem``; ``sky.Resources._try_validate_cpus_mem``
refuses a pinned instance type of another size). The SkyPilot launcher pins the placement's instance type, so a
cloud offer of another size than an exact one asked is a launch SkyPilot refuses: placement never takes one. A
pool is a share of a host and a simulated zone a process on this host: there a size is at least.

A GCP GPU that rides an ``n1-`` VM is offered on every such VM GCP attaches it to, and placement picks the host as
SkyPilot does (``sky/catalog/gcp_catalog.py``, ``get_instance_type_for_accelerator``): with no size asked, at least
SkyPilot's default vCPUs for the GPUs and 4 GiB each; with ``cpus`` alone, at least 4 GiB per vCPU asked; with
``memory`` alone, any vCPUs; with both, as written; a VM the task names, as named.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.catalog import parse_vms_csv
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, place


def aws(name, vcpus, memory, price, tier=Tier.ONDEMAND, acc=None, count=0, zone="us-east-1a"):
    return Offer(tier, "aws", "us-east-1", zone, name, acc, count, price, vcpus=Decimal(vcpus),
                 memory_gib=Decimal(memory))


CPU_TYPES = [
    aws("m6i.2xlarge", 8, 32, 384_000),
    aws("r6i.2xlarge", 8, 64, 504_000),
    aws("m6i.4xlarge", 16, 64, 768_000),
    aws("c6i.8xlarge", 32, 64, 1_360_000),
    aws("c6i.8xlarge", 32, 64, 600_000, tier=Tier.SPOT),  # cheaper than the 16-vCPU type on-demand
    aws("m6i.8xlarge", 32, 128, 450_000, tier=Tier.SPOT),  # cheaper than the 64 GiB types
    Offer(Tier.ONDEMAND, "gcp", "us-central1", "us-central1-a", "n1-standard-2", None, 0, 94_999,
          vcpus=Decimal(2), memory_gib=Decimal("7.5")),
]
A10G_TYPES = [  # AWS's A10G:1 types, as the catalog has them
    aws("g5.xlarge", 4, 16, 1_006_000, acc="A10G", count=1),
    aws("g5.2xlarge", 8, 32, 1_212_000, acc="A10G", count=1),
    aws("g5.4xlarge", 16, 64, 1_624_000, acc="A10G", count=1),
    aws("g5.8xlarge", 32, 128, 2_448_000, acc="A10G", count=1),
    aws("g5.8xlarge", 32, 128, 980_000, acc="A10G", count=1, tier=Tier.SPOT),  # cheaper than every smaller g5
]
OFFERS = CPU_TYPES + A10G_TYPES
POOL = Offer(Tier.ONPREM, "local", "lab", "lab", "lab-1slot", None, 0, 300_000, vcpus=Decimal(32),
             memory_gib=Decimal(128))
K8S_POOL = Offer(Tier.ONPREM, "kubernetes", "lab-gpus", "lab", "lab-1slot", "A10G", 1, 900_000, vcpus=Decimal(12),
                 memory_gib=Decimal(48))
SIM_ZONE = Offer(Tier.SPOT, "aws", "us-east-1", "sim-us-east-1a", "g5.xlarge", "A10G", 1, 400_000, vcpus=Decimal(4),
                 memory_gib=Decimal(16), simulated=True)


def want(acc=None, count=0, cpus=None, memory=None, **kw):
    """A resource shape as the task writes it: ``cpus="16"`` is exact, ``cpus="16+"`` at least (as ``memory``)."""
    def size(text):
        return (None, False) if text is None else (Decimal(text.rstrip("+")), not text.endswith("+"))

    (c, c_exact), (m, m_exact) = size(cpus), size(memory)
    return ResourceRequest(acc, count, cpus=c, memory_gib=m, cpus_exact=c_exact, memory_exact=m_exact, **kw)


def job(*alternatives):
    return JobRequest(alternatives=alternatives)


PLACED = [
    pytest.param(job(want(cpus="16")), OFFERS, "ondemand m6i.4xlarge",
                 id="cpus: 16 takes the 16-vCPU type, not a cheaper 32-vCPU spot one SkyPilot would refuse"),
    pytest.param(job(want(cpus="16+")), OFFERS, "spot m6i.8xlarge",
                 id="cpus: 16+ takes the cheapest type with at least 16 vCPUs"),
    pytest.param(job(want(cpus="8")), OFFERS, "ondemand m6i.2xlarge",
                 id="cpus: 8 takes the cheapest of the types with exactly 8 vCPUs"),
    pytest.param(job(want(memory="64")), OFFERS, "ondemand r6i.2xlarge",
                 id="memory: 64 takes the cheapest type with exactly 64 GiB, not a cheaper 128 GiB spot one"),
    pytest.param(job(want(cpus="8", memory="64")), OFFERS, "ondemand r6i.2xlarge",
                 id="cpus: 8 with memory: 64 takes the type of exactly that shape"),
    pytest.param(job(want(cpus="16+", memory="64")), OFFERS, "spot c6i.8xlarge",
                 id="cpus: 16+ with memory: 64 takes the cheapest with 64 GiB and at least 16 vCPUs"),
    pytest.param(job(want(memory="64+")), OFFERS, "spot m6i.8xlarge",
                 id="memory: 64+ takes the cheapest type with at least 64 GiB"),
    pytest.param(job(want(memory="7.5")), OFFERS, "ondemand n1-standard-2",
                 id="a fractional exact memory takes the type of exactly that much"),
    pytest.param(job(want("A10G", 1, cpus="16")), OFFERS, "ondemand g5.4xlarge",
                 id="A10G:1 with cpus: 16 takes the g5 of 16 vCPUs, not the cheaper 32-vCPU spot g5"),
    pytest.param(job(want("A10G", 1, cpus="6+")), OFFERS, "spot g5.8xlarge",
                 id="A10G:1 with cpus: 6+ takes the cheapest g5 with at least 6 vCPUs"),
    pytest.param(job(want("A10G", 1, memory="32")), OFFERS, "ondemand g5.2xlarge",
                 id="A10G:1 with memory: 32 takes the g5 of 32 GiB, not the cheaper 128 GiB spot one"),
    pytest.param(job(want("A10G", 1, cpus="4"), want("A10G", 1, cpus="16")), OFFERS, "ondemand g5.xlarge",
                 id="any_of two exact sizes takes the cheapest type of either size"),
    pytest.param(job(want(cpus="16")), [POOL, *OFFERS], "onprem lab-1slot",
                 id="a pool of 32 vCPUs a slot takes cpus: 16, a share of a host being at least what is asked"),
    pytest.param(job(want(memory="64")), [POOL, *OFFERS], "onprem lab-1slot",
                 id="a pool takes an exact memory as at least too"),
    pytest.param(job(want("A10G", 1, cpus="8", memory="32")), [K8S_POOL, *A10G_TYPES], "onprem lab-1slot",
                 id="a Kubernetes pool takes an exact size as at least, SkyPilot sizing the pod to it"),
    pytest.param(job(want("A10G", 1, cpus="2")), [SIM_ZONE], "spot g5.xlarge",
                 id="a simulated zone, a process on this host, takes cpus: 2 on its 4-vCPU stand-in"),
]


GCP_ROWS = [  # GCP's n1 shapes at their us-central1 prices (vCPUs, GiB, $/h, spot $/h)
    "n1-standard-1,1.0,3.75,0.0475,0.01", "n1-highcpu-2,2.0,1.8,0.0709,0.015", "n1-standard-2,2.0,7.5,0.095,0.02",
    "n1-highmem-2,2.0,13.0,0.1184,0.025", "n1-standard-4,4.0,15.0,0.19,0.04", "n1-highmem-4,4.0,26.0,0.2368,0.05",
    "n1-standard-8,8.0,30.0,0.38,0.08", "n1-highmem-8,8.0,52.0,0.47321,0.09962", "n1-standard-16,16.0,60.0,0.76,0.16",
    "n1-highmem-16,16.0,104.0,0.94642,0.19924", "n1-highcpu-16,16.0,14.4,0.5672,0.12",
    "n2-standard-2,2.0,8.0,0.01,0.001",  # cheaper than any n1, but GCP attaches no T4 to it
]
GCP_GPUS = [",,,0.35,0.14,T4,1", ",,,2.48,0.992,V100,1"]  # priced apart from the VM they ride
GCP = parse_vms_csv("InstanceType,vCPUs,MemoryGiB,Price,SpotPrice,AcceleratorName,AcceleratorCount,Region,AvailabilityZone\n"
                    + "\n".join(f"{r},us-central1,us-central1-a" for r in [f"{vm},," for vm in GCP_ROWS] + GCP_GPUS),
                    "gcp")

PLACED += [
    pytest.param(job(want("T4", 1)), GCP, "spot n1-highmem-4+T4:1",
                 id="T4:1 asking nothing more takes the cheapest n1 VM of SkyPilot's default 4+ vCPUs and 16+ GiB"),
    pytest.param(job(want("V100", 1)), GCP, "spot n1-highmem-8+V100:1",
                 id="V100:1 asking nothing more takes the cheapest n1 VM of SkyPilot's default 8+ vCPUs and 32+ GiB"),
    pytest.param(job(want("T4", 1, cpus="2")), GCP, "spot n1-highmem-2+T4:1",
                 id="T4:1 with cpus: 2 takes n1-highmem-2, not n1-standard-2 under the 8 GiB SkyPilot gives 2 vCPUs"),
    pytest.param(job(want("T4", 1, cpus="2+")), GCP, "spot n1-highmem-2+T4:1",
                 id="T4:1 with cpus: 2+ takes the cheapest n1 VM with 2+ vCPUs and 4 GiB each"),
    pytest.param(job(want("T4", 1, cpus="16")), GCP, "spot n1-highmem-16+T4:1",
                 id="T4:1 with cpus: 16 takes the 16-vCPU n1 VM with 64+ GiB, not n1-standard-16 of 60 GiB"),
    pytest.param(job(want("T4", 1, memory="15")), GCP, "spot n1-standard-4+T4:1",
                 id="T4:1 with memory: 15 takes n1-standard-4, SkyPilot leaving its vCPUs free"),
    pytest.param(job(want("T4", 1, memory="1.8")), GCP, "spot n1-highcpu-2+T4:1",
                 id="T4:1 with memory: 1.8 takes n1-highcpu-2, under the 4 GiB a vCPU SkyPilot asks only with cpus"),
    pytest.param(job(want("T4", 1, memory="3+")), GCP, "spot n1-standard-1+T4:1",
                 id="T4:1 with memory: 3+ takes the cheapest n1 VM with that much, of 1 vCPU"),
    pytest.param(job(want("T4", 1, cpus="2", memory="7.5")), GCP, "spot n1-standard-2+T4:1",
                 id="T4:1 with cpus: 2 and memory: 7.5 takes n1-standard-2: sizes asked both are taken as written"),
    pytest.param(job(want("T4", 1, instance_type="n1-standard-1")), GCP, "spot n1-standard-1+T4:1",
                 id="T4:1 naming n1-standard-1 takes it, as SkyPilot takes a VM named"),
    pytest.param(job(want("T4", 1, cpus="1", instance_type="n1-standard-1")), GCP, "spot n1-standard-1+T4:1",
                 id="T4:1 naming n1-standard-1 with cpus: 1 takes it, SkyPilot checking only the size asked"),
]


@pytest.mark.parametrize("request_, offers, expected", PLACED)
def test_sizes_are_placed_as_skypilot_reads_them(request_, offers, expected):
    result = place(request_, offers)
    assert isinstance(result, Placement), result
    assert f"{result.tier.value} {result.offer.instance_type}" == expected


def test_a_full_pool_leaves_an_exact_size_to_the_type_of_that_size():
    result = place(job(want(cpus="16")), [POOL, *OFFERS], free_capacity={"lab": 0})
    assert isinstance(result, Placement) and result.offer.instance_type == "m6i.4xlarge", result


NO_FIT = [
    pytest.param(job(want("A10G", 1, cpus="12")), OFFERS,
                 "no instance type has 1x A10G with exactly 12 vCPUs (the ones that fit otherwise have 16 or 32 "
                 "vCPUs); write cpus: 12+ for at least 12 vCPUs",
                 id="an exact vCPU count no type with the GPU has says so, the sizes there are, and to write 12+"),
    pytest.param(job(want(memory="48")), OFFERS,
                 "no instance type has exactly 48 GiB of memory (the ones that fit otherwise have 64 or 128 GiB); "
                 "write memory: 48+ for at least 48 GiB",
                 id="an exact memory no type has says to write memory: 48+"),
    pytest.param(job(want(cpus="0.5")), CPU_TYPES,
                 "no instance type has exactly 0.5 vCPUs (the ones that fit otherwise have 2, 8, 16 or 32 vCPUs); "
                 "write cpus: 0.5+ for at least 0.5 vCPUs",
                 id="a fractional vCPU count is no instance type's"),
    pytest.param(job(want(cpus="4", memory="64")), CPU_TYPES,
                 "no instance type has exactly 4 vCPUs and exactly 64 GiB of memory (the ones that fit otherwise "
                 "have 8, 16 or 32 vCPUs); write cpus: 4+ for at least 4 vCPUs",
                 id="with both sizes exact only the one to loosen is said"),
    pytest.param(job(want("A10G", 1, cpus="12", memory="48")), OFFERS,
                 "no instance type has 1x A10G with exactly 12 vCPUs and exactly 48 GiB of memory (the ones that fit "
                 "otherwise have 16 vCPUs with 64 GiB or 32 vCPUs with 128 GiB); write cpus: 12+ and memory: 48+ "
                 "for at least those sizes",
                 id="with both sizes to loosen both are said"),
    pytest.param(job(want(cpus="64")), OFFERS, "no offer has exactly 64 vCPUs (the largest offer has 32 vCPUs)",
                 id="an exact size larger than any offer says how large the largest is, '+' would not help"),
    pytest.param(job(want("A10G", 1, cpus="12")), [SIM_ZONE],
                 "no offer has 1x A10G with exactly 12 vCPUs (the largest offer has 4 vCPUs)",
                 id="a simulated zone smaller than the size asked is no fit, and '+' would not help there"),
    pytest.param(job(want("T4", 1, cpus="1")), GCP,
                 "no instance type has 1x T4 with exactly 1 vCPUs: n1-standard-1 has 1 vCPUs but 3.75 GiB of memory, "
                 "under the 4 GiB SkyPilot asks of a GCP GPU's host for cpus: 1 without memory (4 GiB a vCPU); write "
                 "memory: 3.75+ to take it, or cpus: 1+ for at least 1 vCPUs (the ones that fit then have 2, 4, 8 or "
                 "16 vCPUs)",
                 id="T4:1 with cpus: 1 is no fit: n1-standard-1 has 3.75 GiB, under the 4 GiB SkyPilot asks with it"),
    pytest.param(job(want("V100", 1, cpus="16")), GCP, "no offer has 1x V100 with exactly 16 vCPUs",
                 id="V100:1 with cpus: 16 is no fit, past GCP's 12 vCPUs for one V100"),
]


@pytest.mark.parametrize("request_, offers, reason", NO_FIT)
def test_an_exact_size_no_instance_type_has_is_no_fit_saying_how_to_ask_for_at_least(request_, offers, reason):
    result = place(request_, offers)
    assert isinstance(result, NoFit), result
    assert result.reason == reason
