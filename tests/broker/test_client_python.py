"""``broker.client.BrokerClient`` used from Python (a notebook), as the QA walkthrough of it did: what ``broker submit``
does with a task's paths, the same in the client; the broker refusing a relative host path it would read from its own
folder; a wait that rides out a broker restart; the Python values a notebook passes; the filters and methods the CLI
has.

Real parts: ``broker serve`` as a subprocess (SQLite, the local launcher running the jobs), the client over HTTP."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from broker_testing import ADMIN, start_broker, wait_for
from testports import free_port

from broker.client import BrokerClient, BrokerError, duration_text

CONFIG = """
pools: [{name: cpu, slots: 2, price_per_slot_hour: "0.05"}]
tick_seconds: 0.2
stop_grace_seconds: 2
"""

TEAM = "vision-token"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One broker for the module, with a team: (url, its folder)."""
    tmp = tmp_path_factory.mktemp("served")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=CONFIG,
                             env_extra={"BROKER_TEAM_TOKENS": json.dumps({"vision": TEAM})})
    yield url, tmp
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as http:
        for job in http.get("/v1/jobs").json()["jobs"]:
            if job["state"] in ("queued", "placed", "launching", "running"):
                http.post(f"/v1/jobs/{job['id']}/cancel")
    proc.send_signal(signal.SIGTERM)
    proc.wait(20)


def project(root: Path) -> Path:
    """A notebook's project folder, not the broker's: its code and a task that runs it from ``workdir: .``."""
    root.mkdir(parents=True)
    (root / "mycode.py").write_text('print("my notebook code")\n')
    (root / "data.txt").write_text("my data\n")
    (root / "task.yaml").write_text(f"name: wd-test\nresources: {{cpus: 1}}\nworkdir: .\n"
                                    f"file_mounts: {{{root}/node/data.txt: ./data.txt}}\n"
                                    f"run: pwd; python mycode.py; cat {root}/node/data.txt\n"
                                    "broker: {budget_usd: \"0.1\"}\n")
    return root


def output(client: BrokerClient, job_id: str) -> list[str]:
    """The job's output lines, the broker's own notes (``[spot-broker] file_mounts …: a link to …``) left out."""
    text = "".join(page["data"] for page in client.log_pages(job_id))
    return [line for line in text.splitlines() if not line.startswith("[spot-broker]")]


# -- 1. relative paths: read from where the client runs; the broker refuses them ---------------------------------------


def test_workdir_dot_submitted_by_the_client_runs_the_callers_folder_not_the_brokers(served, tmp_path, monkeypatch):
    """QA 1: a notebook in ~/proj submitting ``workdir: .`` ran ``/work/main`` (the broker's install), and failed on
    ``python mycode.py`` there. The client reads it from its own folder, as ``broker submit`` does."""
    url, _ = served
    proj = project(tmp_path / "proj")
    monkeypatch.chdir(proj)
    with BrokerClient(url, ADMIN) as client:
        job = client.submit((proj / "task.yaml").read_text())
        ended = client.wait(job["id"], timeout=90)
        text = output(client, job["id"])
    assert ended["state"] == "succeeded", (ended["reason"], text)
    assert text == [str(proj), "my notebook code", "my data"], text  # its mount read from the caller's folder too


@pytest.mark.parametrize("task, field", [
    ({"workdir": "."}, "workdir"),
    ({"workdir": "proj/sub"}, "workdir"),
    ({"file_mounts": {"/data": "./data.txt"}}, "file_mounts./data"),
    ({"file_mounts": {"/data": {"source": ["s3://b/x", "data"], "mode": "COPY"}}}, "file_mounts./data.source"),
    ({"file_mounts": {"/k": "x:/../../../etc/broker/secrets-key"}}, "file_mounts./k"),
], ids=["workdir dot", "a relative workdir", "a relative mount source", "a relative source in a storage mapping",
        "a first part holding a colon, a URL with no host to SkyPilot, which reads it as a path"])
