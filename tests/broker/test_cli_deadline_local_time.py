"""`broker submit --deadline '2026-12-07 09:00'`: a time with no time zone, read on the user's own clock.

The broker refuses such a time (it cannot know the submitter's clock), and `--deadline` sent it as given: the user got
"has no timezone" and the CLI ignored `TZ`, which says the very clock meant. The CLI now reads it there (`TZ`, else the
system's zone) and sends it with that moment's offset, saying so on stderr; a `TZ` it cannot read is refused naming
`--deadline`. A task file's `broker.deadline` without its zone stays refused: a file is submitted from many clocks.
"""

import json
import re
import signal
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from broker_testing import POOL_AND_SPOT, cli_runner, start_broker


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deadline-local")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=POOL_AND_SPOT)
    task = tmp / "t.yaml"
    task.write_text("name: due\nresources: {cpus: 1}\nrun: sleep 600\n")
    yield cli_runner(url), task
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def _in(zone: str, days: int = 2) -> tuple[str, datetime]:
    """A wall-clock time ``days`` from now in ``zone`` as a user types it (no zone), and that moment."""
    when = (datetime.now(timezone.utc) + timedelta(days=days)).astimezone(ZoneInfo(zone)).replace(second=0,
                                                                                                  microsecond=0)
    return when.strftime("%Y-%m-%d %H:%M"), when


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York", "UTC"])
def test_a_deadline_without_its_zone_is_read_on_the_clock_tz_names(cli, zone):
    run, task = cli
    typed, meant = _in(zone)
    r = run("--json", "submit", str(task), "--budget", "5", "--deadline", typed, "--dry-run", extra_env={"TZ": zone})
    assert r.returncode == 0, r.stderr
    read = datetime.fromisoformat(json.loads(r.stdout)["deadline"].replace("Z", "+00:00"))
    assert read == meant, (read, meant)


def test_the_reading_is_said_with_the_zone_and_the_offset_sent(cli):
    run, task = cli
    typed, meant = _in("Asia/Tokyo")
    r = run("submit", str(task), "--budget", "5", "--deadline", typed, "--dry-run", extra_env={"TZ": "Asia/Tokyo"})
    sent = meant.isoformat(timespec="minutes")  # …+09:00
    assert f"note: --deadline {typed} gives no time zone: read on this machine's clock (Asia/Tokyo), as {sent}" \
        in r.stderr, r.stderr
    assert f"deadline {meant.astimezone(timezone.utc):%Y-%m-%d %H:%M}Z (in 4" in r.stdout, r.stdout  # and in UTC


def test_a_tz_that_names_no_zone_is_refused_naming_the_option(cli):
    run, task = cli
    typed, _ = _in("UTC")
    r = run("--json", "submit", str(task), "--budget", "5", "--deadline", typed, "--dry-run", check=False,
            extra_env={"TZ": "Mars/Olympus"})
    said = json.loads(r.stdout)
    assert r.returncode == 1 and said["field"] == "--deadline", r.stdout
    assert "TZ=Mars/Olympus names no time zone this machine knows" in said["error"], said
    assert "Traceback" not in r.stderr


def test_a_task_files_deadline_without_its_zone_is_still_refused(cli, tmp_path):
    run, _ = cli
    typed, _ = _in("UTC")
    task = tmp_path / "file.yaml"
    task.write_text(f"name: due\nresources: {{cpus: 1}}\nrun: sleep 600\nbroker: {{deadline: '{typed}'}}\n")
    r = run("submit", str(task), "--budget", "5", "--dry-run", check=False, extra_env={"TZ": "Asia/Tokyo"})
    assert r.returncode == 1 and "broker.deadline: has no timezone" in r.stderr, r.stderr


def test_the_help_says_how_a_time_without_its_zone_is_read(cli):
    run, _ = cli
    said = " ".join(run("submit", "--help").stdout.split())
    assert "a time without one ('2026-12-01 18:00') is read on this machine's clock (TZ, else the system's zone)" \
        in said, said


def test_status_of_one_job_says_its_deadline_as_submit_did(cli):
    """`broker status ID` printed the stored ISO text (`deadline 2026-12-07T08:00:00Z`): now the UTC minute and how
    far off it is, as the submit line says it."""
    run, task = cli
    job = json.loads(run("--json", "submit", str(task), "--budget", "1", "--deadline", "6h").stdout)
    due = datetime.fromisoformat(job["deadline"].replace("Z", "+00:00"))
    out = run("status", job["id"]).stdout
    assert f"deadline {due:%Y-%m-%d %H:%M}Z (in 6.0 h)" in out, out  # to the nearest: "5.9 h" fell short of 6h
    assert job["deadline"] not in out, out


def test_a_deadline_passed_is_said_as_how_long_ago():
    from broker.cli import _deadline_moment

    past = datetime.now(timezone.utc) - timedelta(hours=2, minutes=31)
    assert _deadline_moment(past.isoformat()) == f"{past:%Y-%m-%d %H:%M}Z (2.5 h ago)"
    assert _deadline_moment("not a time") == "not a time"


