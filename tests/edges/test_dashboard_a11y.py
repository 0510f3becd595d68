"""The dashboard for a keyboard, a screen reader and a phone, in Debian's headless Chromium (the fixtures of
``test_dashboard``): a QA walkthrough found the focus thrown to the page's start by every 30 s refresh, money columns
cut by a long job name (on a phone, and on a 1280 px screen), rows that screen readers read as one long link, a job
panel that took no focus and had no way to close, nothing announced, the sign-in screen behind three dead controls, a
local time with no zone beside UTC ones, and a chart whose figures only a mouse could read."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import datetime, timezone

import httpx
import pytest

from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth
from .test_dashboard import ARTIFACTS, chromium, server  # noqa: F401  (server: the fixture, reused)

PHONE = 375
LONG = ("nlp-finetune-llama3-70b-instruct-lora-r64-alpha128-lr2e-5-warmup500-cosine-seq8192-bs256-run-"
        "2026-12-07T18-40-00Z-xxxxxxxxx")  # 123 letters, as the QA's

# (table, the headers of its money columns): each cell whole inside its table's box and on the screen
MONEY = {
    "burn": ("Spent / budget", "Left at this price"),
    "failures": ("Spent",),
    "top": ("Spent", "Against on-demand"),
    "attempts": ("Cost", "On-demand equivalent"),
}

ACTIVE_ROW = """() => { const a = document.activeElement; const tr = a.closest('tr');
    return [a.tagName, tr ? tr.dataset.job : null, tr ? tr.closest('table').id : null]; }"""


def _long_names(store, now: float) -> None:
    """A running spot job named with 123 letters (the budget burn, the top jobs), whose attempt's state says a long
    reason, and a failed one named as long (the failures)."""
    run = world.job("j-long", "team-a", JobState.RUNNING, submitted=now - 4000, budget=3_000_000, spent=35_100,
                    attempts=1, reason="running attempt 1", placement=world.spot("us-east-1b", 1_010_000,
                                                                                  od=3_000_000), updated=now - 60)
    run = replace(run, name=LONG, spec={**run.spec, "name": LONG})
    tried = world.attempt("j-long", 1, AttemptState.RUNNING, world.spot("us-east-1b", 1_010_000, od=3_000_000),
                          start=now - 3600, seconds=125, cost=35_100, running=True)
    tried.reason = "running: started on spot in us-east-1b after us-east-1a had no capacity for 8x H100 (zone-blocked)"
    world._commit(store, run, [tried])
    failed = world.job("j-longf", "team-a", JobState.FAILED, submitted=now - 7200, budget=1_000_000, spent=3_456,
                       attempts=1, reason="failed: the run command exited with code 1", updated=now - 120)
    failed = replace(failed, name=LONG + "-f", spec={**failed.spec, "name": LONG + "-f"})
    world._commit(store, failed, [world.attempt("j-longf", 1, AttemptState.FAILED, world.onprem(200_000),
                                                start=now - 7000, seconds=60, cost=3_456)])


def _cut_money(page) -> dict:
    """For each money column: the cells not whole inside both the screen and their table's scrolling box."""
    return page.evaluate("""(columns) => {
        const out = {};
        for (const [table, names] of Object.entries(columns)) {
            const t = document.getElementById(table);
            if (!t || t.offsetParent === null) { out[table] = "not shown"; continue; }
            const box = t.parentElement.getBoundingClientRect();  // the box it scrolls in
            const heads = [...t.querySelectorAll("thead th")].map((th) => th.textContent);
            for (const name of names) {
                const i = heads.indexOf(name);
                const cells = [...t.querySelectorAll("tbody tr")].map((r) => r.cells[i]).filter((c) => c && c.colSpan === 1);
                const bad = cells.filter((c) => { const r = c.getBoundingClientRect();
                    return r.width === 0 || r.left < Math.max(0, box.left) - 0.5
                        || r.right > Math.min(window.innerWidth, box.right) + 0.5 || c.scrollWidth > c.clientWidth; });
                if (!cells.length) out[table + "/" + name] = "no rows";
                if (bad.length) out[table + "/" + name] = bad.map((c) => c.textContent);
            }
        }
        return out;
    }""", MONEY)


