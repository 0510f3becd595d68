"""Gaps an audit found in the diagnosis: HF Trainer's evaluation bar read as the training step once a log collector
stripped the escape codes; a thread's traceback before a hang named as the cause of the hang; and Hugging Face's
offline mode (HF_HUB_OFFLINE=1) with a model not in the cache read as a network failure (resumed in one click).

The progress bars are drawn by the real tqdm; the thread's death and the hang are a real torchrun run on gloo (CPU).
The Hugging Face tracebacks are written as huggingface_hub and transformers word them (their source: the
``OfflineAdapter``'s "Cannot reach …: offline mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE`
environment variable.", ``_raise_on_head_call_error``'s LocalEntryNotFoundError, transformers' ``cached_files``'s
OSError); neither library is installed here.
"""

import io
import re
import subprocess

import pytest
import sys
import textwrap

from tqdm import tqdm

from broker.diagnosis import INFRASTRUCTURE, Ending, diagnose, last_step

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def stripped(text: str) -> str:
    """What a log collector that drops terminal escape codes keeps (Fluent Bit, CloudWatch, many more)."""
    return ESCAPES.sub("", text)


def hf_log(*, evaluating: int, announced: bool = False, trained: int = 1200, total: int = 3000) -> str:
    """HF Trainer's bars as tqdm writes them to a file: the training bar at ``trained``/``total``, its logs, then
    the evaluation bar (no description, drawn below the training bar) at ``evaluating``/100; ``announced``: with the
    INFO lines its example scripts print ("***** Running Evaluation *****")."""
    out = io.StringIO()
    train = tqdm(total=total, file=out, mininterval=0, miniters=1)
    train.update(trained)
    train.write("{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 4e-05, 'epoch': 0.4}", file=out)
    if announced:
        train.write("***** Running Evaluation *****\n  Num examples = 800\n  Batch size = 8", file=out)
    bar = tqdm(total=100, file=out, leave=False, mininterval=0, miniters=1)
    for _ in range(evaluating):
        bar.update(1)
    return out.getvalue()


# -- 1. HF Trainer's evaluation bar, escape codes stripped ----------------------------------------------------------


def test_an_evaluation_bar_with_its_escape_codes_stripped_is_not_the_training_step():
    log = stripped(hf_log(evaluating=45))
    assert "\x1b" not in log and "45/100" in log
    assert last_step(log) == 1200


def test_an_out_of_memory_during_evaluation_in_a_stripped_log_names_the_training_step():
    log = stripped(hf_log(evaluating=45)) + (
        "\nTraceback (most recent call last):\n  File \"/workspace/train.py\", line 80, in <module>\n"
        "    trainer.train()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB. "
        "GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n")
    assert diagnose(Ending("failed", 1, log_tail=log)).sentence == "Out of GPU memory after step 1200 (the last in the job's log)."


def test_an_announced_evaluation_is_not_read_even_after_the_training_bar_finished():
    """trainer.evaluate() after train(): the training bar is finished (3000/3000), so the evaluation's is not drawn
    below an unfinished one; "***** Running Evaluation *****" says what it is."""
    log = stripped(hf_log(evaluating=45, announced=True, trained=3000))
    assert last_step(log) == 3000


def test_the_training_bar_drawn_again_after_the_evaluation_is_the_step():
    # guard (kept behaviour): back to training once the evaluation's metrics are logged
    log = stripped(hf_log(evaluating=100, announced=True)) + (
        "\n{'eval_loss': 1.91, 'eval_runtime': 3.2, 'epoch': 0.4}\n\r 40%|####      | 1201/3000 [10:09<15:00,  2.00it/s]")
    assert last_step(log) == 1201


def test_a_bar_that_starts_after_the_one_before_it_finished_is_read():
    # guard (kept behaviour): a script's bar over its data, finished, then its training bar of another total
    log = stripped(" 100%|##########| 500/500 [00:05<00:00, 99.00it/s]\n"
                   "\r   2%|2         | 20/1000 [00:02<01:38, 10.00it/s]")
    assert last_step(log) == 20


# -- 2. a thread that died before a hang ----------------------------------------------------------------------------


PREFETCH_DIES = """\
import datetime, queue, threading, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
rank = dist.get_rank()
batches = queue.Queue(maxsize=2)

def prefetch():
    for i in range(1, 100):
        if rank == 1 and i == 5:
            time.sleep(1)  # rank 0 printed its step 4 by now: the two processes' lines do not interleave
            raise ValueError(f"bad record {i}")
        batches.put(torch.ones(4))

threading.Thread(target=prefetch, name="prefetch", daemon=True).start()
for step in range(1, 100):
    batch = batches.get()  # rank 1 waits here for ever once its thread died
    dist.all_reduce(batch)
    if rank == 0:
        print(f"step {step}", flush=True)
"""


