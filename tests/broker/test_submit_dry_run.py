"""`broker submit --dry-run` and `POST /v1/jobs?dry_run=true`: a quote before submitting, storing nothing.

Against the real app (in process, SQLite) and a real `broker serve` for the CLI: a dry run answers where the job would
go and what it would cost, stores no job, no event and no Idempotency-Key, uploads no workdir, and is refused exactly
where the submit is refused.
"""

import json
import re
import signal

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.store import open_store
from broker_testing import ADMIN, TEAM_TOKENS, cli_runner, start_broker

CONFIG = """
pools:
  - {name: gpu-box, slots: 2, accelerator: A100, price_per_slot_hour: "2.00"}
zones:
  - {name: sim-a, tier: spot, instance_type: g5.xlarge}
default_budget_usd: "10"
max_workdir_bytes: 20000
"""
TASK = {"name": "train", "resources": {"accelerators": "A100:1"}, "run": "echo hi",
        "broker": {"budget_usd": "50", "expected_hours": 2}}


def auth(token=ADMIN):
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def served(make_settings, tmp_path):
    settings = make_settings(config=CONFIG)
    store = open_store(f"sqlite://{tmp_path / 'dry.db'}")
    with TestClient(create_app(settings, store=store, engine=False), raise_server_exceptions=False) as c:
        yield c, store, settings


def nothing_stored(client, store) -> None:
    assert client.get("/v1/jobs", headers=auth()).json()["jobs"] == []
    assert store.list_jobs(limit=100) == []


def test_a_dry_run_answers_the_quote_placement_and_queue_and_stores_nothing(served):
    client, store, _ = served
    r = client.post("/v1/jobs?dry_run=true", json=TASK, headers={**auth(), "Idempotency-Key": "k-1"})
    assert r.status_code == 200, r.text
    assert "location" not in r.headers
    run = r.json()
    assert run["dry_run"] is True and run["existing_job"] is None
    assert (run["name"], run["team"], run["expected_hours"]) == ("train", "default", "2")
    assert run["budget"] == {"micros": 50_000_000, "usd": "$50.00"}
    # the pool's slot at $2.00/h for 2 h: the cheapest way, which the budget covers
    assert run["estimate"] == {"micros": 4_000_000, "usd": "$4.00"}
    assert run["price_per_hour"] == {"micros": 2_000_000, "usd": "$2.00"}
    assert run["budget_covers"] == {"onprem": True}
    assert run["budget_lasts_seconds"] is None
    assert run["placement"]["tier"] == "onprem" and run["placement"]["location"] == "gpu-box"
    assert run["placement"]["price_per_hour"] == 2_000_000
    assert run["reason"].startswith("placed on onprem")
    assert run["queue_position"] == 1
    nothing_stored(client, store)

    # the same Idempotency-Key still makes a job afterwards, whose quote is the one the dry run gave
    made = client.post("/v1/jobs", json=TASK, headers={**auth(), "Idempotency-Key": "k-1"})
    assert made.status_code == 201, made.text
    job = made.json()
    assert job["quote"] == run["quote"]
    assert job["quote"]["tiers"][0]["estimate"] == run["estimate"]["micros"]
    assert [e["event"] for e in client.get(f"/v1/jobs/{job['id']}/events", headers=auth()).json()["events"]] \
        == ["submit"]


def test_a_dry_run_of_a_used_idempotency_key_names_the_job_the_submit_would_answer_with(served):
    client, store, _ = served
    job = client.post("/v1/jobs", json=TASK, headers={**auth(), "Idempotency-Key": "k-2"}).json()
    run = client.post("/v1/jobs?dry_run=true", json=TASK, headers={**auth(), "Idempotency-Key": "k-2"}).json()
    assert run["existing_job"] == job["id"] and run["quote"] == job["quote"]
    assert run["queue_position"] == 1
    other = {**TASK, "run": "echo other"}
    dry = client.post("/v1/jobs?dry_run=true", json=other, headers={**auth(), "Idempotency-Key": "k-2"})
    real = client.post("/v1/jobs", json=other, headers={**auth(), "Idempotency-Key": "k-2"})
    assert dry.status_code == real.status_code == 422 and dry.json() == real.json()
    assert len(store.list_jobs(limit=100)) == 1


