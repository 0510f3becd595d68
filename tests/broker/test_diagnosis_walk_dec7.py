"""Walkthrough, Dec 7: a real broker and a real PyTorch script using the checkpoint library.

What it found, and what these tests hold the broker to:

- the step a diagnosis named was the last one the job showed, not the one it failed at: ``FAIL_AT=37`` read "Out of
  GPU memory at step 30."; a ValueError at step 65 "… at step 60"; a resume from 50 that failed at 60 "at step 50".
  A sentence now says "after step 30 (the last the job reported)", or "(the last in the job's log)", and never "at".
- a checkpoint bucket that does not exist (``broker: {checkpoint: s3://nosuch-bucket/runs/x}``) was blamed on the
  code, its error said twice ("… does not exist (caused by botocore.errorfactory.NoSuchBucket: <the same again>)"),
  and a resume asked for --force: now it is the checkpoint location's, resumed in one click once the bucket is there.
- a code error's resume refusal said "resumed with --force it runs again unchanged", where a workdir on the broker's
  host is read anew at each attempt: after train.py was fixed, ``broker resume J --force`` ran the fixed code.

Real parts: ``broker serve`` subprocesses with the local launcher, PyTorch (CPU), moto's S3 server, the checkpoint
library; and the diagnosis itself on logs those runs printed.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx
import pytest
from broker_testing import ADMIN, start_broker, wait_for

from broker.diagnosis import Ending, diagnose

TRAINER = Path(__file__).with_name("trainer.py")
H = {"Authorization": f"Bearer {ADMIN}"}
CONFIG = """
pools:
  - {name: cpu, slots: 2, price_per_slot_hour: "0.36"}
tick_seconds: 0.1
stop_grace_seconds: 2
"""


@pytest.fixture
def serve(tmp_path):
    procs = []

    def start(env_extra=None):
        proc, url = start_broker(tmp_path, f"sqlite://{tmp_path / 'w.db'}", config=CONFIG, env_extra=env_extra)
        procs.append(proc)
        return httpx.Client(base_url=url, headers=H, timeout=10)

    yield start
    for p in procs:
        p.send_signal(signal.SIGTERM)
        p.wait(15)


def until_state(client, job_id, states, timeout=90):
    return wait_for(lambda: (j := client.get(f"/v1/jobs/{job_id}").json())["state"] in states and j, timeout=timeout)


# --- the step a diagnosis names ---------------------------------------------------------------------------------

# a script that prints and reports every 10 steps ("step 10" … "step 30"), then fails at step 37
SHOWN = "".join(f"step {n}\n" for n in (10, 20, 30))
FAILURES = {
    "CUDA out of memory": ("Traceback (most recent call last):\n  File \"/work/train.py\", line 14, in <module>\n"
                           "    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
                           "GiB. GPU 0 has a total capacity of 22.20 GiB\n", 1, None, "Out of GPU memory{}."),
    "an exception of the script's": ("Traceback (most recent call last):\n  File \"/work/train.py\", line 16, in "
                                     "<module>\n    raise ValueError(\"boom\")\nValueError: boom\n", 1, None,
                                     "The training script raised ValueError{}: boom."),
    "a NaN loss": ("Traceback (most recent call last):\n  File \"/work/train.py\", line 18, in <module>\n    raise "
                   "FloatingPointError(f\"loss is nan at step {step}\")\nFloatingPointError: loss is nan at step 37\n",
                   1, None, "The training diverged{}: the loss or gradients became NaN or infinite "
                            "(FloatingPointError: loss is nan at step 37)."),
    "the kernel's OOM killer": ("Killed\n", 137, 9, "Out of host memory{}: the kernel killed the process."),
    "a segfault": ("", 139, 11, "The job crashed with a segmentation fault{}."),
}


@pytest.mark.parametrize("kind", FAILURES)
@pytest.mark.parametrize("reported, said", [
    pytest.param(30, " after step 30 (the last the job reported)", id="its last report was step 30"),
    pytest.param(None, " after step 30 (the last in the job's log)", id="it reported none, its log shows step 30"),
])
def test_a_failure_at_step_37_is_said_to_come_after_the_last_step_shown_never_at_it(kind, reported, said):
    # the NaN's error names step 37 itself: not a step the job showed it got past
    tail, code, sig, sentence = FAILURES[kind]
    d = diagnose(Ending("failed", code, sig, log_tail=SHOWN + tail, step=reported))
    assert d.sentence == sentence.format(said), d
    assert " at step 30" not in d.text and d.step == 30


def test_a_resumed_run_that_failed_before_reporting_again_names_the_step_it_resumed_from_as_reported():
    # attempt 2 restored step 50 (its checkpoint, reported), printed "start 50" and failed at 60 before its next
    # report: "at step 50" said it failed there
    d = diagnose(Ending("failed", 1, log_tail="start 50\nTraceback (most recent call last):\n  File \"t.py\", line 9, "
                                              "in <module>\nValueError: boom\n", step=50))
    assert d.sentence == "The training script raised ValueError after step 50 (the last the job reported): boom.", d


def test_a_real_out_of_memory_at_step_37_is_said_to_come_after_the_reported_step_30(serve, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os, time\nimport torch\nfrom checkpoint.progress import report\n"
        "fail_at = int(os.environ['FAIL_AT'])\nmodel = torch.nn.Linear(4, 1)\n"
        "for step in range(1, 101):\n"
        "    model(torch.randn(8, 4)).pow(2).mean().backward()\n"
        "    if step == fail_at:\n"
        "        raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
        "    if step % 10 == 0:\n"
        "        print(f'step {step}', flush=True)\n"
        "        report(step, 100)\n"
        "    time.sleep(0.05)\n")
    client = serve()
    job = client.post("/v1/jobs", json={
        "name": "oom", "resources": {"cpus": 1}, "run": f"{sys.executable} {script}",
        "envs": {"FAIL_AT": "37", "BROKER_PROGRESS_INTERVAL_S": "0"}, "broker": {"budget_usd": 5}}).json()
    final = until_state(client, job["id"], {"failed", "succeeded"})
    assert final["state"] == "failed" and final["progress"]["step"] == 30, (final["progress"], final["reason"])
    assert final["diagnosis"]["class"] == "gpu_oom"
    assert final["diagnosis"]["sentence"] == "Out of GPU memory after step 30 (the last the job reported).", final


# --- a checkpoint location that cannot be used ------------------------------------------------------------------

# what the checkpoint library printed when its base's bucket did not exist (trainer.py against moto, restore first)
NO_BUCKET = """Traceback (most recent call last):
  File "/work/main/checkpoint/storage.py", line 868, in _call
    return call()
           ^^^^^^
  File "/work/main/.venv/lib/python3.11/site-packages/botocore/client.py", line 1094, in _make_api_call
    raise error_class(parsed_response, operation_name)
