"""QA, Dec 8: a broker with the SkyPilot launcher logged each price-catalog warning twice, once with its time and once
as ``WARNING:broker.offers:...``. Importing SkyPilot gives the root logger a handler
(``sky/catalog/data_fetchers/fetch_vsphere.py`` calls ``logging.basicConfig()``), and the broker's loggers, which
``broker serve`` gives a handler of their own, passed every line on to it as well.

In a Python of its own, as ``broker serve`` sets it up: SkyPilot imported (under a HOME of the test's own), the broker's
log lines on, and the price table of SkyPilot's AWS catalog read, then that catalog broken, so the broker keeps the
prices read before and warns — and the catalog emptied, which the price table's reader warns of."""

from __future__ import annotations

import os
import subprocess
import sys

from pricing.loading import SNAPSHOT_DIR

SERVE_LOGGING = r"""
import logging, sys, time
from pathlib import Path
import sky  # noqa: F401 — what the SkyPilot launcher imports
from broker.cli import _broker_logs
from broker import offers

_broker_logs()
vms = Path(sys.argv[1]) / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
offers_header = vms.read_text().splitlines()[0]
assert len(offers._price_table(("aws",))) > 0
vms.write_text("InstanceType,AcceleratorName\nnot,a,catalog\n")  # caught mid-rewrite: not re-read
offers._checked.clear()
offers._price_table(("aws",))
vms.write_text(offers_header + "\n")  # a header alone: passed over, the snapshot read
offers._checked.clear()
offers._price_table(("aws",))
"""


def test_each_catalog_warning_is_logged_once_with_its_time_when_skypilot_is_imported(tmp_path):
    vms = tmp_path / ".sky" / "catalogs" / "v8" / "aws" / "vms.csv"
    vms.parent.mkdir(parents=True)
    vms.write_text((SNAPSHOT_DIR / "aws" / "vms.csv").read_text())
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path),
           "SKYPILOT_DISABLE_USAGE_COLLECTION": "1"}
    done = subprocess.run([sys.executable, "-c", SERVE_LOGGING, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "price catalog" in line]
    # the catalog broken, then emptied: the broker keeps the prices read before, each time; the reader passes the
    # empty one over — three warnings, each once, each as the broker's timed line
    assert len(lines) == 3, done.stderr
    assert not any(line.startswith("WARNING:") for line in done.stderr.splitlines()), done.stderr
    assert all(line[:4].isdigit() and line[20:29] == " WARNING " for line in lines), done.stderr
    assert [line.split(" ")[2] for line in lines] == ["broker.offers:", "pricing.loading:", "broker.offers:"]
