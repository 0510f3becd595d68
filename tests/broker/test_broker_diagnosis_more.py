"""More real failures read right: a collective that timed out (NCCL's watchdog) next to the job's own error, the step
of the training bar (not HF Trainer's evaluation bar, nor a dataset's), NCCL's own usage and memory errors, and what
the out-of-GPU-memory advice says of a resume.

The log lines are as PyTorch, NCCL, torchrun, tqdm, Megatron, NeMo, fairseq, numpy and transformers print them; the
gloo timeout is a real run of torch on CPU."""

import subprocess
import sys

import pytest

from broker.diagnosis import INFRASTRUCTURE, Ending, diagnose, last_step

# torch 2.x: the watchdog's lines, then the process taken down (SIGABRT) with the C++ exception's text
WATCHDOG_ABORT = """\
[E1204 08:12:10.112233 2101 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: \
WorkNCCL(SeqNum=6801, OpType=ALLREDUCE, NumelIn=124439808, NumelOut=124439808, Timeout(ms)=600000) ran for 600062 \
milliseconds before timing out.
[E1204 08:12:10.112544 2101 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 0] Exception (either an \
error or timeout) detected by watchdog at work: 6801, last enqueued NCCL work: 6801, last completed NCCL work: 6800.
[E1204 08:12:10.112570 2101 ProcessGroupNCCL.cpp:630] [Rank 0] Some NCCL operations have failed or timed out. Due to \
the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
[E1204 08:12:10.112581 2101 ProcessGroupNCCL.cpp:636] [Rank 0] To avoid data inconsistency, we are taking the entire \
process down.
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: [Rank 0] \
Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6801, OpType=ALLREDUCE, NumelIn=124439808, \
NumelOut=124439808, Timeout(ms)=600000) ran for 600062 milliseconds before timing out.
Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:618 (most recent call \
first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f83f296c1b6 in \
/usr/local/lib/python3.11/site-packages/torch/lib/libc10.so)
frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, \
1000l> > >) + 0x2b4 (0x7f83a09fec74 in /usr/local/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so)
"""
STACK_ERROR = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 88, in <module>
    batch = collate(samples)
  File "/workspace/data.py", line 41, in collate
    return torch.stack([s["input_ids"] for s in samples])
RuntimeError: stack expects each tensor to be equal size, but got [512] at entry 0 and [511] at entry 3
"""
STACK_SENTENCE = ("The training script raised RuntimeError after step 3400 (the last in the job's log): stack expects each tensor to be equal size, "
                  "but got [512] at entry 0 and [511] at entry 3.")


def on(node: str, text: str) -> str:
    """Lines as SkyPilot shows a node's output in a job's one log."""
    prefix = ("(head, rank=0, pid=2101, ip=10.0.0.1) " if node == "head" else
              "(worker1, rank=1, pid=2033, ip=10.0.0.2) ")
    return "".join(prefix + line + "\n" for line in text.splitlines())


def as_rank(rank: int, text: str) -> str:
    return "".join(f"[rank{rank}]:{line}\n" for line in text.splitlines())


def torchrun_summary(rank: int, exitcode: int, traceback: str) -> str:
    return f"""\
E1204 08:12:11.000000 2000 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {exitcode}) \
local_rank: 0 (pid: 2101) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-04_08:12:11
  host      : node-{rank}
  rank      : {rank} (local_rank: 0)
  exitcode  : {exitcode} (pid: 2101)
  error_file: <N/A>
  traceback : {traceback}
