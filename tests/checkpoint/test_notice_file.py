"""The broker's own stop notice on a host it runs jobs on: a file that appears
(``checkpoint/notice_file.py``). The runner side — the notice written, the group's SIGTERM held
back while a checkpointer listens — runs end to end with a real DataLoader in
``tests/broker/test_broker_recovery.py``."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time

import pytest
from conftest import PYTHON

from checkpoint import Checkpointer
from checkpoint.notice_file import NoticeFileWatcher, listeners_dir
from checkpoint.preemption import PreemptionNotice


def _until(predicate, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_checkpointer_listens_while_open_and_the_file_is_its_preemption_notice(tmp_path):
    notice = tmp_path / "notice.json"
    with Checkpointer(str(tmp_path / "run"), every_steps=1000, env={"BROKER_NOTICE_FILE": str(notice)}) as ckpt:
        assert (listeners_dir(notice) / str(os.getpid())).exists()  # what the runner looks for
        assert not ckpt.due(1)
        written = time.monotonic()
        notice.write_text(json.dumps({"reason": "preempted", "grace_seconds": 10, "at": time.time() - 2}))
        assert _until(lambda: ckpt.preemption.requested)
        read_within = time.monotonic() - written  # the watcher's poll, and a loaded host's delays
        assert ckpt.due(1)
        # the runner kills at the end of its 10 s, 2 s of which have passed: exit a second before that
        assert 7.0 - read_within - 0.1 <= ckpt.preemption.grace_s <= 7.0
    assert os.listdir(listeners_dir(notice)) == []  # closed: the runner signals at once again


def test_without_the_variable_or_with_sigterm_handling_off_nothing_listens(tmp_path):
    notice = tmp_path / "notice.json"
    with Checkpointer(str(tmp_path / "a"), env={}) as ckpt:
        assert ckpt._notice_file is None
    with Checkpointer(str(tmp_path / "b"), env={"BROKER_NOTICE_FILE": str(notice)}, handle_sigterm=False):
        assert not listeners_dir(notice).exists()


def test_a_notice_already_there_is_heard_at_once_and_only_once(tmp_path):
    notice = tmp_path / "notice.json"
    notice.write_text("{}")
    heard = []
    watcher = NoticeFileWatcher(notice, heard.append, poll_s=0.01).start()
    assert _until(lambda: heard)
    time.sleep(0.1)
    watcher.stop()
    assert heard == [None]  # the notice gave no grace period


def test_the_runners_last_warning_after_the_notice_does_not_cut_the_save_short():
    codes = []
    notice = PreemptionNotice(grace_s=60, force_exit=codes.append)
    notice.notify("broker")
    notice.notify("signal")  # the group's SIGTERM just before the grace ends: the save goes on
    assert codes == []
    notice.notify("signal")  # a second signal: now exit
    assert codes == [143]
    notice.uninstall()


def test_the_log_says_why_the_broker_stops_the_job(tmp_path, caplog):
    """A stop at the job's budget was logged as "the broker announces a stop" then "preemption notice: saving":
    the user read their job as preempted. The notice's reason is said first."""
    said = []
    for reason, expected in (("budget", "the broker announces a stop: the job is at its budget"),
                             ("something-new", "the broker announces a stop: something-new"),
                             (None, "the broker announces a stop (")):
        notice = tmp_path / f"{reason}.json"
        notice.write_text(json.dumps({"reason": reason, "grace_seconds": 10, "at": time.time()}))
        heard = []
        caplog.clear()
        with caplog.at_level("WARNING", logger="checkpoint"):
            watcher = NoticeFileWatcher(notice, heard.append, poll_s=0.01).start()
            assert _until(lambda: heard)
            watcher.stop()
        said.append(any(r.getMessage().startswith(expected) for r in caplog.records))
    assert said == [True, True, True]


