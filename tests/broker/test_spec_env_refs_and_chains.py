"""SkyPilot task features the broker read differently from SkyPilot (QA, task spec parsing):

- ``${VAR}`` / ``$VAR`` naming a task's ``envs`` in ``workdir`` and ``file_mounts`` (a mount's destination, its
  source, a storage mapping's ``name`` and ``source``) were left as written, where SkyPilot fills them in
  (``sky/task.py::_fill_in_env_vars``): the local launcher made the link ``~/mnt/llama-${SIZE}b`` and the job
  failed, and the broker's checks ran on the text as written;
- ``job_recovery`` in an ``any_of`` / ``ordered`` alternative was dropped without a word (no retry), and
  ``strategy: FOO`` there accepted;
- a file of several YAML documents (a SkyPilot task chain) was "not valid YAML ... but found another document";
- ``infra: local/<pool>`` on a broker with no such pool: the words for it (:func:`broker.spec.local_pool_refusal`).

Real parts: the spec parser, the YAML reader, the HTTP API in process, the CLI as a subprocess, and the engine with
the local launcher running real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.auth import Principal
from broker.config import load_settings
from broker.lifecycle import JobState
from broker.spec import SpecError, fill_env_refs, local_pool_refusal, parse
from broker.store import open_store
from broker.task_text import load_text, load_yaml, yaml_error

from broker_testing import ADMIN, TEAM_TOKENS, local_broker, run_until

NOW = 1_800_000_000.0
TEAM = {"Authorization": f"Bearer {TEAM_TOKENS['vision']}"}
AS_ADMIN = {"Authorization": f"Bearer {ADMIN}"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def api(tmp_path):
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
                              "BROKER_TEAM_TOKENS": json.dumps(TEAM_TOKENS)})
    with TestClient(create_app(settings, engine=False), raise_server_exceptions=False) as c:
        yield c


# -- 1. ${VAR} in workdir and file_mounts -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, envs, filled", [
    pytest.param("/tmp/x/${PROJ}", {"PROJ": "proj"}, "/tmp/x/proj", id="${VAR} is filled in"),
    pytest.param("~/mnt/llama-$SIZE-b", {"SIZE": 7}, "~/mnt/llama-7-b", id="$VAR too, and a number as its text"),
    pytest.param("/d/${NOPE}/$NOPE", {"PROJ": "p"}, "/d/${NOPE}/$NOPE",
                 id="a variable not in envs is left as written, as SkyPilot leaves it"),
    pytest.param("/d/${A}${B}", {"A": "$B", "B": "x"}, "/d/$Bx", id="one pass: a value's own $B is not filled in"),
    pytest.param("/d/${A}", {"A": None}, "/d/${A}", id="a variable set to null is not filled in"),
], )
def test_fill_env_refs_fills_as_skypilot_does(text, envs, filled):
    assert fill_env_refs(text, envs) == filled


def test_workdir_and_file_mounts_are_filled_in_from_envs_at_parse():
    spec = parse({"run": "x", "envs": {"SIZE": 7, "PROJ": "proj"}, "workdir": "/tmp/x/${PROJ}",
                  "file_mounts": {"~/mnt/llama-${SIZE}b": "/tmp/cfg-$PROJ.yaml",
                                  "/data": {"name": "bucket-${PROJ}", "source": "s3://weights/llama-${SIZE}b",
                                            "mode": "MOUNT"},
                                  "/other": "/tmp/${UNDEFINED}"}}, now=NOW)
    assert spec.task["workdir"] == "/tmp/x/proj"
    assert spec.task["file_mounts"] == {"~/mnt/llama-7b": "/tmp/cfg-proj.yaml",
                                        "/data": {"name": "bucket-proj", "source": "s3://weights/llama-7b",
                                                  "mode": "MOUNT"},
                                        "/other": "/tmp/${UNDEFINED}"}
    assert spec.task["envs"] == {"SIZE": 7, "PROJ": "proj"}  # the envs themselves as given


def test_a_filled_in_source_is_held_to_the_checks_a_written_one_is():
    """A value filled in from envs is no way round the source checks: ``sha256:/../../etc`` is a path SkyPilot reads
    on the broker's host."""
    with pytest.raises(SpecError) as bad:
        parse({"run": "x", "envs": {"SRC": "sha256:/../../etc"}, "file_mounts": {"/data": "${SRC}"}}, now=NOW)
    assert bad.value.field == "file_mounts./data" and "'sha256:/../../etc'" in bad.value.reason, bad.value
    with pytest.raises(SpecError) as bad:
        parse({"run": "x", "envs": {"D": "data/"}, "file_mounts": {"/${D}": "s3://b/x"}}, now=NOW)
    assert bad.value.field == "file_mounts./data/" and "no trailing slash" in bad.value.reason, bad.value


