"""`broker ondemand J` on a job that failed in its own code speaks of the switch, and the CLI splices its command once.

QA walkthrough (Dec 7): the switch answered with the resume's refusal ("…then resume it with --force … broker resume J
--env …"), and the CLI's ``_forced`` replaced every "with force" in it, so "Resumed with force and nothing changed"
read "Resumed with --force (broker ondemand J --force) and nothing changed". Now the switch's refusal says "not
switched to on-demand … switch it with --force", and the CLI names the forcing command once, where the text first asks
for force, for either command; the resume's other refusals come from the switch as the switch's.

Against a real ``broker serve`` (local launcher, a pool slot and a simulated on-demand zone) and the CLI as typed.
"""

from __future__ import annotations

import json

import pytest
from broker_testing import cli_runner, start_broker, stop_broker, wait_for

CONFIG = """
pools:
  - {name: local, slots: 2, price_per_slot_hour: "0.36"}
zones:
  - {name: sim-od, tier: ondemand, instance_type: g5.xlarge, nodes: 1, price_per_hour: "1.00"}
tick_seconds: 0.2
stop_grace_seconds: 2
"""
OWN_ERROR = "name: {name}\nresources: {{cpus: 1}}\nrun: |\n  echo 'ValueError: bad label' >&2; exit 3\n"
NO_TOKEN = ("name: {name}\nresources: {{cpus: 1}}\nrun: |\n"
            "  echo 'huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
            "https://huggingface.co/api/x'; echo 'Invalid user token'; exit 1\n")



@pytest.fixture
def run(tmp_path):
    proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'b.db'}", config=CONFIG)
    yield cli_runner(url)
    stop_broker(proc, url)


def _failed(run, tmp_path, name: str, text: str) -> str:
    task = tmp_path / f"{name}.yaml"
    task.write_text(text)
    job_id = json.loads(run("--json", "submit", str(task), "--budget", "2").stdout)["id"]
    wait_for(lambda: json.loads(run("--json", "status", job_id).stdout)["state"] == "failed", timeout=60)
    return job_id


def _said(r) -> str:
    return " ".join(r.stderr.split())  # the CLI wraps its error to the terminal's width


def test_a_switch_of_a_job_that_failed_in_its_own_code_speaks_of_the_switch(run, tmp_path):
    jid = _failed(run, tmp_path, "own", OWN_ERROR.format(name="own"))

    r = run("ondemand", jid, check=False)
    said = _said(r)
    assert r.returncode == 1 and "not switched to on-demand: the job failed for a reason of its own that on-demand " \
                                 "capacity would not change:" in said, said
    assert f"Change what made it fail, then switch it with --force (broker ondemand {jid} --force): it starts over " \
           "(it saved no checkpoint) on on-demand" in said, said  # it said "from its last checkpoint" of none
    assert f"broker resume {jid} --env NAME=value needs no --force, and broker ondemand {jid} then pins it to " \
           "on-demand. Forced with nothing changed, it fails the same way" in said, said
    assert said.count("--force (broker") == 1 and "resume it with --force" not in said, said
    assert "not resumed" not in said, said

    # the resume's own refusal, the command spliced once where it first asks for force
    said = _said(r := run("resume", jid, check=False))
    assert r.returncode == 1 and f"then resume it with --force (broker resume {jid} --force): it starts over" in said, \
        said
    assert said.count("--force (broker") == 1 and "Forced with nothing changed, it fails the same way" in said, said

    # forced, the switch resumes it on on-demand
    job = json.loads(run("--json", "ondemand", jid, "--force").stdout)
    assert job["state"] == "queued" and job["pinned_tier"] == "ondemand", job


def test_a_switch_of_a_job_that_lacked_a_secret_names_the_resume_that_gives_it_then_the_switch(run, tmp_path):
    jid = _failed(run, tmp_path, "token", NO_TOKEN.format(name="token"))

    said = _said(r := run("ondemand", jid, check=False))
    assert r.returncode == 1 and said.startswith("error [409]: not switched to on-demand: the job failed for "
                                                 "credentials it was not given:"), said
    assert f"Resume it with them (broker resume {jid} --secret HF_TOKEN), then switch it (broker ondemand {jid}); " \
           f"switched with --force (broker ondemand {jid} --force) it runs again unchanged" in said, said
    said = _said(run("resume", jid, check=False))
    assert f"resumed with --force (broker resume {jid} --force) it runs again unchanged" in said, said


def test_the_resumes_other_refusals_come_from_a_switch_as_the_switchs(run, tmp_path):
    base = f"file://{tmp_path / 'shared-base'}"
    jid = _failed(run, tmp_path, "first", OWN_ERROR.format(name="first") + f"broker: {{checkpoint: '{base}'}}\n")
    task = tmp_path / "second.yaml"  # the base taken since by a job not ended
    task.write_text(f"name: second\nresources: {{cpus: 1}}\nrun: sleep 300\nbroker: {{checkpoint: '{base}'}}\n")
    other = json.loads(run("--json", "submit", str(task), "--budget", "2").stdout)["id"]

    said = _said(r := run("ondemand", jid, "--force", check=False))
    assert r.returncode == 1 and said.startswith(f"error [409]: not switched to on-demand: its checkpoint base "
                                                 f"'{base}' is also that of job {other}"), said
    assert said.endswith("Switch it once that job has ended (or cancel that job)"), said
