"""The diagnosis names what ended the job, not the first rule's match anywhere in the log's tail.

A job's log often shows a problem it got past (a CUDA out-of-memory caught and retried with a smaller batch, a NCCL
connect that was retried, a sample skipped because its file was missing) before the failure that ended it. Read by
table order over the whole tail, the earlier line won: a KeyError in the user's code was called "Out of GPU memory",
or a NCCL warning from start-up made a code error resume without --force. The logs below are as Python, PyTorch and
torchrun print them (the first ones captured from real runs of torch 2.13 on CPU, the CUDA and NCCL lines as those
libraries word them)."""

import subprocess
import sys
import textwrap

import pytest

from broker.diagnosis import Ending, RuleBook, diagnose

CAUGHT_OOM = """\
step 1200 batch_size=64
Traceback (most recent call last):
  File "/workspace/train.py", line 20, in <module>
    train_step(batch, batch_size)
  File "/workspace/train.py", line 14, in train_step
    loss = model(batch).loss
           ^^^^^^^^^^^^
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of \
which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.02 GiB memory in use. Of the allocated \
memory 74.33 GiB is allocated by PyTorch, and 2.91 GiB is reserved by PyTorch but unallocated. If reserved but \
unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
OOM at step 1200: retrying with batch_size=32
step 1201 loss 2.31
step 1202 loss 2.29
step 1203 loss 2.30
"""

MISSING_SHARD_IN_A_WORKER = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 26, in <module>
    for batch in loader:
  File "/usr/local/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 725, in __next__
    data = self._next_data()
           ^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1567, in _process_data
    data.reraise()
  File "/usr/local/lib/python3.11/site-packages/torch/_utils.py", line 794, in reraise
    raise exception
FileNotFoundError: Caught FileNotFoundError in DataLoader worker process 1.
Original Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 374, in _worker_loop
    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]
           ^^^^^^^^^^^^^^^^^^^^
  File "/workspace/train.py", line 9, in __getitem__
    with open(f"data/shards/train-{i:05d}.bin", "rb") as f:
         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
FileNotFoundError: [Errno 2] No such file or directory: 'data/shards/train-00040.bin'
"""

KEY_ERROR = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 212, in <module>
    main()
  File "/workspace/train.py", line 180, in main
    loss = compute_loss(model, batch)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/workspace/train.py", line 97, in compute_loss
    labels = batch["labels"]
             ~~~~~^^^^^^^^^^
KeyError: 'labels'
"""

NCCL_CONNECT_RETRIED = """\
node-1:2210:2290 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>
node-1:2210:2290 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.2<43221> failed : Connection \
refused
node-1:2210:2290 [0] NCCL INFO Call to connect returned Connection refused, retrying
node-1:2210:2290 [0] NCCL INFO Connected all rings
node-1:2210:2290 [0] NCCL INFO Connected all trees
step 100 loss 3.02
step 200 loss 2.87
"""

SKIPPED_SAMPLE = """\
step 4000 loss 1.95
WARNING:dataset:skipping a sample: [Errno 2] No such file or directory: '/data/imagenet/train/n01440764/img_0042.JPEG'
step 4100 loss 1.93
"""

ILLEGAL_ADDRESS = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 180, in main
    loss.backward()
  File "/usr/local/lib/python3.11/site-packages/torch/_tensor.py", line 648, in backward
    torch.autograd.backward(
RuntimeError: CUDA error: an illegal memory access was encountered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.

"""

DEVICE_SIDE_ASSERT = """\
/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: \
[5,0,0] Assertion `t >= 0 && t < n_classes` failed.
Traceback (most recent call last):
  File "/workspace/train.py", line 178, in main
    loss = criterion(logits, labels)
           ^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: CUDA error: device-side assert triggered
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.
"""

# torchrun, two ranks on gloo (a real run): rank 1 caught an OOM at step 10 (its traceback printed without the
# "[rank1]:" prefix, which only an uncaught one gets) and raised a KeyError at step 30; rank 0 lost its peer
TORCHRUN_CAUGHT_OOM_THEN_KEYERROR = """\
W1204 07:45:50.921000 14525 torch/distributed/run.py:874] *****************************************
step 8
step 9
Traceback (most recent call last):
  File "/workspace/train.py", line 9, in <module>
    loss = model(batch).loss
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 1 has a total capacity of 79.15 GiB of \
which 612.00 MiB is free.
rank 1: OOM at step 10, retrying with batch_size=16
step 10
step 11
step 28
[rank1]: Traceback (most recent call last):
[rank1]:   File "/workspace/train.py", line 14, in <module>
[rank1]:     labels = batch["labels"]
[rank1]:              ~~~~~^^^^^^^^^^
[rank1]: KeyError: 'labels'
step 29
[rank0]: Traceback (most recent call last):
[rank0]:   File "/workspace/train.py", line 15, in <module>
[rank0]:     dist.all_reduce(torch.ones(4))
[rank0]:   File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 3252, in all_reduce
[rank0]:     work.wait()
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by \
peer [127.0.0.1]:13706. This is typically caused by a remote worker crashing. Check the logs of the remote worker \
before reporting an error. GLHF! 🏖️
W1204 07:45:52.904000 14525 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 14555 closing \
signal SIGTERM
E1204 07:45:52.920000 14525 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 1 \
(pid: 14556) of binary: /usr/local/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-04_07:45:52
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 14555)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 14555
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_07:45:52
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 14556) 
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