def test_a_dry_run_behind_a_full_pool_says_it_would_wait_and_where_it_stands(served):
    client, store, _ = served
    from dataclasses import replace

    from broker.lifecycle import JobState
    from broker.store import Change

    # two jobs hold the pool's two slots (as the engine places them) and one more waits
    for n in range(3):
        body = {**TASK, "name": f"ahead-{n}", "resources": {"accelerators": "A100:1", "use_spot": False}}
        job_id = client.post("/v1/jobs", json=body, headers=auth()).json()["id"]
        if n < 2:
            job = store.get_job(job_id)
            store.commit(Change(job=replace(job, state=JobState.RUNNING, slots=(n,), running_since=job.submitted_at,
                                            placement={"tier": "onprem", "location": "gpu-box", "num_nodes": 1}),
                                expected_version=job.version))
    body = {**TASK, "resources": {"accelerators": "A100:1", "use_spot": False}}
    run = client.post("/v1/jobs?dry_run=true", json=body, headers=auth()).json()
    assert run["placement"] is None
    assert "pool gpu-box is full" in run["reason"], run["reason"]
    assert run["queue_position"] == 2  # behind the one waiting already
    assert len(store.list_jobs(limit=100)) == 3


def test_without_expected_hours_a_dry_run_is_priced_per_hour_with_how_long_the_budget_lasts(served):
    client, _, _ = served
    body = {**TASK, "broker": {"budget_usd": "0.50"}}
    run = client.post("/v1/jobs?dry_run=true", json=body, headers=auth()).json()
    assert run["estimate"] is None and run["budget_covers"] is None
    assert run["price_per_hour"]["micros"] == min(t["price_per_hour"] for t in run["quote"]["tiers"])
    # until the engine's budget stop: the clean stop it keeps of every budget left out
    assert run["budget_lasts_seconds"] == 500_000 * 3600 // run["price_per_hour"]["micros"] - run["quote"]["stop_seconds"]
    assert run["quote"]["stop_seconds"] > 0
    assert run["quote"]["per_hour_only"] is True


@pytest.mark.parametrize("body, token, status, field", [
    ({**TASK, "broker": {"budget_usd": "1", "expected_hours": 2}}, ADMIN, 422, "broker.budget_usd"),
    ({**TASK, "resources": {"accelerators": "H100:8"}}, ADMIN, 422, "resources.accelerators"),
    ({**TASK, "broker": {"team": "nlp"}}, "vision-token", 403, "broker.team"),
    ({**TASK, "broker": {"budget_usd": "lots"}}, ADMIN, 422, "broker.budget_usd"),
    ({**TASK, "num_nodes": 0}, ADMIN, 422, "num_nodes"),
], ids=["a budget under the cheapest estimate", "resources no offer has", "another team's submit",
        "a budget that is no amount", "no nodes"])
def test_a_dry_run_is_refused_with_the_very_error_of_the_submit(served, body, token, status, field):
    client, store, _ = served
    dry = client.post("/v1/jobs?dry_run=true", json=body, headers=auth(token))
    real = client.post("/v1/jobs", json=body, headers=auth(token))
    assert dry.status_code == real.status_code == status, (dry.text, real.text)
    assert dry.json() == real.json() and dry.json()["field"] == field
    nothing_stored(client, store)


def test_a_dry_run_on_the_checkpoint_base_of_a_live_job_gets_the_submits_409(served, tmp_path):
    client, store, _ = served
    base = (tmp_path / "ckpt").as_uri()
    body = {**TASK, "broker": {**TASK["broker"], "checkpoint": base}}
    assert client.post("/v1/jobs", json=body, headers=auth()).status_code == 201
    dry = client.post("/v1/jobs?dry_run=true", json=body, headers=auth())
    real = client.post("/v1/jobs", json=body, headers=auth())
    assert dry.status_code == real.status_code == 409
    assert dry.json() == real.json() and dry.json()["field"] == "broker.checkpoint"
    assert len(store.list_jobs(limit=100)) == 1


