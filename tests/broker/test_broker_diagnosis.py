"""Every ending gets a class and a sentence a person can act on."""

import os
import time

import pytest

from broker.diagnosis import Ending, RuleBook, diagnose

CASES = [
    ("preempted", Ending("preempted", log_tail="step 400\n"), "preempted", "Spot capacity was preempted at step 400."),
    ("node lost", Ending("lost"), "node_lost", "The node running the job was lost (no exit was recorded)."),
    ("budget", Ending("budget", log_tail="step 90"), "budget_stop", "Stopped at its budget at step 90."),
    ("gpu oom", Ending("failed", 1, log_tail="step 1200 batch_size 64\nRuntimeError: CUDA out of memory. Tried to allocate"),
     "gpu_oom", "Out of GPU memory at step 1200 (batch size 64)."),
    ("host oom", Ending("failed", 137, 9, log_tail="step 5\nKilled"), "host_oom",
     "Out of host memory at step 5: the kernel killed the process."),
    ("missing data", Ending("failed", 1, log_tail="FileNotFoundError: [Errno 2] No such file or directory: 's3://bucket/train/part-3.parquet'"),
     "data_not_found", "Could not read s3://bucket/train/part-3.parquet."),
    ("missing module", Ending("failed", 1, log_tail="ModuleNotFoundError: No module named 'transformers'"),
     "dependency_missing", "A Python dependency is missing: transformers."),
    ("nccl", Ending("failed", 1, log_tail="step 77\nRuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error"),
     "nccl_network", "A NCCL/network error stopped the job at step 77."),
    ("python error", Ending("failed", 1, log_tail="Traceback (most recent call last):\nZeroDivisionError: division by zero"),
     "user_code_error", "The training script raised ZeroDivisionError."),
    ("plain exit code", Ending("failed", 3, log_tail="bye"), "user_code_error", "The job exited with code 3."),
]


@pytest.mark.parametrize("ending, cls, sentence", [c[1:] for c in CASES],
                         ids=[f"{c[0]} → {c[2]}" for c in CASES])
def test_shipped_rules(ending, cls, sentence):
    d = diagnose(ending)
    assert (d.cls, d.sentence) == (cls, sentence)
    assert d.hint  # every shipped class says what to do


def test_infrastructure_classes_resume_without_question_code_errors_do_not():
    assert diagnose(Ending("preempted")).infrastructure
    assert diagnose(Ending("failed", 1, log_tail="NCCL error: unhandled system error")).infrastructure
    assert not diagnose(Ending("failed", 1, log_tail="CUDA out of memory")).infrastructure


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


def test_the_step_is_the_latest_known_the_logs_when_the_rate_limited_reports_lag_behind_it():
    # progress reports go out at most every few seconds: the log has seen steps the broker has not
    log = "step 350\nstep 375\nTraceback (most recent call last):\nValueError: bad batch\n"
    assert diagnose(Ending("failed", 1, log_tail=log, step=248)).step == 375
    assert diagnose(Ending("failed", 1, log_tail="no step here\nValueError: bad batch\n", step=248)).step == 248
    assert diagnose(Ending("preempted", log_tail="step 90\n", step=120)).sentence == \
        "Spot capacity was preempted at step 120."
