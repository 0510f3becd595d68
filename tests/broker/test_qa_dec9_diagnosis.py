"""What a QA tester's failed jobs were told, checked against the plain-words diagnosis: a plain evaluation bar after the
script's "step N/TOTAL" lines read as the step; a setup command's exception said as the training script's; a
checkpoint promised to a job that saved none; a shell's exit 137 said as a SIGKILL seen; a second stall that named no
step; pip's network failure quoted up to its object's address, before what failed."""

from __future__ import annotations

import pytest

from broker.diagnosis import SHIPPED_RULES, Ending, diagnose

STEPS = "".join(f"step {s}/5000 | loss {2.9 - s / 1000:.3f} | lr 3.0e-04\n" for s in range(200, 1201, 200))
OOM = ("Traceback (most recent call last):\n"
       '  File "/home/user/app/train.py", line 141, in <module>\n'
       "    logits = model(batch[\"input_ids\"].cuda())\n"
       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB "
       "of which 1.06 GiB is free. Process 12345 has 78.03 GiB memory in use. Of the allocated memory 75.12 GiB is "
       "allocated by PyTorch, and 1.40 GiB is reserved by PyTorch but unallocated.\n")


def _bar(upto: int, total: int = 313) -> str:
    """tqdm's plain bar (``tqdm(range(313))``, no description) as it redraws after carriage returns."""
    out = ""
    for n in range(0, upto + 1, 20):
        out += f"\r{n * 100 // total:3d}%|{'█' * (n * 10 // total):<10}| {n}/{total} [00:{n // 27:02d}<00:11, 27.10it/s]"
    if upto % 20:
        out += f"\r{upto * 100 // total:3d}%|{'█' * (upto * 10 // total):<10}| {upto}/{total} [00:05<00:06, 27.10it/s]"
    return out


@pytest.mark.parametrize("bar", [_bar(140) + "\n", _bar(313) + "\n"],
                         ids=["an evaluation bar stopped at 140/313", "a finished evaluation bar 313/313"])
def test_a_plain_evaluation_bar_after_the_scripts_step_lines_is_not_the_step(bar):
    d = diagnose(Ending("failed", 1, log_tail=STEPS + "evaluating\n" + bar + OOM, command="run"), SHIPPED_RULES)
    assert d.cls == "gpu_oom", d
    assert d.sentence == "Out of GPU memory after step 1200 (the last in the job's log).", d.sentence
    assert d.step == 1200


def test_a_bar_of_the_step_lines_total_goes_on_from_them():
    # the script's own lines, then a tqdm bar over the same 5000 steps: the bar counts the steps
    d = diagnose(Ending("failed", 1, log_tail=STEPS + _bar(1300, 5000) + "\n" + OOM, command="run"), SHIPPED_RULES)
    assert d.step == 1300, d


SETUP_JSON = ("Traceback (most recent call last):\n"
              '  File "/home/user/app/prepare.py", line 12, in <module>\n'
              "    cfg = json.load(f)\n"
              '  File "/usr/lib/python3.11/json/__init__.py", line 293, in load\n'
              "    return loads(fp.read(),\n"
              '  File "/usr/lib/python3.11/json/decoder.py", line 355, in raw_decode\n'
              '    raise JSONDecodeError("Expecting value", s, err.value) from None\n'
              "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n")
SETUP_KEY = ("Traceback (most recent call last):\n"
             '  File "/home/user/app/prepare.py", line 20, in <module>\n'
             '    path = os.environ["DATA_DIR"]\n'
             '  File "<frozen os>", line 679, in __getitem__\n'
             "KeyError: 'DATA_DIR'\n")