============================================================
"""


# Two nodes, one log (SkyPilot's): the worker's process raised and died; the head's waited for it in its next
# all-reduce until NCCL's watchdog took it down ten minutes later. The timeout is the consequence: the worker's error
# is the cause, and resuming without a fix would fail the same way (it was "A NCCL/network error", resumed in one click)
HANG_AFTER_A_PEERS_ERROR = [
    ("one log of two nodes, no rank prefix: the worker's error, then the head's watchdog",
     on("head", "step 3400 loss 1.87") + on("worker1", STACK_ERROR) + on("head", WATCHDOG_ABORT)
     + on("head", "Aborted (core dumped)")),
    ("one log of two torchrun nodes: rank 1's error and its node's summary, then rank 0's watchdog and its summary",
     on("head", "[rank0]:step 3400 loss 1.87") + on("worker1", as_rank(1, STACK_ERROR))
     + on("worker1", torchrun_summary(1, 1, "To enable traceback see: "
                                           "https://pytorch.org/docs/stable/elastic/errors.html"))
     + on("head", as_rank(0, WATCHDOG_ABORT))
     + on("head", torchrun_summary(0, -6, "Signal 6 (SIGABRT) received by PID 2101"))),
    ("ranks without a prefix: a caught OOM the job went on from, then rank 1's error, then the watchdog",
     "step 3300\nTraceback (most recent call last):\n  File \"/workspace/train.py\", line 60, in <module>\n"
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\nretrying with batch_size=32\n"
     "step 3400 loss 1.87\n" + STACK_ERROR + WATCHDOG_ABORT),
]


@pytest.mark.parametrize("log_tail", [c[1] for c in HANG_AFTER_A_PEERS_ERROR],
                         ids=[c[0] for c in HANG_AFTER_A_PEERS_ERROR])
def test_a_collective_timeout_after_a_peers_own_error_is_that_error(log_tail):
    d = diagnose(Ending("failed", 1, log_tail=log_tail, command="run"))
    assert (d.cls, d.infrastructure, d.sentence) == ("user_code_error", False, STACK_SENTENCE), d


def test_a_peers_error_after_the_timeout_is_still_the_cause():
    # the peer was running, not hung, when the others timed out waiting on it (working alone, or calling another
    # collective): the code's, as before
    log = "step 3400 loss 1.87\n" + WATCHDOG_ABORT + STACK_ERROR
    d = diagnose(Ending("failed", 1, log_tail=log, command="run"))
    assert (d.cls, d.infrastructure, d.sentence) == ("user_code_error", False, STACK_SENTENCE), d


HANG_ALONE = [
    # every rank waited (a node, a GPU or a link hung): the timeout is what the log has
    ("torch 2.x under torchrun: the watchdog, the abort, torchrun's summary",
     Ending("failed", 1, log_tail="[rank0]:step 3400 loss 1.87\n" + as_rank(0, WATCHDOG_ABORT)
            + as_rank(1, WATCHDOG_ABORT) + torchrun_summary(0, -6, "Signal 6 (SIGABRT) received by PID 2101")),
     "The job's processes stopped waiting for each other after step 3400 (the last in the job's log): a collective operation (ALLREDUCE) did not "
     "finish within its timeout of 10 minutes."),
    ("plain python, taken down by SIGABRT",
     Ending("failed", 134, 6, log_tail="step 3400 loss 1.87\n" + WATCHDOG_ABORT + "Aborted (core dumped)\n"),
     "The job's processes stopped waiting for each other after step 3400 (the last in the job's log): a collective operation (ALLREDUCE) did not "
     "finish within its timeout of 10 minutes."),
    ("torch 1.x with NCCL_BLOCKING_WAIT=1 (was 'The training script raised RuntimeError')",
     Ending("failed", 1, log_tail="step 90\nTraceback (most recent call last):\n  File \"train.py\", line 40, in "
            "<module>\n    dist.broadcast(t, 0)\nRuntimeError: [Rank 1] Caught collective operation timeout: "
            "WorkNCCL(OpType=BROADCAST, TensorShape=[1], Timeout(ms)=1800000) ran for 1800305 milliseconds before "
            "timing out.\n"),
     "The job's processes stopped waiting for each other after step 90 (the last in the job's log): a collective operation (BROADCAST) did not "
     "finish within its timeout of 30 minutes."),
    ("gloo (was 'The training script raised RuntimeError')",
     Ending("failed", 1, log_tail="step 90\nTraceback (most recent call last):\n  File \"train.py\", line 40, in "
            "<module>\n    dist.barrier()\nRuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
            "unbound_buffer.cc:78] Timed out waiting 1800000ms for recv operation to complete\n"),
     "The job's processes stopped waiting for each other after step 90 (the last in the job's log): a collective operation did not finish within its "
     "timeout of 30 minutes."),
]


@pytest.mark.parametrize("ending, sentence", [c[1:] for c in HANG_ALONE], ids=[c[0] for c in HANG_ALONE])
def test_a_collective_timeout_alone_is_a_hang_resumed_in_one_click_with_what_to_check_if_it_repeats(ending, sentence):
    d = diagnose(ending)
    assert (d.cls, d.infrastructure, d.sentence) == ("nccl_network", True, sentence), d
    assert d.cls in INFRASTRUCTURE and "resume it" in d.hint
    assert "at the same step again" in d.hint and "rank 0 only" in d.hint


HANG = """\
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
rank = dist.get_rank()
for step in range(1, 100):
    if rank == 1 and step == 5:
        time.sleep(60)  # alive, but it never joins the next collective
    dist.all_reduce(torch.ones(4))
    if rank == 0:
        print(f"step {step}", flush=True)
