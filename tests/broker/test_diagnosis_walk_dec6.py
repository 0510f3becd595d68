"""Failures walked as an ML engineer meets them, through a real broker and the local launcher: the logs below are
what those runs printed (a small PyTorch script that reports its steps, failing at step 30), cut to their end.

What the walk found: a SIGINT (Ctrl-C on the node) whose KeyboardInterrupt traceback ended a job that exited 1 was
called the job's own error ("exited with code 1 … Read the end of its log"), so a resume needed --force; a bare
``assert`` said only "AssertionError"; a chained exception named the wrapper and not the error that started it; a
SyntaxError did not say where; a NaN loss was told to be fixed in the code rather than the training's settings; and
a job that exited 0 half way through its steps was said to have succeeded with no word that it stopped short.
"""

import sys
import textwrap

import pytest

from broker.auth import Principal
from broker.diagnosis import Ending, diagnose
from broker.lifecycle import JobState

from broker_testing import ONE_CHEAP_SLOT, local_broker, wait_for

STEPS = "training with batch_size=64\n" + "".join(f"step {n}/60 loss 1.4{n:03d}\n" for n in range(5, 35, 5))

KEYBOARD_INTERRUPT = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 67, in <module>
        os.kill(os.getpid(), signal.SIGINT)
    KeyboardInterrupt
    """)
BARE_ASSERT = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 86, in <module>
        assert loss.item() < 0
               ^^^^^^^^^^^^^^^
    AssertionError
    """)
CAUSED_BY = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 75, in <module>
        load_shard(7)
      File "/tmp/walkQ/work/fail.py", line 27, in load_shard
        raise KeyError(f"shard_{i}")
    KeyError: 'shard_7'

    The above exception was the direct cause of the following exception:

    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 77, in <module>
        raise RuntimeError("could not build batch from the shard index") from e
    RuntimeError: could not build batch from the shard index
    """)
DURING_HANDLING = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 80, in <module>
        load_shard(7)
      File "/tmp/walkQ/work/fail.py", line 27, in load_shard
        raise KeyError(f"shard_{i}")
    KeyError: 'shard_7'

    During handling of the above exception, another exception occurred:

    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 82, in <module>
        int("not-a-number")
    ValueError: invalid literal for int() with base 10: 'not-a-number'
    """)
SYNTAX = textwrap.dedent("""\
      File "/tmp/walkQ/work/syntax.py", line 3
        print("step", i
             ^
    SyntaxError: '(' was never closed
    """)
NAN_RAISED = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 71, in <module>
        raise ValueError(f"Loss is nan at step {step}, stopping training.")
    ValueError: Loss is nan at step 30, stopping training.
    """)
NAN_ASSERTED = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 73, in <module>
        assert torch.isfinite(torch.tensor(float('nan'))), f"non-finite loss: nan"
    AssertionError: non-finite loss: nan
    """)
# 1,200 lines of progress, an ERROR line to stderr, then the traceback
NOISY_INF = "".join(f"[rank0] step {s} micro {i} lr 0.1 tokens/s 12345 loss 1.4353\n"
                    for s in range(1, 31) for i in range(40)) + textwrap.dedent("""\
    step 30/60 loss 1.4353
    ERROR: gradient norm exploded
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 89, in <module>
        raise ValueError("gradient norm is inf at step %d" % step)
    ValueError: gradient norm is inf at step 30
    """)
RECURSION = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/tmp/walkQ/work/fail.py", line 84, in <module>
        recurse(0)
      File "/tmp/walkQ/work/fail.py", line 24, in recurse
        return recurse(n + 1)
               ^^^^^^^^^^^^^^
      File "/tmp/walkQ/work/fail.py", line 24, in recurse
        return recurse(n + 1)
               ^^^^^^^^^^^^^^
      File "/tmp/walkQ/work/fail.py", line 24, in recurse
        return recurse(n + 1)
               ^^^^^^^^^^^^^^
      [Previous line repeated 996 more times]
    RecursionError: maximum recursion depth exceeded
    """)
# a bare StopIteration inside a generator, which Python re-raises as a RuntimeError (PEP 479)
GENERATOR = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/workspace/data.py", line 41, in batches
        x = next(it)
            ^^^^^^^^
    StopIteration

    The above exception was the direct cause of the following exception:

    Traceback (most recent call last):
      File "/workspace/train.py", line 60, in <module>
        for xb, yb in batches(loader):
    RuntimeError: generator raised StopIteration
    """)
