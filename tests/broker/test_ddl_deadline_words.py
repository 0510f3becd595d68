"""A submit's deadline the broker already knows it cannot meet, deadlines with a one-word zone name, and the figures a
budget lowered too far is told to lower to (QA, Dec 7).

* ``--deadline 74s`` with ``broker.expected_hours: 0.02`` (72 s) was accepted, and the first placement then said
  "safety net: the deadline can no longer be met, even on on-demand (3 s short, counting a changeover of 5 s)": the
  submit (and its dry run) is refused, with the safety net's arithmetic and the broker's ``changeover_seconds``.
* ``2026-12-08 09:00 CET`` (``EST``, ``utc``) was "must be an ISO time (…) or a duration"; a zone ``zoneinfo`` knows is
  read, an abbreviation it does not (``PST``, ``IST``, ``BST``) refused naming the word.
* "lower it to no less than $0.0013" beside parts shown as $0.0004 and $0.0010; "is below what the job already spent
  ($0.0005)" named no budget that works."""

from __future__ import annotations

import re
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import Principal
from broker.engine.reconcile import Engine
from broker.lifecycle import JobState
from broker.runtime import open_launcher
from broker.service import BrokerService, Invalid
from broker.spec import SpecError, parse_deadline
from broker.store import open_store

from broker_testing import ADMIN, set_fields, wait_for

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge, grace_seconds: 2}
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge}
changeover_seconds: 5
"""
TASK = {"name": "train", "resources": {"accelerators": "A10G:1"}, "run": "echo hi",
        "broker": {"budget_usd": "5", "expected_hours": "0.02"}}


@pytest.fixture
def client(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def auth():
    return {"Authorization": f"Bearer {ADMIN}"}


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/jobs?dry_run=true"], ids=["submit", "dry run"])
def test_a_deadline_the_job_cannot_meet_even_on_on_demand_is_refused_at_submit_with_the_figures(client, path):
    task = {**TASK, "broker": {**TASK["broker"], "deadline": "74s"}}
    r = client.post(path, json=task, headers=auth())
    assert r.status_code == 422 and r.json()["field"] == "broker.deadline", r.text
    assert r.json()["detail"] == ("broker.deadline: is 74 s away, but the job needs 72 s (broker.expected_hours) and a "
                                  "changeover of 5 s to start: it cannot be met even on on-demand (3 s short); move "
                                  "the deadline or correct the estimate"), r.text
    assert client.get("/v1/jobs", headers=auth()).json()["jobs"] == []


def test_a_deadline_with_room_for_the_work_and_a_changeover_is_still_taken(client):
    task = {**TASK, "broker": {**TASK["broker"], "deadline": "80s"}}
    assert client.post("/v1/jobs", json=task, headers=auth()).status_code == 201


def test_a_job_only_the_teams_pool_runs_is_not_charged_a_changeover_the_safety_net_never_plans(make_settings, tmp_path):
    """The changeover counts where the job may run on spot (the safety net plans those jobs alone): on a broker of one
    pool, 74 s for 72 s of work is taken as before."""
    settings = make_settings(config='pools:\n  - {name: cpu, slots: 2, price_per_slot_hour: "0.10"}\n'
                                    'changeover_seconds: 5\n')
    app = create_app(settings, store=open_store(f"sqlite://{tmp_path / 'pool.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as pool:
        task = {**TASK, "resources": {"cpus": 1}, "broker": {**TASK["broker"], "deadline": "74s"}}
        assert pool.post("/v1/jobs", json=task, headers=auth()).status_code == 201


NOW = datetime(2026, 12, 7, 12, 0, tzinfo=ZoneInfo("UTC")).timestamp()


@pytest.mark.parametrize("text, zone", [
    ("2026-12-08 09:00 CET", "CET"),
    ("2026-12-08 09:00 EST", "EST"),
    ("2026-12-08 09:00 EST5EDT", "EST5EDT"),
    ("2026-12-08 09:00 utc", "UTC"),
    ("2026-12-08T09:00 gmt", "UTC"),
    ("2026-12-08 9:00 cet", "CET"),
], ids=["CET → read on Central European time", "EST → read at UTC-5", "EST5EDT → US Eastern with its summer time",
        "utc in small letters → UTC", "gmt → UTC", "a one-digit hour and cet in small letters → CET"])
def test_a_deadline_with_a_one_word_zone_zoneinfo_knows_is_read_on_that_zone(text, zone):
    expected = datetime(2026, 12, 8, 9, 0, tzinfo=ZoneInfo(zone)).timestamp()
    assert parse_deadline(text, now=NOW, where="broker.deadline") == expected


@pytest.mark.parametrize("word", ["PST", "IST", "BST", "localtime"],
                         ids=["PST → refused naming it", "IST (three zones') → refused naming it",
                              "BST → refused naming it", "localtime (the broker host's clock) → refused"])
def test_a_one_word_zone_zoneinfo_does_not_know_is_refused_naming_it_with_an_iana_name_or_offset(word):
    with pytest.raises(SpecError) as refused:
        parse_deadline(f"2026-12-08 09:00 {word}", now=NOW, where="broker.deadline")
    assert refused.value.field == "broker.deadline"
    said = refused.value.reason
    assert said.startswith(f"names the time zone '{word}', which the broker does not know"), said
    assert "IANA name such as Europe/London" in said and "(2026-12-08T09:00+01:00)" in said, said


def test_a_one_word_zone_is_read_at_submit_and_a_phrase_without_a_date_keeps_the_general_refusal(client):
    day = datetime.fromtimestamp(time.time() + 3 * 86400, ZoneInfo("UTC")).date().isoformat()
    ok = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "deadline": f"{day} 09:00 CET"}},
                     headers=auth())
    assert ok.status_code == 201 and ok.json()["deadline"].startswith(f"{day}T08:00"), ok.text
    r = client.post("/v1/jobs", json={**TASK, "broker": {**TASK["broker"], "deadline": "in six hours"}},
                    headers=auth())
    assert r.status_code == 422 and "must be an ISO time" in r.json()["detail"], r.text


@pytest.mark.parametrize("text, now, said", [
    ("2027-03-14 02:30 America/New_York", NOW,
     "2027-03-14 02:30 America/New_York: that time does not exist on that clock (summer time skips it); give a time "
     "outside the hour skipped, or its offset if one is meant (2027-03-14T02:30-05:00 is 2027-03-14T03:30-04:00 "
     "there)"),
    ("2026-11-01 01:30 America/New_York", datetime(2026, 10, 1, tzinfo=ZoneInfo("UTC")).timestamp(),
     "2026-11-01 01:30 America/New_York: that time comes twice on that clock (summer time ends); give its offset: "
     "2026-11-01T01:30-04:00 for the first, 2026-11-01T01:30-05:00 for the second"),
    ("2027-03-14 02:30 EST5EDT", NOW,
     "2027-03-14 02:30 EST5EDT: that time does not exist on that clock (summer time skips it); give a time outside "
     "the hour skipped, or its offset if one is meant (2027-03-14T02:30-05:00 is 2027-03-14T03:30-04:00 there)"),
], ids=["a time summer time skips, its zone named → refused, with the offsets", "a time that comes twice → refused, "
        "with the offset of each", "a one-word zone with summer time → the same"])
def test_a_deadline_summer_time_skips_or_repeats_in_the_zone_it_names_is_refused_with_the_offset_to_give(text, now,
                                                                                                        said):
    """With TZ=America/New_York, `--deadline "2027-03-14 02:30"` says the time does not exist on this clock; the same
    with the zone written out (`2027-03-14 02:30 America/New_York`) was read as 07:30Z without a word."""
    with pytest.raises(SpecError) as refused:
        parse_deadline(text, now=now, where="broker.deadline")
    assert (refused.value.field, refused.value.reason) == ("broker.deadline", said)
    # one stored before this was refused is read as it was admitted (zoneinfo's first reading), not stranded
    assert parse_deadline(text, now=now, where="broker.deadline", bounded=False) == \
        datetime.fromisoformat(text.split(" ")[0] + "T" + text.split(" ")[1]).replace(
            tzinfo=ZoneInfo(text.split(" ")[2])).timestamp()
    # a time next to it is one moment, and taken
    assert parse_deadline(text.replace("02:30", "04:30").replace("01:30", "03:30"), now=now, where="broker.deadline")


def test_a_submit_whose_deadline_summer_time_skips_is_refused_naming_the_field(client):
    task = {**TASK, "broker": {**TASK["broker"], "expected_hours": "1",
                               "deadline": "2027-03-14 02:30 America/New_York"}}
    r = client.post("/v1/jobs", json=task, headers=auth())
    assert (r.status_code, r.json()["field"]) == (422, "broker.deadline"), r.text
    assert "that time does not exist on that clock (summer time skips it)" in r.json()["detail"], r.text
    assert client.get("/v1/jobs", headers=auth()).json()["jobs"] == []


# -- a budget lowered too far: the figure to lower to -------------------------------------------------------------

ODD_PRICE = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.4246"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""
ADMIN_P = Principal("admin", None, admin=True)
DOLLARS = re.compile(r"\$(\d+\.\d+)")


@pytest.fixture
def parts(make_settings, tmp_path):
    settings = make_settings(config=ODD_PRICE)
    store = open_store(f"sqlite://{tmp_path / 'b.db'}")
    launcher = open_launcher(settings)
    now = [time.time()]
    service = BrokerService(settings, store, launcher, clock=lambda: now[0])
    yield settings, store, launcher, service, now
    for run in launcher.runs_dir.glob("j*"):
        launcher.kill(run.name)
    store.close()


def _micros(text: str) -> int:
    whole, _, part = text.partition(".")
    return int(whole) * 1_000_000 + int(part.ljust(6, "0"))


def test_a_running_jobs_budget_lowered_under_its_clean_stop_is_told_the_sum_of_the_parts_it_is_shown(parts):
    settings, store, launcher, service, now = parts
    engine = Engine(settings, store, launcher, clock=lambda: now[0], monotonic=lambda: now[0])
    job = service.submit(ADMIN_P, {"name": "t", "run": "sleep 60", "resources": {"cpus": 1},
                                   "broker": {"budget_usd": "1"}})[0]
    wait_for(lambda: engine.tick() or store.get_job(job.id).state is JobState.RUNNING)
    (attempt,) = store.attempts(job.id)
    now[0] = attempt.created_at + 3.3  # $0.4246/h for 3.3 s: 389 micro-dollars, shown $0.0004
    with pytest.raises(Invalid) as refused:
        service.raise_budget(ADMIN_P, job.id, 400)
    said = refused.value.reason
    assert refused.value.field == "budget_usd" and "would not pay for the running job's clean stop" in said, said
    spent, stop, price, lowest = (_micros(m) for m in DOLLARS.findall(said)[1:5])
    assert price == 424_600 and (spent, stop) == (400, 800), said  # 389 and 708 micro-dollars, each rounded up
    assert said.endswith(f"lower it to no less than ${lowest / 1e6:.4f}, or cancel the job"), said
    assert lowest == spent + stop == 1200, said  # the exact least is 1,097: "$0.0011" beside $0.0004 + $0.0008
    # under the spend: the same figure, and the clean stop it covers
    with pytest.raises(Invalid) as below:
        service.raise_budget(ADMIN_P, job.id, 100)
    assert below.value.reason.startswith("is below what the job already spent ($0.0004), and stopping it ("), below.value
    assert below.value.reason.endswith("costs up to $0.0008 at $0.4246/h: lower it to no less than $0.0012, or cancel "
                                       "the job"), below.value
    assert store.get_job(job.id).budget == 1_000_000  # nothing changed
    assert service.raise_budget(ADMIN_P, job.id, lowest).budget == lowest  # the figure said is taken


def test_a_budget_under_a_failed_jobs_spend_is_told_the_spend_as_shown_as_the_least(parts):
    settings, store, launcher, service, now = parts
    job = service.submit(ADMIN_P, {"name": "t", "run": "sleep 60", "resources": {"cpus": 1},
                                   "broker": {"budget_usd": "1"}})[0]
    set_fields(store, job, spent=489, state=JobState.FAILED)  # what its run had spent before it failed
    with pytest.raises(Invalid) as below:
        service.raise_budget(ADMIN_P, job.id, 100)
    assert below.value.reason == ("is below what the job already spent ($0.0005): lower it to no less than "
                                  "$0.0005"), below.value
    assert service.raise_budget(ADMIN_P, job.id, 500).budget == 500
