"""In a run of several ranks each rank says its preemption notice, its grace period and its stop: the log of a 2-rank
torchrun had each line twice with no way to tell whose it was. The library's lines now lead with the rank."""

from __future__ import annotations

import logging

import pytest

import checkpoint  # noqa: F401  (its loggers' filters)


@pytest.mark.parametrize("env, said", [
    ({"RANK": "1", "WORLD_SIZE": "2"}, "[rank 1] preemption notice: saving at the next step"),
    ({"RANK": "0", "WORLD_SIZE": "1"}, "preemption notice: saving at the next step"),
    ({}, "preemption notice: saving at the next step"),
], ids=["rank 1 of 2: tagged", "a world of one: as before", "no torchrun: as before"])
def test_the_librarys_lines_lead_with_the_rank_in_a_run_of_several(monkeypatch, caplog, env, said):
    for key in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with caplog.at_level(logging.WARNING, logger="checkpoint"):
        logging.getLogger("checkpoint").warning("preemption notice: saving at the next step")
        logging.getLogger("checkpoint.progress").warning("progress: the broker did not answer")
    assert [r.getMessage() for r in caplog.records] == [said, said.replace(
        "preemption notice: saving at the next step", "progress: the broker did not answer")]
