"""An attempt billed past its end. Two brokers with data dirs of their own on one Redis: one was killed, the other
took its job over and ended its attempt as lost at 03:10:47; the first came back and stopped the old run at 03:11:20,
billed to then. `broker status` showed the attempt as 03:10:19Z → 03:10:47Z (28 s) beside its cost of 60 s (`broker
costs` showed 60 s): the span now says what the cost counts to."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from broker import cli as broker_cli
from broker.lifecycle import AttemptState
from broker.models import Attempt
from broker.views import attempt_view, iso

STARTED = 1796613019.0  # 2026-12-07T03:10:19Z


@pytest.mark.parametrize("ended, billed, said", [
    (28.0, 61.0, "2026-12-07T03:10:19Z → 2026-12-07T03:10:47Z, billed to 2026-12-07T03:11:20Z"),
    (28.0, 28.0, "2026-12-07T03:10:19Z → 2026-12-07T03:10:47Z\n"),
    (28.0, 28.4, "2026-12-07T03:10:19Z → 2026-12-07T03:10:47Z\n"),
], ids=["a run that went on after its attempt ended says what it was billed to",
        "one billed to its end says nothing more",
        "nor one billed within the same second"])
def test_status_says_when_an_attempt_billed_past_its_end_was_billed_to(ended, billed, said):
    attempt = Attempt(id="j-1-a1", job_id="j-1", n=1, state=AttemptState.LOST, launcher="local",
                      placement={"tier": "spot", "zone": "sim-a"}, price_per_hour=426_000, created_at=STARTED - 2,
                      started_at=STARTED, ended_at=STARTED + ended, billed_until=STARTED + billed, cost=7_100)
    view = attempt_view(attempt)
    assert view["billed_until"] == iso(STARTED + billed)
    job = {"id": "j-1", "name": "n", "team": "t", "state": "running", "reason": "", "spent": {"usd": "$0.0071"},
           "budget": {"usd": "$1"}, "attempt_list": [view]}
    con = Console(file=io.StringIO(), width=200)
    broker_cli._show_job(con, job)
    out = con.file.getvalue()
    assert said in out, out