def test_two_checkpointers_of_one_process_stay_registered_until_the_last_one_closes(tmp_path):
    """The listener file is named after the pid, so two checkpointers share it (the run's, and one opened to
    read pretrained weights): closing the reader removed it, and the runner, finding no listener, sent the
    group's SIGTERM at once (killing DataLoader workers) while the run's checkpointer still listened."""
    notice = tmp_path / "notice.json"
    registered = listeners_dir(notice) / str(os.getpid())
    env = {"BROKER_NOTICE_FILE": str(notice)}
    run = Checkpointer(str(tmp_path / "run"), every_steps=1000, env=env)
    reader = Checkpointer(str(tmp_path / "pretrained"), env=env)
    reader.close()
    assert registered.exists()
    run.close()
    assert not registered.exists()


@pytest.mark.parametrize("reason, notice, ended", [
    ("budget", "stop notice (the job is at its budget): saving at the next step",
     "stopped (the job is at its budget): checkpoint"),
    ("cancelled", "stop notice (the job was cancelled): saving at the next step",
     "stopped (the job was cancelled): checkpoint"),
    ("preempted", "preemption notice: saving at the next step", "preempted: checkpoint"),
    ("the pod is being deleted", "preemption notice: saving at the next step", "preempted: checkpoint"),
], ids=["a stop at the budget is said as a stop", "so is a cancel", "a preemption is said as one",
        "a reason the library does not know is taken for a preemption"])
def test_the_job_log_says_a_stop_is_a_stop_from_the_notice_to_the_exit(tmp_path, subprocess_env, reason, notice,
                                                                         ended):
    """A stop at the budget was logged as "the broker announces a stop: the job is at its budget", then "preemption
    notice: saving" and "preempted: checkpoint … committed, exiting": the user read their job as preempted."""
    script = textwrap.dedent("""
        import json, os, sys, time
        import numpy as np
        from checkpoint import Checkpointer
        with Checkpointer(every_steps=10**6, grace_s=30) as ckpt:
            for step in range(1, 10**6):
                time.sleep(0.01)
                if step == 20:  # written whole, as the runner writes it: a watcher that read it half-written took
                    # it for a notice with no reason, a preemption (seen once in a full run)
                    with open(sys.argv[1] + ".tmp", "w") as f:
                        json.dump({"reason": sys.argv[2], "grace_seconds": 30, "at": time.time()}, f)
                    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
                if ckpt.due(step):
                    ckpt.save(step, {"w": np.full(4, step)})
        print("the loop ended without the notice's save", flush=True)
    """)
    path = tmp_path / "notice.json"
    done = subprocess.run([PYTHON, "-c", script, str(path), reason], capture_output=True, text=True, timeout=60,
                          env=subprocess_env(str(tmp_path / "run"), BROKER_NOTICE_FILE=str(path)))
    assert done.returncode == 143, done.stderr[-2000:]
    assert notice in done.stderr and ended in done.stderr, done.stderr[-2000:]
    if reason in ("budget", "cancelled"):
        assert "preempt" not in done.stderr, done.stderr[-2000:]


def test_a_notice_seen_half_written_is_read_once_whole(tmp_path, caplog):
    """A notice written in place (not through a temporary file, as the runner writes it) and seen half-written had
    no reason: a stop at the budget was logged, and handled, as a preemption."""
    notice = tmp_path / "notice.json"
    whole = json.dumps({"reason": "budget", "grace_seconds": 10, "at": time.time()})
    heard = []
    with caplog.at_level("WARNING", logger="checkpoint"):
        watcher = NoticeFileWatcher(notice, heard.append, poll_s=0.01).start()
        with notice.open("w") as fh:
            fh.write(whole[:12])
            fh.flush()
            time.sleep(0.15)  # the watcher polls every 10 ms: it sees the half
            fh.write(whole[12:])
        assert _until(lambda: heard)
        watcher.stop()
    assert any(r.getMessage() == f"the broker announces a stop: the job is at its budget ({notice})"
               for r in caplog.records), caplog.text
    assert heard[0] is not None and 0 < heard[0] <= 10
