"""The pages a browser opens, in a real headless Chromium: the dashboard (loads clean, shows /v1/costs' numbers,
filters, screenshots) and the API docs at /docs and /redoc, with no network but the broker."""

from __future__ import annotations

import socket
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from testports import free_port

from broker.lifecycle import AttemptState, JobState

from . import world
from .conftest import auth, build_app, serving, serving_world

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


@contextmanager
def chromium():
    """Debian's headless Chromium under Playwright (no ``playwright install``), closed on the way out."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)  # Playwright's 5 s is short for a page on a loaded 2-core host
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _as_shown(iso: str) -> str:
    """An API time ("2026-11-30T18:40:48Z") as the page writes it: "2026-11-30 18:40:48 UTC"."""
    return iso.replace("T", " ").replace("Z", " UTC")


@pytest.fixture
def server(tmp_path, store, seeded):
    with serving_world(tmp_path, store, lifespan="on") as url:
        yield url


def test_the_page_is_static_and_names_no_other_host(client):
    page = client.get("/dashboard")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("dashboard.js", "dashboard.css"):
        r = client.get(f"/dashboard/static/{asset}")
        assert r.status_code == 200
        assert "http://" not in r.text.replace("http://www.w3.org/2000/svg", "") and "https://" not in r.text
    assert "https://" not in page.text and "http://" not in page.text
    # a first-day user asked for a token is told where the generated admin token is
    assert "~/.local/share/spot-broker/admin-token" in page.text
    assert client.get("/dashboard/static/..%2Fdashboard.py").status_code == 404
    assert client.get("/dashboard/static/nope.js").status_code == 404


def test_a_static_name_too_long_for_a_file_is_a_404_not_a_500(tmp_path, store, seeded):
    """`/dashboard/static/<300 letters>.js` asked the filesystem, which refused the name (ENAMETOOLONG): a 500, and a
    traceback in the log for each such request, from anyone (the page's files ask no token)."""
    from fastapi.testclient import TestClient

    with TestClient(build_app(world.settings(tmp_path), store), raise_server_exceptions=False) as client:
        for name in ("a" * 300 + ".js", "b" * 5000 + ".css"):
            r = client.get(f"/dashboard/static/{name}")
            assert (r.status_code, r.content) == (404, b"not found")
        assert client.get("/dashboard/static/dashboard.js").status_code == 200


def test_dashboard_in_chromium(server):
    from playwright.sync_api import expect

    admin = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    team_b = httpx.get(f"{server}/v1/costs?period=7d&team=team-b", headers=auth(world.ADMIN)).json()
    errors: list[str] = []
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        assert "token=" not in page.url  # taken out of the address bar, kept in localStorage
        t = admin["totals"]
        assert page.text_content("#total-spent") == t["spent"]["usd"]
        assert page.get_attribute("#total-spent", "data-micros") == str(t["spent"]["micros"])
        assert page.get_attribute("#total-saving", "data-micros") == str(t["saving"]["micros"])
        assert page.text_content("#total-ondemand") == t["ondemand_equivalent"]["usd"]
        for tier, m in t["by_tier"].items():
            assert page.get_attribute(f'#tiers [data-tier="{tier}"]', "data-micros") == str(m["micros"])
        assert page.locator("#chart rect").count() > 0
        assert page.locator("#queue tbody tr").count() == 1 and "8x H100" in page.text_content("#queue")
        assert "75%" in page.text_content("#burn")

        page.select_option("#team", "team-b")  # the filter
        expect(page.locator("#total-spent")).to_have_attribute("data-micros", str(team_b["totals"]["spent"]["micros"]))
        assert page.text_content("#total-saving") == team_b["totals"]["saving"]["usd"]
        assert page.locator("#top tbody tr").count() == 1

        page.select_option("#team", "")
        expect(page.locator("#total-spent")).to_have_attribute("data-micros", str(t["spent"]["micros"]))
        page.click("#top tbody tr:first-child")  # the most expensive job: attempts and loss curve
        page.wait_for_selector("#loss polyline")
        assert page.locator("#attempts tbody tr").count() == 2
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

        page.evaluate("localStorage.setItem('spot-broker-token', 'wrong')")
        page.goto(f"{server}/dashboard")
        page.wait_for_selector("#login:not([hidden])")
    assert [e for e in errors if "401" not in e] == []  # the wrong-token 401 at the end is expected
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 10_000


def test_the_queue_says_roughly_when_a_waiting_job_starts(server, store, seeded):
    start = world.wait_behind_a_running_job(store, seeded)
    expected = datetime.fromtimestamp(start, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    with chromium() as browser:
        page = browser.new_page()
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url))
        # the link form docs/slack.md gives: the fragment never reaches the server, so no request log holds it
        page.goto(f"{server}/dashboard#token={world.TOKENS['team-a']}")
        page.wait_for_selector("#queue tbody tr td:nth-child(3)")
        assert "token" not in page.url and asked and not [u for u in asked if world.TOKENS["team-a"] in u], asked
        cells = page.locator("#queue tbody tr").first.locator("td").all_text_contents()
    assert cells[0] == "1" and "j-a3" in cells[1] and cells[2] == expected and "full" in cells[3]


