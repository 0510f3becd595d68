"""Finished runners are collected by the broker process that spawned them, whoever watches their attempts. A runner
is the spawning process's child, and it was waited for only when that launcher asked its attempt's status and found
the runner gone: the look that read the attempt's end (``exit.json``, written just before the runner exits) found it
still alive and nothing looked again, and an attempt another broker on the same data dir watched was never asked
of the spawning one at all. QA found 13 zombies under a single broker after 246 short jobs and 75 under one of two
brokers after 230, never collected: a broker running sweeps daily would use up the host's pids. Real launchers on
one runs directory, as two brokers on one data dir have, real runner processes; zombies read from ``/proc``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from launchers.base import LaunchRequest, Phase
from launchers.local import LocalLauncher

ENDED = {Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED, Phase.PREEMPTED, Phase.LOST, Phase.GONE}
#: what a loaded host may take to start, run and end a few short runners
TIMEOUT = 60.0

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads process states from /proc")


def _process(pid: int) -> tuple[str, int] | None:
    """The state letter and parent pid of ``pid``; None once it is gone (collected)."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except OSError:
        return None
    return fields["State"].split()[0], int(fields["PPid"])


def _zombies_of_this_process(pids: list[int]) -> list[int]:
    return [pid for pid in pids if (p := _process(pid)) is not None and p[0] == "Z" and p[1] == os.getpid()]


def _launch(launcher: LocalLauncher, attempt_id: str) -> None:
    launcher.launch(LaunchRequest(attempt_id=attempt_id, job_id=attempt_id.rsplit("-a", 1)[0], attempt=1,
                                  task={"run": "echo done"}, placement={"tier": "on-demand"}))


def _watch_until_ended(watchers: dict[str, LocalLauncher]) -> None:
    """Ask each attempt's status of its own watcher until it has ended, then never again, as the engine does."""
    deadline = time.monotonic() + TIMEOUT
    left = dict(watchers)
    while left:
        assert time.monotonic() < deadline, f"not ended in {TIMEOUT} s: {sorted(left)}"
        for attempt_id, watcher in list(left.items()):
            status = watcher.status(attempt_id)
            if status.phase in ENDED:
                assert status.phase is Phase.SUCCEEDED, (attempt_id, status)
                del left[attempt_id]
        time.sleep(0.02)


def _runner_pids(runs: Path, attempts: list[str]) -> list[int]:
    return [int((runs / a / "spawned").read_text()) for a in attempts]


def _no_zombie_left(pids: list[int]) -> list[int]:
    """The runners still zombies of this process once every one of them has exited and a moment has passed."""
    deadline = time.monotonic() + TIMEOUT
    while any((p := _process(pid)) is not None and p[0] not in "ZX" for pid in pids):
        assert time.monotonic() < deadline, "the runners did not exit"
        time.sleep(0.05)
    deadline = time.monotonic() + 5.0  # collected as they exit: 5 s is room for a loaded host
    while (zombies := _zombies_of_this_process(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return zombies


def test_runners_whose_attempts_another_broker_watches_are_collected_by_the_broker_that_spawned_them(tmp_path):
    runs = tmp_path / "data" / "runs"
    spawner, other = LocalLauncher(runs), LocalLauncher(runs)  # two brokers on one data dir
    attempts = [f"j-{n}-a1" for n in range(6)]
    for attempt_id in attempts:
        _launch(spawner, attempt_id)
    # half watched by the broker that launched them, half by the other (the store hands jobs to either)
    _watch_until_ended({a: spawner if n % 2 else other for n, a in enumerate(attempts)})
    pids = _runner_pids(runs, attempts)
    assert _no_zombie_left(pids) == []
    # the other broker may then remove their folders: nothing of this process is left waiting on them either
    assert sorted(other.sweep_attempt_files(lambda names: set(), limit=100)) == attempts
    assert _zombies_of_this_process(pids) == []


def test_runners_a_single_broker_watched_to_their_end_are_collected(tmp_path):
    runs = tmp_path / "data" / "runs"
    launcher = LocalLauncher(runs)
    attempts = [f"j-{n}-a1" for n in range(6)]
    for attempt_id in attempts:
        _launch(launcher, attempt_id)
    # the look that finds exit.json is the last: the runner writes it just before it exits
    _watch_until_ended({a: launcher for a in attempts})
    assert _no_zombie_left(_runner_pids(runs, attempts)) == []