def test_a_thread_that_died_before_a_real_hang_is_told_but_the_hang_is_the_diagnosis(tmp_path):
    """Before, the thread's ValueError was the diagnosis ("The training script raised ValueError"), a code error
    resumed only with --force, though nothing in the main thread failed: the job hung, and the others timed out."""
    script = tmp_path / "train.py"
    script.write_text(PREFETCH_DIES)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    log = done.stdout
    assert (done.returncode, "Exception in thread prefetch" in log, "Timed out waiting 3000ms" in log) == \
        (1, True, True), log
    d = diagnose(Ending("failed", done.returncode, log_tail=log[-16_384:], command="run"))
    assert (d.cls, d.infrastructure) == ("nccl_network", True), d
    assert d.sentence.startswith("The job's processes stopped waiting for each other after step 4 (the last in the job's log): a collective "
                                 "operation did not finish within its timeout of 3 seconds. Before that, the job's "
                                 "thread 'prefetch' died"), d
    assert d.sentence.endswith(": ValueError: bad record 5."), d
    assert d.hint.startswith("If the job waited on that thread (it fed the data, or filled a queue the training "
                             "loop reads), that is the cause, and a resume stops the same way: fix it first."), d
    assert "at the same step again" in d.hint  # and what the hang's hint said


THREAD_DIED = """\
step 7
Exception in thread Thread-2 (log_metrics):
Traceback (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
    self.run()
  File "/usr/lib/python3.11/threading.py", line 982, in run
    self._target(*self._args, **self._kwargs)
  File "/workspace/train.py", line 31, in log_metrics
    requests.post(url, json=metrics).raise_for_status()
KeyError: 'loss'
step 8
step 9
"""

WATCHDOG = ("[E ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
            "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600406 milliseconds before timing "
            "out.\n")


def test_a_collective_timeout_after_a_threads_death_in_one_process_is_the_hang():
    d = diagnose(Ending("failed", 134, 6, log_tail=THREAD_DIED + WATCHDOG + "Aborted (core dumped)\n"))
    assert (d.cls, d.infrastructure) == ("nccl_network", True), d
    assert d.sentence == ("The job's processes stopped waiting for each other after step 9 (the last in the job's log): a collective operation "
                          "(ALLREDUCE) did not finish within its timeout of 10 minutes. Before that, the job's thread "
                          "'Thread-2 (log_metrics)' died: KeyError: 'loss'.")


def test_a_job_silent_past_its_heartbeat_after_a_threads_death_says_so():
    d = diagnose(Ending("silent", reason="12 min", log_tail=THREAD_DIED))
    assert (d.cls, d.infrastructure) == ("stalled", True), d
    assert d.sentence == ("The job stalled after step 9 (the last in the job's log): it reported no progress for 12 min, so the broker stopped it. "
                          "Before that, the job's thread 'Thread-2 (log_metrics)' died: KeyError: 'loss'.")
    assert d.hint.startswith("If the job waited on that thread")


def test_a_node_lost_after_a_threads_death_says_so():
    d = diagnose(Ending("lost", log_tail=THREAD_DIED))
    assert (d.cls, d.infrastructure) == ("node_lost", True), d
    assert d.sentence.endswith("Before that, the job's thread 'Thread-2 (log_metrics)' died: KeyError: 'loss'.")


CHAINED_THREAD = """\
step 7
Exception in thread uploader:
Traceback (most recent call last):
  File "/workspace/train.py", line 40, in upload
    payload = metrics["loss"]
KeyError: 'loss'

{marker}

Traceback (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
    self.run()
  File "/workspace/train.py", line 44, in upload
    raise RuntimeError("upload failed") from exc
RuntimeError: upload failed
step 8
"""


@pytest.mark.parametrize("marker, link", [
    ("The above exception was the direct cause of the following exception:", "caused by"),
    ("During handling of the above exception, another exception occurred:", "while handling"),
], ids=["raise from: the last exception, caused by the first",
        "raised while handling another: the last exception, while handling the first"])
def test_a_thread_that_died_of_a_chained_exception_is_said_to_die_of_the_last_one(marker, link):
    """Python prints a chain oldest first; the thread died of the last one. Before, the first was named alone."""
    d = diagnose(Ending("silent", reason="12 min", log_tail=CHAINED_THREAD.format(marker=marker)))
    assert d.sentence.endswith(f"Before that, the job's thread 'uploader' died: RuntimeError: upload failed ({link} "
                               f"KeyError: 'loss').")


def test_a_segfault_after_a_threads_death_is_a_crash_not_the_threads_error():
    """A thread's traceback is not the main thread's failure that a process tears down after. Before, with no step
    after it, the segfault was read as that teardown, and the thread's KeyError named."""
    log = "step 9\n" + THREAD_DIED.split("step 8")[0].removeprefix("step 7\n") + "Segmentation fault (core dumped)\n"
    assert log.startswith("step 9\nException in thread") and "step 8" not in log
    d = diagnose(Ending("failed", 139, 11, log_tail=log))
    assert (d.cls, d.sentence) == ("crash", "The job crashed with a segmentation fault after step 9 (the last in the job's log)."), d


