"""The Grafana dashboard and the Prometheus example use only metrics the broker exports."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import yaml

ROOT = Path(__file__).resolve().parents[2]


def exported_names(client) -> set[str]:
    text = client.get("/metrics").text
    return {m for m in re.findall(r"^# TYPE (\S+)", text, re.M)}


def test_every_grafana_query_names_an_exported_metric(app, client):
    app.state.engine = SimpleNamespace(last_tick_seconds=0.25)  # the collector reads the engine at scrape time
    client.get("/v1/healthz")
    assert "broker_engine_tick_seconds 0.25" in client.get("/metrics").text
    names = exported_names(client)
    series = {n + s for n in names for s in ("", "_total", "_bucket", "_count", "_sum")}
    dash = json.loads((ROOT / "deploy/grafana/spot-broker.json").read_text())
    assert dash["uid"] == "spot-broker" and dash["panels"]
    for panel in dash["panels"]:
        for target in panel["targets"]:
            for word in re.findall(r"\bbroker_[a-z_]+", target["expr"]):
                assert word in series, f"{panel['title']}: {word} is not exported"


def test_prometheus_example_scrapes_the_broker():
    cfg = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    (job,) = cfg["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"]
