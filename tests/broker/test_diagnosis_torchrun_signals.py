"""One rank of a torchrun job stopped by a signal someone on the node sent (`kill PID`, `kill -9 PID`): torchrun's
summary names the rank, its pid and its exit code, while the other ranks die of the lost peer. The peer's traceback
("Connection closed by peer … a remote worker crashing") was read as the script's own error, resumable only with
--force, and a SIGKILLed rank was not named. Logs as a 2-rank gloo run on this host printed them (trimmed)."""

from __future__ import annotations

import pytest

from broker.diagnosis import Ending, diagnose

PEER_LOST = """\
[rank0] step 150/200 loss 0.3507
preemption notice: saving at the next step, exiting within 30 s
[rank0]: Traceback (most recent call last):
[rank0]:   File "/tmp/proj/train_ddp.py", line 28, in <module>
[rank0]:     opt.zero_grad(); loss.backward(); opt.step()
[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by \
peer [127.0.0.1]:9858. This is typically caused by a remote worker crashing. Check the logs of the remote worker \
before reporting an error.
E1206 18:55:31.296000 32213 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: {code}) \
local_rank: 1 (pid: 32234) of binary: /usr/bin/python
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train_ddp.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-06_18:55:31
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 32233) 
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_18:55:30
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 32234) {said}
  error_file: <N/A>
  traceback : {traceback}
============================================================
"""


def ending(code: str, said: str, traceback: str) -> Ending:
    return Ending(phase="failed", exit_code=1, signal=None, reason="", command="run", step=None, unreported=False,
                  log_tail=PEER_LOST.format(code=code, said=said, traceback=traceback))


@pytest.mark.parametrize("code, said, traceback", [
    ("143", "", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"),
    ("-15", " (SIGTERM)", "Signal 15 (SIGTERM) received by PID 32234"),
], ids=["exit 143: the script's own handler exited", "-15: the signal ended it"])
def test_a_rank_sigtermed_on_the_node_is_named_and_resumes_without_force(code, said, traceback):
    d = diagnose(ending(code, said, traceback))
    assert d.cls == "terminated" and d.infrastructure, d
    assert d.sentence.startswith("Rank 1 (pid 32234) was stopped after step 150 (the last in the job's log) by SIGTERM, which the broker did not "
                                 "send, and the other ranks lost it"), d.sentence
    assert "RuntimeError" not in d.sentence and "Connection closed" not in d.sentence


def test_a_rank_sigkilled_on_the_node_is_named():
    d = diagnose(ending("-9", " (SIGKILL)", "Signal 9 (SIGKILL) received by PID 32234"))
    assert d.cls == "host_oom", d
    assert d.sentence.startswith("Rank 1 (pid 32234) was killed by SIGKILL after step 150 (the last in the job's log), and torchrun stopped the "
                                 "other ranks: often the kernel's out-of-memory killer"), d.sentence


def test_a_rank_that_raised_of_its_own_is_still_diagnosed_by_its_own_exception():
    own = PEER_LOST.replace("Connection closed by peer [127.0.0.1]:9858. This is typically caused by a remote worker "
                            "crashing. Check the logs of the remote worker before reporting an error.",
                            "shape '[64, 10]' is invalid for input of size 630")
    d = diagnose(Ending(phase="failed", exit_code=1, signal=None, reason="", command="run", step=None, unreported=False,
                        log_tail=own.format(code="1", said="", traceback="To enable traceback see: …")))
    assert d.cls != "terminated" and "shape '[64, 10]' is invalid" in d.sentence, d


NO_PROCESS = """\
SKYPILOT_NUM_GPUS_PER_NODE=0
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1019, in run
    elastic_launch(
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 194, in __call__
    return launch_agent(
           ^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 338, in launch_agent
    spec = WorkerSpec(
           ^^^^^^^^^^^
  File "<string>", line 19, in __init__
  File "/venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py", line 109, in __post_init__
    raise AssertionError
AssertionError
"""


def test_torchrun_given_no_process_a_node_is_its_arguments_not_the_scripts_error():
    """`--nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE` on a CPU instance gave torchrun 0: its own check raised an
    AssertionError with no message, said as "The training script raised AssertionError", which never started."""
    d = diagnose(Ending(phase="failed", exit_code=1, signal=None, reason="", command="run", step=None,
                        unreported=False, log_tail=NO_PROCESS))
    assert d.cls == "bad_arguments" and not d.infrastructure, d
    assert d.sentence == ("The run command gives torchrun no process to start on a node (--nproc_per_node is 0 or "
                          "less), so the training script never ran.")
    assert "--nproc_per_node=1" in d.hint