@pytest.mark.parametrize("width", [PHONE, 1280])
def test_a_long_job_name_gives_way_and_money_stays_whole_on_the_screen(server, store, seeded, width):  # noqa: F811
    """At 1280 px one 123-letter name cut "Spent / budget" and hid "Left at this price" on every row of the budget
    burn; at 375 px the burn, the failures and a job's attempts scrolled their money out of view."""
    _long_names(store, seeded.now)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#burn tbody tr[data-job='j-long']")
        page.click("#burn tbody tr[data-job='j-long'] a.open")
        page.wait_for_selector("#attempts tbody tr")
        cut = _cut_money(page)
        name = page.locator("#burn tbody tr[data-job='j-long'] .jobname")
        line = page.evaluate("parseFloat(getComputedStyle(document.body).lineHeight)")
        box = name.bounding_box()
        title = name.get_attribute("title")
        wide = page.evaluate("document.documentElement.scrollWidth")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-long-name-{width}.png"), full_page=True)
    assert cut == {}, cut
    assert title == LONG and box["height"] < 1.5 * line, box  # one line, cut; the whole in its title
    assert wide <= width


def test_a_refresh_keeps_the_keyboard_on_the_same_job_s_row(server, store, seeded):  # noqa: F811
    """Every 30 s the tables were built again and the focus fell to the page's body: the next Tab went to another
    row (the rows re-sorted by spend). It stays on the same job's row, wherever the row moved."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.clock.install()
        page.clock.pause_at(time.time() + 1)
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#top tbody tr[data-job='j-b1']")
        page.focus("#top tbody tr[data-job='j-b1'] a.open")
        assert page.evaluate(ACTIVE_ROW) == ["A", "j-b1", "top"]
        before = page.locator("#top tbody tr").evaluate_all("rs => rs.map(r => r.dataset.job)")

        now = time.time()  # a job that spent more than any: it comes first, and j-b1's row moves down
        big = world.job("j-big", "team-b", JobState.SUCCEEDED, submitted=now - 7200, budget=90_000_000,
                        spent=50_000_000, attempts=1, reason="succeeded", updated=now - 60)
        world._commit(store, big, [world.attempt("j-big", 1, AttemptState.SUCCEEDED, world.ondemand(25_000_000),
                                                 start=now - 7200, seconds=7200, cost=50_000_000)])
        page.clock.run_for(31_000)
        expect(page.locator("#top tbody tr").first).to_have_attribute("data-job", "j-big")
        after = page.evaluate(ACTIVE_ROW)
        page.keyboard.press("Enter")  # and the keyboard goes on from there
        expect(page.locator("#job-title")).to_contain_text("(j-b1)")
        moved = page.locator("#top tbody tr").evaluate_all("rs => rs.map(r => r.dataset.job)")
    assert before.index("j-b1") != moved.index("j-b1"), (before, moved)  # the row was built again, elsewhere
    assert after == ["A", "j-b1", "top"], after


def test_rows_stay_table_rows_with_a_link_to_the_job_and_every_table_has_a_name(server):  # noqa: F811
    """A clickable row was role="link": a screen reader heard one long link per row, and no column headers; none of
    the tables had a name in the list of tables."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#failures tbody tr[data-job]")
        roles = page.eval_on_selector_all("tr", "rs => rs.filter(r => r.hasAttribute('role')).length")
        top = page.get_by_role("table", name="Most expensive jobs")
        row = top.get_by_role("row").filter(has_text="j-a1")
        link = row.get_by_role("link", name="train-j-a1 (j-a1)")
        expect(link).to_have_count(1)
        for name in ("By team", "Budget burn of running jobs", "Queue", "Most expensive jobs", "Preemptions",
                     "Recent failures and budget stops"):
            expect(page.get_by_role("table", name=name, exact=True)).to_have_count(1)
        link.focus()
        page.keyboard.press(" ")  # Space opens it, as Enter does
        expect(page.locator("#job-title")).to_contain_text("(j-a1)")
        expect(page.get_by_role("table", name="Attempts of this job")).to_have_count(1)
        # the preemptions name their job beside its id, as every other table does
        preempted = page.locator("#preemptions tbody tr").first.inner_text()
    assert roles == 0
    assert "train-j-a1 (j-a1) #1" in preempted, preempted


