"""The broker's limits on cloud placement: ``instance_types`` and ``launch_regions`` (``BROKER_INSTANCE_TYPES``,
``BROKER_LAUNCH_REGIONS``), what its cloud role may launch.

QA: terraform/aws gives the broker's role ``ec2:RunInstances`` only for ``gpu_instance_types`` in ``launch_regions``,
and the broker knew neither: ``broker submit examples/train.yaml --dry-run`` said "would be placed on spot CPU
m6i.2xlarge in aws/us-east-2b", a launch IAM refuses; the job was requeued with zone cooldowns and might never run.
A cloud offer outside the limits is now never quoted nor placed, and a job only such offers would fit is told which
setting keeps them out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import broker.offers
from broker.auth import Principal
from broker.config import ConfigError, load_settings
from broker.engine.schedule import schedule_now
from broker.offers import all_offers, market
from broker.service import BrokerService, Invalid
from broker.store import open_store
from pricing.loading import SNAPSHOT_DIR, load_price_table
from pricing.offers import Tier
from pricing.placement import Barred, Limits, Placement, place, within_limits

ADMIN = Principal("admin", None, admin=True)
ROOT = Path(__file__).resolve().parents[2]
LIMITED = {"BROKER_LAUNCHER": "skypilot", "BROKER_CLOUDS": "aws", "BROKER_INSTANCE_TYPES": "g5.* , p4d.*",
           "BROKER_LAUNCH_REGIONS": "us-east-1"}
A10G = {"run": "python train.py", "resources": {"accelerators": "A10G:1"}, "broker": {"budget_usd": 5}}


@pytest.fixture(autouse=True)
def snapshot_prices(tmp_path, monkeypatch):
    """The shipped AWS snapshot as the price table (no SkyPilot catalog on this host's home), read afresh."""
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path / "sky"))
    monkeypatch.setattr(broker.offers, "_tables", {})
    monkeypatch.setattr(broker.offers, "_checked", {})
    monkeypatch.setattr(broker.offers, "_joined", {})


@pytest.fixture
def make_settings(tmp_path):
    """Settings for a broker under ``tmp_path``; keyword arguments become env values, ``config`` the config file."""
    def make(config: str | None = None, **env):
        path = None
        if config is not None:
            path = tmp_path / "config.yaml"
            path.write_text(config)
        return load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": "admin-token",
                              **env}, config_path=path)

    return make


@pytest.fixture
def service(sky, make_settings, tmp_path):
    """A broker of the SkyPilot launcher: it checks each task with ``sky``, imported under this folder's HOME (the
    ``sky`` fixture; outside tests/launchers a test may not import it, tests/conftest.py)."""
    def make(**env) -> BrokerService:
        store = open_store(f"sqlite://{tmp_path / f'limits-{len(stores)}.db'}")
        stores.append(store)
        return BrokerService(make_settings(**{**LIMITED, **env}), store, None)

    stores: list = []
    yield make
    for store in stores:
        store.close()


def _train_yaml() -> dict:
    task = yaml.safe_load((ROOT / "examples" / "train.yaml").read_text())
    task.pop("workdir")  # read from where `broker submit` runs; the placement is what is looked at here
    return task


def test_the_qa_cpu_task_under_gpu_only_instance_types_is_refused_naming_the_setting_not_placed_on_m6i(service):
    svc = service()
    for submit in (svc.submit_dry_run, svc.submit):
        with pytest.raises(Invalid) as refused:
            submit(ADMIN, _train_yaml())
        assert refused.value.field == "resources"
        assert "m6i.2xlarge is outside this broker's instance_types (g5.*, p4d.*)" in refused.value.reason, \
            refused.value.reason
        assert refused.value.reason.startswith("cannot place this job: no offer this broker may launch has 1+ vCPUs"), \
            refused.value.reason


def test_a_gpu_task_is_quoted_and_placed_only_within_the_instance_types_and_launch_regions(service):
    unlimited = service(BROKER_LAUNCH_REGIONS=None, BROKER_INSTANCE_TYPES=None).submit_dry_run(ADMIN, A10G)
    assert unlimited.placement["region"] != "us-east-1", "the snapshot's cheapest A10G is outside the limits"
    run = service().submit_dry_run(ADMIN, A10G)
    assert run.placement is not None, run.reason
    assert run.placement["region"] == "us-east-1" and run.placement["instance_type"].startswith("g5."), run.placement
    quoted = [t["offer"] for t in run.job.quote["tiers"]]
    assert quoted and all(" g5." in o and "aws/us-east-1" in o for o in quoted), quoted


