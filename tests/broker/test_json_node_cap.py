"""A JSON task is held to the node count a YAML one is (``broker.task_text.MAX_NODES``): a megabyte of
``[1,1,1,…]`` sent as JSON was walked whole, 0.7 s of the broker's CPU before its 422, for any team's token."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.spec import SpecError
from broker.store import open_store
from broker.task_text import MAX_NODES, load_json, load_text

from broker_testing import TEAM_TOKENS


def _task(items: int) -> str:  # the mapping, run, its value, config, the list: 5 nodes, then the items
    return '{"run": "echo hi", "config": [' + ",".join(["1"] * items) + "]}"


def test_a_json_task_of_exactly_max_nodes_is_read_and_one_more_is_refused_as_yaml_is():
    assert len(load_json(_task(MAX_NODES - 5))["config"]) == MAX_NODES - 5
    assert len(load_text(_task(MAX_NODES - 5))["config"]) == MAX_NODES - 5  # the same text read as YAML
    for read in (load_json, load_text):
        with pytest.raises(SpecError, match="more than 50,000 keys, values and items"):
            read(_task(MAX_NODES - 4))
    # a mapping's keys count as YAML counts them: 1 + 2 per key
    keys = (MAX_NODES - 1) // 2
    text = "{" + ",".join(f'"k{i}": 1' for i in range(keys)) + "}"
    assert len(load_json(text)) == keys
    with pytest.raises(SpecError, match="more than 50,000"):
        load_json("{" + ",".join(f'"k{i}": 1' for i in range(keys + 1)) + "}")


def test_a_megabyte_json_body_of_tiny_values_is_a_422_naming_the_limit_without_seconds_of_cpu(make_settings, tmp_path):
    app = create_app(make_settings(), store=open_store(f"sqlite://{tmp_path / 'api.db'}"), engine=False)
    body = '{"run": "echo hi", "config": [' + ",".join(["1"] * 450_000) + "]}"
    headers = {"Authorization": f"Bearer {TEAM_TOKENS['vision']}", "Content-Type": "application/json"}
    with TestClient(app, raise_server_exceptions=False) as client:
        client.post("/v1/jobs", content=_task(1), headers=headers)  # warmed up: imports, the first request
        started = time.process_time()
        r = client.post("/v1/jobs", content=body, headers=headers)
        spent = time.process_time() - started
        assert r.status_code == 422, r.text[:300]
        assert r.json()["field"] == "body" and "more than 50,000 keys, values and items" in r.json()["detail"]
        # 0.7 s walked whole on this test's 2-core host, 0.1 s capped: the bound leaves room for a slow, shared one
        assert spent < 0.45, f"{spent:.2f} s of CPU for one refused body"
        assert client.get("/v1/jobs", headers=headers).json()["jobs"] == []
