"""The shapes of ``file_mounts`` and ``config:`` that SkyPilot's schema refuses, refused at submit naming the field;
and durations written in the digits 0-9 alone. Before, ``file_mounts: {/x: null}``, ``{/x: {source: 5}}``,
``config: []`` or ``config: {hooks: x}`` were stored with a 201: the local launcher skipped the mount without a
word, and SkyPilot refused the task at launch, after it had waited its turn and been placed. ``deadline: ٥h`` (an
Arabic-Indic five) was taken as 5 hours."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.spec import (CONFIG_SECTIONS, CONFIG_VALUES, HOOK_EVENTS, MAX_TASK_HOOKS, STORAGE_KEYS, STORAGE_MODES,
                         STORAGE_STORES, STORAGE_TYPES, SpecError, parse)
from broker.store import open_store

from broker_testing import ADMIN

NOW = 1_800_000_000.0
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
TEAM_H = {"Authorization": "Bearer vision-token"}
HOOK = {"run": "./save.sh", "events": ["preemption"], "timeout": 60}

# (the task's own keys, the field named, words of the reason, whether SkyPilot 0.14.1 refuses it too)
REFUSED = [
    pytest.param({"file_mounts": {"/x": None}}, "file_mounts./x", "has no source", True,
                 id="a mount with no source is refused, not skipped at launch"),
    pytest.param({"file_mounts": {"/x": 5}}, "file_mounts./x", "not 5", True, id="a mount whose source is a number"),
    pytest.param({"file_mounts": {"/x": ["s3://b/x"]}}, "file_mounts./x", "storage mapping", True,
                 id="a mount whose source is a bare list, not a storage mapping"),
    pytest.param({"file_mounts": {"/x": {"source": 5}}}, "file_mounts./x.source", "path or a bucket URL", True,
                 id="a storage mapping whose source is a number"),
    pytest.param({"file_mounts": {"/x": {"source": []}}}, "file_mounts./x.source", "list of them", True,
                 id="a storage mapping whose source is an empty list"),
    pytest.param({"file_mounts": {"/x": {"source": ["s3://b/x", 5]}}}, "file_mounts./x.source", "not ['s3", True,
                 id="a storage mapping whose source list holds a number"),
    pytest.param({"file_mounts": {"/x": {"source": "s3://b/x", "store": "dropbox"}}}, "file_mounts./x.store",
                 "S3, GCS", True, id="a store SkyPilot does not know"),
    pytest.param({"file_mounts": {"/x": {"source": "s3://b/x", "mode": "LINK"}}}, "file_mounts./x.mode",
                 "MOUNT, COPY, MOUNT_CACHED", True, id="a mount mode SkyPilot does not know"),
    pytest.param({"file_mounts": {"/x": {"source": "s3://b/x", "persistent": "yes"}}}, "file_mounts./x.persistent",
                 "true or false", True, id="persistent given as text"),
    pytest.param({"file_mounts": {"/x": {"sauce": "s3://b/x"}}}, "file_mounts./x.sauce", "did you mean 'source'", True,
                 id="a misspelt storage setting names the one meant"),
    pytest.param({"file_mounts": {"/x": {"source": "s3://b/x", "config": 5}}}, "file_mounts./x.config", "mapping",
                 True, id="a store's config that is not a mapping"),
    pytest.param({"file_mounts": {5: "s3://b/x"}}, "file_mounts.5", "path on the node", False,
                 id="a destination that is a number is refused, where the local launcher could only skip it"),
    pytest.param({"config": []}, "config", "mapping of SkyPilot settings", True, id="config as a list"),
    pytest.param({"config": "docker"}, "config", "mapping of SkyPilot settings", True, id="config as text"),
    pytest.param({"config": {"docker": 5}}, "config.docker", "mapping of docker settings", True,
                 id="a config section that is not a mapping"),
    pytest.param({"config": {"docker": {"run_options": 5}}}, "config.docker.run_options",
                 "a string or a list of strings", True, id="docker run options as a number"),
    pytest.param({"config": {"docker": {"run_options": ["--shm-size=1g", 5]}}}, "config.docker.run_options",
                 "a string or a list of strings", True, id="docker run options with a number among them"),
    pytest.param({"config": {"docker": {"run_option": "--shm-size=1g"}}}, "config.docker.run_option",
                 "did you mean 'run_options'", True, id="a misspelt docker setting names the one meant"),
    pytest.param({"config": {"nvidia_gpus": {"disable_ecc": "yes"}}}, "config.nvidia_gpus.disable_ecc",
                 "true or false", True, id="disable_ecc given as text"),
    pytest.param({"config": {"kubernetes": {"provision_timeout": "10m"}}}, "config.kubernetes.provision_timeout",
                 "whole number of seconds", True, id="a provisioning timeout with a unit"),
    pytest.param({"config": {"hooks": "x"}}, "config.hooks", "list of hooks", True, id="hooks as text"),
    pytest.param({"config": {"hooks": [{"events": ["stop"]}]}}, "config.hooks[0].run", "is required", True,
                 id="a hook with nothing to run"),
    pytest.param({"config": {"hooks": [{"run": ""}]}}, "config.hooks[0].run", "is required", True,
                 id="a hook whose script is empty"),
    pytest.param({"config": {"hooks": [{"run": "x", "events": ["boom"]}]}}, "config.hooks[0].events",
                 "stop, preemption, down", True, id="a hook on an event SkyPilot never sends"),
    pytest.param({"config": {"hooks": [{"run": "x", "events": ["stop", "stop"]}]}}, "config.hooks[0].events",
                 "distinct", True, id="a hook on the same event twice"),
    pytest.param({"config": {"hooks": [{"run": "x", "timeout": True}]}}, "config.hooks[0].timeout",
                 "whole number of seconds", True, id="a hook timeout of true"),
    pytest.param({"config": {"hooks": [HOOK, {"run": "x", "on": "stop"}]}}, "config.hooks[1].on",
                 "not a setting of a hook", True, id="a hook setting SkyPilot does not know, in the second hook"),
    pytest.param({"config": {"hooks": [HOOK] * 32}}, "config.hooks", "the broker's own preemption notice", False,
                 id="32 hooks, which with the broker's own notice hook are more than SkyPilot takes"),
    pytest.param({"config": {"active_workspace": 5}}, "config.active_workspace", "workspace's name", True,
                 id="a workspace named by a number"),
]

TAKEN = [
    pytest.param({"file_mounts": {"/x": "s3://b/x", "/ckpt": "broker:checkpoint"}}, id="bucket and broker sources"),
    pytest.param({"file_mounts": {"/x": {"source": "s3://b/x", "mode": "mount"}}},
                 id="a storage mapping with a lower-case mode"),
    pytest.param({"file_mounts": {"/x": {"source": ["s3://b/x", "s3://b/y"], "mode": "COPY"}}},
                 id="a storage mapping with a list of sources"),
    pytest.param({"file_mounts": {"/x": {"name": "my-bucket", "store": "gcs", "persistent": False}}},
                 id="a named bucket with no source"),
    pytest.param({"file_mounts": {"/x": {"source": "gs://b/x", "mode": "MOUNT_CACHED", "type": "dataset_ro",
                                         "config": {"mount_cached": {"transfers": 8}}}}},
                 id="a cached mount with a type and the store's settings"),
    pytest.param({"config": None}, id="config left empty"),
    pytest.param({"config": {"docker": {"run_options": "--shm-size=16g"}}}, id="docker run options as one string"),
    pytest.param({"config": {"docker": {"run_options": ["--shm-size=16g", "--ipc=host"]}}},
                 id="docker run options as a list"),
    pytest.param({"config": {"kubernetes": {"provision_timeout": 900, "kueue": {"local_queue_name": "q"},
                                            "networking": "portforward"}}},
                 id="Kubernetes settings, an unknown one left to SkyPilot as it leaves it"),
    pytest.param({"config": {"hooks": [HOOK, {"run": "echo bye"}]}}, id="hooks, with events and timeout optional"),
    pytest.param({"config": {"hooks": [HOOK] * 31}}, id="31 hooks, with the broker's own 32"),
    pytest.param({"config": {"gcp": {"enable_gvnic": True, "placement_policy": "compact", "vpc_name": None}}},
                 id="GCP settings"),
    pytest.param({"config": {"some_plugin": {"anything": 1}}}, id="a section SkyPilot leaves to its server"),
    pytest.param({"config": {"azure": {"remote_identity": "SERVICE_ACCOUNT"}, "kubernetes": {"enable_docker": "ALL"}}},
                 id="an admin's identity and docker settings"),
]


def _task(extra: dict) -> dict:
    return {"run": "echo hi", **extra}


@pytest.mark.parametrize("extra, field, says, skypilot_too", REFUSED)
def test_a_shape_skypilot_refuses_is_refused_at_submit_naming_the_field(extra, field, says, skypilot_too):
    with pytest.raises(SpecError) as info:
        parse(_task(extra), now=NOW)
    assert info.value.field == field and says in info.value.reason, info.value


@pytest.mark.parametrize("extra", TAKEN)
def test_a_shape_skypilot_takes_is_taken(extra):
    assert parse(_task(extra), now=NOW).task == _task(extra)


@pytest.mark.parametrize("extra, field, says, skypilot_too", REFUSED)
def test_a_stored_spec_is_read_as_it_was_admitted(extra, field, says, skypilot_too):
    """The engine re-reads stored jobs leniently: one admitted before these checks is still read."""
    assert parse(_task(extra), now=NOW, strict=False).task == _task(extra)


# --- durations --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("broker, field", [
    pytest.param({"deadline": "٥h"}, "broker.deadline", id="a deadline with an Arabic-Indic five"),
    pytest.param({"deadline": "1d١٢h"}, "broker.deadline", id="a deadline with Arabic-Indic digits after a 1"),
    pytest.param({"deadline": "PT５H"}, "broker.deadline", id="an ISO duration with a full-width five"),
    pytest.param({"deadline": "2026-12-0१T18:00Z"}, "broker.deadline", id="an ISO time with a Devanagari one"),
    pytest.param({"expected_hours": "٥"}, "broker.expected_hours", id="an expected length with an Arabic-Indic five"),
])
def test_a_duration_in_digits_other_than_0_to_9_is_refused_naming_the_field(broker, field):
    with pytest.raises(SpecError) as info:
        parse(_task({"broker": broker}), now=NOW)
    assert info.value.field == field and "must be written in the digits 0-9 alone" in info.value.reason, info.value


@pytest.mark.parametrize("deadline, seconds", [
    pytest.param("5h", 5 * 3600, id="5h is five hours"),
    pytest.param("1d12h", 36 * 3600, id="1d12h is a day and a half"),
    pytest.param("PT5H", 5 * 3600, id="PT5H is five hours"),
    pytest.param("45min", 45 * 60, id="45min is three quarters of an hour"),
])
def test_a_duration_in_the_digits_0_to_9_is_read_as_before(deadline, seconds):
    assert parse(_task({"broker": {"deadline": deadline}}), now=NOW).broker.deadline == NOW + seconds


def test_a_stored_deadline_in_other_digits_is_still_read_as_it_was_admitted():
    assert parse(_task({"broker": {"deadline": "٥h"}}), now=NOW, strict=False).broker.deadline == NOW + 5 * 3600


# --- through the API --------------------------------------------------------------------------------------------

@pytest.fixture
def client(make_settings, tmp_path):
    app = create_app(make_settings(), store=open_store(f"sqlite://{tmp_path / 'a.db'}"), engine=False)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("body, headers, field", [
    pytest.param("run: echo hi\nfile_mounts:\n  /x:\n", ADMIN_H, "file_mounts./x",
                 id="a YAML mount left empty is a 422"),
    pytest.param("run: echo hi\nfile_mounts: {/x: {source: 5}}\n", ADMIN_H, "file_mounts./x.source",
                 id="a storage source that is a number is a 422"),
    pytest.param("run: echo hi\nconfig: {docker: {run_options: 5}}\n", TEAM_H, "config.docker.run_options",
                 id="a team's docker run options of the wrong type are a 422"),
    pytest.param("run: echo hi\nbroker: {deadline: ٥h}\n", TEAM_H, "broker.deadline",
                 id="a deadline in Arabic-Indic digits is a 422"),
])
def test_the_api_answers_a_422_naming_the_field_and_stores_nothing(client, body, headers, field):
    r = client.post("/v1/jobs", content=body.encode(), headers={**headers, "Content-Type": "application/yaml"})
    assert r.status_code == 422 and r.json()["field"] == field, r.text
    assert client.get("/v1/jobs", headers=ADMIN_H).json()["jobs"] == []


def test_a_valid_storage_mount_and_config_are_stored_with_a_201(client):
    task = _task({"file_mounts": {"/x": {"source": ["s3://b/x"], "mode": "COPY"}},
                  "config": {"docker": {"run_options": ["--ipc=host"]}, "hooks": [HOOK]}})
    r = client.post("/v1/jobs", json=task, headers=TEAM_H)
    assert r.status_code == 201, r.text


# --- held to the installed SkyPilot -----------------------------------------------------------------------------

_SKY = """
import json, sys
from sky.data import storage
from sky.utils import schemas
import sky
config = schemas._task_config_schema()["properties"]
out = {
    "storage_keys": sorted(schemas.get_storage_schema()["properties"]),
    "stores": [t.value for t in storage.StoreType], "modes": [m.value for m in storage.StorageMode],
    "types": [t.value for t in storage.FileMountType],
    "sections": {s: v.get("additionalProperties") is False for s, v in config.items() if "properties" in v},
    "values": sorted([s, k] for s, v in config.items() for k in v.get("properties", {})),
    "hook_events": config["hooks"]["items"]["properties"]["events"]["items"]["enum"],
    "max_hooks": config["hooks"]["maxItems"],
    "verdicts": [],
}
for task in json.loads(sys.stdin.read()):
    try:
        sky.Task.from_yaml_config(task)
        out["verdicts"].append(True)
    except Exception:
        out["verdicts"].append(False)
