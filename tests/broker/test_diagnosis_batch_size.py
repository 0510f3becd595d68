"""The batch size an out-of-memory sentence quotes is the training's: its hint is to make that one smaller.

"Out of GPU memory (batch size 128)" quoted the evaluation's batch size where the log named one after the training's
("eval batch size 128", HF Trainer's "***** Running Evaluation *****" then "Batch size = 128"), and missed the
training's where it had a qualifier of its own ("per_device_train_batch_size=8", "--batch-size 64")."""

import pytest

from broker.diagnosis import Ending, diagnose, training_batch_size

OOM = "\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"

CASES = [
    ("a plain batch_size is the training's", "step 1200 batch_size 64", "64"),
    ("an eval batch size printed after the training's is not quoted", "batch_size=64\neval batch size 128", "64"),
    ("eval_batch_size beside batch_size is not quoted", "batch_size=64 eval_batch_size=128", "64"),
    ("a train batch size is quoted, the eval batch size after it is not",
     "train batch size: 32\nstep 10\neval batch size: 256", "32"),
    ("per_device_train_batch_size is quoted, per_device_eval_batch_size is not",
     "per_device_train_batch_size=8 per_device_eval_batch_size=32", "8"),
    ("a config printed as a dict gives its batch_size, not its eval_batch_size",
     "{'batch_size': 64, 'eval_batch_size': 256}", "64"),
    ("command-line flags give --batch-size, not --val-batch-size", "--batch-size 64 --val-batch-size 512", "64"),
    ("validation, test and inference batch sizes are not the training's",
     "batch size 16\nvalidation batch size 64\ntest_batch_size=64\ninference batch size: 64", "16"),
    ("HF Trainer's batch size per device is quoted, not the Batch size of its evaluation header",
     "***** Running training *****\n  Instantaneous batch size per device = 8\n 40%|████      | 1200/3000 [10:00<15:00]\n"
     "***** Running Evaluation *****\n  Num examples = 500\n  Batch size = 16\n", "8"),
    ("a log naming only an eval batch size quotes none", "step 1200 eval batch size 64", None),
    ("the last training batch size wins: the one the job ran out of memory with",
     "batch_size=64\nretrying with batch_size=32", "32"),
    ("an exception's '(32)' is not a batch size", "Expected input batch_size (32) to match target (16)", None),
    ("a fractional figure is not read as its whole part", "batch size 3.5", None),
]


@pytest.mark.parametrize("log_tail, size", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_batch_size_quoted_is_the_training_one(log_tail, size):
    assert training_batch_size(log_tail) == size
    d = diagnose(Ending("failed", 1, log_tail=log_tail + OOM))
    assert d.cls == "gpu_oom"
    assert d.sentence.startswith(f"Out of GPU memory (batch size {size})" if size else "Out of GPU memory")
    assert ("(batch size" in d.sentence) == (size is not None), d.sentence