@pytest.mark.parametrize("tz, typed, sent, said", [
    ("/usr/share/zoneinfo/Asia/Tokyo", "2027-01-05 09:00", "2027-01-05T09:00+09:00", "(/usr/share/zoneinfo/Asia/Tokyo)"),
    (":/usr/share/zoneinfo/Asia/Tokyo", "2027-01-05 09:00", "2027-01-05T09:00+09:00", "(/usr/share/zoneinfo/Asia/Tokyo)"),
    ("UTC-3", "2027-01-05 09:00", "2027-01-05T09:00+03:00", "(TZ=UTC-3)"),
    ("Europe/Berlin", "2027-03-28 02:30", "2027-03-28T02:30+01:00", "does not exist on this clock"),
    ("Europe/Berlin", "2027-10-31 02:30", "2027-10-31T02:30+02:00", "comes twice on this clock"),
], ids=["a zone file's path, as date reads TZ", "the same with POSIX's leading colon",
        "a POSIX rule is named as TZ gives it, not by its letters (UTC)",
        "a time summer time skips is said", "a time summer time repeats is said"])
def test_tz_as_date_reads_it_and_summer_times_edges(tz, typed, sent, said, monkeypatch, capsys):
    from broker.cli import _on_this_clock

    monkeypatch.setenv("TZ", tz)
    __import__("time").tzset()
    try:
        assert _on_this_clock(typed, quiet=False) == sent
    finally:
        monkeypatch.delenv("TZ")
        __import__("time").tzset()
    assert said in capsys.readouterr().err


# -- a deadline far off, in days --------------------------------------------------------------------------------------


@pytest.mark.parametrize("hours, said", [
    pytest.param(16, "16.0 h", id="16 h away is said in hours, as before"),
    pytest.param(47.99, "47.9 h", id="just under 48 h is still hours, rounded down"),
    pytest.param(48, "2 days", id="48 h is 2 days, with no .0"),
    pytest.param(60, "2.5 days", id="60 h is 2.5 days, to a tenth under ten days"),
    pytest.param(239.9, "9.9 days", id="under ten days, rounded down like the hours"),
    pytest.param(2667.4, "111 days", id="months away is whole days, not 2667.4 h"),
])
def test_a_far_span_is_said_in_days_and_a_near_one_in_hours(hours, said):
    from broker.views import far_duration

    assert far_duration(hours * 3600) == said


def test_a_deadline_months_away_is_said_in_days_either_side_of_now(cli):
    """A deadline months away read "(in 2667.4 h)" at submit and in `broker status ID`."""
    from broker.cli import _deadline_moment

    run, task = cli
    r = run("submit", str(task), "--budget", "5", "--deadline", "111d1h", "--dry-run")
    assert re.search(r"deadline \d{4}-\d\d-\d\d \d\d:\d\dZ \(in 111 days\)", r.stdout), r.stdout
    past = datetime.now(timezone.utc) - timedelta(days=111, hours=1)
    assert _deadline_moment(past.isoformat()) == f"{past:%Y-%m-%d %H:%M}Z (111 days ago)"
    soon = datetime.now(timezone.utc) + timedelta(hours=60, minutes=5)
    assert _deadline_moment(soon.isoformat()).endswith("(in 2.5 days)")


# -- a time alone, a date alone -------------------------------------------------------------------------------------


@pytest.mark.parametrize("typed, said", [
    pytest.param("9:00", r"--deadline '9:00': a time needs its date: '(\d{4}-\d\d-\d\d) 09:00' \(read on this "
                         r"machine's clock\), '\1T09:00Z' \(UTC\), or a duration such as '6h'",
                 id="a time alone is asked for its date, its next coming shown"),
    pytest.param("2026-12-07", r"--deadline '2026-12-07': a date needs its time of day: '2026-12-07 18:00' \(read on "
                               r"this machine's clock\), '2026-12-07T18:00Z' \(UTC\), or a duration such as '6h'",
                 id="a date alone is asked for its time of day, not for a timezone the CLI does not need"),
])
def test_a_time_or_a_date_alone_says_what_is_missing_and_a_form_taken(cli, typed, said):
    """`--deadline 9:00` was refused "must be an ISO time (2026-12-01T18:00:00Z) or a duration (...)"."""
    run, task = cli
    r = run("submit", str(task), "--budget", "5", "--deadline", typed, check=False)
    assert r.returncode == 1 and re.fullmatch(f"error: {said}\n", r.stderr), r.stderr
    r = run("--json", "submit", str(task), "--budget", "5", "--deadline", typed, "--dry-run", check=False)
    error = json.loads(r.stdout)
    assert r.returncode == 1 and error["field"] == "--deadline" and re.fullmatch(said, error["error"]), r.stdout


def test_the_api_refuses_a_time_alone_naming_the_field_and_its_next_date(cli, tmp_path):
    """A task file's `broker.deadline: '9:00'`, read by the broker: its 422 names the field and gives a date."""
    run, _ = cli
    task = tmp_path / "alone.yaml"
    task.write_text("name: due\nresources: {cpus: 1}\nrun: sleep 600\nbroker: {deadline: '9:00'}\n")
    r = run("--json", "submit", str(task), "--budget", "5", "--dry-run", check=False)
    error = json.loads(r.stdout)
    assert (r.returncode, error["status"], error["field"]) == (1, 422, "broker.deadline"), r.stdout
    assert re.fullmatch(r"broker\.deadline: is a time alone \(9:00\): give its date too, such as "
                        r"\d{4}-\d\d-\d\dT09:00Z, or a duration from now such as 6h", error["error"]), error