def test_two_destinations_that_fill_in_to_one_are_refused():
    with pytest.raises(SpecError) as bad:
        parse({"run": "x", "envs": {"N": "7"}, "file_mounts": {"/m/${N}": "s3://b/x", "/m/7": "s3://b/y"}}, now=NOW)
    assert bad.value.field == "file_mounts./m/7" and "both '/m/7'" in bad.value.reason, bad.value


def test_a_reference_to_a_secret_is_refused_rather_than_stored_in_the_clear():
    with pytest.raises(SpecError) as bad:
        parse({"run": "x", "secrets": {"BUCKET": "hidden-name"}, "file_mounts": {"/d": "s3://${BUCKET}/x"}}, now=NOW)
    assert bad.value.field == "file_mounts./d" and "one of the task's secrets" in bad.value.reason, bad.value
    assert "hidden-name" not in str(bad.value)


def test_a_team_cannot_reach_a_host_path_through_an_env(api):
    r = api.post("/v1/jobs", json={"run": "true", "envs": {"SRC": "/etc"}, "file_mounts": {"/data": "${SRC}"}},
                 headers=TEAM)
    assert r.status_code == 403 and r.json()["field"] == "file_mounts./data", r.text
    assert "'/etc'" in r.json()["detail"], r.text
    r = api.post("/v1/jobs", json={"run": "true", "envs": {"SRC": "sha256:/../../etc"},
                                   "file_mounts": {"/data": "${SRC}"}}, headers=TEAM)
    assert r.status_code == 422 and r.json()["field"] == "file_mounts./data", r.text
    assert api.get("/v1/jobs", headers=AS_ADMIN).json()["jobs"] == []


def test_the_stored_job_holds_the_filled_in_paths(make_settings, tmp_path):
    """What the launchers read at launch is the stored task: filled in once, at submit."""
    store = open_store(f"sqlite://{tmp_path / 'api.db'}")
    with TestClient(create_app(make_settings(), store=store, engine=False), raise_server_exceptions=False) as api:
        r = api.post("/v1/jobs", json={"run": "true", "envs": {"V": "v2"},
                                       "file_mounts": {"/data/${V}": "s3://b/${V}"}}, headers=TEAM)
        assert r.status_code == 201, r.text
        assert store.get_job(r.json()["id"]).spec["file_mounts"] == {"/data/v2": "s3://b/v2"}


