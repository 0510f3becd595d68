"""The Grafana dashboard's percentile and count panels, evaluated by a real PromQL engine (``promtool test rules``,
Debian's ``prometheus`` package, as ``tests/edges/test_prometheus_scrape.py`` uses) over series shaped as the broker
exports them: store-derived histograms that never reset, and counters that increase() extrapolates."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RANGE = "2h"  # the dashboard's time range, as Grafana puts it in for $__range


def _exprs(title_start: str) -> list[str]:
    """The queries of the panel whose title starts with ``title_start``, with Grafana's variables filled in."""
    dash = json.loads((REPO / "deploy/grafana/spot-broker.json").read_text())
    (panel,) = [p for p in dash["panels"] if p["title"].startswith(title_start)]
    return [t["expr"].replace("$__range", RANGE).replace("$team", ".*") for t in panel["targets"]]


def _promtool(tmp_path: Path, series: list[dict], checks: list[dict], eval_time: str) -> None:
    """Runs ``checks`` (expr and exp_samples) against ``series`` (one sample a minute) at ``eval_time``; fails with
    promtool's own account of what differed."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool (Debian's prometheus package, installed by make test) is not installed")
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series,
                       "promql_expr_test": [{**c, "eval_time": eval_time} for c in checks]}]}
    path = tmp_path / "dashboard_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def _two_brokers(name: str, values: str) -> list[dict]:
    """``name``'s series as two brokers sharing a store export it: the same values under each instance."""
    return [{"series": f"{name}{{instance=\"{i}\",job=\"spot-broker\"}}", "values": values} for i in ("a", "b")]


@pytest.mark.parametrize("title,metric", [
    ("Recovery time after", "broker_recovery_seconds_bucket"),
    ("Queue wait before first launch", "broker_queue_wait_seconds_bucket"),
], ids=["recovery percentiles are of the last hour, not of the broker's lifetime",
        "queue-wait percentiles are of the last hour, not of the broker's lifetime"])
def test_percentile_panels_read_a_recent_window(tmp_path, title, metric):
    # 100 events of under 60 s in the first two hours, then 10 of 60-600 s in the third: a lifetime p90 is under 60 s
    # (100 of 110), and the last hour's p50 and p90 both above 60 s
    series = []
    for le, before, after in (("60", 100, 100), ("600", 100, 110), ("+Inf", 100, 110)):
        series += [{**s, "series": s["series"].replace("{", f'{{le="{le}",')}
                   for s in _two_brokers(metric, f"0+{before / 120}x120 {before}+{(after - before) / 60}x60")]
    p50, p90 = _exprs(title)
    assert metric in p50 and metric in p90
    _promtool(tmp_path, series, [
        {"expr": f"({p50}) > bool 60", "exp_samples": [{"labels": "{}", "value": 1}]},
        {"expr": f"({p90}) > bool 60", "exp_samples": [{"labels": "{}", "value": 1}]},
    ], eval_time="180m")


@pytest.mark.parametrize("title,metric,labels", [
    ("Preemptions in range", "broker_preemptions_total", '{zone="us-east-1a"}'),
    ("Lost nodes in range", "broker_attempts_lost_total", '{zone="pool-a",tier="onprem"}'),
], ids=["one preemption in range reads 1, not 1.18675", "one lost node in range reads 1, not an extrapolation"])
def test_count_stats_read_whole_numbers(tmp_path, title, metric, labels):
    # the counter at 0 before the range, one counted in it: increase() extrapolates the samples in the range to its
    # bounds (a range of 2 h beginning and ending half a minute from a sample), to 120/119 of one
    inner = labels.strip("{}")
    series = [{"series": f'{metric}{{{inner},instance="{i}",job="spot-broker"}}', "values": "0x100 1x80"}
              for i in ("a", "b")]
    (expr,) = _exprs(title)
    _promtool(tmp_path, series, [{"expr": expr, "exp_samples": [{"labels": "{}", "value": 1}]}], eval_time="150m30s")
