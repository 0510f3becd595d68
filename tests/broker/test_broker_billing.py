"""Per-second accrual (``broker/engine/billing.py``) against the cost report's reading of it."""

import pytest

from broker import costs
from broker.engine.billing import accrue
from broker.lifecycle import AttemptState, JobState
from broker.models import Attempt, Job

T0 = 1_700_000_000.0
PRICE = 36_000_000  # $36/h: $0.01 a second
OD = 72_000_000


def attempt(**kw) -> Attempt:
    return Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.RUNNING, launcher="local",
                   placement={"tier": "spot", "zone": "z", "ondemand_price_per_hour": OD},
                   price_per_hour=PRICE, created_at=T0, **kw)


JOB = Job(id="j", name="n", team="t", state=JobState.RUNNING, spec={}, budget=10**9, priority=0, submitted_at=T0,
          updated_at=T0)


@pytest.mark.parametrize("ticks, cost, billed_seconds", [
    pytest.param([100, 200], 2_000_000, 200, id="ticks 100 s then 200 s → 200 s billed, $2.00"),
    pytest.param([3700, 100], 37_000_000, 3700, id="clock stepped back an hour after 3700 s → cost and span stay"),
    pytest.param([3700, 100, 3800], 38_000_000, 3800, id="then forward past it again → billed on from there"),
])
def test_accrual_never_moves_the_cost_or_the_span_it_covers_backwards(ticks, cost, billed_seconds):
    a = attempt()
    for t in ticks:
        a = accrue(a, T0 + t)
    assert a.cost == cost and costs.billed_span(a) == (int(T0), billed_seconds)
    # the report reads the same seconds: the on-demand equivalent is those seconds at on-demand, the saving exact
    assert costs.ondemand_equivalent(a, JOB) == 2 * cost
    assert costs.job_costs(JOB, [a])["attempts"][0]["seconds"] == billed_seconds


def test_an_end_read_on_a_wall_clock_stepped_forward_is_billed_only_as_far_as_the_billing_clock_came():
    # the launcher read the end on the host's clock an hour ahead; the engine's billing clock counted 100 s
    a = accrue(attempt(ended_at=T0 + 3700), T0 + 100)
    assert a.cost == 1_000_000 and costs.billed_span(a) == (int(T0), 100)


def test_an_end_seen_after_a_later_accrual_keeps_the_span_the_cost_paid_for():
    a = accrue(attempt(), T0 + 11)  # the tick saw it running at 11 s
    ended = accrue(attempt(cost=a.cost, billed_until=a.billed_until, ended_at=T0 + 10), T0 + 12)
    assert ended.cost == 110_000 and costs.billed_span(ended) == (int(T0), 11)


@pytest.mark.parametrize("first, second, noted", [
    pytest.param(3_913, 16_767, True, id="$0.0040 and $0.0168 shown beside a total of $0.0207: the note says why"),
    pytest.param(4_000, 16_700, False, id="rows that add up as shown: no note"),
])
def test_one_jobs_attempts_that_do_not_add_up_as_shown_carry_the_rounding_note(first, second, noted):
    """`broker costs JOB` showed attempts of $0.0040 and $0.0168 and a total of $0.0207 with no word of why, though
    the cost report says it of its own rows; the job's costs now carry the same note, and every edge shows it."""
    rows = [Attempt(id=f"j-a{n}", job_id="j", n=n, state=AttemptState.STOPPED, launcher="local",
                    placement={"tier": "ondemand", "zone": "z"}, price_per_hour=PRICE, created_at=T0,
                    ended_at=T0 + 10, cost=cost) for n, cost in ((1, first), (2, second))]
    c = costs.job_costs(JOB, rows)
    assert [a["cost"]["usd"] for a in c["attempts"]] == [costs.money(first)["usd"], costs.money(second)["usd"]]
    assert (c["rounding_note"] == costs.ROUNDING_NOTE) is noted and (c["rounding_note"] is None) is not noted


def test_a_job_with_no_on_demand_price_for_any_attempt_has_nothing_to_compare_not_a_saving_of_0_percent():
    """An on-prem job whose max_price_per_hour kept on-demand out of its quote read "saved $0.00 (0%) against on-demand
    ($0.0023)", the pool's own price named as on-demand's; the same job without the cap, "saved $0.0089 (80%)"."""
    from dataclasses import replace

    from broker.cli import _saving_line
    from broker.views import NOTHING_TO_COMPARE

    pool = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.SUCCEEDED, launcher="local",
                   placement={"tier": "onprem", "zone": "cpu"}, price_per_hour=200_000, created_at=T0,
                   ended_at=T0 + 41, cost=2_300)
    capped = costs.job_costs(replace(JOB, quote={"tiers": [{"tier": "onprem", "price_per_hour": 200_000}]}), [pool])
    assert capped["saving_percent"] is None and capped["saving"]["micros"] == 0
    line = _saving_line(capped["spent"], capped["ondemand_equivalent"], capped["saving"], capped["saving_percent"])
    assert line == f"  spent $0.0023; {NOTHING_TO_COMPARE}", line
    quoted = costs.job_costs(replace(JOB, quote={"tiers": [{"tier": "ondemand", "price_per_hour": 1_000_000}]}), [pool])
    assert quoted["saving_percent"] == 79, quoted  # an on-demand price in its quote: compared, as before


