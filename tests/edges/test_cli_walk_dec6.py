"""What a walk through the ``broker`` CLI found: a log cut at the broker's first 1 MiB, a Ctrl-C that said nothing,
no ``--version``, typos of a command left unnamed and options read by their prefix, exit codes that did not tell a
failed job from a broker out of reach, box characters in piped tables, a tab in YAML, a replayed submit's JSON with no
marker, a repeated ``--env`` and a zone-only flag taken and ignored, NO_COLOR that left bold and dim on, and
``--budget abc`` named as a field of the task."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest

from broker import cli
from broker.client import BrokerClient, BrokerError

from . import world
from .conftest import serving_world

OFFLINE = ["--url", "http://127.0.0.1:9", "--token", "t"]  # a port nothing listens on: no request may be needed
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def server(tmp_path, store, seeded):
    with serving_world(tmp_path, store) as url:
        yield url


def _at(url: str) -> list[str]:
    return ["--url", url, "--token", world.ADMIN]


# -- 1. `broker logs JOB` prints the whole attempt, not its first MiB ------------------------------------------------

PAGE = 1 << 20


def _paged_logs(text: str):
    data = text.encode()

    def logs(self, job_id, *, offset=0, attempt=None):
        piece = data[offset:offset + PAGE]
        return {"attempt": 1, "data": piece.decode(), "offset": offset + len(piece), "done": True}

    return logs


def test_logs_without_follow_prints_every_page_of_the_attempts_output(monkeypatch, capsys):
    text = "".join(f"line {i:07d} of the run\n" for i in range(120_000))  # 2.6 MiB: three pages
    monkeypatch.setattr(BrokerClient, "logs", _paged_logs(text))
    assert cli.main([*OFFLINE, "logs", "j-1"]) == 0
    out = capsys.readouterr().out
    assert len(out) == len(text) and out.endswith("line 0119999 of the run\n")  # was cut at 1 MiB, mid-line
    assert cli.main([*OFFLINE, "--json", "logs", "j-1"]) == 0
    chunk = json.loads(capsys.readouterr().out)
    assert chunk["data"] == text and chunk["offset"] == len(text.encode()) and chunk["done"] is True


# -- 2. Ctrl-C while following says the job was left as it is ------------------------------------------------------


def test_ctrl_c_while_following_a_job_says_it_is_left_running_and_how_to_follow_it_again(monkeypatch, capsys):
    def interrupted(self, job_id, **kw):
        raise KeyboardInterrupt
        yield  # a generator, as follow_logs is

    monkeypatch.setattr(BrokerClient, "follow_logs", interrupted)
    monkeypatch.setattr(BrokerClient, "job", lambda self, job_id: {"id": job_id, "state": "queued"})
    assert cli.main([*OFFLINE, "logs", "-f", "j-3fa9c1b2e0"]) == 130
    assert capsys.readouterr().err == ("stopped following j-3fa9c1b2e0; it is still queued: `broker logs -f "
                                       "j-3fa9c1b2e0` follows it again, `broker cancel j-3fa9c1b2e0` stops it\n")


# -- 3. --version -------------------------------------------------------------------------------------------------


def test_broker_version_prints_the_installed_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"broker {version('spot-broker')}\n"


# -- 4. a command misspelt is named with the one meant; an option is never read by its prefix -----------------------


@pytest.mark.parametrize("argv, says", [
    (["stauts"], "invalid choice: 'stauts'"),
    (["fault", "premept", "j-1"], "invalid choice: 'premept'"),
], ids=["a command", "a fault's kind"])
def test_a_misspelt_command_is_named_with_the_one_meant(capsys, argv, says):
    assert cli.main([*OFFLINE, *argv]) == 2
    err = capsys.readouterr().err
    meant = "status" if argv == ["stauts"] else "preempt"
    assert says in err and err.rstrip().endswith(f"(did you mean {meant}?)"), err


def test_an_option_cut_short_is_refused_with_the_one_meant_not_read_as_it(capsys):
    """`--stat x` was read as `--state x` (argparse's prefix matching): it asked the broker (exit 1 here)."""
    assert cli.main([*OFFLINE, "status", "--stat", "running"]) == 2
    assert "unrecognized arguments: --stat (did you mean --state?)" in capsys.readouterr().err


def test_a_misspelt_simulate_option_is_named_not_said_to_be_missing(capsys):
    assert cli.main(["simulate", "--windos", "w.jsonl"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --windos (did you mean --windows?)" in err and "required" not in err, err


# -- 5. exit codes ------------------------------------------------------------------------------------------------


@pytest.fixture
def failed_job(monkeypatch, tmp_path):
    job = {"id": "j-1", "name": "t", "team": "default", "state": "failed", "quote": {}, "budget": {"usd": "$1"}}
    monkeypatch.setattr(BrokerClient, "submit", lambda self, task, **kw: {**job, "state": "queued"})
    monkeypatch.setattr(BrokerClient, "follow_logs", lambda self, job_id, **kw: iter(["boom\n"]))
    monkeypatch.setattr(BrokerClient, "follow_log_chunks", lambda self, job_id, **kw: iter([]))
    monkeypatch.setattr(BrokerClient, "job", lambda self, job_id: job)
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nrun: exit 1\n")
    return task


def test_a_followed_job_that_failed_exits_3_not_1_as_a_broker_out_of_reach(failed_job, capsys):
    assert cli.main([*OFFLINE, "--json", "submit", str(failed_job), "--wait"]) == 3
    assert cli.main([*OFFLINE, "logs", "-f", "j-1"]) == 3
    assert cli.main([*OFFLINE, "--json", "logs", "-f", "j-1"]) == 3
    capsys.readouterr()
    assert cli.main(["--help"]) == 0
    assert "exit codes: 0 done" in capsys.readouterr().out


def test_help_into_a_reader_gone_exits_141_as_every_other_output_does():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (`broker --help | true`)
    try:
        r = subprocess.run([sys.executable, "-m", "broker.cli", "--help"], stdout=write, stderr=subprocess.PIPE,
                           cwd=REPO, text=True, timeout=60)
    finally:
        os.close(write)
    assert r.returncode == 141 and "Traceback" not in r.stderr, r.stderr  # was 0: argparse dropped the error


# -- 6. piped tables have no borders -------------------------------------------------------------------------------


def test_a_piped_table_is_plain_columns_whose_first_field_is_the_id(server, capsys):
    assert cli.main([*_at(server), "status"]) == 0
    out = capsys.readouterr().out
    assert not set("│┃━┏┗─┡") & set(out), out
    firsts = [line.split()[0] for line in out.splitlines()]
    assert firsts[0] == "id" and set(firsts[1:]) == {"j-a1", "j-a2", "j-a3", "j-b1"}, out
    assert all(line == line.rstrip() for line in out.splitlines())


# -- 7. a tab in YAML ---------------------------------------------------------------------------------------------


def test_a_tab_indenting_yaml_is_said_to_be_a_tab_by_the_cli_and_the_api():
    from broker.spec import SpecError
    from broker.task_text import load_text

    text = "name: x\nresources:\n\tcpus: 1\nrun: echo hi\n"
    with pytest.raises(BrokerError) as cli_said:
        from broker.client import load_task

        load_task(text)
    with pytest.raises(SpecError) as api_said:
        load_text(text)
    for said in (cli_said.value.detail, api_said.value.reason):
        assert "line 3, column 1: found a tab character" in said and "YAML indents with spaces, never tabs" in said


# -- 8. a replayed submit's JSON says so ---------------------------------------------------------------------------


def test_a_submit_replayed_by_its_idempotency_key_names_the_existing_job_in_its_json(server, tmp_path, capsys):
    task = tmp_path / "t.yaml"
    task.write_text("name: once\nresources: {cpus: 1}\nrun: echo hi\n")
    argv = [*_at(server), "--json", "submit", str(task), "--budget", "1", "--idempotency-key", "walk-k1"]
    assert cli.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert cli.main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert first["existing_job"] is None and again["id"] == first["id"] and again["existing_job"] == first["id"]


# -- 9. a name given twice, a zone's flag on a job's fault ----------------------------------------------------------


@pytest.mark.parametrize("flag, says", [("--env", "--env A: given twice (1, then 2): give it once"),
                                        ("--secret", "--secret A: given twice: give it once")])
def test_a_name_given_twice_to_env_or_secret_is_refused(tmp_path, capsys, flag, says):
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nrun: echo\n")
    assert cli.main([*OFFLINE, "--json", "submit", str(task), flag, "A=1", flag, "A=2"]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {says}\n" and json.loads(out)["field"] == flag  # the secret's values never echoed


@pytest.mark.parametrize("kind, flag", [("kill", "--down"), ("preempt", "--up")])
def test_a_zones_flag_on_a_jobs_fault_is_refused_not_ignored(capsys, kind, flag):
    assert cli.main([*OFFLINE, "fault", kind, "j-1", flag]) == 2
    assert f"{flag}: only a zone's fault takes it" in capsys.readouterr().err


# -- 11. NO_COLOR --------------------------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_color_on_a_terminal_writes_no_escape_codes_at_all(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    cli._console().print("[bold]j-1[/] [dim](note)[/] [red]failed[/]")
    assert terminal.getvalue() == "j-1 (note) failed\n"


# -- 12. --budget abc is named as --budget ------------------------------------------------------------------------


def test_a_budget_option_the_broker_refuses_is_named_as_the_option(server, tmp_path, capsys):
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nresources: {cpus: 1}\nrun: echo\n")
    assert cli.main([*_at(server), "--json", "submit", str(task), "--budget", "abc"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("error [422]: --budget: ") and "broker.budget_usd" not in err, err
    assert json.loads(out)["field"] == "--budget"
    task.write_text("name: t\nresources: {cpus: 1}\nrun: echo\nbroker: {budget_usd: abc}\n")
    assert cli.main([*_at(server), "--json", "submit", str(task)]) == 1  # from the file: named as the file's field
    assert json.loads(capsys.readouterr().out)["field"] == "broker.budget_usd"


def test_an_option_that_overrides_the_task_files_broker_setting_says_so(server, tmp_path, capsys):
    """`--budget 5` over the file's `budget_usd: '2'` won unsaid (Slack's reply says it now); the same value written
    another way overrides nothing, and says nothing."""
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nresources: {cpus: 1}\nrun: echo\nbroker: {budget_usd: '2', deadline: 6h}\n")
    assert cli.main([*_at(server), "--json", "submit", str(task), "--budget", "5", "--deadline", "12h"]) == 0
    out, err = capsys.readouterr()
    assert "note: --budget 5 overrides the task's broker.budget_usd '2'" in err, err
    assert "note: --deadline 12h overrides the task's broker.deadline '6h'" in err, err
    assert json.loads(out)["budget"]["micros"] == 5_000_000
    assert cli.main([*_at(server), "--json", "submit", str(task), "--budget", "$2.00", "--deadline", "360min"]) == 0
    assert "overrides" not in capsys.readouterr().err