def test_a_relative_host_path_posted_to_the_api_is_refused_naming_its_field(served, task, field):
    url, _ = served
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as http:
        r = http.post("/v1/jobs", json={"name": "rel", "run": "true", **task, "broker": {"budget_usd": "0.1"}})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["field"] == field, body
    assert "a relative path, which the broker would read from its own folder, not from the folder you submit from" \
        in body["detail"] and "BrokerClient.submit make a relative one absolute" in body["detail"], body


def test_absolute_home_bucket_and_broker_paths_are_still_taken(served, tmp_path):
    url, _ = served
    (tmp_path / "d").mkdir()
    (tmp_path / "f.txt").write_text("x")
    task = {"name": "abs", "run": "true", "workdir": str(tmp_path / "d"), "broker": {"budget_usd": "0.1"},
            "file_mounts": {"/a": str(tmp_path / "f.txt"), "/b": "~/", "/c": "s3://bucket/data",
                            "/ckpt": "broker:checkpoint"}}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10) as http:
        r = http.post("/v1/jobs", params={"dry_run": "true"}, json=task)
    assert r.status_code == 200, r.text


# -- 2. the workdir uploaded, as `broker submit` uploads it -------------------------------------------------------------


def test_a_team_token_submits_workdir_dot_by_uploading_it_as_broker_submit_does(served, tmp_path, monkeypatch):
    """QA 2: a team's ``submit`` of ``workdir: .`` was a 403 ("a path on the broker's host"): only the CLI could pack
    and upload it. The client does now, by default where the broker reads no path of this caller's."""
    url, _ = served
    proj = project(tmp_path / "proj")
    (proj / ".gitignore").write_text("cache/\n")
    (proj / "cache").mkdir()
    (proj / "cache" / "big.bin").write_text("left out")
    monkeypatch.chdir(proj)
    said: list[str] = []
    with BrokerClient(url, TEAM) as client:
        job = client.submit(Path("task.yaml"), on_upload=said.append)
        ended = client.wait(job["id"], timeout=90)
        text = output(client, job["id"])
        with pytest.raises(BrokerError) as refused:  # told not to upload, a team names the broker's paths: refused
            client.submit(Path("task.yaml"), upload_workdir=False)
    assert ended["state"] == "succeeded", (ended["reason"], text)
    assert text[1:] == ["my notebook code", "my data"] and text[0] != str(proj), text  # an unpacked copy of it
    assert any(line.startswith(f"workdir {proj}: ") and "uploaded (sha256:" in line for line in said), said
    assert any(line.startswith(f"file_mounts {proj}/node/data.txt ({proj}/data.txt): 1 file,") for line in said), said
    assert refused.value.status == 403 and refused.value.field == "workdir", refused.value.detail


def test_told_to_upload_a_folder_that_is_not_there_names_the_python_option(served, tmp_path, monkeypatch):
    url, _ = served
    monkeypatch.chdir(tmp_path)
    with BrokerClient(url, ADMIN) as client, pytest.raises(BrokerError) as err:
        client.submit({"run": "true", "workdir": "gone", "broker": {"budget_usd": "0.1"}}, upload_workdir=True)
    assert err.value.detail == ("workdir gone: no such directory here, so it cannot be uploaded (upload_workdir=False "
                                "leaves it for the broker's host to read)"), err.value.detail


# -- 3. wait() through a broker restart ---------------------------------------------------------------------------------


def test_wait_rides_out_a_broker_restart_and_returns_the_ended_job(tmp_path):
    """QA 3: ``wait`` raised "cannot reach the broker" 3 s into a restart, while the job ran on and succeeded."""
    port = free_port()
    db = f"sqlite://{tmp_path / 'r.db'}"
    proc, url = start_broker(tmp_path, db, port, config=CONFIG)
    client = BrokerClient(url, ADMIN)
    job = client.submit({"name": "sleeper", "resources": {"cpus": 1}, "run": "sleep 6; echo done",
                         "broker": {"budget_usd": "0.1"}})
    wait_for(lambda: client.job(job["id"])["state"] == "running", timeout=60)
    told, got, failed = [], [], []

    def waiter():
        try:
            got.append(client.wait(job["id"], timeout=None, poll=0.2, on_unreachable=told.append))
        except Exception as exc:  # noqa: BLE001 - whatever ended the wait is the test's failure
            failed.append(exc)

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    try:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        time.sleep(3)  # out of reach meanwhile: the old wait gave up here
        assert thread.is_alive() and not failed, failed
        proc, _ = start_broker(tmp_path, db, port, config=CONFIG)
        thread.join(90)
        assert not thread.is_alive() and not failed, failed
        assert got[0]["state"] == "succeeded", got
        # told once it went (refused between two polls, or the connection reset under one in flight) and once back
        assert len(told) == 2 and told[1] is None, told
        assert "cannot reach the broker" in told[0] or "dropped before it answered" in told[0], told
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)