"""


def test_a_real_collective_timeout_under_torchrun(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    log = done.stdout
    assert done.returncode == 1 and "Timed out waiting 3000ms" in log, log[-3000:]
    d = diagnose(Ending("failed", done.returncode, log_tail=log[-16_384:], command="run"))
    assert (d.cls, d.infrastructure, d.sentence) == (
        "nccl_network", True, "The job's processes stopped waiting for each other after step 4 (the last in the job's log): a collective operation "
                              "did not finish within its timeout of 3 seconds."), log[-3000:]


# HF Trainer's evaluation bar (tqdm, no description) is drawn below its training bar, as tqdm writes it to a file:
# "\n\r" then the bar then the cursor moved back up ("\x1b[A"); its count is the evaluation's batch, not the step
HF_EVAL = ("\r 40%|████      | 1200/3000 [10:00<15:00,  2.00it/s]"
           "{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 4e-05, 'epoch': 0.4}\n"
           "\n\r  0%|          | 0/100 [00:00<?, ?it/s]\x1b[A"
           "\n\r 44%|████▍     | 44/100 [00:05<00:06,  8.51it/s]\x1b[A"
           "\n\r 45%|████▌     | 45/100 [00:05<00:06,  8.50it/s]\x1b[A")


@pytest.mark.parametrize("log_tail, step", [
    (HF_EVAL, 1200),
    # …and back to training after the evaluation
    (HF_EVAL + "\n\r                                                 \x1b[A"
               "\r 40%|████      | 1201/3000 [10:09<15:00,  2.00it/s]", 1201),
    # a script's own bar over its epochs, and its batches below it: the batches' count (as before), not the epochs'
    ("\rEpoch:  30%|███       | 3/10 [00:30<01:10, 10.00s/it]\n\r 45%|████▌     | 450/1000 [00:05<00:06, 85.00it/s]"
     "\x1b[A", 450),
    # NeMo's bar shows global_step as a float ("3.2e+4"): the bar's own count, not "step 3"
    ("Epoch 0:   6%|██        | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6, v_num=95nc, "
     "reduced_train_loss=2.590, global_step=3.2e+4, consumed_samples=2.56e+7]", 32040),
    # a float tqdm shows in full is the step; a sentence's full stop is not a decimal point
    ("Epoch 1:  12%|#2        | 120/1000 [01:02<07:35, 1.93it/s, global_step=1120.0]", 1120),
    ("Saved checkpoint at step 1200.", 1200),
    # fairseq
    ("epoch 003:  45%|████▌     | 450/1000 [01:00<01:13, loss=2.1, nll_loss=1.9, ppl=3.73, wps=9500, ups=7.5, "
     "num_updates=3450, lr=0.0005]", 3450),
    ("2024-05-01 10:00:00 | INFO | train_inner | epoch 003:    450 / 1000 loss=2.1, ppl=4.29, num_updates=3450, "
     "lr=0.0005", 3450),
    # Megatron, nanoGPT-style
    (" iteration      200/    1000 | consumed samples:        25600 | elapsed time per iteration (ms): 950.3", 200),
    ("iter 200/1000: loss 2.31, time 80.12ms", 200),
    # a dataset prepared, not training: HF datasets, run_clm.py, TRL
    ("step 7\nGenerating train split: 100%|██████████| 50000/50000 [00:10<00:00, 4975.12 examples/s]", 7),
    ("step 7\nGrouping texts in chunks of 1024: 100%|██████████| 2318/2318 [00:02<00:00, 1012.55 examples/s]", 7),
    ("step 7\nPacking train dataset: 100%|██████████| 9000/9000 [00:01<00:00, 8012.00 examples/s]", 7),
    ("step 7\nExtracting data files: 100%|██████████| 4/4 [00:01<00:00,  3.21it/s]", 7),
])
def test_the_step_is_the_training_bars(log_tail, step):
    assert last_step(log_tail) == step


def test_an_out_of_memory_during_hf_trainers_evaluation_names_the_training_step():
    log = HF_EVAL + ("\nTraceback (most recent call last):\n  File \"/workspace/train.py\", line 80, in <module>\n"
                     "    trainer.train()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. "
                     "GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    assert diagnose(Ending("failed", 1, log_tail=log)).sentence == "Out of GPU memory after step 1200 (the last in the job's log)."


def test_a_megatron_iteration_after_a_caught_error_shows_the_job_went_on():
    # the segfault then is a crash of its own, not the teardown of the error it got past
    log = ("Traceback (most recent call last):\n  File \"/workspace/megatron/training.py\", line 810, in train_step\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\nskipping iteration 200\n"
           " iteration      201/    1000 | consumed samples:        25728 | lm loss: 2.310E+00 |\n"
           " iteration      202/    1000 | consumed samples:        25856 | lm loss: 2.305E+00 |\n"
           "Segmentation fault (core dumped)\n")
    d = diagnose(Ending("failed", 139, 11, log_tail=log))
    assert (d.cls, d.sentence) == ("crash", "The job crashed with a segmentation fault after step 202 (the last in the job's log)."), d


MISREAD = [
    # two processes on one GPU (no torch.cuda.set_device(LOCAL_RANK)): a resume fails the same way
    ("NCCL's 'Duplicate GPU detected' (was a NCCL/network error, resumed in one click)",
     "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 30, in <module>\n"
     "    model = DDP(model)\ntorch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:275, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5\n"
     "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\n"
     "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000\n",
     "user_code_error", False, "Two of the job's processes used the same GPU (NCCL: Duplicate GPU detected)."),
    ("NCCL's invalid usage, its reason not printed",
     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
     "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3\n",
     "user_code_error", False, "NCCL refused how the job called it (invalid usage or argument)."),
    # NCCL's own buffers did not fit on the GPU: memory, not the network
    ("NCCL's CUDA allocation out of memory (was a NCCL/network error)",
     "step 95\nTraceback (most recent call last):\n  File \"/workspace/train.py\", line 90, in <module>\n"
     "    dist.all_reduce(grad)\ntorch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:275, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
     "ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 2 'out of memory'\n",
     "gpu_oom", False, "Out of GPU memory after step 95 (the last in the job's log)."),
    # /dev/shm full (a container's 64 MB): torch's write of a shared tensor fails with ENOSPC, which is not the disk
    ("a tensor not passed through a full /dev/shm (was 'The disk is full')",
     "step 120\nTraceback (most recent call last):\n  File \"/usr/lib/python3.10/multiprocessing/queues.py\", "
     "line 244, in _feed\n    obj = _ForkingPickler.dumps(obj)\n  File \"/usr/local/lib/python3.10/dist-packages/torch/"
     "storage.py\", line 525, in _share_fd_cpu_\n    return super()._share_fd_cpu_(*args, **kwargs)\n"
     "RuntimeError: unable to write to file </torch_169035_1920244589_10>: No space left on device (28)\n",
     "host_oom", False, "The job ran out of shared memory (/dev/shm) after step 120 (the last in the job's log): torch could not pass a tensor "
                        "between its processes."),
    ("NCCL's shared memory segment not created (was a NCCL/network error, resumed in one click)",
     "step 5\nTraceback (most recent call last):\n  File \"/workspace/train.py\", line 31, in <module>\n"
     "    model = DDP(model, device_ids=[local_rank])\ntorch.distributed.DistBackendError: NCCL error in: "
     "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
     "details), NCCL version 2.20.5\nncclSystemError: System call (e.g. socket, malloc) or external library call "
     "failed or device error.\nLast error:\nError while creating shared memory segment /dev/shm/nccl-vzIpS6 (size "
     "9637888)\n",
     "host_oom", False, "NCCL could not create its shared memory segment in /dev/shm (too small, or not "
                        "writable) after step 5 (the last in the job's log)."),
    ("numpy could not allocate (was 'The training script raised numpy…_ArrayMemoryError')",
     "step 12\nTraceback (most recent call last):\n  File \"/workspace/data.py\", line 9, in load\n"
     "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 7.45 GiB for an array with shape (1000000000,) and "
     "data type float64\n",
     "host_oom", False, "Out of host memory after step 12 (the last in the job's log): the job could not allocate 7.45 GiB."),
    ("the Hugging Face hub unreachable (was 'The training script raised OSError')",
     "Traceback (most recent call last):\n  File \"/workspace/train.py\", line 12, in <module>\n"
     "    model = AutoModelForCausalLM.from_pretrained(\"gpt2\")\nOSError: We couldn't connect to "
     "'https://huggingface.co' to load the files, and couldn't find them in the cached files.\n"
     "Check your internet connection or see how to run the library in offline mode at "
     "'https://huggingface.co/docs/transformers/installation#offline-mode'.\n",
     "network_error", True, "A server or the network failed: \"OSError: We couldn't connect to "
                            "'https://huggingface.co' to load the files, and couldn't find them in the cached "
                            "files.\"."),
]


@pytest.mark.parametrize("log_tail, cls, infrastructure, sentence", [c[1:] for c in MISREAD],
                         ids=[c[0] for c in MISREAD])
def test_common_failures_are_classed_by_what_they_are(log_tail, cls, infrastructure, sentence):
    d = diagnose(Ending("failed", 1, log_tail=log_tail, command="run"))
    assert (d.cls, d.infrastructure, d.sentence) == (cls, infrastructure, sentence), d
    assert d.hint


def test_the_out_of_gpu_memory_advice_says_what_a_resume_continues_from_and_with():
    d = diagnose(Ending("failed", 1, log_tail="step 1200 batch_size 64\nRuntimeError: CUDA out of memory. Tried to "
                                              "allocate 2.00 GiB"))
    assert d.text.startswith("Out of GPU memory (batch size 64) after step 1200 (the last in the job's log). Try a smaller batch size")
    # a resume runs the task as it was submitted: from its last checkpoint, the batch size changed where it is read
    assert "continues from the last checkpoint (if one was saved)" in d.hint
    assert "change the batch size where the run reads it" in d.hint


# pip building flash-attn from source (non-interactive output): its setup.py imports torch, which pip's isolated build
# environment lacks even when the task installed torch; "add torch to the setup" was the advice
PIP_BUILD_WITHOUT_TORCH = """\
Collecting flash-attn==2.7.2.post1
  Downloading flash_attn-2.7.2.post1.tar.gz (3.1 MB)
  Installing build dependencies: started
  Installing build dependencies: finished with status 'done'
  Getting requirements to build wheel: started
  Getting requirements to build wheel: finished with status 'error'
  error: subprocess-exited-with-error
  
  × Getting requirements to build wheel did not run successfully.
  │ exit code: 1
  ╰─> [17 lines of output]
      Traceback (most recent call last):
        File "/usr/local/lib/python3.10/dist-packages/pip/_vendor/pyproject_hooks/_in_process/_in_process.py", \