ANOMALY = STEPS + textwrap.dedent("""\
    Traceback (most recent call last):
      File "/workspace/train.py", line 88, in <module>
        loss.backward()
    RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.
    """)

INTERRUPTED = ("The job was interrupted after step 30 (the last the job reported) by SIGINT (what Ctrl-C sends), which the broker did not send.")
DIVERGED = "The training diverged after step 30 (the last the job reported): the loss or gradients became NaN or infinite ({})."

CASES = [
    ("a KeyboardInterrupt traceback from a SIGINT, though the process exited 1, is an interruption, not the code's "
     "error (was 'The job exited with code 1 at step 30: \"KeyboardInterrupt\"')",
     Ending("failed", 1, log_tail=KEYBOARD_INTERRUPT, step=30), "interrupted", INTERRUPTED),
    ("a bare assert names the line that failed (was 'exited with code 1 … \"AssertionError\"')",
     Ending("failed", 1, log_tail=BARE_ASSERT, step=30), "user_code_error",
     "The training script raised AssertionError after step 30 (the last the job reported), with no message, at /tmp/walkQ/work/fail.py, line 86: "
     "assert loss.item() < 0."),
    ("an exception raised from another names the one that started it (was only the RuntimeError)",
     Ending("failed", 1, log_tail=CAUSED_BY, step=30), "user_code_error",
     "The training script raised RuntimeError after step 30 (the last the job reported): could not build batch from the shard index (caused by "
     "KeyError: 'shard_7')."),
    ("an exception raised while handling another names that one too",
     Ending("failed", 1, log_tail=DURING_HANDLING, step=30), "user_code_error",
     "The training script raised ValueError after step 30 (the last the job reported): invalid literal for int() with base 10: 'not-a-number' "
     "(while handling KeyError: 'shard_7')."),
    ("a bare assert while handling another exception names both",
     Ending("failed", 1, log_tail=STEPS + textwrap.dedent("""\
         Traceback (most recent call last):
           File "/workspace/train.py", line 50, in <module>
             batch = cache[key]
                     ~~~~~^^^^^
         KeyError: 'shard_7'

         During handling of the above exception, another exception occurred:

         Traceback (most recent call last):
           File "/workspace/train.py", line 52, in <module>
             assert key in index
                    ^^^^^^^^^^^^
         AssertionError
         """), step=30), "user_code_error",
     "The training script raised AssertionError after step 30 (the last the job reported), with no message, at /workspace/train.py, line 52: assert "
     "key in index (while handling KeyError: 'shard_7')."),
    ("a bare exception that another was raised from is the cause, not the diagnosis",
     Ending("failed", 1, log_tail=GENERATOR, step=30), "user_code_error",
     "The training script raised RuntimeError after step 30 (the last the job reported): generator raised StopIteration (caused by StopIteration)."),
    ("a recursion error names the call it repeated (was only 'maximum recursion depth exceeded')",
     Ending("failed", 1, log_tail=RECURSION, step=30), "user_code_error",
     "The training script raised RecursionError after step 30 (the last the job reported): maximum recursion depth exceeded (the call at "
     "/tmp/walkQ/work/fail.py, line 24, in recurse, repeated 996 more times)."),
    ("a syntax error names its file and line (was only its message)",
     Ending("failed", 1, log_tail=SYNTAX), "user_code_error",
     "The training script raised SyntaxError: '(' was never closed (/tmp/walkQ/work/syntax.py, line 3)."),
    ("a NaN loss the script raised on is a diverged training, not a bug to fix in the code",
     Ending("failed", 1, log_tail=NAN_RAISED, step=30), "diverged",
     DIVERGED.format("ValueError: Loss is nan at step 30, stopping training")),
    ("a NaN loss the script asserted against is a diverged training too",
     Ending("failed", 1, log_tail=NAN_ASSERTED, step=30), "diverged",
     DIVERGED.format("AssertionError: non-finite loss: nan")),
    ("an infinite gradient norm after a thousand lines of progress and an ERROR line is a diverged training",
     Ending("failed", 1, log_tail=NOISY_INF, step=30), "diverged",
     DIVERGED.format("ValueError: gradient norm is inf at step 30")),
    ("torch's anomaly detection finding NaN in a backward pass is a diverged training",
     Ending("failed", 1, log_tail=ANOMALY, step=30), "diverged",
     DIVERGED.format("RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output")),
    ("clip_grad_norm_ refusing a non-finite gradient norm is a diverged training",
     Ending("failed", 1, log_tail=STEPS + "RuntimeError: The total norm of order 2.0 for gradients from `parameters` is "
                                          "non-finite, so it cannot be clipped. To disable this error and scale the "
                                          "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`\n",
            step=30), "diverged",
     DIVERGED.format("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it "
                     "cannot be clipped. To disable this error and scale the gradients by the non-finite norm anyway, "
                     "set `error_if_nonfinit…")),  # the message clipped at 200 characters
    ("DeepSpeed's fp16 loss scale at its minimum is a diverged training",
     Ending("failed", 1, log_tail=STEPS + "Exception: Current loss scale already at minimum - cannot decrease scale "
                                          "anymore. Exiting run.\n", step=30), "diverged",
     DIVERGED.format("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run")),
    ("a plain Exception the script raised is its own error, named with its message (was 'The job exited with code "
     "1 at step 30: \"Exception: …\"')",
     Ending("failed", 1, log_tail=STEPS + 'Traceback (most recent call last):\n  File "/workspace/train.py", line 70, '
                                          'in <module>\n    raise Exception(f"bad batch at step {step}")\n'
                                          "Exception: bad batch at step 30\n", step=30), "user_code_error",
     "The training script raised Exception after step 30 (the last the job reported): bad batch at step 30."),
    ("a NaN in an error that is not of the loss or gradients is the code's error",
     Ending("failed", 1, log_tail=STEPS + "ValueError: Input contains NaN, infinity or a value too large for "
                                          "dtype('float64').\n", step=30), "user_code_error",
     "The training script raised ValueError after step 30 (the last the job reported): Input contains NaN, infinity or a value too large for "
     "dtype('float64')."),
    ("a job that exited 0 half way through the steps it counts says it stopped short (was 'The job succeeded at "
     "step 30.')",
     Ending("succeeded", 0, log_tail=STEPS + "done early\n", step=30), "succeeded",
     "The job succeeded (its command exited 0), but the last step it showed was 30 of 60."),
]


