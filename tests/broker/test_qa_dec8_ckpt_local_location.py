"""A local checkpoint location the checkpoint library cannot write — a base under a file, a directory nothing can be
made in, a read-only or denied one, a file over the size limit there — is the job's checkpoint location
(``checkpoint_location``, resumed without ``--force`` once it is fixed), in the library's words with its note kept;
before, it was "The training script raised checkpoint.errors.CheckpointError … Fix the error in the code" (its note
clipped mid-path) or "Could not read /proc/…" for a write. A full disk says what a resume cannot change
(``resources.disk_size``), and ``keep_last`` only when the file was a checkpoint's. And a base under a file is
refused at submit, naming the field, rather than failing inside the paid job."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from broker.api.app import create_app
from broker.diagnosis import Ending, diagnose
from broker_testing import ADMIN

REPO = Path(__file__).resolve().parents[2]
HEADERS = {"Authorization": f"Bearer {ADMIN}"}
SIZE_NOTE = "(a file is over the size limit: the process's `ulimit -f`, or the file system's largest file)"


def traceback(line: str) -> str:
    return ("step 10 loss 2.1\nTraceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n"
            "    ckpt.save(step, state, wait=True)\n" + line + "\n")


LIBRARY_SAID = [
    pytest.param("checkpoint.errors.CheckpointError: checkpoint base /ckpt/run cannot be created: this process "
                 "cannot write in /ckpt ([Errno 13] Permission denied)", "/ckpt/run",
                 "cannot be created: this process cannot write in /ckpt ([Errno 13] Permission denied)",
                 id="a base whose parent cannot be written"),
    pytest.param("checkpoint.errors.CheckpointError: checkpoint base /ckpt/run is not writable by this process (its "
                 "permissions, or a read-only file system): no checkpoint could be saved there", "/ckpt/run",
                 "is not writable by this process (its permissions, or a read-only file system): no checkpoint "
                 "could be saved there", id="a base that is not writable"),
    pytest.param("checkpoint.errors.CheckpointError: checkpoint base /dev/null/run cannot be created: /dev/null is a "
                 "file, not a directory", "/dev/null/run", "cannot be created: /dev/null is a file, not a directory",
                 id="a base under a file"),
    pytest.param("checkpoint.errors.CheckpointError: background checkpoint save failed: the checkpoint of step 10 "
                 "could not be written: OSError: [Errno 30] Read-only file system: "
                 "'/ckpt/run/step-000000000010-1796625323078/00-w.safetensors' (a read-only file system)", "/ckpt/run",
                 "[Errno 30] Read-only file system: '/ckpt/run/step-000000000010-1796625323078/00-w.safetensors' "
                 "(a read-only file system)", id="a save on a read-only file system"),
    pytest.param("checkpoint.errors.CheckpointError: background checkpoint save failed: the checkpoint of step 10 "
                 "could not be written to /proc/h2/x/step-000000000010-1796625323078: FileNotFoundError: [Errno 2] No "
                 "such file or directory: '/proc/h2' (the folder it goes in could not be created there)",
                 "/proc/h2/x", "(the folder it goes in could not be created there)",
                 id="a save whose folder could not be made"),
    pytest.param("checkpoint.errors.CheckpointError: background checkpoint save failed: the checkpoint of step 10 "
                 "could not be written: OSError: [Errno 27] File too large: '/tmp/some/rather/long/path/to/the/"
                 "checkpoints/of/this/run/step-000000000010-1796625323078/00-w.safetensors' " + SIZE_NOTE,
                 "/tmp/some/rather/long/path/to/the/checkpoints/of/this/run", SIZE_NOTE,
                 id="a save over the file size limit, its note kept"),
]


@pytest.mark.parametrize("line, base, said", LIBRARY_SAID)
def test_the_checkpoint_librarys_words_for_a_local_base_are_its_location_resumed_without_force(line, base, said):
    d = diagnose(Ending("failed", 1, log_tail=traceback(line)))
    assert (d.cls, d.infrastructure) == ("checkpoint_location", True), d
    assert d.sentence.startswith(f"The checkpoint location {base} cannot be used"), d.sentence
    assert said in d.sentence and "Fix the error in the code" not in d.text, d.text
    assert "no --force" in d.hint, d.hint


SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    import numpy as np
    from checkpoint import Checkpointer
    ckpt = Checkpointer(sys.argv[1], every_steps=10, env={{}}, handle_sigterm=False)
    state = {{"w": np.zeros(100_000)}}
    for step in range(1, 31):
        print(f"step {{step}} loss 2.1", flush=True)
        if ckpt.due(step):
            ckpt.save(step, state, wait=True)
    ckpt.close()
""")