botocore.errorfactory.NoSuchBucket: An error occurred (NoSuchBucket) when calling the ListObjectsV2 operation: The \
specified bucket does not exist

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/work/main/tests/broker/trainer.py", line 17, in <module>
    state = ckpt.restore(default=None)
            ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/checkpoint/storage.py", line 879, in _call
    raise OSError(f"{self.uri(path)}: {e}{said}") from e
OSError: s3://nosuch-bucket/runs/x: An error occurred (NoSuchBucket) when calling the ListObjectsV2 operation: The \
specified bucket does not exist
"""
# the same, from a script that saved without restoring: its background save's error, raised on a later call
SAVE_FAILED = """step 10
step 11
Traceback (most recent call last):
botocore.errorfactory.NoSuchBucket: An error occurred (NoSuchBucket) when calling the ListObjectsV2 operation: The \
specified bucket does not exist

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
OSError: s3://nosuch-bucket/runs/x: An error occurred (NoSuchBucket) when calling the ListObjectsV2 operation: The \
specified bucket does not exist

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/work/train.py", line 7, in <module>
    ck.save(step, {"step": step})
checkpoint.errors.CheckpointError: background checkpoint save failed: the checkpoint of step 10 could not be written \
to s3://nosuch-bucket/runs/x/step-000000000010-1796603211655: OSError: s3://nosuch-bucket/runs/x: An error occurred \
(NoSuchBucket) when calling the ListObjectsV2 operation: The specified bucket does not exist
"""
DENIED = ("step 20\nTraceback (most recent call last):\n  File \"/work/main/checkpoint/storage.py\", line 879, in _call\n"
          "    raise OSError(f\"{self.uri(path)}: {e}{said}\") from e\nOSError: s3://team-ckpt/runs/x/step-000000000020-"
          "1796603211655/manifest.json: An error occurred (AccessDenied) when calling the PutObject operation: Access "
          "Denied\n")
FSSPEC_NO_BUCKET = ("Traceback (most recent call last):\n  File \"/work/train.py\", line 3, in <module>\n"
                    "OSError: gs://nosuch/runs/x: bucket 'nosuch' does not exist, or these credentials cannot see it "
                    "(FileNotFoundError: b/nosuch/o)\n")


@pytest.mark.parametrize("log, step, sentence", [
    pytest.param(NO_BUCKET, None, "The checkpoint location s3://nosuch-bucket/runs/x cannot be used: the bucket "
                 "nosuch-bucket does not exist.", id="restore found no bucket (was the code's OSError, said twice)"),
    # reported step 10 (its save), printed step 11: the step its error names (10's save) is not read as shown
    pytest.param(SAVE_FAILED, 10, "The checkpoint location s3://nosuch-bucket/runs/x cannot be used after step 11 (the "
                 "last in the job's log): the bucket nosuch-bucket does not exist.",
                 id="a save found no bucket (was the code's CheckpointError)"),
    pytest.param(DENIED, None, "The checkpoint location s3://team-ckpt/runs/x cannot be used after step 20 (the last "
                 "in the job's log): the job's credentials are denied access to it (PutObject: AccessDenied).",
                 id="access denied to a save's file: the location is its base"),
    pytest.param(FSSPEC_NO_BUCKET, None, "The checkpoint location gs://nosuch/runs/x cannot be used: the bucket nosuch "
                 "does not exist, or the job's credentials cannot see it.", id="an fsspec store's missing bucket"),
])
def test_a_checkpoint_location_that_cannot_be_used_is_its_configuration_not_the_code(log, step, sentence):
    d = diagnose(Ending("failed", 1, log_tail=log, step=step))
    assert (d.cls, d.infrastructure, d.sentence) == ("checkpoint_location", True, sentence), d
    assert "broker.checkpoint" in d.hint and "no --force" in d.hint and "Fix the error in the code" not in d.text


def test_an_exception_that_repeats_the_one_it_was_raised_from_is_not_said_twice():
    log = NO_BUCKET.replace("s3://nosuch-bucket/runs/x", "s3://data/shards")  # the same error raised by the job's code
    d = diagnose(Ending("failed", 1, log_tail=log.replace("checkpoint/storage.py", "mylib/io.py")
                        .replace("OSError: s3://", "mylib.StoreError: s3://")))
    assert d.sentence == ("The training script raised mylib.StoreError: s3://data/shards: An error occurred "
                          "(NoSuchBucket) when calling the ListObjectsV2 operation: The specified bucket does not "
                          "exist."), d
    # a cause that says something else is still named
    other = diagnose(Ending("failed", 1, log_tail="Traceback (most recent call last):\nKeyError: 'shard_7'\n\nThe above "
                                                  "exception was the direct cause of the following exception:\n\n"
                                                  "Traceback (most recent call last):\nRuntimeError: no batch\n"))
    assert other.sentence == "The training script raised RuntimeError: no batch (caused by KeyError: 'shard_7').", other


def test_a_real_job_whose_checkpoint_bucket_does_not_exist_resumes_in_one_click_once_it_does(serve, s3_endpoint):
    import boto3

    aws = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1"}
    client = serve(env_extra=aws)
    job = client.post("/v1/jobs", json={
        "name": "nobucket", "resources": {"cpus": 1}, "run": f"{sys.executable} {TRAINER} 20 0.01 10",
        "envs": {"BROKER_PROGRESS_INTERVAL_S": "0.1"},
        "broker": {"budget_usd": 5, "checkpoint": "s3://nosuch-bucket/runs/x"}}).json()
    final = until_state(client, job["id"], {"failed", "succeeded"})
    d = final["diagnosis"]
    assert final["state"] == "failed" and (d["class"], d["infrastructure"]) == ("checkpoint_location", True), final
    assert d["sentence"] == ("The checkpoint location s3://nosuch-bucket/runs/x cannot be used: the bucket "
                             "nosuch-bucket does not exist."), d
    assert "caused by" not in d["text"] and "--force" not in final["reason"].split(".", 1)[0]
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                 aws_secret_access_key="test").create_bucket(Bucket="nosuch-bucket")
    resumed = client.post(f"/v1/jobs/{job['id']}/resume")  # as its hint says: no --force
    assert resumed.status_code == 200, resumed.text
    again = until_state(client, job["id"], {"failed", "succeeded"})
    assert again["state"] == "succeeded" and again["attempts"] == 2, again


# --- what a refused resume says ---------------------------------------------------------------------------------

def test_a_refused_resume_says_truly_what_force_runs_and_a_fixed_workdir_on_this_host_runs_fixed(serve, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("for step in range(100):\n"
                                   "    if step % 10 == 0:\n"
                                   "        print(f'step {step}', flush=True)\n"
                                   "    if step == 65:\n"
                                   "        raise ValueError('boom')\n")
    client = serve()
    job = client.post("/v1/jobs", json={"name": "fixme", "resources": {"cpus": 1}, "workdir": str(work),
                                        "run": f"{sys.executable} train.py", "broker": {"budget_usd": 5}}).json()
    final = until_state(client, job["id"], {"failed", "succeeded"})
    assert final["diagnosis"]["sentence"] == ("The training script raised ValueError after step 60 (the last in the "
                                              "job's log): boom."), final
    refused = client.post(f"/v1/jobs/{job['id']}/resume")
    said = refused.json()["detail"]
    assert refused.status_code == 409 and "runs again unchanged" not in said, said
    assert "Change what made it fail, then resume it with --force" in said, said
    assert "a workdir that is a path on this host is read anew at each attempt" in said, said
    assert f"broker resume {job['id']} --env NAME=value needs no --force" in said, said
    # and so it is: the fixed script runs on a forced resume
    (work / "train.py").write_text("print('fixed', flush=True)\n")
    assert client.post(f"/v1/jobs/{job['id']}/resume", params={"force": "true"}).status_code == 200
    again = until_state(client, job["id"], {"failed", "succeeded"})
    assert again["state"] == "succeeded" and again["attempts"] == 2, again