def test_a_task_pinned_to_a_region_outside_launch_regions_is_refused_naming_the_setting(service):
    task = {**A10G, "resources": {"accelerators": "A10G:1", "infra": "aws/us-west-2"}}
    with pytest.raises(Invalid) as refused:
        service().submit_dry_run(ADMIN, task)
    assert "region us-west-2 is outside this broker's launch_regions (us-east-1)" in refused.value.reason, \
        refused.value.reason
    assert "instance_types" not in refused.value.reason, "g5.xlarge is one it may launch: only the region is said"


def test_a_job_accepted_before_the_limits_waits_saying_which_limit_keeps_it_out(service):
    """A job queued before the limits were set is never placed outside them: each tick says why it waits."""
    before = service(BROKER_LAUNCH_REGIONS=None, BROKER_INSTANCE_TYPES=None)
    job, _ = before.submit(ADMIN, _train_yaml())
    limited = service()
    mk = market(limited.settings, [], now=job.submitted_at)
    decision, = schedule_now([job], mk, limited.settings, None, now=job.submitted_at + 1, policies={},
                             attempts_of=lambda _id: ())
    assert not hasattr(decision, "placement"), decision
    assert "m6i.2xlarge is outside this broker's instance_types (g5.*, p4d.*)" in decision.reason, decision.reason


def test_no_spot_zone_outside_the_limits_counts_as_up_for_the_spot_policy(service):
    mk = market(service().settings, [])
    assert mk.spot_available and all(zone.startswith("us-east-1") for zone in mk.spot_available), mk.spot_available
    assert any(isinstance(o, Barred) for o in mk.offers), "kept, marked, for the sentence of a job only one fits"


def test_pools_and_simulated_zones_are_not_held_to_the_cloud_limits(service):
    """A pool and a simulated zone launch no cloud instance: a CPU task is placed there under GPU-only limits."""
    config = ("pools: [{name: cpu, slots: 2, price_per_slot_hour: '0.05'}]\n"
              "zones: [{name: sim-m6i, tier: spot, instance_type: m6i.2xlarge, region: us-east-2}]\n"
              "instance_types: [g5.*]\nlaunch_regions: [us-east-1]\n")
    svc = service(config=config, BROKER_LAUNCH_REGIONS=None, BROKER_INSTANCE_TYPES=None)
    assert svc.settings.instance_types == ("g5.*",) and svc.settings.launch_regions == ("us-east-1",)
    run = svc.submit_dry_run(ADMIN, _train_yaml())
    assert run.placement is not None and run.placement["location"] == "cpu", run.reason
    run = svc.submit_dry_run(ADMIN, {**_train_yaml(), "resources": {"cpus": "1+", "infra": "aws/us-east-2/sim-m6i"}})
    assert run.placement is not None and run.placement["location"] == "sim-m6i", run.reason


def test_placement_never_takes_an_offer_outside_the_limits_even_the_cheapest():
    from broker.spec import parse

    table = load_price_table(SNAPSHOT_DIR, clouds=("aws",))
    limits = Limits(instance_types=("g5.*", "p4d.*"), launch_regions=("us-east-1",))
    offers = within_limits(table, limits)
    cheapest = min((o for o in table if o.accelerator == "A10G"), key=lambda o: o.price_per_hour)
    assert not limits.allows(cheapest), "the snapshot's cheapest A10G is outside these limits"
    placed = place(parse(A10G, now=0).request, offers)
    assert isinstance(placed, Placement) and limits.allows(placed.offer) and placed.offer.region == "us-east-1"
    assert placed.tier is Tier.SPOT


