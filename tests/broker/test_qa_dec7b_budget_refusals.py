"""QA walkthrough of Dec 7: a budget refusal at submit says the least budget that would be taken, computed by the
checks' own rules (so that figure is taken and a micro-dollar less of it is not), and a refusal's "cheapest" is the
offer placement would take; a job asking for a cloud the broker cannot price is told what really works."""

from __future__ import annotations

import re

import pytest

from broker.admission import Refused, admit
from broker.spec import parse
from pricing.money import to_micros
from pricing.offers import JobRequest, Offer, ResourceRequest, Tier
from pricing.placement import NoFit, Placement, place, start_shortfall

KW = dict(job_id="j-1", team="ml", now=0.0, actor="t", checkpoint_uri="file:///tmp/x", idempotency_key=None)
POOL = Offer(Tier.ONPREM, "local", "local", "lab", "lab-1slot", None, 1, 200_000)  # $0.20/h
SPOT = Offer(Tier.SPOT, "aws", "us-east-1", "us-east-1a", "p3.2xlarge", "V100", 1, 387_001)


def _least(message: str) -> int:
    found = re.search(r"give at least (\$[0-9.,]+)", message)
    assert found, message
    return to_micros(found.group(1))


def _refused(spec, budget, offers, **kw) -> Refused:
    with pytest.raises(Refused) as refused:
        admit(spec, budget=budget, offers=offers, **KW, **kw)
    assert refused.value.field == "broker.budget_usd"
    return refused.value


def test_a_budget_short_of_a_start_says_the_least_budget_to_give_and_that_one_is_taken():
    """`budget $0.0005` answered "cannot pay for a start and a clean stop (10 s) on any offer: the cheapest ...
    costs $0.20/h" and no figure to give."""
    spec = parse({"run": "echo"}, now=0.0)
    refused = _refused(spec, 500, [POOL], min_run_seconds=10)
    assert "cannot pay for a start and a clean stop (10 s)" in str(refused), refused
    # 10 s at $0.20/h: $0.000555..., rounded up to $0.000556, the clean stop: a budget of exactly that runs nothing, so
    # the figure given is a minute and the clean stop, 70 s: $0.003889, shown rounded up as a cost is
    assert _least(str(refused)) == 3_900 and str(refused).endswith(
        "costs $0.20/h: give at least $0.0039 (a minute and a clean stop)"), refused
    for budget in (3_900, 3_889, 557):
        assert admit(spec, budget=budget, offers=[POOL], min_run_seconds=10, **KW).job.budget == budget
    assert "pays for a clean stop (10 s) and no run" in str(_refused(spec, 556, [POOL], min_run_seconds=10))
    assert "give at least $0.0039" in str(_refused(spec, 555, [POOL], min_run_seconds=10))


def test_a_budget_short_of_the_estimate_says_the_least_budget_to_give_and_that_one_is_taken():
    """`--dry-run` with a $1 budget and `expected_hours: 10` answered "estimated $3.87 ... exceeds the budget of
    $1.00" and no figure to give."""
    spec = parse({"run": "x", "resources": {"accelerators": "V100"}, "broker": {"expected_hours": 10}}, now=0.0)
    refused = _refused(spec, 1_000_000, [SPOT], min_run_seconds=10)
    assert "estimated $3.88 on spot 1x V100 p3.2xlarge in aws/us-east-1a exceeds the budget of $1.00: give at least" \
        in str(refused), refused
    # $3.87001 for 10 h and $0.001076 for the clean stop (10 s), each rounded up: $3.871086, shown as $3.88
    assert _least(str(refused)) == 3_880_000, refused
    for budget in (3_880_000, 3_871_086):
        assert admit(spec, budget=budget, offers=[SPOT], min_run_seconds=10, **KW).job.budget == budget
    assert "give at least $3.88" in str(_refused(spec, 3_871_085, [SPOT], min_run_seconds=10))


