"""More CLI input checked against a real ``broker serve``: ``--upload-workdir`` given with its negation, and a task's
amount of dollars that YAML reads as a float from an exponent (``budget_usd: 1.0e+3``)."""

import json
import signal

import httpx
import pytest

from broker_testing import ADMIN, cli_runner, start_broker

CONFIG = """
pools:
  - {name: local, slots: 1, price_per_slot_hour: "0.36"}
tick_seconds: 0.2
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker with no engine (the jobs stay queued), and a task with a workdir."""
    tmp = tmp_path_factory.mktemp("input-more")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'b.db'}", engine="off", config=CONFIG)
    (tmp / "wd").mkdir()
    (tmp / "wd" / "train.py").write_text("print('hi')\n")
    task = tmp / "t.yaml"
    task.write_text(f"name: t\nworkdir: {tmp / 'wd'}\nresources: {{cpus: 1}}\nrun: python train.py\n")
    yield cli_runner(url), tmp, task
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def job_names(url: str) -> list[str]:
    r = httpx.get(f"{url}/v1/jobs", params={"limit": 1000}, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    return [j["name"] for j in r.json()["jobs"]]


# -- 1. --upload-workdir and --no-upload-workdir together ---------------------------------------------------------


@pytest.mark.parametrize("first, then", [("--upload-workdir", "--no-upload-workdir"),
                                         ("--no-upload-workdir", "--upload-workdir")])
def test_a_flag_and_its_negation_together_are_refused_naming_both(broker, first, then):
    """The last one given was done without a word (an alias's --upload-workdir and a typed --no-upload-workdir: the
    broker was left to read a directory it may not have), where an option given twice is refused."""
    run, _, task = broker
    before = job_names(run.url)
    r = run("submit", str(task), first, then, check=False)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    said = f"{first} and {then} are both given, and they say the opposite: give one"
    assert r.stderr.splitlines()[-1] == f"broker submit: error: {said}", r.stderr
    r = run("--json", "submit", str(task), first, then, check=False)
    assert r.returncode == 2 and json.loads(r.stdout) == {"error": said}, r.stdout
    assert job_names(run.url) == before  # nothing was uploaded or submitted


@pytest.mark.parametrize("flag", ["--upload-workdir", "--no-upload-workdir"])
def test_the_same_flag_twice_still_means_it_once(broker, flag):
    run, _, task = broker
    r = run("submit", str(task), flag, flag)
    assert r.stdout.startswith("submitted j-"), r.stdout
    uploaded = "workdir " in r.stderr and "packed" in r.stderr  # given twice, as once
    assert uploaded is (flag == "--upload-workdir"), r.stderr


# -- 2. an amount of dollars with an exponent, as YAML reads it ---------------------------------------------------


def task_with(tmp, name: str, broker_lines: str):
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\nresources: {{cpus: 1}}\nrun: echo hi\nbroker:\n{broker_lines}")
    return path


@pytest.mark.parametrize("line, field, said", [
    ("  budget_usd: 1.0e+3\n", "broker.budget_usd", "'1.0e+3' (line 5) is not an amount of dollars: write it as "
                                                    "1000, not with an exponent"),
    ("  budget_usd: 5.0E-1\n", "broker.budget_usd", "'5.0E-1' (line 5) is not an amount of dollars: write it as "
                                                    "0.50, not with an exponent"),
    ("  max_price_per_hour: 2.5e+0\n", "broker.max_price_per_hour",
     "'2.5e+0' (line 5) is not an amount of dollars: write it as 2.5, not with an exponent"),
    ("  budget_usd: 1.0e+30\n", "broker.budget_usd", "'1.0e+30' (line 5) must be at most $1,000,000,000"),
], ids=["$1,000 as 1.0e+3", "50 cents as 5.0E-1", "a price cap", "past the largest amount"])
def test_an_amount_yaml_reads_from_an_exponent_is_refused_as_the_cli_and_api_refuse_one(broker, line, field, said):
    """``budget_usd: 1.0e+3`` was a $1,000 budget (YAML's float 1000.0), where ``budget_usd: 1e3`` (text to YAML 1.1),
    ``--budget 1e3`` and the API's ``"1e3"`` are refused as written with an exponent."""
    run, tmp, _ = broker
    before = job_names(run.url)
    task = task_with(tmp, "exp", line)
    r = run("submit", str(task), check=False)
    assert r.returncode == 1 and r.stderr == f"error: the task's {field}: {said}\n", r.stderr
    r = run("--json", "submit", str(task), check=False)
    assert json.loads(r.stdout) == {"error": f"the task's {field}: {said}", "field": field}
    # the API reads a YAML body the same way
    r = httpx.post(f"{run.url}/v1/jobs", content=task.read_text(), timeout=30,
                   headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json() == {"field": field, "detail": f"{field}: {said}"}, r.text
    assert job_names(run.url) == before


def test_an_alias_of_such_an_amount_is_refused_too(broker):
    run, tmp, _ = broker
    task = tmp / "alias.yaml"
    task.write_text("name: alias\nresources: {cpus: 1}\nrun: echo hi\nx-cap: &cap 1.0e+3\n"
                    "broker:\n  budget_usd: *cap\n")
    r = run("submit", str(task), check=False)
    assert r.returncode == 1 and r.stderr.startswith("error: the task's broker.budget_usd: '1.0e+3' (line 4) is not "
                                                     "an amount of dollars"), r.stderr


def test_amounts_written_as_yaml_numbers_without_an_exponent_are_still_taken(broker):
    run, tmp, _ = broker
    job = json.loads(run("--json", "submit", str(task_with(tmp, "plain", "  budget_usd: 12.5\n"
                                                                          "  max_price_per_hour: 0.5\n"))).stdout)
    assert job["budget"] == {"micros": 12_500_000, "usd": "$12.50"}
    job = json.loads(run("--json", "submit", str(task_with(tmp, "whole", "  budget_usd: 1_000.5\n"))).stdout)
    assert job["budget"]["micros"] == 1_000_500_000
    # an exponent elsewhere in the task is no amount of dollars: left as it was
    task = task_with(tmp, "lr", "  budget_usd: 3\n")
    task.write_text(task.read_text() + "envs:\n  LR: 1.0e-4\n")
    job = json.loads(run("--json", "submit", str(task)).stdout)
    assert job["budget"]["micros"] == 3_000_000
