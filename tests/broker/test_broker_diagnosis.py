"""Every ending gets a class and a sentence a person can act on."""

import os
import time

import pytest
from broker_testing import wait_for

from broker.diagnosis import INFRASTRUCTURE, SHIPPED_RULES, Ending, RuleBook, diagnose
from broker.engine.reconcile import ENDED_PHASE_NAME
from launchers.base import LaunchRequest
from launchers.local import LocalLauncher

CASES = [
    ("preempted", Ending("preempted", log_tail="step 400\n"), "preempted", "Spot capacity was preempted after step 400 (the last in the job's log)."),
    ("node lost", Ending("lost"), "node_lost", "The node running the job was lost, and no exit was recorded."),
    ("budget", Ending("budget", log_tail="step 90"), "budget_stop", "Stopped at its budget after step 90 (the last in the job's log)."),
    ("gpu oom", Ending("failed", 1, log_tail="step 1200 batch_size 64\nRuntimeError: CUDA out of memory. Tried to allocate"),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 1200 (the last in the job's log)."),
    ("host oom", Ending("failed", 137, 9, log_tail="step 5\nKilled"), "host_oom",
     "Out of host memory after step 5 (the last in the job's log): the kernel killed the process."),
    ("killed, log silent", Ending("failed", 137, 9, log_tail="step 5\n"), "host_oom",
     "The process was killed by SIGKILL after step 5 (the last in the job's log): "
     "often the kernel's out-of-memory killer, but nothing in the log confirms it."),
    ("succeeded after a caught OOM", Ending("succeeded", 0, log_tail="CUDA out of memory: retrying with batch 32\nstep 900\n"),
     "succeeded", "The job succeeded at step 900."),
    ("an allocation outside PyTorch's caching allocator: 'CUDA error: out of memory'",
     Ending("failed", 1, log_tail='step 40\nTraceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
                                  'RuntimeError: CUDA error: out of memory\n'),
     "gpu_oom", "Out of GPU memory after step 40 (the last in the job's log)."),
    ("the checkpoint library's at-exit save failing after the job's own error is not the cause",
     Ending("failed", 1, log_tail='step 12\nTraceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
                                  "KeyError: 'label'\nERROR:checkpoint.checkpointer:checkpoint upload failed at exit: "
                                  "An error occurred (AccessDenied) when calling the PutObject operation: Access Denied "
                                  "for s3://bucket/ck/step-12\n"),
     "user_code_error", "The training script raised KeyError after step 12 (the last in the job's log): 'label'."),
    ("missing data", Ending("failed", 1, log_tail="FileNotFoundError: [Errno 2] No such file or directory: 's3://bucket/train/part-3.parquet'"),
     "data_not_found", "Could not read s3://bucket/train/part-3.parquet."),
    ("missing module", Ending("failed", 1, log_tail="ModuleNotFoundError: No module named 'transformers'"),
     "dependency_missing", "A Python dependency is missing: transformers."),
    ("a gated Hugging Face model the job's token cannot open (transformers' words)",
     Ending("failed", 1, log_tail='Traceback (most recent call last):\n  File "train.py", line 4, in <module>\n'
                                  "OSError: You are trying to access a gated repo.\nMake sure to have access to it at "
                                  "https://huggingface.co/meta-llama/Llama-2-7b-hf.\n401 Client Error. (Request ID: "
                                  "Root=1-65)\n\nCannot access gated repo for url https://huggingface.co/meta-llama/"
                                  "Llama-2-7b-hf/resolve/main/config.json.\n"),
     "credentials", "Hugging Face refused the job access to meta-llama/Llama-2-7b-hf: the model is gated or private, "
                    "and the job's token is missing or has no access to it."),
    ("a gated model whose access was not granted (huggingface_hub's 403)",
     Ending("failed", 1, log_tail="step 0\nhuggingface_hub.errors.GatedRepoError: 403 Client Error.\n\nCannot access "
                                  "gated repo for url https://huggingface.co/google/gemma-7b/resolve/main/config.json."
                                  "\nAccess to model google/gemma-7b is restricted and you are not in the authorized "
                                  "list.\n"),
     "credentials", "Hugging Face refused the job access to google/gemma-7b after step 0 (the last in the job's log): the model is gated or private, "
                    "and the job's token is missing or has no access to it."),
    ("a Hugging Face token the Hub refuses",
     Ending("failed", 1, log_tail="huggingface_hub.errors.HfHubHTTPError: 401 Client Error: Unauthorized for url: "
                                  "https://huggingface.co/api/whoami-v2\n\nInvalid credentials in Authorization header\n"),
     "credentials", "Hugging Face refused the job's token (401: invalid, or none given for a private or gated model)."),
    ("no AWS credentials on the node (boto3)",
     Ending("failed", 1, log_tail="step 9\nTraceback (most recent call last):\n  File \"train.py\", line 30, in save\n"
                                  "botocore.exceptions.NoCredentialsError: Unable to locate credentials\n"),
     "credentials", "The job has no AWS credentials after step 9 (the last in the job's log): boto3 found none to sign a request with."),
    ("an AWS key that AWS does not know",
     Ending("failed", 1, log_tail="botocore.exceptions.ClientError: An error occurred (InvalidAccessKeyId) when calling "
                                  "the PutObject operation: The AWS Access Key Id you provided does not exist in our "
                                  "records.\n"),
     "credentials", "AWS refused the job's credentials (InvalidAccessKeyId)."),
    ("an S3 call the job's credentials may not make, with no path in the message",
     Ending("failed", 1, log_tail="botocore.exceptions.ClientError: An error occurred (AccessDenied) when calling the "
                                  "ListObjectsV2 operation: Access Denied\n"),
     "storage_access", "AWS denied the job's request: ListObjectsV2 (AccessDenied)."),
    ("no Google Cloud credentials on the node",
     Ending("failed", 1, log_tail="google.auth.exceptions.DefaultCredentialsError: Your default credentials were not "
                                  "found. To set up Application Default Credentials, see https://cloud.google.com/docs\n"),
     "credentials", "The job has no Google Cloud credentials: google-auth found none."),
    ("wandb with no API key",
     Ending("failed", 1, log_tail="step 0\nwandb: ERROR api_key not configured (no-tty). call "
                                  "wandb.login(key=[your_api_key])\nwandb.errors.errors.UsageError: api_key not "
                                  "configured (no-tty).\n"),
     "credentials", "Weights & Biases has no API key after step 0 (the last in the job's log), so wandb could not log in."),
    ("a package pip finds no version of, in the setup",
     Ending("failed", 1, command="setup", log_tail="ERROR: Could not find a version that satisfies the requirement "
                                                   "torch==9.9 (from versions: none)\nERROR: No matching distribution "
                                                   "found for torch==9.9\n"),
     "dependency_missing", "The setup command could not install torch==9.9: pip found no version of it that fits (a "
                           "misspelt name, a version that does not exist, or none built for this Python and platform)."),
    ("a command the node does not have (bash, exit 127)",
     Ending("failed", 127, command="run", log_tail="bash: line 1: torchrun: command not found\n"),
     "dependency_missing", "The job could not run torchrun: there is no such command on the node."),
    ("a command the node does not have (sh's words)",
     Ending("failed", 127, command="setup", log_tail="sh: 1: accelerate: not found\n"),
     "dependency_missing", "The setup command could not run accelerate: there is no such command on the node."),
    ("a command missing long before the job's own error is not its cause",
     Ending("failed", 1, log_tail="bash: nvidia-smi: command not found\nstep 5\nTraceback (most recent call last):\n"
                                  "KeyError: 'x'\n"),
     "user_code_error", "The training script raised KeyError after step 5 (the last in the job's log): 'x'."),
    ("a misspelt script in the run command",
     Ending("failed", 2, log_tail="python: can't open file '/home/u/sky_workdir/trian.py': [Errno 2] No such file or "
                                  "directory\n"),
     "script_not_found", "The job could not open the script /home/u/sky_workdir/trian.py: there is no such file."),
    ("a torch built for a newer CUDA than the node's driver (not a bad node: it fails the same everywhere alike)",
     Ending("failed", 1, log_tail="Traceback (most recent call last):\nRuntimeError: CUDA error: CUDA driver version "
                                  "is insufficient for CUDA runtime version\n"),
     "cuda_mismatch", "The job's CUDA build does not match the node's driver: CUDA driver version is insufficient for "
                      "CUDA runtime version."),
    ("a CUDA runtime library missing on the node",
     Ending("failed", 1, log_tail="Traceback (most recent call last):\nImportError: libcudart.so.12: cannot open shared "
                                  "object file: No such file or directory\n"),
     "cuda_mismatch", "The job's CUDA build does not match the node's driver: libcudart.so.12: cannot open shared "
                      "object file."),
    ("pip refused by an externally managed system Python",
     Ending("failed", 1, command="setup", log_tail="error: externally-managed-environment\n\n× This environment is "
                                                   "externally managed\n"),
     "setup_error", "pip refused to install into the node's system Python (an externally managed environment, PEP "
                    "668)."),
    ("torch finding no NVIDIA driver: the node's GPUs, or a task that asked for none",
     Ending("failed", 1, log_tail="RuntimeError: Found no NVIDIA driver on your system. Please check that you have an "
                                  "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx\n"),
     "gpu_unavailable", "The node's GPUs were not available to the job."),
    ("nccl", Ending("failed", 1, log_tail="step 77\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error"),
     "nccl_network", "A NCCL/network error stopped the job after step 77 (the last in the job's log)."),
    ("python error", Ending("failed", 1, log_tail="Traceback (most recent call last):\nZeroDivisionError: division by zero"),
     "user_code_error", "The training script raised ZeroDivisionError: division by zero."),
    ("plain exit code", Ending("failed", 3, log_tail="bye"), "user_code_error", 'The job exited with code 3: "bye".'),
    ("a SIGTERM the broker did not send (was 'killed by signal 15 … read the end of its log')",
     Ending("failed", 143, 15, log_tail="step 300\n"), "terminated",
     "The job was stopped after step 300 (the last in the job's log) by SIGTERM, which the broker did not send: most likely the node was shutting "
     "down, or a person or process on it stopped the job."),
    ("a SIGINT (Ctrl-C) from someone on the node",
     Ending("failed", 130, log_tail="step 12\nTraceback (most recent call last):\nKeyboardInterrupt\n"), "interrupted",
     "The job was interrupted after step 12 (the last in the job's log) by SIGINT (what Ctrl-C sends), which the broker did not send."),
    ("torchrun told SIGTERM exits 1 with a SignalException, not the script's own error",
     Ending("failed", 1, log_tail="step 40\ntorch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 "
                                  "got signal: 15\n"), "terminated",
     "The job was stopped after step 40 (the last in the job's log) by SIGTERM, which the broker did not send: most likely the node was shutting "
     "down, or a person or process on it stopped the job."),
    ("two torchruns on one host with one --master_port: the port, not the code",
     Ending("failed", 1, log_tail="torch.distributed.DistNetworkError: The server socket has failed to listen on any "
                                  "local network address. port: 8008, useIpv6: false, code: -98, name: EADDRINUSE, "
                                  "message: address already in use\n"), "port_in_use",
     "The job could not listen on port 8008: another process on its host holds it."),
    ("a Python server's [Errno 98] names no port",
     Ending("failed", 1, log_tail="step 3\nOSError: [Errno 98] Address already in use\n"), "port_in_use",
     "The job could not listen on a port after step 3 (the last in the job's log): another process on its host holds it."),
    ("torchrun told SIGINT exits 1 with a SignalException",
     Ending("failed", 1, log_tail="torch.distributed.elastic.multiprocessing.api.SignalException: Process 7 got signal: 2"),
     "interrupted", "The job was interrupted by SIGINT (what Ctrl-C sends), which the broker did not send."),
]


TORCHRUN_SUMMARY = """[2026-12-03 10:00:00,000] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: {code}) local_rank: 0 (pid: 1234) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_10:00:00
  host      : node-1
  rank      : 0 (local_rank: 0)
  exitcode  : {code} (pid: 1234)
  error_file: <N/A>
  traceback : Signal {signal} ({name}) received by PID 1234
============================================================
"""
SHUTDOWN_NOISE = """Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2b1c2d3e20>
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 1479, in __del__
    self._shutdown_workers()
AssertionError: can only test a child process
"""

# Logs as real jobs print them: torchrun's summary, a data-loader worker's death, SkyPilot's line prefix and the
# wrapper's own last line, colour codes, a relative path, Python's shutdown noise after the real traceback
REAL_LOGS = [
    ("a worker SIGKILLed under torchrun is host memory, not the code",
     Ending("failed", 1, log_tail="step 880\n" + TORCHRUN_SUMMARY.format(code=-9, signal=9, name="SIGKILL")),
     "host_oom", "Rank 0 (pid 1234) was killed by SIGKILL after step 880 (the last in the job's log), and torchrun stopped the other ranks: "
                 "often the kernel's out-of-memory killer, but nothing in the log confirms it."),
    ("a worker segfault under torchrun is a crash",
     Ending("failed", 1, log_tail=TORCHRUN_SUMMARY.format(code=-11, signal=11, name="SIGSEGV")),
     "crash", "A training process crashed with a segmentation fault."),
    ("a data-loader worker killed is host memory",
     Ending("failed", 1, log_tail="RuntimeError: DataLoader worker (pid 4567) is killed by signal: Killed. "),
     "host_oom", "A data-loader worker was killed, most likely by the kernel for lack of host memory."),
    ("a data-loader worker's bus error is shared memory",
     Ending("failed", 1, log_tail="ERROR: Unexpected bus error encountered in worker. This might be caused by "
            "insufficient shared memory (shm).\nRuntimeError: DataLoader worker (pid 2345) is killed by signal: Bus "
            "error. It is possible that dataloader's workers are out of shared memory."),
     "host_oom", "A data-loader worker ran out of shared memory (/dev/shm)."),
    ("SkyPilot's line prefix does not hide the exception",
     Ending("failed", 1, log_tail="(task, pid=2101) step 300\n(task, pid=2101) Traceback (most recent call last):\n"
            "(task, pid=2101) ValueError: labels must be in [0, 10), got 12\n"
            "(task, pid=2101) [spot-broker] run exited with status 1\n"),
     "user_code_error", "The training script raised ValueError after step 300 (the last in the job's log): labels must be in [0, 10), got 12."),
    ("the job's own last line is quoted, not the wrapper's exit line",
     Ending("failed", 3, log_tail="step 300\nloss is NaN, stopping\n[spot-broker] run exited with status 3\n"),
     "user_code_error", "The job exited with code 3 after step 300 (the last in the job's log): \"loss is NaN, stopping\"."),
    ("colour codes neither hide the exception nor reach the sentence",
     Ending("failed", 1, log_tail="\x1b[1;91mValueError: \x1b[0mExpected input batch_size (32) to match target (16)"),
     "user_code_error", "The training script raised ValueError: Expected input batch_size (32) to match target (16)."),
    ("a relative path is named as written",
     Ending("failed", 1, log_tail="FileNotFoundError: [Errno 2] No such file or directory: 'data/openwebtext/train.bin'"),
     "data_not_found", "Could not read data/openwebtext/train.bin."),
    ("Python's shutdown noise after the traceback does not replace its exception",
     Ending("failed", 1, log_tail="Traceback (most recent call last):\nKeyError: 'pixel_values'\n" + SHUTDOWN_NOISE),
     "user_code_error", "The training script raised KeyError: 'pixel_values'."),
]


@pytest.mark.parametrize("ending, cls, sentence", [c[1:] for c in REAL_LOGS], ids=[c[0] for c in REAL_LOGS])
def test_real_logs_are_read_for_the_failure_that_ended_the_job(ending, cls, sentence):
    d = diagnose(ending)
    assert (d.cls, d.sentence) == (cls, sentence), d


@pytest.mark.parametrize("ending, cls, sentence", [c[1:] for c in CASES],
                         ids=[f"{c[0]} → {c[2]}" for c in CASES])
def test_shipped_rules(ending, cls, sentence):
    d = diagnose(ending)
    assert (d.cls, d.sentence) == (cls, sentence)
    assert d.hint or cls == "succeeded"  # every failing class says what to do


def test_missing_or_refused_credentials_are_the_tasks_to_fix_and_say_a_resume_would_not():
    """A resume runs with the secrets the job was submitted with: the hint says how one gives it the secret it
    lacked (broker resume --secret); a plain resume is not offered as the way forward."""
    for tail in ("botocore.exceptions.NoCredentialsError: Unable to locate credentials",
                 "wandb.errors.UsageError: api_key not configured (no-tty)"):
        d = diagnose(Ending("failed", 1, log_tail=tail))
        assert d.cls == "credentials" and not d.infrastructure
        assert "broker resume JOB --secret NAME" in d.hint and "fails the same way" in d.hint, d.hint


def test_infrastructure_classes_resume_without_question_code_errors_do_not():
    assert diagnose(Ending("preempted")).infrastructure
    assert diagnose(Ending("failed", 1, log_tail="NCCL error: unhandled system error")).infrastructure
    assert not diagnose(Ending("failed", 1, log_tail="CUDA out of memory")).infrastructure


def test_a_class_whose_hint_says_resume_it_resumes_without_force():
    # "Often a bad node or driver: resume it" must not be answered with "failed in its own code"
    ecc = diagnose(Ending("failed", 1, log_tail="RuntimeError: CUDA error: uncorrectable ECC error encountered"))
    assert ecc.cls == "cuda_error" and ecc.infrastructure
    for rule in SHIPPED_RULES:
        if "resume it" in rule.hint.lower():
            assert rule.cls in INFRASTRUCTURE, rule
    # a device-side assert is the job's own indexing, not the node's
    assert_ = diagnose(Ending("failed", 1, log_tail="step 3\nRuntimeError: CUDA error: device-side assert triggered"))
    assert assert_.cls == "user_code_error" and not assert_.infrastructure
    assert assert_.sentence == "A CUDA kernel's assertion failed (device-side assert) after step 3 (the last in the job's log)."


def test_team_rules_are_read_without_a_restart_and_come_first(tmp_path):
    path = tmp_path / "rules.yaml"
    book = RuleBook(path)
    ending = Ending("failed", 42, log_tail="LicenseError: seat limit reached")
    assert book.diagnose(ending).cls == "user_code_error"
    path.write_text("- class: license\n  pattern: 'LicenseError: (?P<what>.+)'\n"
                    "  sentence: 'The licence server said: {what}.'\n  hint: Ask IT for a seat.\n")
    assert book.diagnose(ending).sentence == "The licence server said: seat limit reached."
    path.write_text("- class: broken\n  pattern: '('\n  sentence: x\n")
    os.utime(path, (time.time() + 5, time.time() + 5))
    assert book.diagnose(ending).cls == "license"  # a broken edit keeps the last good rules
    assert "pattern" in book.error


def test_a_team_rule_can_say_its_failure_is_the_infrastructures_and_so_resumes_with_one_click(tmp_path):
    from broker.diagnosis import rules_from_yaml

    path = tmp_path / "rules.yaml"
    path.write_text("- class: nfs\n  pattern: 'Stale file handle'\n  sentence: The shared disk dropped out.\n"
                    "  hint: Resume it.\n  infrastructure: true\n")
    stale = RuleBook(path).diagnose(Ending("failed", 1, log_tail="OSError: [Errno 116] Stale file handle"))
    assert (stale.cls, stale.infrastructure) == ("nfs", True)
    with pytest.raises(ValueError, match=r"failure_rules\[0\]\.infrastucture: is not a rule setting"):
        rules_from_yaml("- {class: x, sentence: y, infrastucture: true}")
    with pytest.raises(ValueError, match=r"infrastructure: must be true or false"):
        rules_from_yaml("- {class: x, sentence: y, infrastructure: maybe}")


def test_the_step_is_the_latest_known_the_logs_when_the_rate_limited_reports_lag_behind_it():
    # progress reports go out at most every few seconds: the log has seen steps the broker has not
    log = "step 350\nstep 375\nTraceback (most recent call last):\nValueError: bad batch\n"
    assert diagnose(Ending("failed", 1, log_tail=log, step=248)).step == 375
    assert diagnose(Ending("failed", 1, log_tail="no step here\nValueError: bad batch\n", step=248)).step == 248
    assert diagnose(Ending("preempted", log_tail="step 90\n", step=120)).sentence == \
        "Spot capacity was preempted after step 120 (the last the job reported)."


@pytest.fixture
def run_and_diagnose(tmp_path):
    """Run a task as a real attempt under the local launcher and diagnose how it ended, as the engine does."""
    launcher = LocalLauncher(tmp_path / "runs")
    count = iter(range(1, 100))

    def run(task: dict) -> tuple:
        attempt_id = f"j-test-a{next(count)}"
        launcher.launch(LaunchRequest(attempt_id, "j-test", 1, task, {}))
        status = wait_for(lambda: (s := launcher.status(attempt_id)).phase.is_final and s, timeout=60)
        log = launcher.logs(attempt_id, limit=1 << 22)[0].decode()
        ending = Ending(ENDED_PHASE_NAME.get(status.phase, status.phase.value), status.exit_code, status.signal,
                        status.reason, log[-16_384:], command=status.step)
        return diagnose(ending), log

    return run


@pytest.mark.parametrize("run, cls, sentence", [
    # torch's CPU allocator raises a RuntimeError when the address space (or RAM) runs out
    ("ulimit -v 4000000; python -c \"import torch; print('step 5 batch_size=4096', flush=True); "
     "torch.empty(64 * 1024 ** 3, dtype=torch.uint8)\"",
     "host_oom", "Out of host memory (batch size 4096) after step 5 (the last in the job's log): the job could not allocate 64.0 GiB."),
    ("ulimit -v 1000000; python -c \"print('step 7', flush=True); bytearray(1 << 40)\"",
     "host_oom", "Out of host memory after step 7 (the last in the job's log): an allocation failed."),
    # /dev/full answers every write with ENOSPC, as a full disk does
    ("python -c \"print('step 800', flush=True); open('/dev/full', 'w').write('x' * 100000)\"",
     "disk_full", "The disk is full after step 800 (the last in the job's log): could not write a file."),
    ("python -c \"import torch; print('step 800', flush=True); torch.save(torch.zeros(1 << 20), '/dev/full')\"",
     "disk_full", "torch.save could not finish writing a checkpoint after step 800 (the last in the job's log); most often the disk is full."),
    ("python -c \"import errno, os; raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), '/scratch/ckpt/800.pt')\"",
     "disk_full", "The disk is full: could not write /scratch/ckpt/800.pt."),
], ids=["torch CPU allocator", "MemoryError", "a write to a full disk", "torch.save to a full disk", "ENOSPC with a path"])
def test_resource_failures_of_real_processes_are_not_called_code_errors(run_and_diagnose, run, cls, sentence):
    d, log = run_and_diagnose({"run": run})
    assert (d.cls, d.sentence) == (cls, sentence), log[-2000:]
    assert "Fix the error in the code" not in d.text


@pytest.mark.parametrize("task, cls, sentence", [
    # the exception's own words are the useful part of a traceback
    ({"run": "python -c \"import torch; print('step 37', flush=True); "
             "torch.nn.Linear(8, 4)(torch.randn(16, 9))\""},
     "user_code_error", "The training script raised RuntimeError after step 37 (the last in the job's log): "
                        "mat1 and mat2 shapes cannot be multiplied (16x9 and 8x4)"),
    # a script that checks its loss and exits says why on its last line
    ({"run": "python -c \"import sys; print('step 250 loss nan'); print('loss is NaN, stopping'); sys.exit(3)\""},
     "user_code_error", "The job exited with code 3 after step 250 (the last in the job's log): \"loss is NaN, stopping\"."),
    ({"run": "python -c \"import ctypes; print('step 42', flush=True); ctypes.string_at(0)\""},
     "crash", "The job crashed with a segmentation fault after step 42 (the last in the job's log)."),
    ({"run": "echo step 7; kill -SEGV $$"}, "crash", "The job crashed with a segmentation fault after step 7 (the last in the job's log)."),
    ({"run": "python -c \"import os; print('step 9', flush=True); os.abort()\""},
     "user_code_error", "The job was killed by signal 6 (SIGABRT) after step 9 (the last in the job's log): \"step 9\"."),
    ({"setup": "python -m pip install --no-index --disable-pip-version-check definitely-not-a-package-xyz",
      "run": "echo never"},
     "dependency_missing", "The setup command could not install definitely-not-a-package-xyz: pip found no version of "
                           "it that fits (a misspelt name, a version that does not exist, or none built for this Python "
                           "and platform)."),
], ids=["torch shape mismatch", "sys.exit(3) after NaN", "segfault", "segfault of the shell", "abort", "setup"])
def test_a_failure_of_a_real_process_says_what_it_said_and_how_it_ended(run_and_diagnose, task, cls, sentence):
    d, log = run_and_diagnose(task)
    assert (d.cls, d.sentence.rstrip(".")) == (cls, sentence.rstrip(".")), log[-2000:]
    assert d.hint and "code 139" not in d.text and "None" not in d.text


DDP_CRASH = """\
import torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 100):
    if rank == 1 and step == 30:
        raise ValueError(f"batch {step} has labels outside [0, 10)")
    dist.all_reduce(torch.ones(4))  # rank 0 dies here of the lost peer
    if rank == 0:
        print(f"step {step}", flush=True)
"""


def test_a_rank_that_raises_under_torchrun_is_named_by_its_own_exception_not_torchruns(run_and_diagnose, tmp_path):
    # torchrun prefixes each worker's traceback with "[rankN]:", ends with a ChildFailedError of its own,
    # and the other rank dies of the lost peer: the cause is rank 1's exception
    script = tmp_path / "ddp_crash.py"
    script.write_text(DDP_CRASH)
    d, log = run_and_diagnose({"run": f"torchrun --standalone --nproc_per_node=2 {script}"})
    assert "[rank1]: ValueError" in log and "ChildFailedError" in log, log[-3000:]
    assert (d.cls, d.sentence) == ("user_code_error", "The training script raised ValueError after step 29 (the last in the job's log): "
                                                      "batch 30 has labels outside [0, 10)."), log[-3000:]


def test_a_python_error_with_an_empty_message_leaves_no_placeholder():
    d = diagnose(Ending("failed", 1, log_tail="step 3\nTraceback (most recent call last):\nRuntimeError: \n"))
    assert d.sentence == "The training script raised RuntimeError after step 3 (the last in the job's log)."


def test_under_torchrun_a_rank_that_only_lost_its_peer_is_not_taken_for_the_cause():
    # torchrun's "first observed failure" can be a rank that died of the other's exit
    log = ("step 12\n[rank1]: Traceback (most recent call last):\n[rank1]: ValueError: bad labels\n"
           "[rank0]: RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:1. This is typically caused "
           "by a remote worker crashing.\nRoot Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n")
    assert diagnose(Ending("failed", 1, log_tail=log)).sentence == \
        "The training script raised ValueError after step 12 (the last in the job's log): bad labels."