def test_an_opened_job_takes_the_focus_and_escape_or_close_give_it_back(server):  # noqa: F811
    """Enter on a row scrolled to the job, leaving the focus on the row, now off the screen; nothing was announced;
    Escape did nothing, and there was no way to close the panel."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#failures tbody tr[data-job='j-b1']")
        page.focus("#failures tbody tr[data-job='j-b1'] a.open")
        page.keyboard.press("Enter")
        expect(page.locator("#job-title")).to_contain_text("(j-b1)")
        expect(page.locator("#job-heading")).to_be_focused()
        page.keyboard.press("Escape")
        expect(page.locator("#job")).to_be_hidden()
        back = page.evaluate(ACTIVE_ROW)
        assert "#job=" not in page.url

        page.focus("#top tbody tr[data-job='j-a1'] a.open")
        page.keyboard.press("Enter")
        expect(page.locator("#job-heading")).to_be_focused()
        page.get_by_role("button", name="Close").click()
        expect(page.locator("#job")).to_be_hidden()
        closed = page.evaluate(ACTIVE_ROW)
    assert back == ["A", "j-b1", "failures"], back
    assert closed == ["A", "j-a1", "top"], closed


def test_the_sign_in_screen_is_labelled_announced_and_free_of_dead_controls(server):  # noqa: F811
    """Signed out, Tab went through an empty team list, the period and "Change token" before the token field, which
    had no label; "That token was not accepted." was announced to no one, and nor was the "Updated" line."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard")
        expect(page.locator("#login")).to_be_visible()
        assert page.locator("main #login").count() == 1  # in the main landmark
        page.keyboard.press("Tab")
        first = page.evaluate("document.activeElement.textContent")
        page.keyboard.press("Tab")
        second = page.evaluate("document.activeElement.id")
        assert page.is_hidden("#controls")
        page.get_by_label("Token").fill("wrong-token")
        page.keyboard.press("Enter")
        expect(page.get_by_role("alert").filter(has_text="accepted")).to_have_text("That token was not accepted.")
        assert page.get_attribute("#token-input", "aria-invalid") == "true"

        page.get_by_label("Token").fill(world.ADMIN)
        page.keyboard.press("Enter")
        expect(page.get_by_role("status")).to_contain_text("Updated")
        expect(page.locator("#controls")).to_be_visible()
        assert page.get_attribute("#updated", "aria-live") == "polite"
        signed_in = page.evaluate("document.activeElement.id")  # not the token field, hidden now

        page.reload()
        expect(page.locator("#updated")).to_contain_text("Updated")
        page.keyboard.press("Tab")  # the page's first stop: the skip link, past the header's controls
        page.keyboard.press("Enter")
        skipped = page.evaluate("document.activeElement.id")
        page.keyboard.press("Tab")
        after = page.evaluate("document.activeElement.closest('section') && document.activeElement.closest('section').id")
    assert first == "Skip to main content" and second == "token-input", (first, second)
    assert signed_in == "content" and skipped == "content", (signed_in, skipped)
    assert after != "login", after


