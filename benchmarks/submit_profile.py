"""Where one submit's time goes, in process: ``POST /v1/jobs`` through Starlette's TestClient under cProfile.

No server, no load generator, no network: the figure to compare two versions by when the HTTP benchmark
(``benchmarks/api.py``) moves within its noise. Run it once per version, alternately, each from its own clone
with its own venv (``make install-test`` there; copy this file into the older one):

    .venv/bin/python benchmarks/submit_profile.py                           # this checkout
    (cd /path/to/old && .venv/bin/python benchmarks/submit_profile.py)     # the other version

Not ``PYTHONPATH=/path/to/old`` with this venv: its editable install maps ``broker`` and ``pricing`` to this
checkout ahead of ``sys.path``, so that run imports this checkout's code too. The script prints which tree it ran.

It prints the time per submit, the function calls per submit, and the broker's and pricing's functions
by cumulative time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import tempfile
import time
from pathlib import Path

BODY = {"name": "bench", "resources": {"cpus": 1}, "run": "echo hi",
        "broker": {"budget_usd": "5", "expected_hours": "0.1"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--submits", type=int, default=600)
    ap.add_argument("--top", type=int, default=25, help="functions listed")
    args = ap.parse_args()
    os.environ.update(BROKER_DATA_DIR=tempfile.mkdtemp(prefix="submit-profile-"), BROKER_ADMIN_TOKEN="bench-admin",
                      BROKER_ENGINE="off")
    os.environ.pop("BROKER_CONFIG", None)
    from fastapi.testclient import TestClient

    import broker
    from broker.api.app import create_app
    from broker.config import load_settings

    app = create_app(load_settings(create_admin_token=True), engine=False)
    headers = {"Authorization": "Bearer bench-admin"}
    with TestClient(app) as client:
        for _ in range(100):  # warm: imports, caches, the SQLite file
            assert client.post("/v1/jobs", json=BODY, headers=headers).status_code == 201
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        for _ in range(args.submits):
            client.post("/v1/jobs", json=BODY, headers=headers)
        profile.disable()
        elapsed = time.perf_counter() - start
    stats = pstats.Stats(profile)
    print(f"broker imported from {Path(broker.__file__).parent.parent}")
    print(f"{elapsed / args.submits * 1e3:.2f} ms per submit (profiled), "
          f"{stats.total_calls / args.submits:.0f} function calls per submit, {args.submits} submits")
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("cumulative").print_stats(r"broker|pricing", args.top)
    print(out.getvalue())


if __name__ == "__main__":
    main()
