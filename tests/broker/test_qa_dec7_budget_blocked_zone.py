"""After a spot preemption, the budget's advice prices what the job may use now, and says when the blocked zone frees.

QA walkthrough (Dec 7): a job with budget $0.01 was preempted on spot sim-a and stopped at its budget, "… on any
offer: the cheapest, spot … in aws/sim-a …, costs $0.4246/h" — sim-a, the zone that had just preempted it, blocked for
it for 600 s. `broker resume` answered "raise the budget to at least $0.0110 first"; raised to that and resumed, it
stayed queued ("cannot pay … on the cheapest free match, spot … sim-b …, which costs $0.0085") with no start estimate
and no word that sim-a would be free for it at 03:14:36, where it then started.

Now the budget stop names the zone blocked for the job, until when, and the cheapest offer it may use now; a resume's
refusal gives first the budget that runs it now and then the one that waits for the blocked zone (and until when);
the figure a Raise button proposes (``resume_needs``) runs it now; and a job resumed with a budget that pays only in the
blocked zone is told, at its resume and while it waits, that it waits for that zone and until when.

End to end: a real ``broker serve`` (local launcher, two simulated spot zones, sim-a cheaper), a real run, an injected
preemption, and the CLI as typed.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from broker_testing import ADMIN, cli_runner, start_broker, stop_broker, wait_for

from pricing.money import cost_for_seconds, fmt

CONFIG = """
pools: []
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1a, grace_seconds: 2,
     price_per_hour: "3.60"}
  - {name: sim-b, tier: spot, instance_type: g5.xlarge, cloud_zone: us-east-1f, grace_seconds: 2,
     price_per_hour: "4.00"}
tick_seconds: 0.2
stop_grace_seconds: 2
zone_cooldown_seconds: 600
"""
H = {"Authorization": f"Bearer {ADMIN}"}
MINUTE = 2 + 60  # a minute's run and a clean stop: the grace period and a minute
ON_A, ON_B = cost_for_seconds(3_600_000, MINUTE), cost_for_seconds(4_000_000, MINUTE)



@pytest.fixture
def broker(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=CONFIG)
    with httpx.Client(base_url=url, headers=H, timeout=10) as client:
        yield client, cli_runner(url)
    stop_broker(proc, url)


def _hms(epoch: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(epoch))


def test_after_a_preemption_the_budget_advice_prices_the_zones_the_job_may_use_now(broker, tmp_path, make_settings):
    from broker.service import BrokerService
    from broker.store import open_store

    client, run = broker
    job = client.post("/v1/jobs", json={"name": "small", "resources": {"accelerators": "A10G:1"},
                                        "run": "sleep 600", "broker": {"budget_usd": "0.066"}}).json()
    jid = job["id"]
    view = wait_for(lambda: (v := client.get(f"/v1/jobs/{jid}").json())["state"] == "running" and v, timeout=60)
    assert view["attempt_list"][0]["placement"]["zone"] == "sim-a"  # the cheapest
    time.sleep(5)
    assert client.post("/v1/admin/faults", json={"kind": "preempt", "job_id": jid}).status_code == 200
    stopped = wait_for(lambda: (v := client.get(f"/v1/jobs/{jid}").json())["state"] == "stopped_budget" and v,
                       timeout=60)
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    try:
        until = store.get_job(jid).blocked_zones["sim-a"]
        spent = stopped["spent"]["micros"]
        assert spent + ON_A > 66_000, "the budget left pays for a minute nowhere, sim-a included"

        # the stop names the cheapest offer, the zone it is in blocked for the job until when, and the cheapest it
        # may use now
        said = stopped["reason"]
        assert "on any offer: the cheapest, spot 1x A10G g5.xlarge in aws/sim-a (simulated), costs $3.60/h; that is " \
               f"zone sim-a, which this job may not use until {_hms(until)} (after a preemption there): the cheapest " \
               "it may use now, spot 1x A10G g5.xlarge in aws/sim-b (simulated), costs $4.00/h" in said, said

        # the resume's refusal: first what runs it now (on sim-b), then what waits for sim-a, and until when
        r = run("resume", jid, check=False)
        assert r.returncode == 1, r.stdout
        assert (f"raise the budget to at least {fmt(spent + ON_B)} first to run now ({fmt(ON_B)} at $4.00/h), or "
                f"to {fmt(spent + ON_A)} to wait for zone sim-a, which this job may not use until {_hms(until)} "
                f"(after a preemption there), and run there ({fmt(ON_A)} at $3.60/h)") in " ".join(r.stderr.split()), \
            r.stderr

        # what Slack's Raise button proposes at least: the budget that runs it now
        service = BrokerService(make_settings(config=CONFIG), store)
        assert service.resume_needs(store.get_job(jid)) == spent + ON_B

        # a budget that pays for a minute only on sim-a: the raise, the resume and the queued job say it waits there
        middle = spent + (ON_A + ON_B) // 2
        raised = json.loads(run("--json", "budget", jid, f"{middle / 1e6:.6f}").stdout)
        waits = (f"its budget left pays for a minute's run and a clean stop only in zone sim-a, which this job may "
                 f"not use until {_hms(until)} (after a preemption there): it waits for it; "
                 f"a budget of {fmt(spent + ON_B)} runs it now ({fmt(ON_B)} at $4.00/h)")
        assert raised["reason"].endswith(f"resume it to continue (it saved no checkpoint); {waits}"), raised
        resumed = json.loads(run("--json", "resume", jid).stdout)
        assert resumed["state"] == "queued" and resumed["reason"] == f"resumed by admin; {waits}", resumed
        queued = wait_for(lambda: (v := client.get(f"/v1/jobs/{jid}").json())["reason"].startswith("waiting:")
                          and v, timeout=30)
        assert queued["state"] == "queued" and queued["attempts"] == 1, queued
        assert "on the cheapest free match, spot 1x A10G g5.xlarge in aws/sim-b (simulated)" in queued["reason"]
        assert queued["reason"].endswith(
            "; what is left pays for one on spot 1x A10G g5.xlarge in aws/sim-a (simulated), in zone sim-a, which "
            f"this job may not use until {_hms(until)} (after a preemption there): it can start there then, or now "
            "once its budget is raised to pay for one it may use now"), queued["reason"]
        shown = run("status", jid).stdout
        assert f"may not use until {_hms(until)}" in " ".join(shown.split()), shown
    finally:
        store.close()
