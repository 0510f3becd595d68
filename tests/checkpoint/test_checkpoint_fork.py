"""Processes forked from a training script (``multiprocessing`` with the ``fork`` start method: a ``Pool`` or a
``Process`` for data preparation, evaluation or logging) are not the training process.

They inherited the checkpointer's SIGTERM handler and its signal wakeup socket, shared with the parent: a SIGTERM
to such a helper was written into the parent's socket and read there as the parent's own notice, while the helper
itself ignored it. So ``Process.terminate()`` on a helper made the run save and exit 143 as if preempted (and left the
helper running), and the VM's SIGTERM to the whole process group was heard twice — parent and helper — and the
second "notice" forced the exit at once, without the preemption's checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from checkpoint import Checkpointer

PYTHON = sys.executable

HELPER = textwrap.dedent("""
    import multiprocessing, time
    from checkpoint import Checkpointer

    def helper():
        time.sleep(10)  # bounded: a helper that ignores SIGTERM still ends
""")


def test_a_sigterm_to_the_whole_process_group_with_a_forked_helper_still_saves_then_exits_143(
        tmp_path, subprocess_env):
    script = HELPER + textwrap.dedent("""
        ckpt = Checkpointer(every_steps=10**6, grace_s=30)
        multiprocessing.get_context("fork").Process(target=helper, daemon=True).start()
        time.sleep(0.3)
        print("ready", flush=True)
        for step in range(1, 10**6):
            time.sleep(0.02)
            if ckpt.due(step):
                ckpt.save(step, {"step": step})
    """)
    uri = str(tmp_path / "run")
    proc = subprocess.Popen([PYTHON, "-c", script], env=subprocess_env(uri), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()[-2000:]
        os.killpg(proc.pid, signal.SIGTERM)  # what a VM's shutdown does
        _, err = proc.communicate(timeout=30)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the helper too, if it outlived the run
        except ProcessLookupError:
            pass
        proc.wait()
    assert "second preemption notice" not in err, err[-2000:]
    assert proc.returncode == 143, err[-2000:]
    with Checkpointer(uri, env={}, handle_sigterm=False) as ckpt:
        assert ckpt.restore() is not None, err[-2000:]


def test_terminating_a_forked_helper_ends_the_helper_and_is_no_notice_to_the_training_process(
        tmp_path, subprocess_env):
    script = HELPER + textwrap.dedent("""
        ckpt = Checkpointer(every_steps=10**6)
        helper_process = multiprocessing.get_context("fork").Process(target=helper, daemon=True)
        helper_process.start()
        time.sleep(0.3)
        helper_process.terminate()
        helper_process.join(5)
        time.sleep(0.3)  # the watchdog reads its socket every 0.05 s
        print(helper_process.exitcode, ckpt.preemption.requested, flush=True)
        ckpt.close()
    """)
    done = subprocess.run([PYTHON, "-c", script], env=subprocess_env(str(tmp_path / "run")), capture_output=True,
                          text=True, timeout=60, start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(-signal.SIGTERM), "False"], done.stderr[-2000:]
    assert "preemption notice" not in done.stderr


def test_a_forked_process_that_ends_while_the_parent_uploads_leaves_the_upload_to_the_parent(tmp_path, subprocess_env):
    """A forked child ending as scripts end (not by ``os._exit``) ran the exit flush of the parent's checkpointers,
    and waited for the parent's upload on an upload thread the child does not have: it never ended."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from checkpoint import Checkpointer
        from fakes import GatedStorage, committed_steps, memory_store

        storage = GatedStorage(memory_store())
        ckpt = Checkpointer(storage=storage, env={}, every_steps=1)
        ckpt.save(1, {"x": 1})
        storage.writes_started.acquire()  # the upload is running (held at the gate)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        deadline = time.monotonic() + 5  # within the gate's own 10 s
        while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
            time.sleep(0.05)
        if time.monotonic() >= deadline:
            print("the child hangs", flush=True)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        storage.open()
        ckpt.close()
        print("committed", committed_steps(storage), flush=True)
    """)
    env = subprocess_env(str(tmp_path / "unused"))
    env["PYTHONPATH"] = os.path.dirname(__file__) + os.pathsep + env["PYTHONPATH"]
    done = subprocess.run([PYTHON, "-c", script], env=env, capture_output=True, text=True, timeout=60,
                          start_new_session=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["committed [1]"], done.stderr[-2000:]