line 353, in <module>
          main()
        File "/tmp/pip-build-env-j0k5gf0x/overlay/lib/python3.10/site-packages/setuptools/build_meta.py", line 317, \
in run_setup
          exec(code, locals())
        File "<string>", line 21, in <module>
      ModuleNotFoundError: No module named 'torch'
      [end of output]
  
  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

× Getting requirements to build wheel did not run successfully.
│ exit code: 1
╰─> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip.
"""


def test_a_package_whose_source_build_lacks_torch_is_told_to_build_without_isolation():
    d = diagnose(Ending("failed", 1, log_tail=PIP_BUILD_WITHOUT_TORCH, command="setup"))
    assert (d.cls, d.infrastructure) == ("dependency_missing", False), d
    assert d.sentence == ("The setup command could not build a Python package from source: its build needs torch, "
                          "which pip's isolated build environment does not have.")
    assert "--no-build-isolation" in d.hint
    # the script's own import stays as it was
    missing = diagnose(Ending("failed", 1, log_tail="Traceback (most recent call last):\n  File \"train.py\", line 1, "
                                                    "in <module>\nModuleNotFoundError: No module named 'flash_attn'\n"))
    assert missing.text == ("A Python dependency is missing: flash_attn. Add it to the task's setup: pip install "
                            "flash-attn.")
