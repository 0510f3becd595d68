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
    for title, expr in queries(dash):
        words = re.findall(r"\bbroker_[a-z0-9_]+", expr)
        assert words, f"{title}: {expr!r} names no broker metric"
        for word in words:
            assert word in series, f"{title}: {word} is not exported"


def queries(dash: dict) -> list[tuple[str, str]]:
    """Every PromQL query of the dashboard, with where it is: each panel's targets, and each variable's query
    (the team picker's ``label_values(broker_jobs, team)``)."""
    found = [(panel["title"], t["expr"]) for panel in dash["panels"] for t in panel["targets"]]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            found += [(f"variable {var['name']}", query), (f"variable {var['name']}", var["definition"])]
    return found


def test_the_dashboard_shows_lost_nodes_by_pool_beside_preemptions():
    """A node lost without notice (an on-prem pool's) is counted apart from preemptions
    (``broker_attempts_lost_total``): a team lead sees both, side by side, in the top row's counts and per pool
    or zone. Every panel reads the chosen data source, and none covers another."""
    dash = json.loads((ROOT / "deploy/grafana/spot-broker.json").read_text())
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for cell in ((x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])):
            assert cell not in cells, f"{p['title']} covers {cells[cell]}"
            cells[cell] = p["title"]

    def naming(metric: str) -> list[dict]:
        return [p for p in panels if any(metric in t["expr"] for t in p["targets"])]

    for kind in ("stat", "timeseries"):
        (preempted,) = [p for p in naming("broker_preemptions_total") if p["type"] == kind]
        (lost,) = [p for p in naming("broker_attempts_lost_total") if p["type"] == kind]
        assert lost["gridPos"]["y"] == preempted["gridPos"]["y"], "lost nodes sit beside preemptions"
        assert not any("broker_preemptions_total" in t["expr"] for t in lost["targets"])
    (by_pool,) = [p for p in naming("broker_attempts_lost_total") if p["type"] == "timeseries"]
    (target,) = by_pool["targets"]
    assert re.search(r"sum by \((zone, tier|tier, zone)\) \(max without \(instance\)", target["expr"])
    assert "{{zone}}" in target["legendFormat"]


def test_prometheus_example_scrapes_the_broker():
    cfg = yaml.safe_load((ROOT / "deploy/prometheus.yml").read_text())
    (job,) = cfg["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"]
