"""`broker status JOB` as a user reads it after their job went wrong: a run whose loss went NaN (the broker stores a
value that is not finite as null) crashed the command with a TypeError traceback, at the moment the user most needed
it. Real parts: a `broker serve` subprocess, the checkpoint library's progress reports from a real job, the CLI."""

import json
import signal
import sys

import pytest

from broker_testing import POOL_AND_SPOT, cli_runner, start_broker, wait_for


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("status-dec9")
    proc, url = start_broker(tmp, f"sqlite://{tmp / 'c.db'}", config=POOL_AND_SPOT)
    yield cli_runner(url), tmp
    proc.send_signal(signal.SIGTERM)
    proc.wait(15)


@pytest.mark.parametrize("loss, said", [
    pytest.param('float("nan")', "progress: step 5/100, loss not a number (NaN or infinite)",
                 id="a NaN loss is said as not a number"),
    pytest.param("0.12345", "progress: step 5/100, loss 0.1235", id="a finite loss is shown as before"),
])
def test_status_of_a_job_that_reported_its_loss_says_it_without_a_traceback(cli, loss, said):
    run, tmp = cli
    task = tmp / "nan.yaml"
    script = f"import time; from checkpoint.progress import report; report(5, 100, {{\"loss\": {loss}}}); time.sleep(60)"
    task.write_text(f"name: diverged\nresources: {{cpus: 1}}\nrun: |\n  {sys.executable} -c '{script}'\n")
    job = json.loads(run("--json", "submit", str(task), "--budget", "5").stdout)
    try:
        wait_for(lambda: (json.loads(run("--json", "status", job["id"]).stdout).get("progress") or {}).get("step") == 5,
                 timeout=60)
        r = run("status", job["id"], check=False)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
        assert said in r.stdout, r.stdout
    finally:
        run("cancel", job["id"], check=False)