def test_a_spend_beside_a_budget_of_more_than_cents_is_shown_to_its_decimals_never_above_it():
    """A budget of $11.005 all spent read "$11.005 of $11.005" in `broker status`, but "$11.01" in `broker costs`, the
    cost report's top jobs, the dashboard and the job's attempt lines: a cent over the cap the user set."""
    from dataclasses import replace

    from broker.views import job_view

    job = replace(JOB, budget=11_005_000, spent=11_005_000, attempts=1)
    spent = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.STOPPED, launcher="local",
                    placement={"tier": "onprem", "zone": "prem"}, price_per_hour=3_600_000_000, created_at=T0,
                    ended_at=T0 + 12, cost=11_005_000)
    c = costs.job_costs(job, [spent])
    assert c["spent"]["usd"] == "$11.005" and c["attempts"][0]["cost"]["usd"] == "$11.005"
    assert job_view(job, attempts=[spent])["attempt_list"][0]["cost"]["usd"] == "$11.005"
    # a budget in whole cents: as before, rounded up to the cent
    assert costs.job_costs(replace(job, budget=20_000_000), [spent])["spent"]["usd"] == "$11.01"
    report = costs.report([job], {"j": [spent]}, win=costs.Window(T0 - 10, T0 + 100, "x"), now=T0 + 100,
                          positions={}, team=None)
    assert report["top_jobs"][0]["spent"]["usd"] == "$11.005"


# -- the exact span, not whole seconds (QA audit, Dec 7) -------------------------------------------------------------


@pytest.mark.parametrize("created, until, price, cost, seconds", [
    pytest.param(1796668599.692, 1796668630.311, 3_333_000, 28_349, 30.619,
                 id="30.619 s at $3.333/h → $0.028349, not 30 s's $0.027775"),
    pytest.param(1796668599.008, 1796668629.627, 3_600_000, 30_619, 30.619,
                 id="30.619 s at $3.60/h → 30,619 µ$, not the float difference 30.61900019 s rounded up to 30,620"),
    pytest.param(T0, T0 + 200, PRICE, 2_000_000, 200, id="whole seconds → as before, and said as a whole number"),
])
def test_an_attempt_is_billed_for_its_exact_span_and_the_cost_report_says_those_seconds(created, until, price, cost,
                                                                                        seconds):
    """Billing floored each attempt to whole seconds (``int(end - created_at)``) while ``billed_until`` kept the whole
    span: 30.619 s at $3.333/h was billed as 30.000 s, $0.000573 never billed, and ``/v1/costs/jobs/{id}`` said
    ``"seconds": 30``. The exact span is billed (rounded up once), and the report says the seconds it billed."""
    a = accrue(Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.RUNNING, launcher="local",
                       placement={"tier": "onprem", "zone": "odd"}, price_per_hour=price, created_at=created), until)
    assert a.cost == cost and a.billed_until == until
    row = costs.job_costs(JOB, [a])["attempts"][0]
    assert row["seconds"] == seconds and type(row["seconds"]) is type(seconds), row
    # never backwards: a later accrual at an earlier moment leaves the cost and the span
    assert accrue(a, created + 10) == a


def test_a_rate_is_shown_exactly_so_seconds_times_it_give_the_cost_shown():
    """`broker costs ID`, `broker status ID` and the API showed $3.333/h as "$3.34/h" and $1.006/h as "$1.01/h": 30 s
    at the rate shown ($0.02783) read $0.0279 beside the cost shown, $0.0278. A rate is shown exactly, as a budget."""
    from broker.views import attempt_view

    odd = Attempt(id="j-a1", job_id="j", n=1, state=AttemptState.SUCCEEDED, launcher="local",
                  placement={"tier": "onprem", "zone": "odd"}, price_per_hour=3_333_000, created_at=T0,
                  ended_at=T0 + 30, billed_until=T0 + 30, cost=27_775)
    od = Attempt(id="j-a2", job_id="j", n=2, state=AttemptState.SUCCEEDED, launcher="local",
                 placement={"tier": "ondemand", "zone": "sim-od"}, price_per_hour=1_006_000, created_at=T0,
                 ended_at=T0 + 20, billed_until=T0 + 20, cost=5_589)
    c = costs.job_costs(JOB, [odd, od])
    assert [r["price_per_hour"] for r in c["attempts"]] == [
        {"micros": 3_333_000, "usd": "$3.333"}, {"micros": 1_006_000, "usd": "$1.006"}]
    assert attempt_view(odd)["price_per_hour"]["usd"] == "$3.333"
    assert costs.burn(JOB, [od], T0)["price_per_hour"]["usd"] == "$1.006"
    # under a dollar, and whole cents, read as before
    assert costs.rate(424_600)["usd"] == "$0.4246" and costs.rate(200_000)["usd"] == "$0.20"


