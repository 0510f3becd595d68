"""Clock times in a task: an unquoted ``1:30`` or ``9:00`` is the text typed, and an hour may have one digit.

YAML 1.1 (PyYAML's, and the broker's before) reads an unquoted ``1:30`` as the base-60 number 90 and ``9:00`` as 540:
``expected_hours: 1:30`` was refused as "the base-60 number 90", ``deadline: 9:00`` as 540 rather than as the time
alone it is, and an environment value ``1:30`` had to be quoted. The task's reader (``broker.task_text``, behind the
API's YAML body, ``broker submit``'s task file and Slack's submit alike) now reads them as YAML 1.2 does, as text, and
each field says what it takes of it; every other number and an unquoted YAML timestamp read as before.

``datetime.fromisoformat`` takes an hour of two digits alone: ``--deadline '2026-12-07 9:00'`` and
``deadline: '2026-12-07 9:00Z'`` were refused "must be an ISO time". Both now read it as ``09:00``.
"""

from __future__ import annotations

import json
import re
import signal
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.client import load_task
from broker.spec import SpecError
from broker.store import open_store
from broker.task_text import load_text

from broker_testing import ADMIN, POOL_AND_SPOT, cli_runner, start_broker

CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.10", cpus_per_slot: 8, memory_gib_per_slot: 32}
"""
YAML = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/yaml"}


@pytest.fixture
def client(make_settings, tmp_path):
    app = create_app(make_settings(config=CONFIG), store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def _day(days: int = 2) -> str:
    """A date ``days`` from now (UTC), as a user types it."""
    return f"{datetime.now(timezone.utc) + timedelta(days=days):%Y-%m-%d}"


# -- an unquoted 1:30 is the text typed --------------------------------------------------------------------------


@pytest.mark.parametrize("body, field, said", [
    pytest.param("run: echo hi\nbroker: {expected_hours: 1:30}\n", "broker.expected_hours",
                 r"broker\.expected_hours: is 1:30, hours and minutes: write the hours as a decimal number \(1\.5 for "
                 r"1:30\)", id="expected_hours 1:30 is asked for the hours as a number, 1.5, not read as 90 hours"),
    pytest.param("run: echo hi\nbroker: {deadline: 9:00}\n", "broker.deadline",
                 r"broker\.deadline: is a time alone \(9:00\): give its date too, such as \d{4}-\d\d-\d\dT09:00Z, or "
                 r"a duration from now such as 6h", id="a deadline 9:00 is a time alone, asked for its date, not 540"),
])
def test_an_unquoted_clock_time_is_refused_for_what_it_is_not_as_a_base_60_number(client, body, field, said):
    r = client.post("/v1/jobs", content=body, headers=YAML)
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert re.fullmatch(said, r.json()["detail"]), r.json()


def test_a_clock_time_elsewhere_is_the_text_typed_and_every_other_value_reads_as_before(client):
    due = f"{_day()} 09:00:00Z"  # an unquoted YAML timestamp: a datetime, as before
    body = (f"run: echo hi\nenvs: {{T: 1:30, AT: 12:30:45, MAP: 8080:50, SHORT: 0:30, N: 4, F: 1.5, SEVEN: 07}}\n"
            f"resources: {{cpus: 4, memory: 16+, ports: 8080}}\nbroker: {{deadline: {due}, expected_hours: 1.5}}\n")
    r = client.post("/v1/jobs", content=body, headers=YAML)
    assert r.status_code == 201, r.text
    job = client.app.state.service.store.get_job(r.json()["id"])
    assert job.spec["envs"] == {"T": "1:30", "AT": "12:30:45", "MAP": "8080:50", "SHORT": "0:30", "N": 4, "F": 1.5,
                                "SEVEN": 7}
    assert (job.spec["resources"]["cpus"], job.spec["resources"]["memory"], job.spec["resources"]["ports"]) == \
        (4, "16+", 8080)
    assert job.deadline == datetime.fromisoformat(due.replace("Z", "+00:00")).timestamp()
    assert job.expected_hours == "1.5"


def test_the_cli_reads_a_task_file_with_the_same_reader():
    """``broker submit``'s task file (``broker.client.load_task``) and Slack's submit text read as the API does."""
    text = "run: echo hi\nenvs: {T: 1:30}\nbroker: {deadline: 9:00, expected_hours: 1:30}\n"
    assert load_task(text) == load_text(text) == {"run": "echo hi", "envs": {"T": "1:30"},
                                                  "broker": {"deadline": "9:00", "expected_hours": "1:30"}}


def test_an_explicit_int_tag_on_a_clock_time_is_still_refused_as_the_number_yaml_makes_of_it():
    with pytest.raises(SpecError, match=r"is 1:30, which YAML reads as the base-60 number 90"):
        load_text("run: echo hi\nenvs: {T: !!int 1:30}\n")


# -- a one-digit hour ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("typed, offset", [
    pytest.param("{day} 9:00Z", "+00:00", id="a space and Z"),
    pytest.param("{day}T9:05+01:00", "+01:00", id="a T and an offset"),
    pytest.param("{day} 9:00:30Z", "+00:00", id="with seconds"),
])
def test_the_api_reads_a_deadline_whose_hour_has_one_digit(client, typed, offset):
    day = _day()
    typed = typed.format(day=day)
    r = client.post("/v1/jobs", content=f"run: echo hi\nbroker: {{deadline: '{typed}'}}\n", headers=YAML)
    assert r.status_code == 201, r.text
    clock = re.search(r"[T ](\d):(\d\d(?::\d\d)?)", typed)
    meant = datetime.fromisoformat(f"{day}T0{clock[1]}:{clock[2]}{offset}")
    assert client.app.state.service.store.get_job(r.json()["id"]).deadline == meant.timestamp()


def test_the_api_reads_a_one_digit_hour_before_a_time_zones_name(client):
    day = _day()
    r = client.post("/v1/jobs", content=f"run: echo hi\nbroker: {{deadline: '{day} 9:00 Europe/Berlin'}}\n",
                    headers=YAML)
    assert r.status_code == 201, r.text
    meant = datetime.fromisoformat(f"{day}T09:00").replace(tzinfo=ZoneInfo("Europe/Berlin"))
    assert client.app.state.service.store.get_job(r.json()["id"]).deadline == meant.timestamp()


def test_a_one_digit_hour_without_its_zone_is_refused_for_the_zone_showing_the_two_digit_form(client):
    day = _day()
    r = client.post("/v1/jobs", content=f"run: echo hi\nbroker: {{deadline: '{day} 9:00'}}\n", headers=YAML)
    assert r.status_code == 422 and r.json()["field"] == "broker.deadline", r.text
    assert r.json()["detail"].startswith(f"broker.deadline: has no timezone: write {day}T09:00Z for UTC"), r.json()


def test_the_cli_reads_a_one_digit_hour_on_this_machines_clock(monkeypatch):
    from broker.cli import _on_this_clock

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    day = _day()
    assert _on_this_clock(f"{day} 9:00", quiet=True) == f"{day}T09:00+09:00"
    assert _on_this_clock(f"{day}T9:05:30", quiet=True) == f"{day}T09:05:30+09:00"


# -- through `broker submit`, against a real broker ----------------------------------------------------------------


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clock-times")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=POOL_AND_SPOT)
    task = tmp / "t.yaml"
    task.write_text("name: due\nresources: {cpus: 1}\nrun: sleep 600\n")
    yield cli_runner(url), task
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_submit_reads_a_deadline_whose_hour_has_one_digit_on_the_clock_tz_names(cli):
    run, task = cli
    day = _day()
    r = run("--json", "submit", str(task), "--budget", "5", "--deadline", f"{day} 9:00", "--dry-run",
            extra_env={"TZ": "Asia/Tokyo"})
    read = datetime.fromisoformat(json.loads(r.stdout)["deadline"].replace("Z", "+00:00"))
    assert read == datetime.fromisoformat(f"{day}T09:00+09:00"), r.stdout
    r = run("submit", str(task), "--budget", "5", "--deadline", f"{day} 9:00", "--dry-run",
            extra_env={"TZ": "Asia/Tokyo"})
    assert f"note: --deadline {day} 9:00 gives no time zone: read on this machine's clock (Asia/Tokyo), as " \
           f"{day}T09:00+09:00" in r.stderr, r.stderr


@pytest.mark.parametrize("section, said", [
    pytest.param("{deadline: 9:00}", r"broker\.deadline: is a time alone \(9:00\): give its date too, such as "
                                     r"\d{4}-\d\d-\d\dT09:00Z, or a duration from now such as 6h", id="deadline 9:00"),
    pytest.param("{expected_hours: 1:30}", r"broker\.expected_hours: is 1:30, hours and minutes: write the hours as a "
                                           r"decimal number \(1\.5 for 1:30\)", id="expected_hours 1:30"),
])
def test_submit_of_a_task_file_with_an_unquoted_clock_time_says_what_the_field_takes(cli, tmp_path, section, said):
    run, _ = cli
    task = tmp_path / "clock.yaml"
    task.write_text(f"name: due\nresources: {{cpus: 1}}\nrun: sleep 600\nbroker: {section}\n")
    r = run("--json", "submit", str(task), "--budget", "5", "--dry-run", check=False)
    error = json.loads(r.stdout)
    assert (r.returncode, error["status"]) == (1, 422) and re.fullmatch(said, error["error"]), r.stdout