def test_a_dry_run_with_secrets_makes_no_secrets_key(served):
    client, store, settings = served
    body = {**TASK, "secrets": {"HF_TOKEN": "hf_secret"}}
    r = client.post("/v1/jobs?dry_run=true", json=body, headers=auth())
    assert r.status_code == 200, r.text
    assert "hf_secret" not in r.text
    from pathlib import Path

    assert not any(Path(settings.data_dir).glob("*key*"))
    nothing_stored(client, store)


def test_dry_run_is_in_the_openapi_document(served):
    client, _, _ = served
    doc = client.get("/openapi.json").json()
    post = doc["paths"]["/v1/jobs"]["post"]
    assert "dry_run" in [p["name"] for p in post["parameters"]]
    assert "DryRunOut" in json.dumps(post["responses"]["200"])


# -- the CLI against a real `broker serve` ---------------------------------------------------------------------

@pytest.fixture
def cli(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'c.db'}", engine="off", config=CONFIG,
                             env_extra={"BROKER_TEAM_TOKENS": json.dumps(TEAM_TOKENS)})
    yield cli_runner(url, token="vision-token"), tmp_path
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


def test_cli_dry_run_prints_where_and_what_and_submits_nothing(cli):
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("name: train\nresources: {accelerators: A100:1}\nrun: echo hi\n"
                    "broker: {budget_usd: 50, expected_hours: 2}\n")
    out = run("submit", str(task), "--dry-run", "--idempotency-key", "k-cli", extra_env={"BROKER_TOKEN": ADMIN})
    lines = out.stdout.splitlines()
    assert lines[0] == "dry run: nothing was submitted, stored or uploaded", out.stdout
    assert lines[1].startswith("would queue train for team default: budget $50.00, estimate onprem $4.00")
    assert "for 2 h: $4.00 at the cheapest; the budget covers on-prem" in out.stdout
    assert re.search(r"^would be placed on onprem 1x A100 .*gpu-box, at \$2\.00/h$", out.stdout, re.M), out.stdout
    assert "queue: it would start now (no job waits ahead of it)" in out.stdout  # placed: it starts now
    as_json = json.loads(run("--json", "submit", str(task), "--dry-run", extra_env={"BROKER_TOKEN": ADMIN}).stdout)
    assert as_json["dry_run"] is True and as_json["estimate"]["usd"] == "$4.00"
    assert json.loads(run("--json", "status", extra_env={"BROKER_TOKEN": ADMIN}).stdout) == []
    # the key was not taken: the real submit makes the job, quoted as the dry run said
    job = json.loads(run("--json", "submit", str(task), "--idempotency-key", "k-cli",
                         extra_env={"BROKER_TOKEN": ADMIN}).stdout)
    assert job["quote"] == as_json["quote"]


def test_cli_dry_run_of_a_refused_task_exits_as_the_submit_with_its_error_line(cli):
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("name: train\nresources: {accelerators: A100:1}\nrun: echo hi\n"
                    "broker: {budget_usd: 1, expected_hours: 2}\n")
    dry = run("submit", str(task), "--dry-run", check=False)
    real = run("submit", str(task), check=False)
    assert dry.returncode == real.returncode == 1
    assert dry.stderr == real.stderr and dry.stderr.startswith("error [422]: broker.budget_usd: ")
    dry = run("--json", "submit", str(task), "--dry-run", check=False)
    assert json.loads(dry.stdout)["field"] == "broker.budget_usd"