def test_the_least_budget_given_counts_the_clean_stop_and_the_billing_after_the_run():
    """A job of a few seconds' expected length still pays for a clean stop and a cluster's billing after its run:
    the figure given is what every check takes, not the run's estimate alone."""
    spec = parse({"run": "x", "resources": {"accelerators": "V100"}, "broker": {"expected_hours": "0.001"}}, now=0.0)
    refused = _refused(spec, 100, [SPOT], min_run_seconds=60, after_run_seconds={SPOT: 900})
    least = _least(str(refused))
    assert least > 100 and admit(spec, budget=least, offers=[SPOT], min_run_seconds=60, after_run_seconds={SPOT: 900},
                 **KW).job.budget == least
    # 3.6 s and 900 s after the run at $0.387001/h ($0.0972), a clean stop (60 s, $0.00645): $0.1036 rounded up
    assert least == 103_600, refused


# p4d.24xlarge on demand in SkyPilot's catalog: us-east-1 $21.957642/h, us-east-2 $21.957640/h
EAST1 = Offer(Tier.ONDEMAND, "aws", "us-east-1", "us-east-1d", "p4d.24xlarge", "A100", 8, 21_957_642)
EAST2 = Offer(Tier.ONDEMAND, "aws", "us-east-2", "us-east-2a", "p4d.24xlarge", "A100", 8, 21_957_640)
A100x8 = JobRequest(alternatives=(ResourceRequest("A100", 8),))


@pytest.mark.parametrize("offers, after, budget", [
    pytest.param([EAST1, EAST2], {EAST1: 900, EAST2: 900}, 5_000_000,
                 id="billing after the run rules both out: their totals round to the same micro-dollar"),
    pytest.param([EAST2, EAST1], {EAST1: 900, EAST2: 900}, 5_000_000, id="the same, listed the other way"),
    pytest.param([EAST1, EAST2], {}, 10_000, id="a budget short of any start"),
    pytest.param([EAST2, EAST1], {}, 10_000, id="a budget short of any start, listed the other way"),
])
def test_a_refusals_cheapest_is_the_offer_placement_takes(offers, after, budget):
    placed = place(A100x8, offers, min_run_seconds=10, after_run_seconds=after)
    assert isinstance(placed, Placement) and placed.offer is EAST2
    short = start_shortfall(A100x8, offers, budget, min_run_seconds=10, after_run_seconds=after)
    assert short is not None and "aws/us-east-2a" in short and "us-east-1d" not in short, short
    fit = place(A100x8, offers, budget_left=budget, min_run_seconds=10, after_run_seconds=after)
    assert isinstance(fit, NoFit) and "aws/us-east-2a" in fit.reason and "us-east-1d" not in fit.reason, fit


@pytest.mark.parametrize("cloud, says, never", [
    pytest.param("azure", "the broker cannot price azure: it prices aws, gcp and on-prem pools",
                 "`clouds` setting", id="azure: the broker cannot price it, not 'put it in clouds'"),
    pytest.param("onprem", "so ask for one of those (a pool is `infra: local`, or `local/<pool>` for one of them)",
                 "`clouds` setting", id="onprem, not how a pool is asked for: how it is"),
    pytest.param("k8s", "Kubernetes takes an on-prem pool with a `kubernetes_context`",
                 "SkyPilot's catalog on", id="kubernetes: a pool with a kubernetes_context, not a catalog"),
    pytest.param("gcp", "`clouds` setting that has SkyPilot's catalog", "cannot price",
                 id="gcp, a cloud the broker prices: its clouds setting and catalog"),
])
def test_a_job_in_a_cloud_with_no_offer_is_told_what_really_works_there(cloud, says, never):
    spec = parse({"run": "x", "resources": {"accelerators": "V100", "infra": cloud}}, now=0.0)
    with pytest.raises(Refused) as refused:
        admit(spec, budget=5_000_000, offers=[SPOT], **KW)
    assert says in str(refused.value) and never not in str(refused.value), refused.value


# -- a job of several nodes: its figures are for all of them, and its sentences say so ------------------------------

MULTI_ZONES = """\
pools: []
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, nodes: 4}
"""


