"""`broker queue` on a real broker (its local launcher's real processes) of one 2-GPU pool: a 2-GPU job waits for both
GPUs, one held by a job that gives no length; the job of no length behind it was shown a start at the other running
job's end, a GPU the scheduler keeps for the 2-GPU job from it. It now shows no start, and says why."""

from __future__ import annotations

import json

from broker_testing import cli_runner, start_broker, stop_broker, wait_for

CONFIG = """
pools:
  - {name: gpu, slots: 2, accelerator: A10G, price_per_slot_hour: "1.00"}
tick_seconds: 0.2
stop_grace_seconds: 1
"""


def test_the_queue_shows_no_start_for_a_job_of_no_length_behind_a_head_whose_start_cannot_be_told(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'q.db'}", config=CONFIG)
    run = cli_runner(url)
    try:
        def submit(name: str, gpus: int, sleep: int, hours: float | None = None) -> str:
            task = tmp_path / f"{name}.yaml"
            section = f"\nbroker: {{expected_hours: {hours}}}" if hours is not None else ""
            task.write_text(f"name: {name}\nresources: {{accelerators: 'A10G:{gpus}'}}\nrun: sleep {sleep}{section}\n")
            return json.loads(run("--json", "submit", str(task), "--budget", "5").stdout)["id"]

        hold = submit("hold2", 1, 120)
        submit("len", 1, 60, hours=0.02)
        wait_for(lambda: all(j["state"] == "running" for j in json.loads(run("--json", "status").stdout)),
                 timeout=30)
        wide = submit("wide4", 2, 5, hours=0.004)
        nolen = submit("nolen3", 1, 10)
        queued = wait_for(lambda: len(q := json.loads(run("--json", "queue").stdout)) == 2
                          and all("full" in j["reason"] for j in q) and q, timeout=30)
        assert [j["id"] for j in queued] == [wide, nolen]
        assert queued[1]["estimated_start"] is None, queued[1]
        assert f"it waits behind {wide}, first in line for pool gpu, whose start cannot be told" in \
            queued[1]["reason"], queued[1]["reason"]
        assert f"held by {hold} (with no expected length)" in queued[0]["reason"], queued[0]["reason"]
        row = next(line for line in run("queue").stdout.splitlines() if nolen in line)
        assert "it waits behind" in row and ":" not in row.split(nolen, 1)[1].split("waiting", 1)[0], row
    finally:
        stop_broker(proc, url)