def test_wait_timeout_none_waits_past_any_default_and_a_timeout_still_raises(served):
    url, _ = served
    with BrokerClient(url, ADMIN) as client:
        job = client.submit({"name": "short", "resources": {"cpus": 1}, "run": "sleep 1",
                             "broker": {"budget_usd": "0.1"}})
        with pytest.raises(TimeoutError, match=f"job {job['id']} still .* after 0.01 s"):
            client.wait(job["id"], timeout=0.01)
        assert client.wait(job["id"], timeout=None)["state"] == "succeeded"


# -- 4. Python values, and filters given empty ---------------------------------------------------------------------------


def test_python_values_in_a_task_and_in_the_options_are_sent_as_the_yaml_text_would_say_them(served):
    """QA 4: a ``datetime`` deadline in a dict, ``budget=Decimal``, ``deadline=timedelta`` were bare ``TypeError: not
    JSON serializable``."""
    url, _ = served
    at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=2)
    with BrokerClient(url, ADMIN) as client:
        run = client.submit_dry_run({"name": "py", "run": "true", "broker": {"budget_usd": Decimal("0.25"),
                                                                            "deadline": at}})
        assert run["budget"]["usd"] == "$0.25" and datetime.fromisoformat(run["deadline"]) == at, run
        run = client.submit_dry_run({"name": "py", "run": "true"}, budget=Decimal("0.5"), deadline=timedelta(hours=2),
                                    expected_hours=timedelta(minutes=90))
        assert run["budget"]["usd"] == "$0.50" and run["expected_hours"] in ("1.5", 1.5), run
        left = datetime.fromisoformat(run["deadline"]) - datetime.now(timezone.utc)
        assert timedelta(hours=1, minutes=58) < left <= timedelta(hours=2), run["deadline"]
        job = client.submit({"name": "py", "run": "true", "broker": {"budget_usd": "0.1"}},
                            deadline=datetime.now() + timedelta(hours=3))  # no zone: this machine's clock
        assert abs((datetime.fromisoformat(job["deadline"]) - datetime.now(timezone.utc)) - timedelta(hours=3)) \
            < timedelta(minutes=1), job["deadline"]
        with pytest.raises(BrokerError) as err:
            client.submit_dry_run({"name": "py", "run": "true", "envs": {"X": object()}})
    assert err.value.field == "envs.X" and "a object cannot be sent to the broker" in err.value.detail


@pytest.mark.parametrize("span, text", [
    (timedelta(hours=6), "6h"), (timedelta(days=1, hours=12), "1d12h"), (timedelta(minutes=90), "1h30m"),
    (timedelta(seconds=30), "30s"), (timedelta(seconds=1.5), "1.5s"), (timedelta(hours=-2), "-2h"), (timedelta(), "0s"),
], ids=["6 hours", "a day and a half", "90 minutes", "30 seconds", "a second and a half", "negative", "zero"])
def test_a_timedelta_is_a_duration_as_a_deadline_reads_one(span, text):
    assert duration_text(span) == text


@pytest.mark.parametrize("filters, field", [({"state": ""}, "state"), ({"limit": 0}, "limit"), ({"team": ""}, "team"),
                                            ({"name": ""}, "name")],
                         ids=["state empty", "limit 0", "team empty", "name empty"])