# `accelerate launch` with one process runs the script as its child and raises this when the child fails
ACCELERATE_CHILD_FAILED = """\
Traceback (most recent call last):
  File "/usr/local/bin/accelerate", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "/usr/local/lib/python3.11/site-packages/accelerate/commands/accelerate_cli.py", line 50, in main
    args.func(args)
  File "/usr/local/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1204, in launch_command
    simple_launcher(args)
  File "/usr/local/lib/python3.11/site-packages/accelerate/commands/launch.py", line 825, in simple_launcher
    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)
subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py']' returned non-zero exit status 1.
"""


def torchrun_summary(failures: str, root_rank: int) -> str:
    """torchrun's last words: its ChildFailedError, then the ranks it saw fail, the first observed one last."""
    return f"""\
E1204 07:45:52.920000 14525 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: \
{root_rank} (pid: 1456{root_rank}) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
             ^^^^^^
  File "/usr/local/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
{failures}------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_07:45:52
  host      : node-1
  rank      : {root_rank} (local_rank: {root_rank})
  exitcode  : 1 (pid: 1456{root_rank})
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def killed_rank(rank: int) -> str:
    return f"""\
[1]:
  time      : 2026-12-04_07:46:22
  host      : node-1
  rank      : {rank} (local_rank: {rank})
  exitcode  : -9 (pid: 1456{rank})  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 1456{rank}
