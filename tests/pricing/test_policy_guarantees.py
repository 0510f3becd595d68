"""The policies' guarantees on traces made to be hard, not only on the paper's windows.

Hypothesis draws the job (tick 60–600 s, 1–40 ticks of work, a changeover of 0 to 3 ticks, 0 to
3× the job of slack), one to three zones whose spot is a Markov process, a flicker every other
tick, noise, none at all, or there only when the slack has run out, an on-demand price 1.2–10×
spot, and no budget, a budget of exactly on-demand only, or one a third of the allowance above
it. Whatever it draws, the broker's policies (with the safety net and the cost cap, as the live
engine runs them) must:

1. finish by the deadline — it is always reachable at the start here (on-demand from the first
   tick fits);
2. cost at most on-demand only plus the cap's allowance (one hop's two changeovers) — and,
   with a budget that covers on-demand only, at most the budget.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pricing.policy import make_policy
from pricing.simulate import simulate


@st.composite
def hard_jobs(draw):
    gap = draw(st.sampled_from([60, 300, 600]))
    work = draw(st.integers(1, 40)) * gap
    changeover = draw(st.sampled_from([0, gap // 2, gap, int(1.2 * gap), 3 * gap]))
    slack_ticks = draw(st.integers(0, 3 * work // gap + 5))
    deadline_ticks = math.ceil((work + changeover) / gap) + slack_ticks
    zones, n = draw(st.integers(1, 3)), deadline_ticks + 2
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    kind = draw(st.sampled_from(["markov", "flicker", "noise", "late", "none"]))
    avail = np.zeros((zones, n), bool)
    if kind == "markov":
        up, down = draw(st.floats(0.01, 0.99)), draw(st.floats(0.01, 0.99))
        for z in range(zones):
            state = rng.random() < 0.5
            for t in range(n):
                state = rng.random() >= down if state else rng.random() < up
                avail[z, t] = state
    elif kind == "flicker":
        avail[:, ::2] = True
    elif kind == "noise":
        avail = rng.random((zones, n)) < draw(st.floats(0, 1))
    elif kind == "late":  # spot appears just when waiting longer would miss the deadline
        avail[:, max(n - slack_ticks - 1, 0):] = True
    ratio = draw(st.sampled_from([1.2, 3.145, 10.0]))
    budget = draw(st.sampled_from([None, "on-demand only", "a third of the allowance above it"]))
    return gap, work, changeover, deadline_ticks, avail, ratio, budget


@settings(max_examples=250, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(hard_jobs(), st.sampled_from(["broker", "slack_reserve"]))
def test_the_deadline_holds_and_the_cost_stays_under_the_cap_and_the_budget(job, name):
    gap, work, changeover, deadline_ticks, avail, ratio, budget_kind = job
    od_only = math.ceil((work + changeover) / gap) * gap / 3600 * ratio  # spot-hours, as the policy counts money
    allowance = math.ceil(changeover / gap - 1e-9) * gap / 3600 * (1 + ratio)
    budget = {None: None, "on-demand only": od_only, "a third of the allowance above it": od_only + allowance / 3}[budget_kind]
    zones = None if avail.shape[0] == 1 else [f"z{i}" for i in range(avail.shape[0])]
    run = simulate(make_policy(name), avail, gap=gap, work=work, deadline=deadline_ticks * gap, changeover=changeover,
                   price_ratio=ratio, zones=zones, budget=budget)
    assert run.finished and run.finish_seconds <= deadline_ticks * gap + 1e-6, run.actions
    assert run.cost <= od_only + allowance + 1e-9, (run.cost, od_only, run.actions)
    if budget is not None:
        assert run.cost <= budget + 1e-9, (run.cost, budget, run.actions)