def test_a_filter_given_empty_or_zero_is_sent_and_refused_not_dropped(served, filters, field):
    """QA 5: ``jobs(state="")`` listed every job, ``jobs(limit=0)`` the default page; ``jobs(team=os.environ.get(...,
    ""))`` as an admin listed every team's."""
    url, _ = served
    with BrokerClient(url, ADMIN) as client, pytest.raises(BrokerError) as err:
        client.jobs(**filters)
    assert err.value.status == 422 and err.value.field == field, (err.value.status, err.value.field, err.value.detail)


# -- 5. parity with the CLI ----------------------------------------------------------------------------------------------


def test_queue_lists_queued_jobs_in_start_order_and_jobs_filters_by_name(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'q.db'}", engine="off", config=CONFIG)
    try:
        with BrokerClient(url, ADMIN) as client:
            task = {"resources": {"cpus": 1}, "run": "true", "broker": {"budget_usd": "0.1"}}
            first = client.submit(task, name="q-first")
            second = client.submit(task, name="q-second")
            urgent = client.submit(task, name="q-urgent", priority=10)
            client.submit(task, name="other")
            listed = [j["id"] for j in client.jobs(state="queued", name="q-")]
            queue = client.queue()
            named = client.queue(name="q-")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    assert listed == [urgent["id"], second["id"], first["id"]]  # the listing: newest first
    assert [j["id"] for j in named] == [urgent["id"], first["id"], second["id"]]  # the queue: as they start
    assert [j["queue_position"] for j in queue] == [1, 2, 3, 4] and queue[0]["id"] == urgent["id"]


def test_submit_takes_envs_secrets_and_a_name_over_the_tasks_own_as_broker_submit_does(served):
    url, _ = served
    task = {"name": "mine", "resources": {"cpus": 1}, "envs": {"LR": "0.1", "KEEP": "k"}, "secrets": {"TOK": None},
            "run": 'echo "lr=$LR keep=$KEEP tok=$TOK"', "broker": {"budget_usd": "0.1"}}
    with BrokerClient(url, ADMIN) as client:
        job = client.submit(task, name="sweep-lr0.02", envs={"LR": "0.02"}, secrets={"TOK": "s3cr3t"})
        ended = client.wait(job["id"], timeout=90)
        text = output(client, job["id"])
    assert task["envs"] == {"LR": "0.1", "KEEP": "k"} and task["name"] == "mine"  # the caller's mapping as it was
    assert job["name"] == "sweep-lr0.02" and ended["state"] == "succeeded", ended["reason"]
    assert text == ["lr=0.02 keep=k tok=***"], text  # the secret reached the job, shown masked


def test_a_str_that_names_a_task_file_is_refused_pointing_to_it_and_a_path_is_read(served, tmp_path, monkeypatch):
    """QA 9: ``submit("/…/hello.yaml")`` said "the task file must hold a mapping"."""
    url, _ = served
    proj = project(tmp_path / "proj")
    with BrokerClient(url, ADMIN) as client:
        with pytest.raises(BrokerError) as err:
            client.submit_dry_run(str(proj / "task.yaml"))
        monkeypatch.chdir(proj)
        run = client.submit_dry_run(proj / "task.yaml")
    assert err.value.detail == (f"{str(proj / 'task.yaml')!r} looks like a file's path, but a str is the task's YAML "
                                f"text: to submit the file, pass pathlib.Path({str(proj / 'task.yaml')!r})")
    assert run["name"] == "wd-test", run


# -- 6. the key of a submit whose outcome is unknown ---------------------------------------------------------------------


def test_a_submit_left_unanswered_carries_its_idempotency_key_on_the_error(served):
    """QA 8: the key was only in the message, to be parsed out of it by a notebook."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", free_port()))
    listener.listen(16)  # takes the connection and never answers
    try:
        client = BrokerClient(f"http://127.0.0.1:{listener.getsockname()[1]}", ADMIN, timeout=0.2)
        with pytest.raises(BrokerError) as err:
            client.submit({"run": "true"}, idempotency_key="nb-key-1")
    finally:
        listener.close()
    assert err.value.unknown_outcome and err.value.idempotency_key == "nb-key-1", vars(err.value)
