"""`broker submit --deadline '2026-12-07 09:00'`: a time with no time zone, read on the user's own clock.

The broker refuses such a time (it cannot know the submitter's clock), and `--deadline` sent it as given: the user got
"has no timezone" and the CLI ignored `TZ`, which says the very clock meant. The CLI now reads it there (`TZ`, else the
system's zone) and sends it with that moment's offset, saying so on stderr; a `TZ` it cannot read is refused naming
`--deadline`. A task file's `broker.deadline` without its zone stays refused: a file is submitted from many clocks.
"""

import json
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
    assert f"deadline {due:%Y-%m-%d %H:%M}Z (in 5.9 h)" in out, out
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