@pytest.mark.parametrize("env, config, types, regions", [
    pytest.param({"BROKER_INSTANCE_TYPES": " g5.* ,p4d.*, g5.*", "BROKER_LAUNCH_REGIONS": "us-east-1 , us-west-2"},
                 None, ("g5.*", "p4d.*"), ("us-east-1", "us-west-2"),
                 id="the variables are read comma-separated with spaces around the commas, each once"),
    pytest.param({}, "instance_types: [p5.*]\nlaunch_regions: [us-east-2]\n", ("p5.*",), ("us-east-2",),
                 id="the config file's lists are read"),
    pytest.param({"BROKER_INSTANCE_TYPES": "g5.*", "BROKER_LAUNCH_REGIONS": "us-west-2"},
                 "instance_types: [p5.*]\nlaunch_regions: [us-east-2]\n", ("g5.*",), ("us-west-2",),
                 id="the variables win over the config file"),
    pytest.param({}, None, (), (), id="left out there is no limit"),
])
def test_the_limits_are_read_from_the_environment_over_the_config(make_settings, env, config, types, regions):
    settings = make_settings(config=config, BROKER_LAUNCHER="skypilot", BROKER_CLOUDS="aws", **env)
    assert settings.instance_types == types and settings.launch_regions == regions
    assert bool(broker.offers.limits_of(settings)) is bool(types or regions)


@pytest.mark.parametrize("env, config, said", [
    pytest.param({"BROKER_INSTANCE_TYPES": ""}, None,
                 r"^BROKER_INSTANCE_TYPES: is set but empty: give instance type patterns separated by commas",
                 id="an empty variable is refused not read as no limit"),
    pytest.param({"BROKER_LAUNCH_REGIONS": "us-east-1,,us-west-2"}, None,
                 r"^BROKER_LAUNCH_REGIONS: 'us-east-1,,us-west-2' has an empty entry between its commas",
                 id="an empty entry between commas is refused"),
    pytest.param({"BROKER_INSTANCE_TYPES": "g5.* p4d.*"}, None,
                 r"^BROKER_INSTANCE_TYPES: 'g5.\* p4d.\*' is not one of the instance type patterns: it holds a space",
                 id="patterns separated by a space are refused"),
    pytest.param({}, "instance_types: []\n",
                 r"instance_types: is empty: list the instance type patterns \(instance_types: \[g5.\*, p4d.\*\]\), "
                 r"or leave it out for every instance type$", id="an empty list in the file is refused"),
    pytest.param({}, "launch_regions:\n",
                 r"launch_regions: is empty: list the region names", id="a null list in the file is refused"),
    pytest.param({}, "launch_regions: us-east-1\n",
                 r"launch_regions: must be a list of region names like \[us-east-1, us-west-2\], not 'us-east-1'$",
                 id="a region not written as a list is refused"),
    pytest.param({}, "instance_types: [g5.*, '']\n",
                 r"instance_types: must be a list of instance type patterns", id="an empty pattern in the file is refused"),
    pytest.param({"BROKER_LAUNCH_REGIONS": "us-est-1"}, None,
                 r"^BROKER_LAUNCH_REGIONS: the price table of aws has no region 'us-est-1' \(did you mean 'us-east-1'\?\)",
                 id="a region the price table has none of is refused naming the close one"),
    pytest.param({"BROKER_LAUNCH_REGIONS": "US-EAST-1"}, None,
                 r"^BROKER_LAUNCH_REGIONS: the price table of aws has no region 'US-EAST-1' \(did you mean "
                 r"'us-east-1'\? region names are case-sensitive",
                 id="a region in another case than the price table's is refused naming its spelling"),
    pytest.param({}, "launch_regions: [us-east-1, Us-West-2]\n",
                 r"^launch_regions: the price table of aws has no region 'Us-West-2' \(did you mean 'us-west-2'\?",
                 id="a region of the config file in another case is refused too"),
])
def test_a_malformed_limit_is_refused_at_start_naming_the_setting(make_settings, env, config, said):
    with pytest.raises(ConfigError, match=said):
        make_settings(config=config, BROKER_LAUNCHER="skypilot", BROKER_CLOUDS="aws", **env)


def test_limits_under_the_local_launcher_are_warned_of_as_limiting_nothing(make_settings):
    settings = make_settings(BROKER_INSTANCE_TYPES="g5.*")
    assert settings.instance_types == ("g5.*",)
    assert any(w.startswith("BROKER_INSTANCE_TYPES: the local launcher places jobs on pools and simulated zones only")
               for w in settings.warnings), settings.warnings


def test_all_offers_marks_the_offers_outside_the_limits_and_keeps_the_rest(service):
    offers = all_offers(service().settings)
    outside = [o for o in offers if isinstance(o, Barred)]
    inside = [o for o in offers if not isinstance(o, Barred)]
    assert outside and inside
    assert all(o.region == "us-east-1" and o.instance_type.split(".")[0] in ("g5", "p4d") for o in inside)