POOLS = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.36"}
stop_grace_seconds: 2
tick_seconds: 0.05
"""


def test_the_local_launcher_mounts_and_runs_in_the_filled_in_paths(make_settings, tmp_path):
    """The QA task: ``file_mounts: {.../llama-${SIZE}b: cfg.yaml}`` and ``workdir: .../${PROJ}``; the link was made
    at ``llama-${SIZE}b`` as written and the job failed."""
    (tmp_path / "x" / "proj").mkdir(parents=True)
    (tmp_path / "x" / "proj" / "train.py").write_text("print('trained')\n")
    (tmp_path / "cfg.yaml").write_text("lr: 3\n")
    node = tmp_path / "node"
    task = {"name": "t", "envs": {"SIZE": 7, "PROJ": "proj"}, "workdir": f"{tmp_path}/x/${{PROJ}}",
            "file_mounts": {f"{node}/mnt/llama-${{SIZE}}b": f"{tmp_path}/cfg.yaml"},
            "run": f"cat {node}/mnt/llama-7b && python3 train.py", "resources": {"cpus": 1},
            "broker": {"budget_usd": 5}}
    with local_broker(make_settings, tmp_path, POOLS) as (service, engine, store, _):
        job = service.submit(Principal("admin", None, admin=True), task)[0]
        final = run_until(engine, store, job.id, {"succeeded", "failed"})
        log = service.logs(Principal("admin", None, admin=True), job.id)["data"]
    assert final.state is JobState.SUCCEEDED, (final.reason, log)
    assert "lr: 3" in log and "trained" in log, log


# -- 2. job_recovery in any_of / ordered alternatives ---------------------------------------------------------------

def _resources(resources: dict) -> dict:
    return {"run": "exit 5", "resources": resources}


def test_job_recovery_given_in_every_alternative_is_the_retry_policy():
    spec = parse(_resources({"any_of": [{"job_recovery": {"max_restarts_on_errors": 2}, "infra": "aws"},
                                        {"job_recovery": {"max_restarts_on_errors": 2}}]}), now=NOW)
    assert spec.broker.retry.max_restarts_on_errors == 2
    spec = parse(_resources({"ordered": [{"job_recovery": {"strategy": "failover", "recover_on_exit_codes": [5]}},
                                         {"job_recovery": {"strategy": "FAILOVER", "recover_on_exit_codes": [5]}}]}),
                 now=NOW)
    assert spec.broker.retry.recover_on_exit_codes == (5,), "a strategy compares in capitals, as SkyPilot's"


@pytest.mark.parametrize("resources, field, says", [
    pytest.param({"any_of": [{"infra": "aws"}, {"job_recovery": {"strategy": "FOO"}}]},
                 "resources.any_of[1].job_recovery.strategy", "'FOO' is not a recovery strategy",
                 id="a strategy SkyPilot does not know, in an alternative"),
    pytest.param({"ordered": [{"job_recovery": {"max_restarts_on_errors": -3}}, {"infra": "aws"}]},
                 "resources.ordered[0].job_recovery.max_restarts_on_errors", "whole number from 0 to 100",
                 id="a negative number of restarts, in an alternative"),
    pytest.param({"any_of": [{"job_recovery": {"max_restart_on_errors": 2}}]},
                 "resources.any_of[0].job_recovery.max_restart_on_errors", "did you mean 'max_restarts_on_errors'",
                 id="a misspelt setting, in an alternative"),
    pytest.param({"any_of": [{"job_recovery": 5}]}, "resources.any_of[0].job_recovery", "must be a strategy's name",
                 id="a number, in an alternative"),
    pytest.param({"any_of": [{"job_recovery": {"max_restarts_on_errors": 2}}, {"infra": "aws"}]},
                 "resources.any_of[1].job_recovery", "SkyPilot requires the same job_recovery for every alternative",
                 id="one alternative with job_recovery and one without disagree, as SkyPilot reads them"),
    pytest.param({"job_recovery": {"max_restarts_on_errors": 1},
                  "ordered": [{"infra": "aws"}, {"job_recovery": {"max_restarts_on_errors": 3}}]},
                 "resources.ordered[1].job_recovery", "but resources.ordered[0]'s is {max_restarts_on_errors: 1} "
                 "(resources.job_recovery)", id="an alternative's over the one in resources, differing"),
])
def test_a_job_recovery_in_an_alternative_is_checked_as_the_top_level_one(resources, field, says):
    with pytest.raises(SpecError) as bad:
        parse(_resources(resources), now=NOW)
    assert bad.value.field == field and says in bad.value.reason, bad.value
    parse(_resources(resources), now=NOW, strict=False)  # a stored job is still read


def test_the_api_stores_the_alternatives_job_recovery_as_the_jobs_retry(make_settings, tmp_path):
    task = {"run": "exit 5", "resources": {"any_of": [{"job_recovery": {"max_restarts_on_errors": 2}, "cpus": 1},
                                                      {"job_recovery": {"max_restarts_on_errors": 2}, "cpus": 2}]}}
    store = open_store(f"sqlite://{tmp_path / 'api.db'}")
    with TestClient(create_app(make_settings(), store=store, engine=False), raise_server_exceptions=False) as api:
        r = api.post("/v1/jobs", json=task, headers=TEAM)
        assert r.status_code == 201, r.text
        assert store.get_job(r.json()["id"]).retry["max_restarts_on_errors"] == 2
        task["resources"]["any_of"][1]["job_recovery"] = {"strategy": "FOO"}
        r = api.post("/v1/jobs", json=task, headers=TEAM)
        assert r.status_code == 422 and r.json()["field"] == "resources.any_of[1].job_recovery.strategy", r.text
        task["resources"]["any_of"][1]["job_recovery"] = {"max_restarts_on_errors": 3}
        r = api.post("/v1/jobs", json=task, headers=TEAM)
        assert r.status_code == 422 and r.json()["field"] == "resources.any_of[1].job_recovery", r.text
        assert "the same job_recovery for every alternative" in r.json()["detail"], r.text


def test_a_job_whose_alternatives_ask_for_a_restart_is_restarted(make_settings, tmp_path):
    """The QA run: ``run: exit 5`` with ``max_restarts_on_errors`` in each alternative failed after one attempt."""
    task = {"name": "t", "run": 'if [ "$BROKER_ATTEMPT" = 1 ]; then exit 5; fi; echo second',
            "resources": {"any_of": [{"job_recovery": {"max_restarts_on_errors": 1}, "cpus": 1},
                                     {"job_recovery": {"max_restarts_on_errors": 1}, "cpus": 2}]},
            "broker": {"budget_usd": 5}}
    with local_broker(make_settings, tmp_path, POOLS) as (service, engine, store, _):
        job = service.submit(Principal("admin", None, admin=True), task)[0]
        final = run_until(engine, store, job.id, {"succeeded", "failed"}, timeout=60)
    assert final.state is JobState.SUCCEEDED and final.attempts == 2, final.reason


# -- 3. a task chain (several YAML documents) ---------------------------------------------------------------------

CHAIN = "name: pipeline\n---\nname: train\nrun: python train.py\n---\nname: eval\nrun: python eval.py\n"


def test_a_task_chain_is_said_to_be_one_naming_how_many_documents():
    with pytest.raises(SpecError) as bad:
        load_text(CHAIN)
    assert bad.value.field == "body", bad.value
    assert bad.value.reason.startswith("holds 3 YAML documents, separated by --- (the second starts at line 2): "
                                       "that is a SkyPilot task chain"), bad.value.reason
    assert "submit each task on its own, as its own job" in bad.value.reason
    assert "found another document" not in bad.value.reason


def test_a_lone_trailing_separator_is_said_to_start_an_empty_document():
    with pytest.raises(SpecError) as bad:
        load_text("run: x\n---\n")
    assert "only one with anything in it: remove the ---" in bad.value.reason, bad.value.reason


def test_a_config_file_of_several_documents_is_not_called_a_task_chain():
    with pytest.raises(yaml.YAMLError) as bad:
        load_yaml("pools: []\n---\nteams: {}\n", max_bytes=10_000)
    assert yaml_error(bad.value, task=False).startswith("holds 2 YAML documents (a --- at line 2 starts the second)")


def test_the_api_refuses_a_task_chain_naming_the_body(api):
    r = api.post("/v1/jobs", content=CHAIN, headers={**TEAM, "Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["field"] == "body", r.text
    assert "3 YAML documents" in r.json()["detail"] and "SkyPilot task chain" in r.json()["detail"], r.text


def test_the_cli_says_the_file_is_a_task_chain(tmp_path):
    chain = tmp_path / "chain.yaml"
    chain.write_text(CHAIN)
    env = {**os.environ, "BROKER_URL": "http://127.0.0.1:18641", "BROKER_TOKEN": ADMIN}  # never reached
    r = subprocess.run([sys.executable, "-m", "broker.cli", "submit", str(chain)], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: the task holds 3 YAML documents"), r.stderr
    assert "SkyPilot task chain" in r.stderr and "found another document" not in r.stderr, r.stderr


ONE_TASK_CHAIN = "name: pipeline\n---\nrun: python train.py\n"


@pytest.mark.parametrize("text, name", [
    pytest.param(ONE_TASK_CHAIN, "pipeline", id="a name header then one task is that task, named by the header"),
    pytest.param("name: pipeline\n---\nname: train\nrun: python train.py\n", "train",
                 id="a name header then one task that names itself keeps the task's own name"),
    pytest.param("name:\n---\nrun: python train.py\n", None,
                 id="an empty name header names nothing and the task is named as one without a name"),
])
def test_a_chain_of_one_task_is_read_as_that_task_as_skypilot_reads_it(text, name):
    task = load_text(text)
    assert task == ({"run": "python train.py"} if name is None else {"name": name, "run": "python train.py"}), task
    assert parse(task, now=NOW).name == (name or parse({"run": "python train.py"}, now=NOW).name)
    from broker.client import load_task

    assert load_task(text) == task, "the CLI reads the task file as the broker does"


@pytest.mark.parametrize("text, said", [
    pytest.param("name: pipeline\nworkdir: .\n---\nrun: python train.py\n", "holds 2 YAML documents",
                 id="a first document of more than a name is no header: two tasks are refused"),
    pytest.param("name: pipeline\n---\nrun: x\nrun: y\n", "is given twice in the same mapping",
                 id="the one task is checked as a lone task is"),
])
def test_a_two_document_text_that_is_not_a_named_single_task_is_still_refused(text, said):
    with pytest.raises(SpecError) as bad:
        load_text(text)
    assert said in bad.value.reason, bad.value.reason


def test_a_config_file_beginning_with_a_name_document_is_not_read_as_a_chain():
    with pytest.raises(yaml.YAMLError) as bad:
        load_yaml("name: x\n---\npools: []\n", max_bytes=10_000, task=False)
    assert yaml_error(bad.value, task=False).startswith("holds 2 YAML documents")


def test_the_brokers_config_file_of_a_name_document_and_another_is_refused_as_two_documents(tmp_path):
    from broker.config import ConfigError

    path = tmp_path / "config.yaml"
    path.write_text("name: x\n---\npools: []\n")
    with pytest.raises(ConfigError, match=r"holds 2 YAML documents \(a --- at line 2 starts the second\), where one "
                                          r"is read: keep one"):
        load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN}, config_path=path)


def test_the_api_accepts_a_chain_of_one_task_as_that_task(api):
    r = api.post("/v1/jobs", content=ONE_TASK_CHAIN, headers={**TEAM, "Content-Type": "application/yaml"})
    assert r.status_code == 201, r.text
    job = api.get(f"/v1/jobs/{r.json()['id']}", headers=TEAM).json()
    assert job["name"] == "pipeline", job
    r = api.post("/v1/jobs", content="name: pipeline\n---\nname: train\nrun: python train.py\n",
                 headers={**TEAM, "Content-Type": "application/yaml"})
    assert r.status_code == 201 and api.get(f"/v1/jobs/{r.json()['id']}", headers=TEAM).json()["name"] == "train"


# -- 4. infra: local/<pool> with no such pool -----------------------------------------------------------------------

@pytest.mark.parametrize("resources, pools, field, says", [
    pytest.param({"infra": "local/dgx"}, [], "resources.infra",
                 "there is no pool dgx here, nor any: `pools` in the broker's config has none",
                 id="a broker with no pools says it has none"),
    pytest.param({"infra": "local/dgx"}, ["gpu2"], "resources.infra", "there is no pool dgx here: the only pool is gpu2",
                 id="a broker with one pool names it"),
    pytest.param({"any_of": [{"infra": "aws"}, {"infra": "local/dgx1"}]}, ["dgx", "cpu"], "resources.any_of[1].infra",
                 "did you mean local/dgx? the pools are cpu and dgx", id="in an alternative, with the likely one"),
])
def test_a_pool_the_broker_has_not_is_said_in_its_own_words(resources, pools, field, says):
    refusal = local_pool_refusal(resources, pools)
    assert refusal is not None and refusal.field == field and says in refusal.reason, refusal
    assert "does not match" not in refusal.reason


@pytest.mark.parametrize("resources, pools", [
    pytest.param({"infra": "local/dgx"}, ["dgx"], id="a pool there is"),
    pytest.param({"infra": "aws/us-east-1"}, [], id="a cloud"),
    pytest.param(None, [], id="no resources"),
])
def test_a_pool_there_is_or_no_pool_is_not_refused(resources, pools):
    assert local_pool_refusal(resources, pools) is None


def test_the_api_of_a_broker_with_no_pools_says_so_not_skypilots_pattern(tmp_path, monkeypatch):
    """The SkyPilot launcher with `pools: []`: a task asking for `infra: local/dgx` had SkyPilot's schema error
    back (``'local/dgx' does not match '^(?:(?i:(aws|azure|gcp|...``); the submit asks the broker's pools first."""
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path / "sky"))
    config = tmp_path / "config.yaml"
    config.write_text("pools: []\n")
    settings = load_settings({"BROKER_DATA_DIR": str(tmp_path / "data"), "BROKER_ADMIN_TOKEN": ADMIN,
                              "BROKER_TEAM_TOKENS": json.dumps(TEAM_TOKENS), "BROKER_LAUNCHER": "skypilot",
                              "BROKER_CLOUDS": "aws"}, config_path=config)
    task = {"run": "python train.py", "resources": {"infra": "local/dgx", "accelerators": "A100:8"},
            "broker": {"budget_usd": 50}}
    with TestClient(create_app(settings, engine=False), raise_server_exceptions=False) as c:
        for dry in ("false", "true"):
            r = c.post(f"/v1/jobs?dry_run={dry}", json=task, headers=TEAM)
            assert r.status_code == 422 and r.json()["field"] == "resources.infra", r.text
            assert "there is no pool dgx here, nor any" in r.json()["detail"], r.text
            assert "does not match" not in r.json()["detail"], r.text
