"""``benchmarks/metrics_caps.py`` still runs to its table: it subclasses the collector and the service to keep the
way of before beside the way of now, and checks that both give the same figures, so a change to either shows here."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_capped_scrape_benchmark_runs_to_its_table_with_the_same_figures_both_ways():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "metrics_caps.py"), "--jobs", "300",
                           "--rounds", "1"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1].strip() for line in done.stdout.splitlines() if line.startswith("| ")][1:]
    assert rows == ["the first scrape after a start, 3 capped teams", "a scrape after the first, 3 capped teams",
                    "one team's standing (a submit's weighing)"], done.stdout