@pytest.mark.parametrize("shell, base, said", [
    ("ulimit -f 12 && ", "{tmp}/run", SIZE_NOTE),
    ("", "/dev/null/run", "cannot be created: /dev/null is a file, not a directory"),
    ("", "/proc/h6_qa_dec8/run", "cannot be created: cannot create /proc/h6_qa_dec8: [Errno 2] No such file or "
                                 "directory (a folder cannot be made there)"),
], ids=["a ulimit -f under the run command", "a base under /dev/null", "a base under /proc"])
def test_a_real_script_whose_local_checkpoint_location_cannot_be_written_is_that_location_not_its_code(
        tmp_path, shell, base, said):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(repo=str(REPO)))
    base = base.format(tmp=tmp_path)
    ran = subprocess.run(["bash", "-c", f"{shell}exec {sys.executable} {script} {base}"], capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    d = diagnose(Ending("failed", 1, log_tail=ran.stdout + ran.stderr))
    assert (d.cls, d.infrastructure) == ("checkpoint_location", True), (d, ran.stderr[-1500:])
    assert d.sentence.startswith(f"The checkpoint location {base} cannot be used"), d.sentence
    assert said in d.sentence and "Could not read" not in d.sentence, d.sentence


def test_a_long_message_keeps_its_closing_note_and_is_not_cut_inside_a_path():
    message = ("could not write the shard: OSError: [Errno 27] File too large: '/scratch/" + "x" * 200
               + "/shard.bin' " + SIZE_NOTE)
    d = diagnose(Ending("failed", 1, log_tail=traceback(f"mylib.ShardError: {message}")))
    assert d.cls == "user_code_error" and d.sentence.endswith(SIZE_NOTE + "."), d.sentence
    assert "/scratch/xxx" not in d.sentence and "could not write the shard: OSError: [Errno 27] File too large … (a file" \
        in d.sentence, d.sentence


def test_a_full_disk_the_job_wrote_its_own_file_to_says_what_a_resume_cannot_change_and_not_keep_last():
    d = diagnose(Ending("failed", 1, log_tail=traceback(
        "OSError: [Errno 28] No space left on device: '/tmp/out/log.txt'")))
    assert d.cls == "disk_full" and "/tmp/out/log.txt" in d.sentence, d
    assert "keep_last" not in d.hint and "keep fewer checkpoints" not in d.hint.lower(), d.hint
    assert "a resume does not change" in d.hint and "submit the task again with a larger resources.disk_size" \
        in d.hint, d.hint


def test_a_full_disk_a_checkpoint_was_written_to_advises_keep_last():
    d = diagnose(Ending("failed", 1, log_tail=traceback(
        "checkpoint.errors.CheckpointError: background checkpoint save failed: the checkpoint of step 10 could not "
        "be written: OSError: [Errno 28] No space left on device: "
        "'/ckpt/run/step-000000000010-1796625323078/00-w.safetensors' (the disk is full: free space there)")))
    assert d.cls == "disk_full" and "the checkpoint could not write /ckpt/run/step-" in d.sentence, d
    assert "keep_last=N" in d.hint and "submit the task again with a larger resources.disk_size" in d.hint, d.hint


@pytest.fixture
def client(make_settings, store):
    with TestClient(create_app(make_settings(), store=store, engine=False), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("uri, says", [
    ("/dev/null/run", "checkpoint base /dev/null/run cannot be created: /dev/null is a file, not a directory"),
    ("file:///dev/null/run", "checkpoint base /dev/null/run cannot be created: /dev/null is a file, not a directory"),
    ("/dev/null", "checkpoint base /dev/null is a file, not a directory"),
], ids=["a path under a file", "a file URL under a file", "a path that is a file"])
def test_a_local_checkpoint_base_under_a_file_is_a_422_at_submit_naming_the_field(client, uri, says):
    r = client.post("/v1/jobs", json={"run": "echo hi", "broker": {"budget_usd": 1, "checkpoint": uri}},
                    headers=HEADERS)
    assert r.status_code == 422, r.text
    assert r.json()["field"] == "broker.checkpoint" and says in r.json()["detail"], r.text
    assert client.get("/v1/jobs", headers=HEADERS).json()["jobs"] == []