def test_a_threads_error_with_nothing_else_to_explain_the_end_is_named_as_the_threads():
    d = diagnose(Ending("failed", 1, log_tail=THREAD_DIED))
    assert (d.cls, d.infrastructure) == ("user_code_error", False), d
    assert d.sentence == "The training script's thread 'Thread-2 (log_metrics)' raised KeyError after step 9 (the last in the job's log): 'loss'."
    assert "Only its thread died of it" in d.hint


def test_the_main_threads_error_before_a_hang_is_still_the_cause():
    # guard (kept behaviour): the main thread's own traceback, then the others' timeout, is that error
    log = ("step 9\nTraceback (most recent call last):\n  File \"/workspace/train.py\", line 40, in <module>\n"
           "    loss = batch[\"labels\"]\nKeyError: 'labels'\n" + WATCHDOG)
    d = diagnose(Ending("failed", 1, log_tail=log))
    assert (d.cls, d.sentence) == ("user_code_error", "The training script raised KeyError after step 9 (the last in the job's log): 'labels'."), d


# -- 3. Hugging Face's offline mode ---------------------------------------------------------------------------------


TRANSFORMERS_OFFLINE = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/transformers/utils/hub.py", line 479, in cached_files
    hf_hub_download(
  File "/usr/local/lib/python3.11/site-packages/huggingface_hub/file_download.py", line 1010, in hf_hub_download
    return _hf_hub_download_to_cache_dir(
  File "/usr/local/lib/python3.11/site-packages/huggingface_hub/file_download.py", line 1117, in \
_hf_hub_download_to_cache_dir
    _raise_on_head_call_error(head_call_error, force_download, local_files_only)
  File "/usr/local/lib/python3.11/site-packages/huggingface_hub/file_download.py", line 1649, in \
_raise_on_head_call_error
    raise LocalEntryNotFoundError(
huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache and outgoing \
traffic has been disabled. To enable hf.co look-ups and downloads online, set 'local_files_only' to False.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/workspace/train.py", line 12, in <module>
    model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-3.2-1B")
  File "/usr/local/lib/python3.11/site-packages/transformers/utils/hub.py", line 543, in cached_files
    raise OSError(
OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached files.
Check your internet connection or see how to run the library in offline mode at \
'https://huggingface.co/docs/transformers/installation#offline-mode'.
"""

HUB_OFFLINE = """\
step 3
Traceback (most recent call last):
  File "/workspace/train.py", line 30, in <module>
    path = hf_hub_download("org/tokenizer", "tokenizer.json")
huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/org/tokenizer/revision/main: \
offline mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE` environment variable.
"""

HUB_OFFLINE_OLDER = """\
Traceback (most recent call last):
  File "/workspace/train.py", line 30, in <module>
    path = hf_hub_download("org/tokenizer", "tokenizer.json")
huggingface_hub.utils._errors.OfflineModeIsEnabled: Offline mode is enabled. Tried to reach \
https://huggingface.co/org/tokenizer/resolve/main/tokenizer.json
"""


def test_transformers_offline_mode_with_a_model_not_in_the_cache_is_the_jobs_setting_not_the_network():
    """Before: "A server or the network failed: "OSError: We couldn't connect to 'https://huggingface.co'…"",
    resumed in one click, to fail the same way."""
    d = diagnose(Ending("failed", 1, log_tail=TRANSFORMERS_OFFLINE, command="run"))
    assert (d.cls, d.infrastructure) == ("hf_offline", False), d
    assert d.cls not in INFRASTRUCTURE
    assert d.sentence == ("A Hugging Face model or file was not in the node's cache, and offline mode "
                          "(HF_HUB_OFFLINE, or local_files_only) kept it from being downloaded.")
    assert "unset HF_HUB_OFFLINE" in d.hint and "cache" in d.hint and "--force" in d.hint


def test_huggingface_hubs_offline_error_is_the_jobs_setting_in_either_wording():
    for log, sentence_end in ((HUB_OFFLINE, " after step 3 (the last in the job's log)."), (HUB_OFFLINE_OLDER, ".")):
        d = diagnose(Ending("failed", 1, log_tail=log, command="run"))
        assert (d.cls, d.infrastructure) == ("hf_offline", False), d
        assert d.sentence.endswith("kept it from being downloaded" + sentence_end), d


def test_the_hub_unreachable_without_offline_mode_is_still_a_network_failure():
    # guard (kept behaviour): the same OSError, chained to the connection failure (no offline mode), resumes in one
    # click
    log = TRANSFORMERS_OFFLINE.replace(
        "Cannot find the requested files in the disk cache and outgoing traffic has been disabled. To enable hf.co "
        "look-ups and downloads online, set 'local_files_only' to False.",
        "An error happened while trying to locate the file on the Hub and we cannot find the requested files in the "
        "local cache. Please check your connection and try again or make sure your Internet connection is on.")
    assert "outgoing traffic" not in log
    d = diagnose(Ending("failed", 1, log_tail=log, command="run"))
    assert (d.cls, d.infrastructure) == ("network_error", True), d