def test_the_queue_says_a_waiting_jobs_deadline_beside_its_start(server, store, seeded):
    """The deadline went unshown in the dashboard's queue: a job starting too late for it read the same as any."""
    from dataclasses import replace

    from broker.store import Change

    start = world.wait_behind_a_running_job(store, seeded)
    a3 = store.get_job("j-a3")
    store.commit(Change(job=replace(a3, deadline=float(int(start + 7200))), expected_version=a3.version))
    shown = (datetime.fromtimestamp(start, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") + " · due "
             + datetime.fromtimestamp(int(start + 7200), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"))
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard#token={world.TOKENS['team-a']}")
        page.wait_for_selector("#queue tbody tr td:nth-child(3)")
        cells = page.locator("#queue tbody tr").first.locator("td").all_text_contents()
    assert cells[2] == shown, cells


def _offline(page, server: str, outside: list[tuple[str, str]]) -> None:
    """Let the page reach the broker only, as on a host with no internet: every other request fails."""
    def route(r):
        if r.request.url.startswith(server):
            r.continue_()
        else:
            outside.append((r.request.resource_type, r.request.url))
            r.abort("internetdisconnected")
    page.route("**/*", route)


def test_the_api_docs_render_their_operations_with_no_network(server):
    spec = httpx.get(f"{server}/openapi.json").json()
    operations = {(m.upper(), path) for path, ops in spec["paths"].items() for m in ops}
    docs: list[tuple[str, str]] = []
    redoc: list[tuple[str, str]] = []
    with chromium() as browser:
        page = browser.new_page()
        _offline(page, server, docs)
        page.goto(f"{server}/docs")
        page.wait_for_selector(".opblock", timeout=15_000)  # Swagger UI drew the operations
        shown = {(block.locator(".opblock-summary-method").text_content(),
                  block.locator(".opblock-summary-path").get_attribute("data-path"))
                 for block in page.locator(".opblock").all()}
        assert shown == operations

        page = browser.new_page()
        _offline(page, server, redoc)
        page.goto(f"{server}/redoc")
        page.wait_for_selector("[data-section-id^='operation/']", timeout=15_000)  # ReDoc drew them too
        assert page.locator("[data-section-id^='operation/']").count() == len(operations)
    assert docs == []  # nothing from a CDN or a font host
    # ReDoc's own "API docs by Redocly" footer logo is the one thing it asks elsewhere: an image, left out
    assert [kind for kind, _ in redoc] in ([], ["image"])


def test_a_long_queue_and_many_running_jobs_leave_the_rest_of_the_page_in_view(server, store, seeded):
    """500 queued jobs drew 500 rows, and the most expensive jobs and the preemptions were 25,000 px down the page:
    the queue shows its first rows and how many more wait, the budget burn its hottest jobs first."""
    now = seeded.now
    for i in range(45):
        world._commit(store, world.job(f"j-q{i:02d}", "team-a", JobState.QUEUED, submitted=now - 200 + i,
                                       budget=1_000_000, spent=0, attempts=0, reason="waiting: every pool is full"), [])
    for i in range(30):  # j-r29 has used 87% of its budget, j-r00 none of it
        job = world.job(f"j-r{i:02d}", "team-b", JobState.RUNNING, submitted=now - 900, budget=1_000_000,
                        spent=i * 30_000, attempts=1, placement=world.onprem(200_000), updated=now - 60)
        world._commit(store, job, [world.attempt(job.id, 1, AttemptState.RUNNING, world.onprem(200_000),
                                                 start=now - 600, seconds=540, cost=i * 30_000, running=True)])
    body = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()
    assert len(body["queue"]) == 46 and len(body["budget_burn"]) == 31  # the API still gives them all
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        queue = page.locator("#queue tbody tr").all_text_contents()
        burn = page.locator("#burn tbody tr").all_text_contents()
        top_y = page.locator("#top").bounding_box()["y"]
    assert len(queue) == 21 and "j-a3" in queue[0] and "26 more waiting" in queue[-1]
    assert len(burn) == 21 and "j-r29" in burn[0] and "87%" in burn[0] and "11 more running" in burn[-1]
    assert top_y < 2500


def test_the_chart_dates_every_period_and_writes_money_as_the_broker_does(server, store, seeded):
    """At 90 days the chart had no date under any bar; its scale rounded $0.0046 up to "$0.01" (the broker writes
    hundredths of a cent under a dollar) and an empty chart read "$0.01"; a team that paid more than on-demand
    was told it spent "-11% less", on a green card."""
    from pricing.money import fmt

    now = seeded.now
    # team B: an on-prem job at $0.20/h whose on-demand quote is $0.10/h (20 h, ten days ago), and a short one today
    dear = world.job("j-b3", "team-b", JobState.SUCCEEDED, submitted=now - 10 * 86_400, budget=9_000_000,
                     spent=4_000_000, attempts=1, quote_od=100_000, updated=now - 9 * 86_400)
    world._commit(store, dear, [world.attempt("j-b3", 1, AttemptState.SUCCEEDED, world.onprem(200_000),
                                              start=now - 10 * 86_400, seconds=20 * 3600, cost=4_000_000)])
    short = world.job("j-b4", "team-b", JobState.SUCCEEDED, submitted=now - 7200, budget=1_000_000,
                      spent=4_567, attempts=1, updated=now - 3600)
    world._commit(store, short, [world.attempt("j-b4", 1, AttemptState.SUCCEEDED, world.onprem(200_000),
                                               start=now - 7200, seconds=82, cost=4_567)])
    # the default team (an admin's own jobs) is offered once it has a job: one queued, with nothing spent
    world._commit(store, world.job("j-d1", "default", JobState.QUEUED, submitted=now - 60, budget=1_000_000,
                                   spent=0, attempts=0), [])
    seen = {}
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        for team, period in (("", "30d"), ("", "90d"), ("team-b", "24h"), ("team-b", "90d"), ("default", "7d")):
            body = _choose(page, team, period)
            seen[(team, period)] = (body, page.locator("#chart text").all_text_contents(),
                                    page.text_content("#total-saving-pct"),
                                    page.eval_on_selector("#total-saving", "e => e.parentElement.className"))
    for (team, period), (body, labels, saving_text, saving_class) in seen.items():
        dates = [t for t in labels if not t.startswith("$")]
        assert len(dates) >= 2, (team, period, labels)
        assert labels[-1] == fmt(max(d["total"]["micros"] for d in body["by_day"])), (team, period, labels)
    assert seen[("default", "7d")][1][-1] == "$0.00"
    assert seen[("team-b", "24h")][1][-1].startswith("$0.00")  # $0.0046, or its part of one day
    body, _, saving_text, saving_class = seen[("team-b", "90d")]
    assert body["totals"]["saving_percent"] < 0
    assert saving_text == f"{-body['totals']['saving_percent']}% more than all on-demand"
    assert "good" not in saving_class


def test_a_job_that_cost_more_than_on_demand_reads_as_paid_more_when_opened(server, store, seeded):
    """The open job's line said "saved -$2.00 (-100%)" for work that cost more than on-demand, as the CLI and Slack
    did before they said it as ``broker.views.saving_words`` does."""
    from broker.views import saving_words

    now = seeded.now
    dear = world.job("j-b3", "team-b", JobState.SUCCEEDED, submitted=now - 10 * 86_400, budget=9_000_000,
                     spent=4_000_000, attempts=1, quote_od=100_000, updated=now - 9 * 86_400)
    world._commit(store, dear, [world.attempt("j-b3", 1, AttemptState.SUCCEEDED, world.onprem(200_000),
                                              start=now - 10 * 86_400, seconds=20 * 3600, cost=4_000_000)])
    j = httpx.get(f"{server}/v1/costs/jobs/j-b3", headers=auth(world.ADMIN)).json()
    assert j["saving"]["micros"] < 0
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        totals = _choose(page, "team-b", "30d")["totals"]
        card = page.text_content("#total-saving-label"), page.text_content("#total-saving")
        page.click("#top tbody tr:has-text('j-b3')")
        page.wait_for_selector("#job:not([hidden])")
        summary = page.text_content("#job-summary")
    said = saving_words(j["saving"], j["saving_percent"], "on-demand")
    assert said.startswith("paid ") and said in summary and "saved -" not in summary, summary
    # the team's card too: it read "Saved -$0.40"
    assert totals["saving"]["micros"] < 0
    assert card == ("Paid more than on-demand", totals["saving"]["usd"].lstrip("-")), card


def _choose(page, team: str, period: str) -> dict:
    """Pick a team and a period on the page, one after the other, and return the report it then shows."""
    from playwright.sync_api import expect

    body = None
    for select, value in (("#team", team), ("#period", period)):
        if page.input_value(select) != value:
            with page.expect_response(lambda r: "/v1/costs?" in r.url) as answer:
                page.select_option(select, value)
            body = answer.value.json()
            # the page writes a time as its tables do ("2026-11-30 18:40:48 UTC"), not as the API ("…T18:40:48Z")
            expect(page.locator("#window")).to_contain_text(_as_shown(body["window"]["since"]))
    assert body is not None and (body["team"] or "", body["window"]["period"]) == (team, period)
    return body


def test_a_broker_that_cannot_answer_the_costs_says_so_on_the_page(tmp_path):
    """With its Redis down the broker answers /v1/costs with a 503 saying why; the page opened on it drew nothing at
    all (the message went into the hidden main section), not even the header's reason. It says why now, and the
    costs once the store is back."""
    import shutil
    import subprocess

    from playwright.sync_api import expect

    from broker.store.redis import RedisStore

    rport, port = free_port(), free_port()
    redis_cmd = [shutil.which("redis-server"), "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", str(tmp_path)]

    def start_redis() -> subprocess.Popen:
        proc = subprocess.Popen(redis_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", rport), timeout=0.2).close()
                return proc
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    redis = start_redis()
    store = RedisStore(f"redis://127.0.0.1:{rport}/0", prefix="dash")
    world.seed(store)
    app = build_app(world.settings(tmp_path, public_url=f"http://127.0.0.1:{port}"), store)
    try:
        with serving(app, port, log_level="critical", lifespan="on") as server:
            redis.terminate()
            redis.wait(10)
            down = httpx.get(f"{server}/v1/costs", headers=auth(world.ADMIN))
            assert down.status_code == 503
            with chromium() as browser:
                page = browser.new_page()
                page.goto(f"{server}/dashboard?token={world.ADMIN}")
                expect(page.locator("#error")).to_be_visible()
                expect(page.locator("#error")).to_have_text(down.json()["detail"])
                redis = start_redis()
                world.seed(store)
                page.select_option("#period", "30d")
                expect(page.locator("#error")).to_be_hidden()
                page.wait_for_selector("#total-spent[data-micros]")
    finally:
        store.close()
        redis.terminate()
        redis.wait(10)


def test_an_answer_that_comes_late_does_not_replace_the_one_for_the_latest_choice(server):
    """Team B, then 30 days, picked quickly: the answer for team B over 7 days came after the one for 30 days and
    was drawn over it, so the page showed 7 days' spend under "30 days"."""
    from playwright.sync_api import expect

    held = []
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        # the network holds the first answer back, as a slow one is; the broker answers every request itself
        page.route("**/v1/costs?**", lambda route: held.append(route) if not held else route.continue_())
        page.select_option("#team", "team-b")
        with page.expect_response(lambda r: "period=30d" in r.url) as latest:
            page.select_option("#period", "30d")
        since = _as_shown(latest.value.json()["window"]["since"])
        expect(page.locator("#window")).to_contain_text(since)
        assert held and "period=7d" in held[0].request.url
        with page.expect_response(lambda r: "period=7d" in r.url):
            held[0].continue_()
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(300)
        window = page.text_content("#window")
    assert since in window and "team-b" in window


def test_the_page_follows_new_spend_without_a_reload_while_it_is_in_view(server, store, seeded):
    """A running job's cost grows and new jobs spend: the page asked once, at load, and showed that moment's
    figures until someone reloaded it. It asks again every 30 s (the open job too, without scrolling to it)."""
    from playwright.sync_api import expect

    from . import world as w

    before = httpx.get(f"{server}/v1/costs?period=7d", headers=auth(world.ADMIN)).json()["totals"]["spent"]["micros"]
    with chromium() as browser:
        page = browser.new_page()
        page.clock.install()
        # paused: an installed clock runs on with real time, so a slow host's seconds between the load and
        # run_for below would count towards the 30 s
        page.clock.pause_at(time.time() + 1)
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        expect(page.locator("#total-spent")).to_have_attribute("data-micros", str(before))
        expect(page.locator("#updated")).to_contain_text("refreshes every 30 s")
        page.click("#top tbody tr:first-child")
        page.wait_for_selector("#attempts tbody tr")
        shown = page.text_content("#job-title")
        page.evaluate("window.scrollTo(0, 0)")

        now = time.time()
        late = w.job("j-b9", "team-b", JobState.SUCCEEDED, submitted=now - 7200, budget=9_000_000,
                     spent=1_234_567, attempts=1, reason="succeeded", updated=now - 60)
        w._commit(store, late, [w.attempt("j-b9", 1, AttemptState.SUCCEEDED, w.onprem(200_000), start=now - 7200,
                                          seconds=3600, cost=1_234_567)])
        page.clock.run_for(25_000)  # not yet
        page.wait_for_timeout(300)
        assert page.get_attribute("#total-spent", "data-micros") == str(before)
        page.clock.run_for(6_000)
        expect(page.locator("#total-spent")).to_have_attribute("data-micros", str(before + 1_234_567))
        assert page.text_content("#job-title") == shown and page.evaluate("window.scrollY") == 0


def test_the_curve_of_a_job_that_reports_no_loss_is_drawn_whatever_its_first_report_holds(server, store, seeded):
    """A script that reports `val_loss` (not `loss`) and whose first report held no number — its step and total steps
    only, or a value gone to NaN, kept as null — got "No metrics reported yet." under hundreds of reported points: the
    page took the metric to draw from the first point alone. A preemption of a job that ended without resuming read
    "(waiting)" for good."""
    now = seeded.now
    job = world.job("j-v1", "team-b", JobState.CANCELLED, submitted=now - 7200, budget=5_000_000, spent=250_000,
                    attempts=1, reason="cancelled", updated=now - 1800)
    points = [{"time": now - 7000, "step": 0, "total_steps": 500, "metrics": {}},
              {"time": now - 6990, "step": 10, "total_steps": 500, "metrics": {"val_loss": None}},
              *({"time": now - 6900 + i, "step": 10 * i, "total_steps": 500, "metrics": {"val_loss": 3 / i}}
                for i in range(2, 40))]
    world._commit(store, job, [world.attempt("j-v1", 1, AttemptState.PREEMPTED, world.spot("us-east-1c", 500_000),
                                             start=now - 7100, seconds=1800, cost=250_000)], metrics=points)
    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.TOKENS['team-b']}")
        page.wait_for_selector("#preemptions tbody tr")
        preemption = page.text_content("#preemptions tbody tr:has-text('j-v1')")
        page.click("#top tbody tr:has-text('j-v1')")
        page.wait_for_selector("#job:not([hidden]) #loss > *")
        loss = page.locator("#loss")
        drawn = loss.locator("polyline").count(), loss.text_content()
    assert "(job ended)" in preemption and "waiting" not in preemption, preemption
    assert drawn[0] == 1 and "No metrics" not in drawn[1], drawn


def test_changing_token_closes_the_job_the_last_token_opened(server, store, seeded):
    """The admin opened team B's job, then "Change token" to team A's: team A's page still showed team B's job, its
    attempts and spend, and kept it (the refresh of it was refused, silently). A job the broker refuses to show says
    why where the job would be; the click did nothing at all."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        page.click("#top tbody tr:has-text('j-b1')")
        expect(page.locator("#job-title")).to_contain_text("j-b1")
        page.click("#logout")
        page.fill("#token-input", world.TOKENS["team-a"])
        page.click("#login-form button")
        expect(page.locator("#window")).to_contain_text("team-a")
        page.wait_for_timeout(300)
        assert page.is_hidden("#job") and "j-b1" not in page.inner_text("#main")

        page.route("**/v1/costs/jobs/**", lambda r: r.fulfill(status=404, content_type="application/json",
                                                             body='{"detail": "No job j-a1."}'))
        page.click("#top tbody tr:has-text('j-a1')")
        expect(page.locator("#job")).to_be_visible()
        expect(page.locator("#job-summary")).to_have_text("No job j-a1.")
        assert page.locator("#attempts tbody tr").count() == 0  # not the attempts of the job shown before


def test_a_page_opened_while_the_broker_restarts_shows_the_costs_once_it_answers(server):
    """Opened while the broker was down (restarting), the page said "The broker did not answer" and never asked again:
    the refresh ran only over a page that had loaded once. It asks again on its 30 s beat, as a loaded page does."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.clock.install()
        page.clock.pause_at(time.time() + 1)
        page.route("**/v1/costs?**", lambda r: r.abort("connectionrefused"))
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        expect(page.locator("#error")).to_contain_text("did not answer")
        page.unroute("**/v1/costs?**")
        page.clock.run_for(31_000)
        expect(page.locator("#main")).to_be_visible()
        expect(page.locator("#error")).to_be_hidden()
        assert page.get_attribute("#total-spent", "data-micros")

        # down again, then the token is refused: the sign-in prompt is not headed "did not answer" any more
        page.route("**/v1/costs?**", lambda r: r.abort("connectionrefused"))
        page.select_option("#period", "30d")
        expect(page.locator("#error")).to_contain_text("did not answer")
        page.unroute("**/v1/costs?**")
        page.evaluate("localStorage.setItem('spot-broker-token', 'revoked')")
        page.select_option("#period", "90d")
        expect(page.locator("#login")).to_be_visible()
        expect(page.locator("#error")).to_be_hidden()


def test_a_name_with_no_spaces_and_many_preemptions_keep_the_page_on_a_phone_screen(server, store, seeded):
    """A job named with no space (a run id, a path) widened its table and the whole page past the screen: 2,000 px
    wide at 1280, 1,700 px on a 375 px phone; and 50 preemptions of one job drew 50 rows, as the queue once did."""
    now = seeded.now
    long_name = "run-" + "0123456789abcdef" * 12
    job = world.job("j-long", "team-a", JobState.SUCCEEDED, submitted=now - 2 * 86_400, budget=90_000_000,
                    spent=30 * 100_000, attempts=30, updated=now - 86_400)
    job = replace(job, name=long_name)
    tries = [world.attempt("j-long", n, AttemptState.PREEMPTED if n < 30 else AttemptState.SUCCEEDED,
                           world.spot("us-east-1a", 500_000), start=now - 2 * 86_400 + n * 1200, seconds=720,
                           cost=100_000) for n in range(1, 31)]
    world._commit(store, job, tries)
    with chromium() as browser:
        for width in (1280, 375):
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.goto(f"{server}/dashboard?token={world.TOKENS['team-a']}")
            page.wait_for_selector("#total-spent[data-micros]")
            page.click(f"#top tbody tr:has-text('{long_name}')")
            page.wait_for_selector("#attempts tbody tr")
            assert page.evaluate("document.documentElement.scrollWidth") <= width, width
            rows = page.locator("#preemptions tbody tr").all_text_contents()
            assert len(rows) == 21 and "and 10 more in this period" in rows[-1], rows[-1]


def test_an_open_job_has_a_link_that_opens_it_again(server):
    """A team lead who found the job eating the budget could not send it to its owner, nor keep it over a reload: the
    open job was nowhere in the address. It is (#job=ID), and the page opened from that address opens the job."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        page.click("#top tbody tr:has-text('j-b1')")
        expect(page.locator("#job-title")).to_contain_text("j-b1")
        assert page.url.endswith("/dashboard#job=j-b1"), page.url

        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.TOKENS['team-a']}#job=j-a1")
        expect(page.locator("#job-title")).to_have_text("train-j-a1 (j-a1)")
        assert page.locator("#attempts tbody tr").count() == 2 and "token=" not in page.url
        page.select_option("#period", "30d")  # the job stays open, and in the address
        page.click("#logout")  # another token: the job it opened is no more in the address
        assert "#job=" not in page.url


def test_a_job_row_opens_from_the_keyboard(server):
    """Rows opened a job on a mouse click only: one could not reach them with Tab, nor open one with Enter."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        # the job cell's link, the row's one stop for Tab (the row itself stays a table row)
        row = page.locator("#top tbody tr:has-text('j-b1') a.open")
        row.focus()
        assert page.evaluate("document.activeElement.textContent").startswith("train-j-b1")
        page.keyboard.press("Enter")
        expect(page.locator("#job-title")).to_contain_text("j-b1")
        page.locator("#top tbody tr:has-text('j-a1') a.open").focus()
        page.keyboard.press(" ")
        expect(page.locator("#job-title")).to_contain_text("j-a1")


def test_a_link_to_a_job_opens_it_after_signing_in(server):
    """A colleague's link (#job=ID) opened with no token: the sign-in prompt dropped the job from the address, and
    after signing in the job did not open."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard#job=j-a1")
        expect(page.locator("#login")).to_be_visible()
        assert page.url.endswith("#job=j-a1"), page.url
        page.fill("#token-input", world.TOKENS["team-a"])
        page.click("#login-form button")
        expect(page.locator("#job-title")).to_have_text("train-j-a1 (j-a1)")


@pytest.mark.parametrize("link, token", [("#job=%E0%A4", False), ("#job=%", True), ("#job=..", True)],
                         ids=["a broken escape, no token", "a broken escape, signed in", "a path step"])
def test_a_malformed_job_link_is_no_job_not_a_broken_page(server, link, token):
    """A bad %-escape threw in the page: with no token the sign-in prompt never showed, signed in the page stopped
    updating; #job=.. fetched the costs summary as a job, and threw on it."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{server}/dashboard" + (f"?token={world.ADMIN}" if token else "") + link)
        expect(page.locator("#main" if token else "#login")).to_be_visible()
        if token:
            expect(page.locator("#updated")).to_contain_text("Updated")
        page.wait_for_timeout(300)
        assert errors == [] and page.is_hidden("#job")


def test_a_new_token_does_not_ask_for_the_team_the_last_token_chose(server):
    """The admin chose team-b, then "Change token" to team-a's: its first load asked for team-b's costs, was refused
    ("you can see only your team's costs"), and the prompt stayed until a reload."""
    from playwright.sync_api import expect

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{server}/dashboard?token={world.ADMIN}")
        page.wait_for_selector("#total-spent[data-micros]")
        page.select_option("#team", "team-b")
        expect(page.locator("#window")).to_contain_text("team-b")
        page.click("#logout")
        page.fill("#token-input", world.TOKENS["team-a"])
        page.click("#login-form button")
        expect(page.locator("#window")).to_contain_text("team-a")
