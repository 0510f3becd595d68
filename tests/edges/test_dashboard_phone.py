"""The dashboard on a phone (375 px) and the job panel's attempt times, in Debian's headless Chromium (the fixtures
of ``test_dashboard``).

On a 375 px screen the spend chart, an 800-unit drawing squeezed into a 325 px box, wrote its dates and scale
about 3.7 px tall; "Most expensive jobs" and "Budget burn" were 509 and 600 px wide inside their 325 px boxes, so
their money columns were off the screen. The job panel wrote each attempt's time in hours: a 15 s attempt that
cost money read "0.00".
"""

from __future__ import annotations

import pytest

from broker.lifecycle import AttemptState, JobState

from . import world
from .test_dashboard import ARTIFACTS, chromium, server  # noqa: F401  (server: the fixture, reused)

PHONE = 375
CELLS = "rs => rs.map(r => [...r.cells].map(c => c.textContent))"
READABLE_PX = 8  # the chart's labels are 10 px; squeezed they were under 4 px

# (table, the headers of the columns that hold money): each must be on the screen, whole
MONEY_COLUMNS = {
    "top": ("Spent", "Against on-demand"),
    "burn": ("Spent / budget", "Left at this price"),
    "teams": ("Spent", "On-demand equivalent", "Against on-demand"),
    "attempts": ("Cost", "On-demand equivalent"),
}


def _short_attempts(store, now: float) -> None:
    """A job of team A whose attempts ran 15 s and 24 s on spot: they cost money, and read "0.00" and "0.01" h."""
    job = world.job("j-short", "team-a", JobState.SUCCEEDED, submitted=now - 3600, budget=1_000_000, spent=3_900,
                    attempts=2, updated=now - 1800)
    world._commit(store, job, [
        world.attempt("j-short", 1, AttemptState.PREEMPTED, world.spot("us-east-1a", 360_000, od=1_200_000),
                      start=now - 3000, seconds=15, cost=1_500),
        world.attempt("j-short", 2, AttemptState.SUCCEEDED, world.spot("us-east-1b", 360_000, od=1_200_000),
                      start=now - 2400, seconds=24, cost=2_400)])


def _outside(page) -> dict:
    """For each money column: the cells (and header) that do not lie whole inside the viewport."""
    return page.evaluate("""(columns) => {
        const out = {};
        for (const [table, names] of Object.entries(columns)) {
            const t = document.getElementById(table);
            if (!t || t.offsetParent === null) { out[table] = "not shown"; continue; }
            const heads = [...t.querySelectorAll("thead th")].map((th) => th.textContent);
            for (const name of names) {
                const i = heads.indexOf(name);
                if (i < 0) { out[table + "/" + name] = "no such column"; continue; }
                const cells = [t.querySelectorAll("thead th")[i],
                               ...[...t.querySelectorAll("tbody tr")].map((r) => r.cells[i]).filter((c) => c)];
                const bad = cells.filter((c) => { const r = c.getBoundingClientRect();
                    return r.width === 0 || r.left < 0 || r.right > window.innerWidth + 0.5; });
                if (bad.length) out[table + "/" + name] = bad.map((c) => c.textContent);
            }
        }
        return out;
    }""", MONEY_COLUMNS)


def _chart_text_heights(page, chart: str) -> list[float]:
    return page.eval_on_selector_all(f"#{chart} svg text", "ts => ts.map(t => t.getBoundingClientRect().height)")


def _opened(browser, server: str, width: int):
    """The admin's page at ``width``, with the seeded spot job (and its loss curve) open."""
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.goto(f"{server}/dashboard?token={world.ADMIN}")
    page.wait_for_selector("#total-spent[data-micros]")
    page.wait_for_selector("#burn tbody tr.clickable")
    page.click("#top tbody tr:has-text('j-a1')")  # a job with a loss curve
    page.wait_for_selector("#loss polyline")
    return page


@pytest.mark.parametrize("width", [PHONE, 1280])
def test_on_a_phone_the_money_columns_are_on_screen(server, store, seeded, width):  # noqa: F811
    _short_attempts(store, seeded.now)
    with chromium() as browser:
        page = _opened(browser, server, width)
        outside = _outside(page)
        wide = page.evaluate("document.documentElement.scrollWidth")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-{width}.png"), full_page=True)
    assert outside == {}, outside
    assert wide <= width


@pytest.mark.parametrize("width", [PHONE, 1280])
def test_on_a_phone_the_charts_labels_keep_a_readable_size(server, width):  # noqa: F811
    with chromium() as browser:
        page = _opened(browser, server, width)
        days = _chart_text_heights(page, "chart")
        loss = _chart_text_heights(page, "loss")
        dates = [t for t in page.locator("#chart text").all_text_contents() if not t.startswith("$")]
        overlapping = page.eval_on_selector_all("#chart svg text", """ts => {
            const rs = ts.map((t) => t.getBoundingClientRect()).sort((a, b) => a.left - b.left);
            return rs.some((r, i) => i && Math.abs(r.top - rs[i - 1].top) < 1 && r.left < rs[i - 1].right); }""")
        assert len(dates) >= 2 and not overlapping, dates
        assert days and min(days) >= READABLE_PX, days
        assert loss and min(loss) >= READABLE_PX, loss
        page.set_viewport_size({"width": 1000 if width == PHONE else PHONE, "height": 900})  # turned on its side
        page.wait_for_function("""() => { const s = document.querySelector('#chart svg');  // drawn again
            return s && s.viewBox.baseVal.width === document.getElementById('chart').clientWidth; }""", timeout=10_000)
        turned = _chart_text_heights(page, "chart")
    assert turned and min(turned) >= READABLE_PX and max(turned) < 2 * min(days), (days, turned)


def test_the_job_panel_says_each_attempt_s_time_as_the_cli_and_slack_do(server, store, seeded):  # noqa: F811
    from playwright.sync_api import expect

    from broker.views import duration

    _short_attempts(store, seeded.now)
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{server}/dashboard?token={world.ADMIN}#job=j-short")
        page.wait_for_selector("#attempts tbody tr")
        heads = page.locator("#attempts thead th").all_text_contents()
        rows = page.eval_on_selector_all("#attempts tbody tr", CELLS)
        page.click("#top tbody tr:has-text('j-a1')")  # a job whose attempts ran hours
        expect(page.locator("#job-title")).to_contain_text("(j-a1)")
        longer = page.eval_on_selector_all("#attempts tbody tr", CELLS)
    at = heads.index("Time")
    assert [r[at] for r in rows] == ["15 s", "24 s"] == [duration(15), duration(24)]
    assert [r[at] for r in longer] == ["4.0 h", "6.0 h"] == [duration(4 * 3600), duration(6 * 3600)]