@pytest.mark.parametrize("ending,cls,sentence", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_walked_failure_is_told_in_plain_words(ending, cls, sentence):
    d = diagnose(ending)
    assert (d.cls, d.sentence) == (cls, sentence)


def test_an_interruption_resumes_without_force_and_a_diverged_training_does_not():
    assert diagnose(Ending("failed", 1, log_tail=KEYBOARD_INTERRUPT)).infrastructure is True
    diverged = diagnose(Ending("failed", 1, log_tail=NAN_RAISED))
    assert diverged.infrastructure is False
    assert "lower the learning rate" in diverged.hint and "--force" in diverged.hint


def test_a_job_that_exited_0_at_its_last_step_just_succeeded():
    log = STEPS + "".join(f"step {n}/60 loss 1.4\n" for n in range(35, 65, 5))
    d = diagnose(Ending("succeeded", 0, log_tail=log, step=60))
    assert (d.sentence, d.hint) == ("The job succeeded at step 60.", "")


def test_a_stopped_short_job_is_told_what_to_look_at():
    d = diagnose(Ending("succeeded", 0, log_tail=STEPS, step=30))
    assert "sys.exit(0)" in d.hint and d.infrastructure is False and d.facts["total_steps"] == 60


def test_an_exception_with_a_message_is_not_read_as_a_bare_one():
    log = STEPS + 'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n    f()\nKeyError: \'x\'\n'
    assert diagnose(Ending("failed", 1, log_tail=log)).sentence == "The training script raised KeyError after step 30 (the last in the job's log): 'x'."


# -- through a real broker and runner ---------------------------------------------------------------------------------

ADMIN = Principal("admin", None, admin=True)
CONFIG = ONE_CHEAP_SLOT
# a PyTorch script with an optimizer: torch.optim imports torch._dynamo, after which Python exits 1 on an uncaught
# KeyboardInterrupt rather than by the signal (130), so only the traceback's last line says it was a SIGINT
INTERRUPTS_ITSELF = textwrap.dedent("""\
    import os, signal, time
    import torch
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1, 31):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
        print(f"step {step}/60 loss {loss.item():.4f}", flush=True)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    """)


def test_a_real_job_interrupted_by_sigint_is_resumed_with_one_click(make_settings, tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTS_ITSELF)
    with local_broker(make_settings, tmp_path, CONFIG) as (service, engine, store, launcher):
        try:
            task = {"name": "ctrl-c", "run": f"{sys.executable} {script}", "resources": {"cpus": 1},
                    "broker": {"budget_usd": 5}}
            job = service.submit(ADMIN, task)[0]
            failed = wait_for(lambda: engine.tick() or ((j := store.get_job(job.id)).state.is_final and j), timeout=60)
            assert failed.state is JobState.FAILED
            assert store.attempts(job.id)[0].exit_code == 1  # not 130: the KeyboardInterrupt's traceback says it
            assert failed.diagnosis["class"] == "interrupted" and failed.diagnosis["infrastructure"] is True
            # it printed its steps, and reported none: the step is its log's
            assert failed.diagnosis["sentence"] == INTERRUPTED.replace("the last the job reported", "the last in the job's log")
            assert service.resume(ADMIN, job.id).state is JobState.QUEUED  # no --force asked
        finally:
            for run in launcher.runs_dir.glob("j*"):
                launcher.kill(run.name)


@pytest.mark.parametrize("module, install", [
    pytest.param("cv2", "pip install opencv-python (the package cv2 comes in)", id="cv2 is installed as opencv-python"),
    pytest.param("sklearn", "pip install scikit-learn (the package sklearn comes in)", id="sklearn as scikit-learn"),
    pytest.param("einops", "pip install einops", id="a package named as its import is installed by that name"),
    pytest.param("transformers.models.llama4", "pip install transformers (a version of it that has "
                 "transformers.models.llama4; an older one may be installed)",
                 id="a module inside a package asks for a version of the package that has it"),
    pytest.param("google.protobuf", "pip install protobuf (the package google.protobuf comes in)",
                 id="a dotted import with a known package is installed by the package's name"),
])
def test_a_missing_module_hint_names_what_pip_installs_it(module, install):
    from broker.diagnosis import Ending, diagnose

    d = diagnose(Ending("failed", 1, log_tail=f"Traceback (most recent call last):\n  File \"train.py\", line 1, in "
                                              f"<module>\nModuleNotFoundError: No module named '{module}'\n"))
    assert d.cls == "dependency_missing" and d.hint == f"Add it to the task's setup: {install}.", d


def test_broker_status_of_a_job_that_stopped_short_of_its_steps_says_so():
    """The engine's reason for a success is only that its command exited 0: the diagnosis that it stopped at step 30
    of the 60 it counted reached the API, not `broker status JOB`."""
    import io

    from rich.console import Console

    from broker.cli import _show_job

    said = diagnose(Ending("succeeded", 0, log_tail="step 10/60\nstep 20/60\nstep 30/60\n")).to_dict()
    job = {"id": "j-1", "name": "short", "team": "ml", "state": "succeeded",
           "reason": "succeeded: the run command exited 0", "diagnosis": said, "spent": {"usd": "$0.01"},
           "budget": {"usd": "$1.00"}, "attempts": []}
    out = io.StringIO()
    _show_job(Console(file=out, width=200), job)
    assert "the last step it showed was 30 of 60" in out.getvalue(), out.getvalue()
    plain = {**job, "diagnosis": diagnose(Ending("succeeded", 0, log_tail="step 60/60\n")).to_dict()}
    out = io.StringIO()
    _show_job(Console(file=out, width=200), plain)
    assert "last step" not in out.getvalue() and "The job succeeded" not in out.getvalue()