def test_every_time_on_the_page_is_utc_whatever_the_browser_s_zone(server):  # noqa: F811
    """"Updated 10:40:48" was the browser's own clock, unnamed, beside tables that say "… UTC"."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_context(timezone_id="America/Los_Angeles").new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        expect(page.locator("#updated")).to_contain_text("Updated")
        updated = page.text_content("#updated")
        window = page.text_content("#window")
    m = re.match(r"Updated (\d\d):(\d\d):(\d\d) UTC · ", updated)
    assert m, updated
    now = datetime.now(timezone.utc)
    shown = now.replace(hour=int(m[1]), minute=int(m[2]), second=int(m[3]))
    assert abs((now - shown).total_seconds()) < 120, (updated, now)
    assert re.match(r"From \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC to \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC · ", window), window


def test_the_chart_s_figures_can_be_read_without_a_mouse(server):  # noqa: F811
    """Each day's figures were only in hover titles inside role="img"; the legend was part of the heading's name;
    the tier figures ran together ("On-prem $0.0437On-demand $0.2516"); an empty period drew a bare axis."""
    from playwright.sync_api import expect

    body = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        expect(page.get_by_role("heading", name="Spend by day", exact=True)).to_have_count(1)
        page.get_by_text("Spend by day as a table").click()
        days = page.get_by_role("table", name="Spend by day and tier (UTC days)")
        rows = days.locator("tbody tr").evaluate_all("rs => rs.map(r => [...r.cells].map(c => c.textContent))")
        tiers = page.inner_text("#tiers")
        label = page.get_attribute("#chart svg", "aria-label")
        page.select_option("#period", "24h")
        page.select_option("#team", "team-b")  # spent nothing in the last 24 hours
        expect(page.locator("#chart")).to_contain_text("No spend in this period.")
    t = body["totals"]["by_tier"]
    assert re.fullmatch(r"On-prem \$[\d.,]+ · On-demand \$[\d.,]+ · Spot \$[\d.,]+", tiers.replace("\n", " ")), tiers
    assert t["spot"]["usd"] in tiers
    assert [r[0] for r in rows] == [d["date"] for d in body["by_day"]]
    for r, d in zip(rows, body["by_day"]):
        # a column to the same decimals ("$0.40" beside "$0.0046" reads "$0.4000"): the same amount either way
        assert [float(c.strip("$").replace(",", "")) for c in r[1:]] == [
            float(d[k]["usd"].strip("$").replace(",", "")) for k in ("onprem", "ondemand", "spot", "total")], r
    peak = max(body["by_day"], key=lambda d: d["total"]["micros"])
    assert f"highest {peak['total']['usd']} on {peak['date']}" in label, label


def test_a_money_column_shows_its_amounts_to_the_same_decimals(server, store, seeded):  # noqa: F811
    """"By team" read "$0.23" beside "$0.4856": a whole-cent amount among hundredths of a cent reads as rounded or
    stale. The cards already wrote "$0.2300"; a column does too (the same amount, neither rounded nor overstated)."""
    from playwright.sync_api import expect

    now = seeded.now
    for job_id, team, cost in (("j-d9", "default", 230_000), ("j-b9", "team-b", 85_600)):
        j = world.job(job_id, team, JobState.SUCCEEDED, submitted=now - 7200, budget=9_000_000, spent=cost,
                      attempts=1, reason="succeeded", updated=now - 60)
        world._commit(store, j, [world.attempt(job_id, 1, AttemptState.SUCCEEDED, world.onprem(200_000),
                                               start=now - 7200, seconds=3600, cost=cost)])
    body = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        expect(page.locator("#teams tbody tr")).to_have_count(3)
        spent = dict(page.locator("#teams tbody tr").evaluate_all(
            "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])"))
    api = {t["team"]: t["spent"]["usd"] for t in body["by_team"]}
    assert api["default"] == "$0.23" and api["team-b"] == "$0.4856", api
    assert spent == {"default": "$0.2300", "team-a": api["team-a"], "team-b": "$0.4856"}, spent