@pytest.mark.parametrize("spent, held, cap, words", [
    pytest.param(67_688, 1_930_538, 2_000_000,
                 "$0.0677 spent in 2026-12 and $1.9306 held by 1 job not ended, of a $2.00 monthly cap: $0.0017 free",
                 id="held to the hundredth of a cent, as the others: $0.0677 + $1.9306 + $0.0017 = $2.00"),
    pytest.param(412_095_001, 180_000_000, 1_000_000_000,
                 "$412.10 spent in 2026-12 and $180.00 held by 2 jobs not ended, of a $1,000.00 monthly cap: "
                 "$407.90 free", id="cents: the spend rounded up, what is free down, what is held the rest"),
    pytest.param(67_688, 1_932_262, 2_000_000,
                 "$0.067688 spent in 2026-12 and $1.932262 held by 1 job not ended, of a $2.00 monthly cap: "
                 "$0.000050 free", id="under $0.0001 free: every part to the micro-dollar"),
])
def test_a_monthly_cap_line_adds_up_to_the_cap(spent, held, cap, words):
    """"$0.0677 spent … and $1.94 held …, of a $2.00 monthly cap: $0.0017 free" made $2.0094: held was rounded up to
    the cent beside the others' hundredths of a cent. The three parts are shown alike and add up to the cap, in the
    line every edge shows and in the amounts beside it."""
    from broker.team_budget import TeamMonth, month_of
    from pricing.money import amount_shown

    standing = TeamMonth("beta", cap, month_of(1796668599), spent, held, 1 if held < 10**8 else 2)
    assert standing.words() == words
    record = standing.record()
    parts = [amount_shown(record[k]["usd"]) for k in ("spent", "held", "free")]
    assert sum(parts) == cap and record["text"] == words, record


def test_a_dry_runs_price_per_hour_over_http_is_the_pools_rate_exactly(make_settings, tmp_path):
    """The quote's `price_per_hour.usd` read "$3.34" for a pool priced at $3.333 a slot-hour."""
    from fastapi.testclient import TestClient

    from broker.api.app import create_app
    from broker.store import open_store
    from broker_testing import ADMIN

    settings = make_settings(config='pools:\n  - {name: odd, slots: 1, price_per_slot_hour: "3.333"}\n')
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'rate.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.post("/v1/jobs?dry_run=true", headers={"Authorization": f"Bearer {ADMIN}"},
                        json={"name": "odd", "resources": {"cpus": 1}, "run": "echo hi", "broker": {"budget_usd": "5"}})
        assert r.status_code == 200, r.text
        assert r.json()["price_per_hour"] == {"micros": 3_333_000, "usd": "$3.333"}, r.json()


def test_status_name_json_keeps_its_list_and_says_the_sweeps_total_on_stderr_as_the_table_does(tmp_path):
    """`broker status --name a-` says "11 jobs named a-*: $0.1114 spent in all, of $4.82 of budgets"; with --json the
    total was nowhere. Its stdout stays the list scripts read (`| jq '.[].id'`); the total goes to stderr, as the
    table's does, and as the note of older jobs left out goes there with --json."""
    import json
    import signal
    import socket

    from broker_testing import cli_runner, start_broker

    def port_in_range() -> int:
        for port in range(19340, 19400):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise AssertionError("no free port in 19340-19399")

    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'c.db'}", port=port_in_range(), engine="off")
    try:
        run = cli_runner(url)
        task = tmp_path / "t.yaml"
        task.write_text("name: t\nresources: {cpus: 1}\nrun: echo hi\n")
        ids = [json.loads(run("--json", "submit", str(task), "--name", n, "--budget", b).stdout)["id"]
               for n, b in (("a-1", "1"), ("a-2", "0.25"), ("b-1", "5"))]
        listed = run("--json", "status", "--name", "a-")
        assert [j["id"] for j in json.loads(listed.stdout)] == ids[1::-1], listed.stdout
        assert listed.stderr.strip() == "2 jobs named a-*: $0.00 spent in all, of $1.25 of budgets", listed.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