def test_cli_dry_run_uploads_no_workdir_to_a_broker_it_would_upload_to(cli):
    """A team's token uploads its workdir even to a broker on this host: the dry run checks it is there and sends
    nothing (no pack stored), and the broker quotes the rest of the task."""
    run, tmp = cli
    work = tmp / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    task = tmp / "t.yaml"
    task.write_text(f"name: train\nworkdir: {work}\nresources: {{accelerators: A100:1}}\nrun: python train.py\n"
                    "broker: {budget_usd: 50, expected_hours: 2}\n")
    out = run("submit", str(task), "--dry-run")
    assert re.search(rf"dry run: workdir {work}: 1 file, .* packed \(the broker takes 19\.5 KiB\), would be "
                     "uploaded by a submit; nothing is uploaded", out.stderr), out.stderr
    assert "would queue train for team vision" in out.stdout
    assert not list((tmp / "data").rglob("*.tar.gz"))  # packs are kept under <data>/checkpoints/workdirs
    missing = tmp / "t2.yaml"
    missing.write_text(task.read_text().replace(str(work), str(tmp / "gone")))
    r = run("submit", str(missing), "--dry-run", check=False)
    assert r.returncode == 1 and "no such directory here" in r.stderr


def test_cli_dry_run_of_a_workdir_too_large_for_the_broker_is_refused_as_the_submit_is(cli):
    """The dry run packs the workdir as a submit does and holds it to the broker's max_workdir_bytes: a task file a
    CI job checked with --dry-run was refused at the submit for its workdir."""
    import os

    run, tmp = cli
    work = tmp / "big"
    work.mkdir()
    (work / "weights.bin").write_bytes(os.urandom(60_000))  # does not compress
    task = tmp / "t.yaml"
    task.write_text(f"name: train\nworkdir: {work}\nresources: {{accelerators: A100:1}}\nrun: echo\n"
                    "broker: {budget_usd: 50, expected_hours: 2}\n")
    dry = run("submit", str(task), "--dry-run", check=False)
    real = run("submit", str(task), check=False)
    assert dry.returncode == real.returncode == 1
    assert dry.stderr == real.stderr and "weights.bin" in dry.stderr, dry.stderr
    assert json.loads(run("--json", "status", extra_env={"BROKER_TOKEN": ADMIN}).stdout) == []


def test_cli_dry_run_with_wait_is_a_usage_error_naming_the_option(cli):
    run, tmp = cli
    task = tmp / "t.yaml"
    task.write_text("name: train\nrun: echo hi\n")
    r = run("submit", str(task), "--dry-run", "--wait", check=False)
    assert r.returncode == 2 and "--wait: a dry run makes no job to follow" in r.stderr
    r = run("--json", "submit", str(task), "--dry-run", "--wait", check=False)
    assert r.returncode == 2 and json.loads(r.stdout)["field"] == "--wait"


def test_a_tier_whose_estimate_leaves_nothing_for_the_clean_stop_is_not_covered(make_settings, tmp_path):
    """The engine stops a job once what is left pays only for a clean stop: a tier quoted at exactly the budget was
    said covered, and a job placed there would have been stopped short of its expected end."""
    config = CONFIG + "zones:\n  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, price_per_hour: '4.00'}\n"
    config = config.replace("zones:\n  - {name: sim-a, tier: spot, instance_type: g5.xlarge}\n", "")
    store = open_store(f"sqlite://{tmp_path / 'dry.db'}")
    with TestClient(create_app(make_settings(config=config), store=store, engine=False),
                    raise_server_exceptions=False) as client:
        task = {"name": "t", "resources": {"any_of": [{"accelerators": "A100:1"}, {"accelerators": "A10G:1"}]},
                "run": "echo hi", "broker": {"budget_usd": "8", "expected_hours": 2}}  # pool $4, on-demand $8
        run = client.post("/v1/jobs?dry_run=true", json=task, headers=auth()).json()
        assert run["budget_covers"] == {"onprem": True, "ondemand": False}, run
        task["broker"]["budget_usd"] = "8.04"  # and the 36 s clean stop at $4.00/h
        run = client.post("/v1/jobs?dry_run=true", json=task, headers=auth()).json()
        assert run["budget_covers"] == {"onprem": True, "ondemand": True}, run
