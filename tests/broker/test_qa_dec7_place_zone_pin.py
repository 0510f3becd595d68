"""A task pinning a zone that matches none is told the zones there are, the likely one meant first.

QA walkthrough (Dec 7): zone sim-spot (`cloud_zone: us-east-1f`, the real zone it takes its price from) was pinned
only as `infra: aws/us-east-1/sim-spot`; `aws/us-east-1/us-east-1f` and the typo `aws/us-east-1/sim-spott` were both
refused with the bare "no offer has 1x A10G in aws/us-east-1/…", where a pool mistyped is answered "(there is no pool
dgz here: the only pool is dgx)". A simulated zone is a process on this host named by its name; its `cloud_zone` only
prices it (docs/deploy.md, `zones`), so pinning the cloud zone is refused still, saying to name the simulated zone.
"""

from __future__ import annotations

import pytest

from broker.auth import Principal
from broker.service import BrokerService, Invalid
from broker.store import open_store

ADMIN = Principal("admin", None, admin=True)
CONFIG = """
pools:
  - {name: dgx, gpus: 8, accelerator: A10G, price_per_gpu_hour: "0.36"}
zones:
  - {name: sim-spot, tier: spot, instance_type: g5.xlarge, region: us-east-1, cloud_zone: us-east-1f, grace_seconds: 5}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, region: us-east-1}
"""


@pytest.mark.parametrize("infra, said", [
    ("aws/us-east-1/sim-spott",
     "no offer has 1x A10G in aws/us-east-1/sim-spott (there is no zone sim-spott here: did you mean "
     "aws/us-east-1/sim-spot? the zones in aws/us-east-1 are sim-od and sim-spot)"),
    ("aws/us-east-1/us-east-1f",
     "no offer has 1x A10G in aws/us-east-1/us-east-1f (there is no zone us-east-1f here: the zones in aws/us-east-1 "
     "are sim-od and sim-spot; a simulated zone is named by its name, not by the cloud_zone it takes its price from)"),
], ids=["a zone mistyped is answered with the one meant", "a simulated zone's cloud zone says to name the zone"])
def test_a_pinned_zone_that_matches_none_names_the_zones_there_are(make_settings, tmp_path, infra, said):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'z.db'}")
    try:
        service = BrokerService(settings, store, None)
        with pytest.raises(Invalid) as refused:
            service.submit(ADMIN, {"run": "true", "resources": {"accelerators": "A10G:1", "infra": infra}})
        assert said in str(refused.value), str(refused.value)
        placed = service.submit_dry_run(ADMIN, {"run": "true", "resources": {"accelerators": "A10G:1",
                                                                             "infra": "aws/us-east-1/sim-spot"}})
        assert placed.placement is not None and placed.placement["zone"] == "sim-spot", placed.reason
    finally:
        store.close()
