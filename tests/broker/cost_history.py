"""A generated history of jobs for the cost report at scale: what ``test_broker_cost_history.py`` compares
the report on, and what ``benchmarks/costs.py`` times."""

from __future__ import annotations

import random

from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Event, Job
from broker.store import Change

DAY = 86_400
TEAMS = ["vision", "nlp", "speech", "robotics", "research"]
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c", "us-west-2a", "us-west-2b"]


def _place(rng: random.Random, tier: str, nodes: int) -> dict:
    if tier == "onprem":
        return {"ondemand_price_per_hour": None, "tier": "onprem", "cloud": "local", "region": "local", "zone": "local",
                "location": "local", "instance_type": "local-8slot", "accelerator": "A100", "accelerator_count": 8,
                "num_nodes": nodes, "price_per_hour": 1_600_000 * nodes, "simulated": False}
    zone = rng.choice(ZONES)
    od = 32_772_000 * nodes
    price = od if tier == "ondemand" else rng.randrange(9_000_000, 14_000_000) * nodes
    return {"ondemand_price_per_hour": od, "tier": tier, "cloud": "aws", "region": zone[:-1], "zone": zone,
            "location": zone, "instance_type": "p4d.24xlarge", "accelerator": "A100", "accelerator_count": 8,
            "num_nodes": nodes, "price_per_hour": price, "simulated": False}


def history(store, n: int, now: float, *, seed: int = 1, days: int = 120) -> None:
    """Commit ``n`` jobs submitted uniformly over the last ``days`` days, stored as the broker stores them
    (spec, quote, placement, checkpoint, progress): five teams; on-prem, spot and on-demand work on 1–4
    nodes; 0–5 attempts each, the earlier ones preempted or lost, the last succeeded, failed or still
    running; on-prem placements with no on-demand price (the quote's is used)."""
    rng = random.Random(seed)
    for i in range(n):
        start = now - rng.uniform(0, days * DAY)
        jid = f"j-{i:06x}{rng.randrange(16**4):04x}"
        team = rng.choice(TEAMS)
        nodes = rng.choice([1, 1, 1, 2, 4])
        kind = rng.random()
        tries = []
        t = start + rng.uniform(5, 600)
        n_att = 0 if kind < 0.03 else rng.choice([1, 1, 2, 2, 3, 4, 5])
        for k in range(1, n_att + 1):
            tier = "onprem" if kind < 0.2 else ("ondemand" if kind < 0.3 or (k > 2 and rng.random() < 0.5) else "spot")
            p = _place(rng, tier, nodes)
            secs = rng.randrange(60, 3 * DAY)
            last = k == n_att
            end = t + secs
            live = last and end > now
            if last:
                state = AttemptState.RUNNING if live else rng.choice([AttemptState.SUCCEEDED] * 4 + [AttemptState.FAILED])
            else:
                state = rng.choice([AttemptState.PREEMPTED] * 5 + [AttemptState.LOST])
            billed = min(end, now)
            cost = p["price_per_hour"] * int(billed - t) // 3600
            tries.append(Attempt(
                id=f"{jid}-a{k}", job_id=jid, n=k, state=state, launcher="skypilot", placement=p,
                price_per_hour=p["price_per_hour"], created_at=t, started_at=t + rng.uniform(30, 400),
                ended_at=None if live else end, exit_code=None if live else 0, reason="" if live else f"{state.value} by the cloud",
                cost=cost, billed_until=billed, slots=[], resume_from=f"s3://ckpt/{team}/{jid}/step-{k * 1000}" if k > 1 else None,
                first_step=(k - 1) * 1000, first_report_at=t + 300, last_step=k * 1000 + 17,
                checkpoint={"step": k * 1000, "uri": f"s3://ckpt/{team}/{jid}/step-{k * 1000}", "at": end - 60},
                launched_in="aws", steps_lost=rng.randrange(0, 200)))
            if live:
                break
            t = end + rng.uniform(30, 7200)
            if t > now:
                break
        last = tries[-1] if tries else None
        if not tries:
            state = JobState.QUEUED
        elif last.state is AttemptState.RUNNING:
            state = JobState.RUNNING
        elif last.state is AttemptState.SUCCEEDED:
            state = JobState.SUCCEEDED
        elif last.state is AttemptState.FAILED:
            state = JobState.FAILED
        else:
            state = JobState.QUEUED
        spent = sum(a.cost for a in tries)
        od = 32_772_000 * nodes
        job = Job(
            id=jid, name=f"{team}-train-{i}", team=team, state=state,
            spec={"name": f"{team}-train-{i}", "resources": {"accelerators": "A100:8", "use_spot": True,
                  "disk_size": 500}, "num_nodes": nodes, "setup": "pip install -r requirements.txt\n" * 3,
                  "run": "torchrun --nproc_per_node 8 train.py --config configs/large.yaml --resume auto\n",
                  "envs": {"WANDB_PROJECT": team, "SEED": str(i)},
                  "broker": {"budget_usd": 5000, "priority": 0, "deadline": None, "expected_hours": "20"}},
            budget=5_000_000_000, priority=rng.choice([0, 0, 1, 5]), submitted_at=start,
            updated_at=(last.ended_at or now) if tries and state.is_final else (now if tries else start),
            version=3 + 4 * len(tries), expected_hours="20", spent=spent, attempts=len(tries),
            reason="waiting for capacity" if state is JobState.QUEUED else "",
            quote={"expected_hours": "20", "per_hour_only": False, "tiers": [
                {"tier": "onprem", "offer": "local 8x A100", "price_per_hour": 1_600_000 * nodes, "estimate": 32_000_000 * nodes, "text": "$32.00"},
                {"tier": "spot", "offer": "aws us-east-1a p4d.24xlarge", "price_per_hour": 11_000_000 * nodes, "estimate": 220_000_000 * nodes, "text": "$220.00"},
                {"tier": "ondemand", "offer": "aws us-east-1 p4d.24xlarge", "price_per_hour": od, "estimate": od * 20, "text": "$655.44"}]},
            placement=tries[-1].placement if tries else {},
            retry={"max_restarts_on_errors": 1, "recover_on_exit_codes": [137]},
            progress={"step": 1000 * len(tries) + 17, "total_steps": 10_000, "at": start + 100,
                      "metrics": {"loss": 1.234, "lr": 0.0003, "tokens_per_s": 51234.5}},
            last_checkpoint={"step": 1000, "uri": f"s3://ckpt/{team}/{jid}/step-1000", "at": start + 90},
            blocked_zones={ZONES[0]: start + 3600} if len(tries) > 2 else {},
            diagnosis={"kind": "preempted", "text": "the cloud took the spot instance back"} if len(tries) > 1 else {},
            running_since=tries[-1].started_at if state is JobState.RUNNING else None,
            checkpoint_uri=f"s3://ckpt/{team}/{jid}", submitted_by=f"{team}-bot")
        ev = Event(job_id=jid, time=start, event="submit", from_state=None, to_state="queued", reason="seed", actor="bench")
        store.commit(Change(job=job, expected_version=None, events=[ev], attempts=tries))