"""


# what ended the job comes after a problem it got past: each of these was explained by the earlier line
LATER_CAUSE = [
    ("a caught CUDA OOM, then a shard missing in a data-loader worker",
     Ending("failed", 1, log_tail=CAUGHT_OOM + MISSING_SHARD_IN_A_WORKER),
     "data_not_found", False, "Could not read data/shards/train-00040.bin after step 1203 (the last in the job's log)."),
    ("a caught CUDA OOM, then a KeyError in the user's code",
     Ending("failed", 1, log_tail=CAUGHT_OOM + KEY_ERROR),
     "user_code_error", False, "The training script raised KeyError after step 1203 (the last in the job's log): 'labels'."),
    ("a NCCL connect retried at start-up, then a KeyError: the code's, so no resume without --force",
     Ending("failed", 1, log_tail=NCCL_CONNECT_RETRIED + KEY_ERROR),
     "user_code_error", False, "The training script raised KeyError after step 200 (the last in the job's log): 'labels'."),
    ("a sample skipped for a missing file, then a device-side assert",
     Ending("failed", 1, log_tail=SKIPPED_SAMPLE + DEVICE_SIDE_ASSERT),
     "user_code_error", False, "A CUDA kernel's assertion failed (device-side assert) after step 4100 (the last in the job's log)."),
    ("a sample skipped for a missing file, then an illegal memory access: the node's, resumed with one click",
     Ending("failed", 1, log_tail=SKIPPED_SAMPLE + ILLEGAL_ADDRESS),
     "cuda_error", True, "A CUDA error stopped the job after step 4100 (the last in the job's log)."),
    ("under torchrun, the root rank's caught OOM, then its KeyError",
     Ending("failed", 1, log_tail=TORCHRUN_CAUGHT_OOM_THEN_KEYERROR),
     "user_code_error", False, "The training script raised KeyError after step 29 (the last in the job's log): 'labels'."),
    ("under `accelerate launch`, a caught CUDA OOM, then a missing shard",
     Ending("failed", 1, log_tail=CAUGHT_OOM + MISSING_SHARD_IN_A_WORKER + ACCELERATE_CHILD_FAILED),
     "data_not_found", False, "Could not read data/shards/train-00040.bin after step 1203 (the last in the job's log)."),
    # an exit status is the last thing that happened: it outranks a line the job got past
    ("SIGKILLed (no line of its own) after a caught CUDA OOM",
     Ending("failed", 137, 9, log_tail=CAUGHT_OOM),
     "host_oom", False, "The process was killed by SIGKILL after step 1203 (the last in the job's log): "
                        "often the kernel's out-of-memory killer, but nothing in the log confirms it."),
    ("SIGTERM from the node after a NCCL connect retried at start-up",
     Ending("failed", 143, 15, log_tail=NCCL_CONNECT_RETRIED),
     "terminated", True, "The job was stopped after step 200 (the last in the job's log) by SIGTERM, which the broker did not send: most likely the "
                         "node was shutting down, or a person or process on it stopped the job."),
    # a line of its own at the end ("Killed") and the exit status agree: the line's rule, the first of the two
    ("the shell's 'Killed' after a caught CUDA OOM, and exit 137",
     Ending("failed", 137, 9, log_tail=CAUGHT_OOM + "Killed\n"),
     "host_oom", False, "Out of host memory after step 1203 (the last in the job's log): the kernel killed the process."),
]


@pytest.mark.parametrize("ending, cls, infrastructure, sentence", [c[1:] for c in LATER_CAUSE],
                         ids=[c[0] for c in LATER_CAUSE])
def test_the_cause_nearest_the_end_of_the_log_is_the_one_named(ending, cls, infrastructure, sentence):
    d = diagnose(ending)
    assert (d.cls, d.infrastructure, d.sentence) == (cls, infrastructure, sentence), d


def test_an_illegal_memory_access_is_not_taken_for_a_device_side_assert():
    # PyTorch ends every CUDA error's message with "Compile with `TORCH_USE_CUDA_DSA` to enable device-side
    # assertions.": that line names no assert that fired
    d = diagnose(Ending("failed", 1, log_tail=ILLEGAL_ADDRESS))
    assert (d.cls, d.infrastructure) == ("cuda_error", True), d
    assert diagnose(Ending("failed", 1, log_tail=DEVICE_SIDE_ASSERT)).sentence == \
        "A CUDA kernel's assertion failed (device-side assert)."


# one failure printed over several lines or chained exceptions is one cause: there the table order still decides,
# so the specific rule beats the generic "raised an exception" one wherever in it each matched
SAME_CAUSE = [
    ("a CUDA OOM's exception line (also an uncaught exception's)",
     Ending("failed", 1, log_tail="step 40 batch_size 64\n" + CAUGHT_OOM.split("\n", 1)[1].split("OOM at")[0]),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 40 (the last in the job's log)."),
    # a real run: the worker's bus error, then "exited unexpectedly" chained to it ("The above exception was the
    # direct cause"), whose rule says memory of another kind
    ("a data-loader worker's bus error chained to 'exited unexpectedly'",
     Ending("failed", 1, log_tail=textwrap.dedent("""\
        step 2
        ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).
         step 3
        Traceback (most recent call last):
          File "/usr/local/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1291, in _try_get_data
            data = self._data_queue.get(timeout=timeout)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
          File "/usr/local/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler
            _error_if_any_worker_fails()
        RuntimeError: DataLoader worker (pid 14499) is killed by signal: Bus error. It is possible that dataloader's \
        workers are out of shared memory. Please try to raise your shared memory limit.

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "/workspace/train.py", line 8, in <module>
            for step, b in enumerate(loader):
          File "/usr/local/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1304, in _try_get_data
            raise RuntimeError(
        RuntimeError: DataLoader worker (pid(s) 14499) exited unexpectedly
        """)),
     "host_oom", "A data-loader worker ran out of shared memory (/dev/shm) after step 3 (the last in the job's log)."),
    ("a missing file re-raised as the script's own RuntimeError ('raise ... from exc')",
     Ending("failed", 1, log_tail=textwrap.dedent("""\
        step 0
        Traceback (most recent call last):
          File "/workspace/data.py", line 4, in load_index
            with open(path) as f:
                 ^^^^^^^^^^
        FileNotFoundError: [Errno 2] No such file or directory: '/mnt/data/openwebtext/index.json'

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "/workspace/train.py", line 9, in <module>
            load_index("/mnt/data/openwebtext/index.json")
          File "/workspace/data.py", line 7, in load_index
            raise RuntimeError(f"could not load the dataset index") from exc
        RuntimeError: could not load the dataset index
        """)),
     "data_not_found", "Could not read /mnt/data/openwebtext/index.json after step 0 (the last in the job's log)."),
    ("an exception raised while handling a disk-full one ('During handling of the above exception')",
     Ending("failed", 1, log_tail=textwrap.dedent("""\
        step 800
        Traceback (most recent call last):
          File "/workspace/train.py", line 60, in save
            f.write(blob)
        OSError: [Errno 28] No space left on device

        During handling of the above exception, another exception occurred:

        Traceback (most recent call last):
          File "/workspace/train.py", line 62, in save
            raise ValueError("checkpoint 800 not saved")
        ValueError: checkpoint 800 not saved
        """)),
     "disk_full", "The disk is full after step 800 (the last in the job's log): could not write a file."),
    # torch prints a NCCL failure as the error, then NCCL's own result name on the next line
    ("NCCL's result name on the line after torch's NCCL error",
     Ending("failed", 1, log_tail="step 77\n" + textwrap.dedent("""\
        Traceback (most recent call last):
          File "/workspace/train.py", line 90, in <module>
            dist.all_reduce(loss)
        torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, \
        internal error - please report this issue to the NCCL developers, NCCL version 2.19.3
        ncclInternalError: Internal check failed.
        Last error:
        NET/IB : Got completion from peer 10.0.0.2<51234> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0
        """)),
     "nccl_network", "A NCCL/network error stopped the job after step 77 (the last in the job's log)."),
    # the launcher's own exception reports its child's failure, printed just before it: that is the cause
    ("a CUDA OOM under `accelerate launch`, whose CalledProcessError comes last",
     Ending("failed", 1, log_tail="step 40 batch_size 64\n" + CAUGHT_OOM.split("\n", 1)[1].split("OOM at")[0]
            + ACCELERATE_CHILD_FAILED),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 40 (the last in the job's log)."),
    # torchrun's summary comes last and lists a rank it SIGKILLed once rank 1 had failed (rank 0 did not stop on its
    # SIGTERM): the summary reports rank 1's failure, it is not a cause after it
    ("under torchrun, rank 1's CUDA OOM, and rank 0 SIGKILLed by torchrun afterwards",
     Ending("failed", 1, log_tail="step 450 batch_size 64\n" + textwrap.dedent("""\
        [rank1]: Traceback (most recent call last):
        [rank1]:   File "/workspace/train.py", line 60, in <module>
        [rank1]:     loss = model(batch).loss
        [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity \
        of 79.15 GiB of which 1.12 GiB is free.
        W1204 07:45:52.904000 14525 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 14560 \
        closing signal SIGTERM
        W1204 07:46:22.910000 14525 torch/distributed/elastic/multiprocessing/api.py:1045] Unable to shutdown \
        process 14560 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL
        """) + torchrun_summary(killed_rank(0), root_rank=1)),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 450 (the last in the job's log)."),
    # …but a rank that only lost its peer names no cause: the peer torchrun lists as SIGKILLed is it
    ("under torchrun, rank 0 lost its peer, and rank 1 was SIGKILLed (by the kernel)",
     Ending("failed", 1, log_tail="step 880\n" + textwrap.dedent("""\
        [rank0]: Traceback (most recent call last):
        [rank0]:   File "/workspace/train.py", line 15, in <module>
        [rank0]:     dist.all_reduce(torch.ones(4))
        [rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by \
        peer [10.0.0.2]:13706. This is typically caused by a remote worker crashing.
        """) + torchrun_summary(killed_rank(1), root_rank=0)),
     "host_oom", "A training process was killed by SIGKILL after step 880 (the last in the job's log): "
                 "often the kernel's out-of-memory killer, but nothing in the log confirms it."),
    # Python's shutdown runs atexit callbacks after the traceback; one that fails prints its own traceback last
    ("a CUDA OOM, then an atexit callback's BrokenPipeError (Python 3.10)",
     Ending("failed", 1, log_tail="step 450 batch_size 64\n" + CAUGHT_OOM.split("\n", 1)[1].split("OOM at")[0]
            + "Error in atexit._run_exitfuncs:\nTraceback (most recent call last):\n"
              "  File \"/usr/local/lib/python3.10/site-packages/wandb/sdk/lib/sock_client.py\", line 142, in _send\n"
              "    self._sock.sendall(data)\nBrokenPipeError: [Errno 32] Broken pipe\n"),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 450 (the last in the job's log)."),
    ("a CUDA OOM, then an atexit callback's BrokenPipeError (Python 3.11)",
     Ending("failed", 1, log_tail="step 450 batch_size 64\n" + CAUGHT_OOM.split("\n", 1)[1].split("OOM at")[0]
            + "Exception ignored in atexit callback: <function flush_logger at 0x7fa2d79b84a0>\n"
              "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 3, in flush_logger\n"
              "    raise BrokenPipeError(32, \"Broken pipe\")\nBrokenPipeError: [Errno 32] Broken pipe\n"),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 450 (the last in the job's log)."),
    # the exit ranks as the last line, not after it: a segfault rule placed below the generic one does not take a
    # Python exception printed last (a native extension that crashed while the interpreter exited after it)
    ("exit 139 after the script's own exception",
     Ending("failed", 139, 11, log_tail="step 12\n" + KEY_ERROR),
     "user_code_error", "The training script raised KeyError after step 12 (the last in the job's log): 'labels'."),
]


@pytest.mark.parametrize("ending, cls, sentence", [c[1:] for c in SAME_CAUSE], ids=[c[0] for c in SAME_CAUSE])
def test_within_one_failure_the_specific_rule_still_beats_the_generic_one(ending, cls, sentence):
    d = diagnose(ending)
    assert (d.cls, d.sentence) == (cls, sentence), d


def test_a_phase_the_broker_knows_is_named_whatever_the_log_ends_with():
    for phase, cls in (("preempted", "preempted"), ("lost", "node_lost"), ("budget", "budget_stop"),
                       ("cancelled", "cancelled")):
        assert diagnose(Ending(phase, 1, log_tail=CAUGHT_OOM + KEY_ERROR)).cls == cls


def test_a_team_rule_that_matches_beats_every_shipped_one_wherever_it_matched(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("- class: nfs_gone\n  pattern: \"No such file or directory: '/mnt/nfs/\"\n"
                    "  sentence: The shared disk was not mounted.\n  hint: Resume it.\n  infrastructure: true\n")
    book = RuleBook(path)
    missing = ("Traceback (most recent call last):\n  File \"/workspace/train.py\", line 9, in <module>\n"
               "    open(path)\nFileNotFoundError: [Errno 2] No such file or directory: '/mnt/nfs/data/train-3.bin'\n")
    # the same line the shipped data_not_found rule and the generic one match
    final = book.diagnose(Ending("failed", 1, log_tail=CAUGHT_OOM + missing))
    assert (final.cls, final.infrastructure) == ("nfs_gone", True), final
    # first in a chain that the script's own error ends
    chained = missing + ("\nThe above exception was the direct cause of the following exception:\n\n"
                         "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 12, in <module>\n"
                         "    load()\nRuntimeError: could not load the training set\n")
    assert book.diagnose(Ending("failed", 1, log_tail=chained)).cls == "nfs_gone"
    # a line before the job's own error: teams know their logs, their rule says what it means wherever it is (as
    # before the latest cause was ranked); a team that means only a final failure writes a pattern for that
    retried = "WARNING: No such file or directory: '/mnt/nfs/cache/index.json': using the local copy\nstep 5\n"
    later = book.diagnose(Ending("failed", 1, log_tail=retried + KEY_ERROR))
    assert (later.cls, later.infrastructure) == ("nfs_gone", True), later
    # the shipped rules rank as ever when no rule of the team's matches
    assert book.diagnose(Ending("failed", 1, log_tail=CAUGHT_OOM + KEY_ERROR)).sentence == \
        "The training script raised KeyError after step 1203 (the last in the job's log): 'labels'."


def test_a_16_kib_tail_of_a_real_failure_is_read_for_its_last_cause(tmp_path):
    """A real process: it catches an OOM (as torch raises it) and retries with a smaller batch, trains on, then a
    data-loader worker finds a shard missing; the engine reads the last 16 KiB of its log."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import traceback
        import torch
        from torch.utils.data import DataLoader, Dataset

        class Shards(Dataset):
            def __len__(self):
                return 4096
            def __getitem__(self, i):
                if i == 2000:
                    open("data/shards/train-02000.bin", "rb")
                return torch.zeros(4)

        batch_size = 64
        print(f"step 1200 batch_size={batch_size}", flush=True)
        try:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                                         "capacity of 79.15 GiB of which 1.12 GiB is free.")
        except torch.OutOfMemoryError:
            traceback.print_exc()
            batch_size //= 2
            print(f"retrying with batch_size={batch_size}", flush=True)
        for step, batch in enumerate(DataLoader(Shards(), batch_size=8, num_workers=1), start=1201):
            print(f"step {step} loss 2.31", flush=True)
        """))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)  # one stream, as a launcher keeps it
    log = done.stdout
    assert done.returncode == 1 and "CUDA out of memory" in log, log[-3000:]
    d = diagnose(Ending("failed", done.returncode, log_tail=log[-16_384:]))
    assert (d.cls, d.sentence) == ("data_not_found", "Could not read data/shards/train-02000.bin after step 1450 (the last in the job's log)."), \
        log[-3000:]


# What a job prints between its own traceback and `accelerate launch`'s CalledProcessError: wandb's summary as the
# process exits, the resource tracker's warning about semaphores a data loader left
WANDB_SUMMARY = """\
wandb: 🚀 View run glorious-sun-12 at: https://wandb.ai/team/proj/runs/abc123
wandb: ⭐️ View project at: https://wandb.ai/team/proj
wandb: Synced 5 W&B file(s), 0 media file(s), 0 artifact file(s) and 0 other file(s)
wandb: Find logs at: ./wandb/run-20240101_000000-abc123/logs
"""
LEAKED_SEMAPHORE = """\
/usr/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: resource_tracker: There appear to be 1 \
leaked semaphore objects to clean up at shutdown
  warnings.warn('resource_tracker: There appear to be %d '
"""
OOM_40 = "step 40 batch_size 64\n" + CAUGHT_OOM.split("\n", 1)[1].split("OOM at")[0]


def accelerate_child_died(name: str, number: int) -> str:
    return ACCELERATE_CHILD_FAILED.replace("returned non-zero exit status 1", f"died with <Signals.{name}: {number}>")


# the launcher's CalledProcessError reports the failure its child printed: whatever is printed between the two, the
# child's traceback is the cause (it was the generic "raised CalledProcessError", needing --force)
UNDER_ACCELERATE = [
    ("a CUDA OOM, wandb's exit summary, then accelerate's CalledProcessError",
     Ending("failed", 1, log_tail=OOM_40 + WANDB_SUMMARY + ACCELERATE_CHILD_FAILED),
     "gpu_oom", False, "Out of GPU memory (batch size 64) after step 40 (the last in the job's log)."),
    ("a CUDA OOM, the resource tracker's leaked-semaphore warning, then accelerate's CalledProcessError",
     Ending("failed", 1, log_tail=OOM_40 + LEAKED_SEMAPHORE + ACCELERATE_CHILD_FAILED),
     "gpu_oom", False, "Out of GPU memory (batch size 64) after step 40 (the last in the job's log)."),
    ("an illegal memory access, wandb's summary, then accelerate's error: the node's, resumed with one click",
     Ending("failed", 1, log_tail="step 7\n" + ILLEGAL_ADDRESS + WANDB_SUMMARY + ACCELERATE_CHILD_FAILED),
     "cuda_error", True, "A CUDA error stopped the job after step 7 (the last in the job's log)."),
    # the generic rule quotes the child's exception, not the launcher's
    ("the child's KeyError right before accelerate's CalledProcessError",
     Ending("failed", 1, log_tail="step 12\n" + KEY_ERROR + ACCELERATE_CHILD_FAILED),
     "user_code_error", False, "The training script raised KeyError after step 12 (the last in the job's log): 'labels'."),
    ("the child's KeyError, wandb's summary, then accelerate's CalledProcessError",
     Ending("failed", 1, log_tail="step 12\n" + KEY_ERROR + WANDB_SUMMARY + ACCELERATE_CHILD_FAILED),
     "user_code_error", False, "The training script raised KeyError after step 12 (the last in the job's log): 'labels'."),
    # a child killed prints nothing of it: the launcher's "died with <Signals.SIGKILL: 9>" says it, as torchrun's
    # summary does, after a traceback the child got past
    ("the child SIGKILLed after a caught CUDA OOM",
     Ending("failed", 1, log_tail=CAUGHT_OOM + accelerate_child_died("SIGKILL", 9)),
     "host_oom", False, "A training process was killed by SIGKILL after step 1203 (the last in the job's log): "
                        "often the kernel's out-of-memory killer, but nothing in the log confirms it."),
    ("the child segfaulted",
     Ending("failed", 1, log_tail="step 3\n" + accelerate_child_died("SIGSEGV", 11)),
     "crash", False, "A training process crashed with a segmentation fault after step 3 (the last in the job's log)."),
    # with no traceback before it, a CalledProcessError (the script's own check=True) reads the line before it
    ("the script's own check=True after tar found the disk full",
     Ending("failed", 1, log_tail="step 42\ntar: /ckpt/step-42.tar: Cannot write: No space left on device\n"
                                  "Traceback (most recent call last):\n"
                                  "  File \"/workspace/train.py\", line 30, in save\n"
                                  "    subprocess.run(['tar', 'cf', '/ckpt/step-42.tar', 'out'], check=True)\n"
                                  "subprocess.CalledProcessError: Command '['tar', 'cf', '/ckpt/step-42.tar', 'out']' "
                                  "returned non-zero exit status 2.\n"),
     "disk_full", False, "The disk is full after step 42 (the last in the job's log): could not write a file."),
]


@pytest.mark.parametrize("ending, cls, infrastructure, sentence", [c[1:] for c in UNDER_ACCELERATE],
                         ids=[c[0] for c in UNDER_ACCELERATE])
def test_under_accelerate_launch_the_childs_failure_is_named_not_the_launchers(ending, cls, infrastructure, sentence):
    d = diagnose(ending)
    assert (d.cls, d.infrastructure, d.sentence) == (cls, infrastructure, sentence), d


STARTUP_WARNINGS = """\
[rank2]:[W socket.cpp:697] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot \
assign requested address).
[rank3]:[W socket.cpp:697] [c10d] The client socket has failed to connect to [localhost]:29500 (errno: 99 - Cannot \
assign requested address).
"""
RANK0_LOST_PEER = """\
[rank0]:Traceback (most recent call last):
[rank0]:  File "/workspace/train.py", line 91, in <module>
[rank0]:    dist.all_reduce(grad)
[rank0]:torch.distributed.DistBackendError: [0] is setting up NCCL communicator and retrieving ncclUniqueId from [0] \
via c10d key-value store by key '1', but store->get('1') got error: Connection reset by peer
"""


def killed_and_stopped(killed: int, stopped: int) -> str:
    return killed_rank(killed) + killed_rank(stopped).replace("[1]:", "[2]:").replace("-9 (", "-15 (").replace(
        "(SIGKILL)", "(SIGTERM)").replace("Signal 9", "Signal 15")


# a rank that printed only a warning (torch's usual start-up "[W socket.cpp:697] … errno: 99") has no failure of its
# own: it is not read as the cause, and does not take torchrun's "Failures:" list with it
UNDER_TORCHRUN = [
    ("rank 0 lost its peer, rank 1 was SIGKILLed (by the kernel), ranks 2 and 3 printed the start-up warning",
     Ending("failed", 1, log_tail=STARTUP_WARNINGS + "step 1200 loss 2.01\n" + RANK0_LOST_PEER
            + torchrun_summary(killed_and_stopped(1, 2), root_rank=0)),
     "host_oom", "A training process was killed by SIGKILL after step 1200 (the last in the job's log): "
                 "often the kernel's out-of-memory killer, but nothing in the log confirms it."),
    ("rank 0 lost its peer, rank 2 printed the start-up warning, rank 3 raised a KeyError",
     Ending("failed", 1, log_tail=STARTUP_WARNINGS.split("\n", 1)[0] + "\nstep 1200 loss 2.01\n" + RANK0_LOST_PEER
            + "[rank3]:Traceback (most recent call last):\n"
              "[rank3]:  File \"/workspace/train.py\", line 14, in <module>\n"
              "[rank3]:KeyError: 'labels'\n" + torchrun_summary(killed_and_stopped(1, 2), root_rank=0)),
     "user_code_error", "The training script raised KeyError after step 1200 (the last in the job's log): 'labels'."),
    # the root rank's own failure, and a rank torchrun SIGKILLed once it had failed: the list is dropped as before
    ("rank 1's CUDA OOM, ranks 2 and 3's start-up warning, rank 0 SIGKILLed by torchrun afterwards",
     Ending("failed", 1, log_tail=STARTUP_WARNINGS + "step 450 batch_size 64\n"
            + "".join(f"[rank1]:{line}\n" for line in OOM_40.splitlines()[1:]) + torchrun_summary(killed_rank(0), 1)),
     "gpu_oom", "Out of GPU memory (batch size 64) after step 450 (the last in the job's log)."),
]


@pytest.mark.parametrize("ending, cls, sentence", [c[1:] for c in UNDER_TORCHRUN], ids=[c[0] for c in UNDER_TORCHRUN])
def test_under_torchrun_a_rank_with_only_warnings_does_not_hide_a_peer_killed(ending, cls, sentence):
    d = diagnose(ending)
    assert (d.cls, d.sentence) == (cls, sentence), d


NCCL_ERROR = """\
step 3400 loss 1.87
Traceback (most recent call last):
  File "/workspace/train.py", line 120, in <module>
    dist.all_reduce(loss)
  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py", line 79, in wrapper
    return func(*args, **kwargs)
torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled \
system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
Last error:
socketStartConnect: Connect to 10.0.3.7<41235> failed : Software caused connection abort
"""
SEGFAULT = "Segmentation fault (core dumped)\n"
BASH_SEGFAULT = "bash: line 1:  4963 Segmentation fault      (core dumped) python train.py\n"

# a process that raised and then crashed tearing down (a NCCL communicator's or a CUDA context's destructor) ends by
# SIGSEGV or SIGABRT after its traceback: the traceback's cause, not "crashed with a segmentation fault" (which needs
# --force where a NCCL error resumes with one click)
TEARDOWN = [
    ("a NCCL error, then the shell's 'Segmentation fault (core dumped)', exit 139",
     Ending("failed", 139, log_tail=NCCL_ERROR + SEGFAULT),
     "nccl_network", True, "A NCCL/network error stopped the job after step 3400 (the last in the job's log)."),
    ("a NCCL error, then SIGSEGV with no line of its own",
     Ending("failed", 139, 11, log_tail=NCCL_ERROR),
     "nccl_network", True, "A NCCL/network error stopped the job after step 3400 (the last in the job's log)."),
    ("the script's KeyError, then bash's segfault line",
     Ending("failed", 139, 11, log_tail="step 12\n" + KEY_ERROR + BASH_SEGFAULT),
     "user_code_error", False, "The training script raised KeyError after step 12 (the last in the job's log): 'labels'."),
    ("a CUDA OOM, wandb's summary, then a segfault",
     Ending("failed", 139, 11, log_tail=OOM_40 + WANDB_SUMMARY + SEGFAULT),
     "gpu_oom", False, "Out of GPU memory (batch size 64) after step 40 (the last in the job's log)."),
    # …but a native crash with no Python error is a crash, and so is one after a traceback the job got past
    ("a segfault and no traceback",
     Ending("failed", 139, 11, log_tail="step 42\n" + SEGFAULT),
     "crash", False, "The job crashed with a segmentation fault after step 42 (the last in the job's log)."),
    ("faulthandler's dump of a segfault, no traceback",
     Ending("failed", 139, 11, log_tail="step 42\nFatal Python error: Segmentation fault\n\nCurrent thread "
                                        "0x00007f3b2a1ff740 (most recent call first):\n  File \"/workspace/ext.py\", "
                                        "line 8 in forward\n" + SEGFAULT),
     "crash", False, "The job crashed with a segmentation fault after step 42 (the last in the job's log)."),
    ("a caught CUDA OOM, training went on, then a segfault",
     Ending("failed", 139, 11, log_tail=CAUGHT_OOM + SEGFAULT),
     "crash", False, "The job crashed with a segmentation fault after step 1203 (the last in the job's log)."),
    ("a caught CUDA OOM, a progress bar went on, then a segfault",
     Ending("failed", 139, 11, log_tail=OOM_40 + "Epoch 0:  12%|#2        | 120/1000 [01:02<07:35,  1.93it/s]\n"
            + SEGFAULT),
     "crash", False, "The job crashed with a segmentation fault after step 120 (the last in the job's log)."),
    # a signal from outside (SIGTERM, SIGKILL) is not the process's own teardown: it often causes the traceback
    ("a caught CUDA OOM, a line of the job's, then a SIGTERM from the node",
     Ending("failed", 143, 15, log_tail=OOM_40 + "retrying with a smaller batch\n"),
     "terminated", True, "The job was stopped after step 40 (the last in the job's log) by SIGTERM, which the broker did not send: most likely the "
                         "node was shutting down, or a person or process on it stopped the job."),
]


@pytest.mark.parametrize("ending, cls, infrastructure, sentence", [c[1:] for c in TEARDOWN],
                         ids=[c[0] for c in TEARDOWN])
def test_a_crash_while_tearing_down_after_the_jobs_error_does_not_replace_it(ending, cls, infrastructure, sentence):
    d = diagnose(ending)
    assert (d.cls, d.infrastructure, d.sentence) == (cls, infrastructure, sentence), d


def test_an_abort_after_the_jobs_error_ranks_as_that_error_among_a_teams_rules(tmp_path):
    # within one table (here the team's) the SIGABRT of the teardown ranks as the traceback; table order decides
    path = tmp_path / "rules.yaml"
    path.write_text("- {class: lease_lost, sentence: The data lease expired., pattern: 'LeaseExpired: '}\n"
                    "- {class: aborted, sentence: The job aborted., exit_codes: [134]}\n")
    book = RuleBook(path)
    log = ("Traceback (most recent call last):\n  File \"/workspace/train.py\", line 3, in <module>\n"
           "LeaseExpired: lease 42 on /data/shards expired\nwandb: Synced 5 W&B file(s)\nAborted (core dumped)\n")
    assert book.diagnose(Ending("failed", 134, 6, log_tail=log)).cls == "lease_lost"
    assert book.diagnose(Ending("failed", 134, 6, log_tail="step 3\nAborted (core dumped)\n")).cls == "aborted"


FEATURE_STORE = """\
2024-05-01 10:00:00 WARNING feature-store: connection refused (attempt 3/3), giving up
Traceback (most recent call last):
  File "/workspace/train.py", line 40, in <module>
    batch = next(loader)
  File "/workspace/data.py", line 88, in __next__
    raise RuntimeError("no features for batch")
RuntimeError: no features for batch
"""


def test_a_team_rule_on_the_line_before_the_traceback_beats_the_shipped_generic_one(tmp_path):
    # a rule file written before the latest cause was ranked keeps its meaning: the team's rule is checked first
    path = tmp_path / "rules.yaml"
    path.write_text("- class: feature_store_down\n  sentence: The feature store was unreachable.\n"
                    "  pattern: 'feature-store: connection refused'\n  infrastructure: true\n")
    d = RuleBook(path).diagnose(Ending("failed", 1, log_tail=FEATURE_STORE))
    assert (d.cls, d.infrastructure, d.sentence) == ("feature_store_down", True, "The feature store was unreachable.")


def test_among_a_teams_rules_the_latest_cause_wins(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text("- {class: feature_store_down, sentence: x, pattern: 'feature-store: connection refused'}\n"
                    "- {class: bad_features, sentence: y, pattern: 'no features for batch'}\n"
                    "- {class: team_catch_all, sentence: z, phases: [failed]}\n")
    book = RuleBook(path)
    assert book.diagnose(Ending("failed", 1, log_tail=FEATURE_STORE)).cls == "bad_features"
    # a rule of the team's that names only phases wins over the team's rules below it, and every shipped one
    assert book.diagnose(Ending("failed", 1, log_tail=CAUGHT_OOM + KEY_ERROR)).cls == "team_catch_all"
    assert book.diagnose(Ending("preempted", log_tail=CAUGHT_OOM)).cls == "preempted"


def test_under_torchrun_a_ranks_own_failure_may_be_a_logged_error_not_a_traceback():
    # the NCCL watchdog logs its timeout as an error of torch's C++ log and aborts the rank (a C++ exception): that
    # is the rank's own failure, and the rank torchrun SIGKILLed after it is not the cause
    log = (STARTUP_WARNINGS + "step 300 loss 2.2\n"
           "[rank0]:[E1204 07:46:10.000000 140 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600035 "
           "milliseconds before timing out.\n"
           "[rank0]:terminate called after throwing an instance of 'c10::DistBackendError'\n"
           + torchrun_summary(killed_rank(1), root_rank=0))
    d = diagnose(Ending("failed", 1, log_tail=log))
    assert (d.cls, d.infrastructure) == ("nccl_network", True), d
