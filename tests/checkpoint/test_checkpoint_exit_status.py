"""A script that ends without close() while its last save uploads: the exit status says whether that save was kept.

Real scripts in subprocesses against real stores that refuse the upload: a local directory replaced by a file
(every write under it fails), and moto's S3 server with the run's bucket deleted under it (NoSuchBucket). Before,
the failure was at most a log line and the process exited 0: the broker took the run for finished and its user
believed the final checkpoint existed.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from checkpoint import Checkpointer

#: Saves step 1 and waits for its commit, then the store starts refusing writes, then saves step 2 in the
#: background and ends as ENDING says — never calling close().
SCRIPT = """
import atexit, os, shutil, sys
import numpy as np
from checkpoint import Checkpointer

atexit.register(print, "the script's own atexit hook ran")  # a tracker's finish(): the exit status must not skip it

uri = os.environ["BROKER_CHECKPOINT_URI"]
ckpt = Checkpointer(every_steps=1)
ckpt.save(1, {"a": np.full(1024, 1.0)}, wait=True)
if os.environ["BREAK"] == "yes":
    if uri.startswith("s3://"):  # the bucket is deleted under the run: S3 refuses every write with NoSuchBucket
        import boto3
        bucket = boto3.resource("s3").Bucket(uri.split("/")[2])
        bucket.objects.all().delete()
        bucket.delete()
    else:  # the directory is replaced by a file: every write under it fails
        shutil.rmtree(uri)
        open(uri, "w").close()
ckpt.save(2, {"a": np.full(1024, 2.0)})
print("saved 2 in the background", flush=True)
"""

ENDINGS = {
    "at the end of the script": "",
    "after sys.exit(0)": "sys.exit(0)",
    "after an uncaught exception": "raise RuntimeError('the loop crashed after saving')",
}


@pytest.fixture
def run_script(request, make_uri, subprocess_env):
    def run(kind: str, ending: str, *, broken: bool) -> subprocess.CompletedProcess:
        uri = make_uri(kind)
        if kind == "s3":  # a bucket of its own, as the script deletes it
            import boto3

            s3_endpoint = request.getfixturevalue("s3_endpoint")
            bucket = f"exit-{uuid.uuid4().hex[:12]}"
            boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                         aws_secret_access_key="test").create_bucket(Bucket=bucket)
            uri = f"s3://{bucket}/run"
        script = SCRIPT + ENDINGS[ending] + "\n"
        return subprocess.run([sys.executable, "-c", script], env=subprocess_env(uri, BREAK="yes" if broken else "no"),
                              capture_output=True, text=True, timeout=120)

    return run


@pytest.mark.parametrize("kind, ending", [("file", "at the end of the script"), ("s3", "at the end of the script"),
                                          ("file", "after sys.exit(0)")], ids=lambda v: v)
def test_a_last_save_the_store_refused_makes_a_script_that_forgot_close_exit_1_saying_so(kind, ending, run_script):
    done = run_script(kind, ending, broken=True)
    assert "saved 2 in the background" in done.stdout, done.stderr[-2000:]
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "the script's own atexit hook ran" in done.stdout
    last = done.stderr.strip().splitlines()[-1]
    # one plain sentence, last on stderr (where the broker's diagnosis quotes it), naming the step and why
    assert last.startswith("The last checkpoint (step 2) was not saved to "), last
    assert ("NoSuchBucket" if kind == "s3" else "Error") in last and "close()" in last and "status 1" in last, last


def test_a_script_that_ended_with_an_exception_keeps_it_as_the_reason_and_still_names_the_lost_save(run_script):
    done = run_script("file", "after an uncaught exception", broken=True)
    assert done.returncode == 1
    assert "RuntimeError: the loop crashed after saving" in done.stderr
    # after the traceback, in the form the broker's diagnosis reads as shutdown noise (broker/diagnosis.py)
    tail = done.stderr.split("RuntimeError: the loop crashed after saving", 1)[1]
    assert "checkpoint upload failed at exit: The last checkpoint (step 2) was not saved" in tail, done.stderr[-2000:]


@pytest.mark.parametrize("ending", ["at the end of the script", "after sys.exit(0)"])
def test_a_script_that_forgot_close_and_whose_last_save_committed_still_exits_0(ending, run_script):
    done = run_script("file", ending, broken=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the script's own atexit hook ran" in done.stdout
    assert "not saved" not in done.stderr and "failed at exit" not in done.stderr, done.stderr


def test_an_upload_that_hangs_at_exit_is_given_up_after_exit_timeout_s_and_exits_1(tmp_path, subprocess_env):
    # an S3 endpoint that takes the connection and never answers (botocore would wait 60 s a try, and retry)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    script = textwrap.dedent("""
        import numpy as np
        from checkpoint import Checkpointer
        ckpt = Checkpointer(every_steps=1, exit_timeout_s=1.5)
        ckpt.save(1, {"a": np.full(1024, 1.0)})
    """)
    env = subprocess_env("s3://hangs/run", AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test",
                         AWS_SECRET_ACCESS_KEY="test", AWS_DEFAULT_REGION="us-east-1")
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    finally:
        silent.close()
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert time.monotonic() - started < 30
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("The last checkpoint (step 1) was not saved to s3://hangs/run: still uploading 1.5 s"), last


@pytest.mark.parametrize("value, error", [(-1, ValueError), ("600", TypeError), (True, TypeError)])
def test_exit_timeout_s_is_checked_when_the_checkpointer_is_built(value, error, tmp_path):
    with pytest.raises(error, match="exit_timeout_s"):
        Checkpointer(tmp_path, env={}, handle_sigterm=False, exit_timeout_s=value)


def test_the_broker_explains_a_run_whose_last_save_was_lost_in_a_sentence_naming_the_step_and_store(run_script):
    """What the broker's diagnosis makes of that exit (its log and status as the launcher hands them over): the lost
    checkpoint, not "the training script raised an Error" of the store's message, nor "could not read" a path."""
    from broker.diagnosis import Ending, diagnose

    done = run_script("s3", "at the end of the script", broken=True)
    assert done.returncode == 1, done.stderr[-2000:]
    found = diagnose(Ending(phase="failed", exit_code=1, log_tail=done.stdout + done.stderr))
    assert found.cls == "checkpoint_not_saved", found
    assert found.sentence.startswith("The training ended, but its last checkpoint (step 2) was not saved to s3://"), found
    assert "NoSuchBucket" in found.sentence and "close()" in found.hint and not found.infrastructure, found


def test_by_default_the_exit_waits_for_the_last_upload_however_long_it_takes():
    """A cap on the whole upload gave up a healthy final save of a large model (600 s: about 60 GB), uncommitted;
    only a script that asks for one (its store may hang) gets a limit."""
    import inspect

    assert inspect.signature(Checkpointer).parameters["exit_timeout_s"].default is None