@pytest.mark.parametrize("limits, instance_type, region, allowed", [
    pytest.param(Limits(instance_types=("g5.*",)), "g5.xlarge", "us-east-1", True,
                 id="g5.* allows g5.xlarge"),
    pytest.param(Limits(instance_types=("G5.*",)), "g5.xlarge", "us-east-1", False,
                 id="G5.* allows no g5.xlarge, as IAM's case-sensitive StringLike on ec2:InstanceType allows none"),
    pytest.param(Limits(instance_types=("g5.XLARGE",)), "g5.xlarge", "us-east-1", False,
                 id="a whole name in another case allows nothing"),
    pytest.param(Limits(launch_regions=("us-east-1",)), "g5.xlarge", "us-east-1", True,
                 id="us-east-1 allows us-east-1"),
    pytest.param(Limits(launch_regions=("US-EAST-1",)), "g5.xlarge", "us-east-1", False,
                 id="US-EAST-1 allows no us-east-1, as aws:RequestedRegion matches exactly"),
    pytest.param(Limits(instance_types=("a2-*",)), "a2-highgpu-1g+A100:1", "us-central1", True,
                 id="a GCP GPU offer matches by its host VM's name"),
    pytest.param(Limits(instance_types=("A2-*",)), "a2-highgpu-1g+A100:1", "us-central1", False,
                 id="a GCP GPU offer's host VM in another case matches no pattern"),
])
def test_the_limits_match_case_sensitively_as_the_cloud_role_does(limits, instance_type, region, allowed):
    assert (limits.type_allowed(instance_type) and limits.region_allowed(region)) is allowed


def test_an_upper_case_pattern_places_nothing_on_g5_and_the_job_is_refused_naming_it(service):
    """QA: ``BROKER_INSTANCE_TYPES='G5.*'`` placed on g5.xlarge, which the role's ``StringLike`` refuses."""
    with pytest.raises(Invalid) as refused:
        service(BROKER_INSTANCE_TYPES="G5.*").submit_dry_run(ADMIN, A10G)
    assert "outside this broker's instance_types (G5.*)" in refused.value.reason, refused.value.reason


def _unmatched(settings) -> list[str]:
    return [w for w in settings.warnings if w.startswith("BROKER_INSTANCE_TYPES:")]


@pytest.mark.parametrize("types, said", [
    pytest.param("p9.*", ["BROKER_INSTANCE_TYPES: 'p9.*' matches no instance type in the price table of aws: no job is "
                          "placed by it",
                          "BROKER_INSTANCE_TYPES: no pattern of it (p9.*) matches an instance type in the price table "
                          "of aws: every cloud job will be refused"],
                 id="a pattern matching nothing is warned of, and that every cloud job will be refused"),
    pytest.param("g5.*,g6.*", ["BROKER_INSTANCE_TYPES: 'g6.*' matches no instance type in the price table of aws: no "
                               "job is placed by it"],
                 id="terraform's g6.* the snapshot lacks is warned of alone and the broker starts"),
    pytest.param("G5.*", ["BROKER_INSTANCE_TYPES: 'G5.*' matches no instance type in the price table of aws (did you "
                          "mean 'g5.*'? instance type names are case-sensitive, as the cloud role's ec2:InstanceType "
                          "is): no job is placed by it",
                          "BROKER_INSTANCE_TYPES: no pattern of it (G5.*) matches an instance type in the price table "
                          "of aws: every cloud job will be refused"],
                 id="a pattern in upper case is warned of naming its lower case spelling"),
    pytest.param("g5.* , p4d.*", [], id="patterns that each match an instance type are not warned of"),
])
def test_an_instance_types_pattern_matching_no_instance_type_is_warned_of_at_start_not_refused(make_settings, types,
                                                                                              said):
    settings = make_settings(BROKER_LAUNCHER="skypilot", BROKER_CLOUDS="aws", BROKER_INSTANCE_TYPES=types)
    assert _unmatched(settings) == said


def test_a_pattern_of_the_config_file_matching_nothing_is_warned_of_by_the_files_key(make_settings):
    settings = make_settings(config="instance_types: [p9.*]\n", BROKER_LAUNCHER="skypilot", BROKER_CLOUDS="aws")
    assert any(w.startswith("instance_types: 'p9.*' matches no instance type") for w in settings.warnings), \
        settings.warnings
