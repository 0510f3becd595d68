"""QA, Dec 8: a "no fit" sentence gives the real reason, of the cloud asked.

* ``{cpus: 64+, infra: aws}`` was told "the largest offer has 32.0 vCPUs" — GCP's n2d-standard-32, where AWS's largest
  CPU-only type has 8 — and ``{memory: 200+}`` "the largest offer has 128.0 GiB" though p5.48xlarge has 2048 GiB: a
  task asking for no accelerator never takes a GPU type (as SkyPilot launches it), which the sentence now says.
* ``{accelerators: T4, cpus: 4, infra: gcp}`` was told "no instance type has 1x T4 with exactly 4 vCPUs in gcp (the ones
  that fit otherwise have 8 or 16 vCPUs)" though n1-standard-4 has 4 vCPUs: SkyPilot asks 4 GiB a vCPU of a GCP GPU's
  host when the task gives cpus without memory, and it has 15 GiB.

The shipped AWS catalog, and GCP rows as SkyPilot's GCP catalog has them (n1 VMs priced apart from the T4 they carry).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from pricing.catalog import parse_vms_csv
from pricing.loading import SNAPSHOT_DIR, load_price_table
from pricing.offers import JobRequest, ResourceRequest
from pricing.placement import NoFit, Placement, place

AWS = load_price_table(SNAPSHOT_DIR, clouds=("aws",))
GCP_VMS = ["n2d-standard-32,32.0,128.0,1.35187,0.28051", "n1-standard-4,4.0,15.0,0.19,0.04",
           "n1-standard-8,8.0,30.0,0.38,0.08", "n1-standard-16,16.0,60.0,0.76,0.16"]
GCP = parse_vms_csv("InstanceType,vCPUs,MemoryGiB,Price,SpotPrice,AcceleratorName,AcceleratorCount,Region,"
                    "AvailabilityZone\n" + "\n".join(f"{r},us-central1,us-central1-a"
                                                    for r in [f"{vm},," for vm in GCP_VMS] + [",,,0.35,0.14,T4,1"]),
                    "gcp")
OFFERS = [*AWS, *GCP]


def no_fit(**want) -> str:
    result = place(JobRequest(alternatives=(ResourceRequest(**want),)), OFFERS)
    assert isinstance(result, NoFit), result
    return result.reason


@pytest.mark.parametrize("want, said, not_said", [
    pytest.param(dict(cpus=Decimal(64), cloud="aws"),
                 "no offer has 64+ vCPUs in aws (the largest CPU-only offer in aws has 8 vCPUs; GPU instance types "
                 "such as p5.48xlarge, with 192 vCPUs, are left out: a task asking for no accelerator never takes one",
                 "32", id="a CPU-only size in aws is weighed against aws's types, not gcp's n2d-standard-32"),
    pytest.param(dict(memory_gib=Decimal(200)),
                 "no offer has 200+ GiB of memory (the largest CPU-only offer has 128 GiB of memory; GPU instance "
                 "types such as p5.48xlarge, with 2048 GiB of memory, are left out", "128.0",
                 id="a memory only GPU types have says the GPU types are left out, and which has it"),
    pytest.param(dict(memory_gib=Decimal(200), cloud="gcp"),
                 "no offer has 200+ GiB of memory in gcp (the largest offer in gcp has 128 GiB of memory)", "GPU",
                 id="a cloud with no GPU type of that size says its largest alone"),
])
def test_a_cpu_only_size_no_offer_has_is_weighed_in_the_cloud_asked_and_says_gpu_types_are_left_out(want, said,
                                                                                                     not_said):
    reason = no_fit(**want)
    assert reason.startswith(said), reason
    assert not_said not in reason, reason


def test_a_t4_with_cpus_4_on_gcp_is_told_its_4_vcpu_host_lacks_the_memory_skypilot_asks():
    reason = no_fit(accelerator="T4", accelerator_count=1, cpus=Decimal(4), cpus_exact=True, cloud="gcp")
    assert reason == ("no instance type has 1x T4 with exactly 4 vCPUs in gcp: n1-standard-4 has 4 vCPUs but 15 GiB of "
                      "memory, under the 16 GiB SkyPilot asks of a GCP GPU's host for cpus: 4 without memory (4 GiB a "
                      "vCPU); write memory: 15+ to take it, or cpus: 4+ for at least 4 vCPUs (the ones that fit then "
                      "have 8 or 16 vCPUs)"), reason


@pytest.mark.parametrize("want, instance_type", [
    pytest.param(dict(memory_gib=Decimal(15)), "n1-standard-4+T4:1", id="memory: 15+ beside cpus: 4 takes n1-standard-4"),
    pytest.param(dict(cpus_exact=False), "n1-standard-8+T4:1", id="cpus: 4+ takes the 8-vCPU host"),
])
def test_what_the_sentence_says_to_write_is_placed(want, instance_type):
    asked = {"cpus": Decimal(4), "cpus_exact": True, "cloud": "gcp", **want}
    result = place(JobRequest(alternatives=(ResourceRequest("T4", 1, **asked),)), OFFERS)
    assert isinstance(result, Placement) and result.offer.instance_type == instance_type, result