@pytest.fixture
def zones_service(make_settings, tmp_path):
    from broker.service import BrokerService
    from broker.store import open_store

    store = open_store(f"sqlite://{tmp_path / 'nodes.db'}")
    try:
        yield BrokerService(make_settings(config=MULTI_ZONES), store)
    finally:
        store.close()


def _submit_refused(service, broker: dict, nodes: int = 2):
    from broker.auth import Principal
    from broker.service import Invalid

    with pytest.raises(Invalid) as refused:
        service.submit(Principal("vision", "vision"), {"run": "x", "num_nodes": nodes,
                                                       "resources": {"accelerators": "A10G:1"}, "broker": broker})
    return refused.value


def test_a_budget_refusal_of_several_nodes_names_how_many_its_figure_is_for(zones_service):
    """QA: "estimated $0.0170 on spot 1x A10G g5.xlarge in aws/sim-a (simulated) exceeds the budget" for 2 nodes: a
    user who knows one costs $0.4246/h could not tell why it was twice what she expected."""
    refused = _submit_refused(zones_service, {"budget_usd": "0.012", "expected_hours": 0.02})
    assert refused.field == "broker.budget_usd"
    assert re.search(r"estimated \$[0-9.]+ on spot 1x A10G g5\.xlarge in [a-z]+/sim-a \(simulated\), 2 nodes, "
                     r"exceeds the budget of \$0\.012", refused.reason), refused.reason
    one = _submit_refused(zones_service, {"budget_usd": "0.001", "expected_hours": 0.02}, nodes=1)
    assert "nodes" not in one.reason, one.reason  # one node: said as before


def test_a_price_cap_refusal_of_several_nodes_says_the_cap_is_for_all_of_them(zones_service):
    refused = _submit_refused(zones_service, {"budget_usd": "5", "max_price_per_hour": "0.5"})
    assert refused.field == "broker.max_price_per_hour"
    assert re.search(r"the cheapest match, spot 1x A10G g5\.xlarge in [a-z]+/sim-a \(simulated\), 2 nodes, costs "
                     r"\$[0-9.]+/h for both, over the job's max_price_per_hour of \$0\.50, a cap on both nodes "
                     r"together", refused.reason), refused.reason


def test_a_quote_of_several_nodes_says_its_offer_with_how_many_nodes():
    from pricing.quote import offer_text, quote

    zone = Offer(Tier.SPOT, "aws", "us-east-1", "sim-a", "g5.xlarge", "A10G", 1, 424_600, simulated=True, max_nodes=4)
    request = JobRequest(alternatives=(ResourceRequest("A10G", 1),), num_nodes=3)
    (tier,) = quote(request, [zone]).tiers
    assert tier.price_per_hour == 3 * 424_600
    assert offer_text(tier) == "spot 1x A10G g5.xlarge in aws/sim-a (simulated), 3 nodes"
    (single,) = quote(JobRequest(alternatives=(ResourceRequest("A10G", 1),)), [zone]).tiers
    assert offer_text(single) == "spot 1x A10G g5.xlarge in aws/sim-a (simulated)"


def test_a_stored_quote_of_several_nodes_says_how_many_its_price_is_for(zones_service):
    """QA: the submit reply's ``quote.tiers[].offer`` read "1x A10G g5.xlarge" beside the price of both nodes; each tier
    now carries the node count its price is for (the offer itself stays as placement names it)."""
    from broker.auth import Principal

    two = zones_service.submit(Principal("vision", "vision"), {"run": "x", "num_nodes": 2, "resources": {
        "accelerators": "A10G:1"}, "broker": {"budget_usd": "5", "expected_hours": 0.02}})[0]
    (spot,) = [t for t in two.quote["tiers"] if t["tier"] == "spot"]
    assert spot["num_nodes"] == 2 and spot["price_per_hour"] == 2 * 424_600, spot
    assert spot["offer"].startswith("spot 1x A10G g5.xlarge"), spot
    one = zones_service.submit(Principal("vision", "vision"), {"run": "x", "resources": {"accelerators": "A10G:1"},
                                                               "broker": {"budget_usd": "5", "expected_hours": 0.02}})[0]
    assert {t["num_nodes"] for t in one.quote["tiers"]} == {1}