@pytest.mark.parametrize("log, said", [
    (SETUP_JSON, "The setup command raised json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
    (SETUP_KEY, "The setup command raised KeyError: 'DATA_DIR'"),
], ids=["JSONDecodeError", "KeyError"])
def test_an_exception_the_setup_command_raised_is_said_as_the_setup_commands(log, said):
    d = diagnose(Ending("failed", 1, log_tail=log, command="setup"), SHIPPED_RULES)
    assert d.cls == "user_code_error", d
    assert d.sentence.startswith(said), d.sentence
    assert "training script" not in d.text
    # the run command's is the training script's, as before
    assert diagnose(Ending("failed", 1, log_tail=log, command="run")).sentence.startswith("The training script raised")


def test_an_exception_with_no_message_in_setup_is_the_setup_commands():
    log = ("Traceback (most recent call last):\n"
           '  File "/home/user/app/prepare.py", line 7, in <module>\n'
           "    assert os.path.isdir(root)\n"
           "AssertionError\n")
    d = diagnose(Ending("failed", 1, log_tail=log, command="setup"), SHIPPED_RULES)
    assert d.sentence.startswith("The setup command raised AssertionError, with no message, at "
                                 "/home/user/app/prepare.py, line 7"), d.sentence


SHORT = "step 10/100 loss 2.31\nstep 20/100 loss 2.12\nstep 50/100 loss 1.87\n"


@pytest.mark.parametrize("checkpoint, says, not_said", [
    (None, "if it saved a checkpoint, its last one is kept", "; its last checkpoint is kept"),
    (False, "it saved no checkpoint, so the task submitted again trains from the beginning", "checkpoint_uri"),
    (True, "its last checkpoint is kept, and the task submitted again with broker.checkpoint set to this job's "
           "checkpoint_uri continues from it", "if it saved"),
], ids=["checkpoint not known", "no checkpoint", "a checkpoint"])
def test_a_job_that_stopped_short_is_promised_a_checkpoint_only_if_it_saved_one(checkpoint, says, not_said):
    d = diagnose(Ending("succeeded", 0, log_tail=SHORT, command="run", checkpoint=checkpoint), SHIPPED_RULES)
    assert d.sentence == "The job succeeded (its command exited 0), but the last step it showed was 50 of 100.", d
    assert says in d.hint, d.hint
    assert not_said not in d.hint, d.hint


@pytest.mark.parametrize("code, sig, lead", [(143, 15, "Not the job's own error: "),
                                             (130, 2, "Something on the node interrupted it")],
                         ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("checkpoint, says", [
    (None, "resume it to continue from its last checkpoint, if it saved one (else it starts over)."),
    (False, "resume it to run it again (it saved no checkpoint, so it starts over)."),
    (True, "resume it to continue from its last checkpoint."),
], ids=["checkpoint not known", "no checkpoint", "a checkpoint"])
def test_a_signal_from_elsewhere_is_told_to_continue_from_a_checkpoint_only_if_it_saved_one(code, sig, lead,
                                                                                            checkpoint, says):
    d = diagnose(Ending("failed", code, signal=sig, log_tail=SHORT, command="run", checkpoint=checkpoint),
                 SHIPPED_RULES)
    assert d.cls in ("terminated", "interrupted"), d
    assert d.hint.startswith(lead) and d.hint.endswith(says), d.hint


def test_exit_137_from_a_shell_is_said_as_the_code_not_as_a_sigkill_seen():
    log = "step 100/5000 loss 2.1\nstep 200/5000 loss 1.9\n"
    d = diagnose(Ending("failed", 137, signal=None, log_tail=log, command="run"), SHIPPED_RULES)
    assert d.cls == "host_oom", d
    assert d.sentence == ("The run command exited with code 137 after step 200 (the last in the job's log), which is "
                          "how a shell reports a process killed by SIGKILL: often the kernel's out-of-memory killer, "
                          "but nothing in the log confirms it."), d.sentence
    # the launcher that saw the signal itself says so, as before
    seen = diagnose(Ending("failed", None, signal=9, log_tail=log, command="run"), SHIPPED_RULES)
    assert seen.sentence.startswith("The process was killed by SIGKILL after step 200"), seen.sentence


def test_a_second_stall_names_the_step_it_stalled_after_before():
    d = diagnose(Ending("silent_again", None, reason="10m 0s", log_tail="resuming\n", stalled_at=390), SHIPPED_RULES)
    assert d.cls == "stalled_again", d
    assert d.sentence.startswith("The job stalled again after step 390 (where it stalled the time before), with no "
                                 "progress since it last stalled: it reported nothing for 10m 0s"), d.sentence
    # a step this attempt reported is said as before
    d = diagnose(Ending("silent_again", None, reason="10m 0s", step=7, stalled_at=7), SHIPPED_RULES)
    assert d.sentence.startswith("The job stalled again after step 7 (the last the job reported), with no progress")


RETRY = ("WARNING: Retrying (Retry(total={n}, connect=None, read=None, redirect=None, status=None)) after connection "
         "broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f64a1b2c3d0>: "
         "Failed to establish a new connection: [Errno 111] Connection refused')': /simple/torch/\n")


def test_pips_retry_is_quoted_with_what_failed():
    log = ("Looking in indexes: https://pypi.internal.example.com/simple\n"
           + "".join(RETRY.format(n=n) for n in (4, 3, 2, 1, 0))
           + "ERROR: Could not find a version that satisfies the requirement torch==2.3.1 (from versions: none)\n"
             "ERROR: No matching distribution found for torch==2.3.1\n")
    d = diagnose(Ending("failed", 1, log_tail=log, command="setup"), SHIPPED_RULES)
    assert d.cls == "network_error", d
    assert "Failed to establish a new connection: [Errno 111] Connection refused" in d.sentence, d.sentence
    assert "0x7f64" not in d.sentence


def test_pips_install_error_is_quoted_with_the_host_and_what_failed():
    log = ("Collecting numpy==1.26.4\n  Downloading numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl.metadata\n"
           "ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='files.pythonhosted.org', "
           "port=443): Max retries exceeded with url: /packages/4b/d1/8a730ea07f4a37d94f9172f4ce1d81064b7a64766b460378be2"
           "78952de75/numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl (Caused by "
           "NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection object at 0x7f8b2c1d4e50>: Failed to "
           "establish a new connection: [Errno 111] Connection refused'))\n")
    d = diagnose(Ending("failed", 1, log_tail=log, command="setup"), SHIPPED_RULES)
    assert d.cls == "network_error", d
    assert "host='files.pythonhosted.org'" in d.sentence and "[Errno 111] Connection refused" in d.sentence, d.sentence


# -- the engine gives the diagnosis what it knows: whether the job saved a checkpoint -----------------------------

ENGINE_CONFIG = """
pools:
  - {name: cpu, slots: 1, price_per_slot_hour: "0.36"}
stop_grace_seconds: 1
tick_seconds: 0.05
"""


def test_the_engine_tells_the_diagnosis_a_job_that_saved_no_checkpoint_starts_over(make_settings, tmp_path):
    """A SIGTERM from elsewhere on a job that saved no checkpoint: the engine's own diagnosis (``reconcile._ended``)
    said "resume it to continue from its last checkpoint" of none. Real parts: the engine, a SQLite store and the
    local launcher's runner processes."""
    from broker.auth import Principal
    from broker_testing import local_broker, run_until

    admin = Principal("admin", None, admin=True)
    with local_broker(make_settings, tmp_path, ENGINE_CONFIG) as (service, engine, store, launcher):
        try:
            job = service.submit(admin, {"name": "t", "resources": {"cpus": 1}, "broker": {"budget_usd": 1},
                                         "run": 'echo "step 5/10"; kill -TERM $$'})[0]
            ended = run_until(engine, store, job.id, {"failed"}, timeout=60)
            assert ended.diagnosis["class"] == "terminated", ended.diagnosis
            assert ended.diagnosis["hint"] == ("Not the job's own error: resume it to run it again (it saved no "
                                               "checkpoint, so it starts over)."), ended.diagnosis
        finally:
            for run in launcher.runs_dir.glob("j-*"):
                launcher.kill(run.name)
