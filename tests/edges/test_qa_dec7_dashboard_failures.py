"""QA walkthrough, 7 Dec: "Recent failures and budget stops" read `Stopped at its budget: Stopped at its budget after
step 469 (...)`: the page led every reason with the state's words, also a reason (the engine's diagnosis) that
already begins with them. Such a reason now reads once; any other is still led by them."""

from __future__ import annotations

import pytest

from broker.lifecycle import JobState

from . import world
from .conftest import serving_world
from .test_dashboard import chromium
from .test_obs_dashboard import _failed

STOP = "Stopped at its budget after step 469 ($1.00 of its $1.00 budget spent). Raise the budget and resume."


@pytest.fixture
def server(tmp_path, store, seeded):
    with serving_world(tmp_path, store, lifespan="on") as url:
        yield url


def test_a_reason_that_begins_with_the_states_words_reads_them_once(server, store, seeded):
    now = seeded.now
    _failed(store, "j-s9", "team-a", JobState.STOPPED_BUDGET, ended=now - 60, spent=1_000_000,
            diagnosis={"class": "budget_stop", "text": STOP})
    _failed(store, "j-s8", "team-a", JobState.STOPPED_BUDGET, ended=now - 90, spent=1_000_000,
            reason="stopped at its budget by the launcher itself")
    _failed(store, "j-f9", "team-a", JobState.FAILED, ended=now - 120,
            diagnosis={"class": "x", "text": "Failed after 20 attempts: the last exited with code 1."})
    _failed(store, "j-f8", "team-a", JobState.FAILED, ended=now - 150, reason="failed: the run command exited 2")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#failures tbody tr.clickable")
        rows = page.locator("#failures tbody tr").all_text_contents()
    text = "\n".join(rows)
    assert text.lower().count("stopped at its budget") == 2, rows
    assert f"{STOP}" in rows[0] and "Stopped at its budget: Stopped" not in rows[0], rows
    assert "Stopped at its budget by the launcher itself" in rows[1], rows
    assert "Failed after 20 attempts: the last exited with code 1." in rows[2] and "Failed: Failed" not in rows[2]
    assert "Failed: the run command exited 2" in rows[3], rows  # a reason without the words is still led by them