print(json.dumps(out))
"""


def test_the_shapes_are_the_installed_skypilots_and_it_gives_the_same_verdicts(tmp_path):
    """The lists above are SkyPilot 0.14.1's own, and each case refused (but the broker's own choices) is one SkyPilot
    refuses too, each case taken one it takes. Read in a child process: ``sky`` fixes its paths from ``HOME`` at
    import, which must not leak into this one."""
    refused = [_task(p.values[0]) for p in REFUSED if p.values[3]]
    taken = [_task(p.values[0]) for p in TAKEN]
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path / "sky"),
           "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    out = subprocess.run([sys.executable, "-c", _SKY], input=json.dumps(refused + taken), env=env,
                         capture_output=True, text=True, timeout=180, check=True)
    sky = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(sky["storage_keys"]) == STORAGE_KEYS
    assert (sky["stores"], sky["modes"], sky["types"]) == (list(STORAGE_STORES), list(STORAGE_MODES),
                                                           list(STORAGE_TYPES))
    assert sky["sections"] == CONFIG_SECTIONS
    assert {tuple(v) for v in sky["values"]} == set(CONFIG_VALUES)
    assert (sky["hook_events"], sky["max_hooks"]) == (list(HOOK_EVENTS), MAX_TASK_HOOKS + 1)
    verdicts = sky["verdicts"]
    assert verdicts[:len(refused)] == [False] * len(refused), [t for t, ok in zip(refused, verdicts) if ok]
    assert verdicts[len(refused):] == [True] * len(taken), [t for t, ok in zip(taken, verdicts[len(refused):]) if not ok]
