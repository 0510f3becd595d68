"""Two writers move one attempt's own budget limit at once — the API's lowered budget (``BrokerService._lower_limit``)
and the engine's next look (``Engine._keep_limit``), by design. With one shared ``limit.json.tmp`` the second
``os.replace`` found it gone: FileNotFoundError, a 500 on ``broker budget`` (seen once in a fresh-clone CI run)."""

from __future__ import annotations

import json
import threading

from launchers.local import LocalLauncher


def test_two_threads_moving_the_limit_at_once_both_land_and_leave_one_whole_limit(tmp_path):
    launcher = LocalLauncher(tmp_path / "runs")
    run_dir = tmp_path / "runs" / "j-1-a1"
    run_dir.mkdir(parents=True)  # a live attempt: a run folder with no exit and no stop
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(seconds: float) -> None:
        start.wait()
        try:
            for _ in range(300):
                assert launcher.set_stop_in("j-1-a1", seconds) is True
        except BaseException as exc:  # noqa: BLE001 (any of them fails the test, with what it was)
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(s,)) for s in (60.0, 61.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [], errors
    limit = json.loads((run_dir / "limit.json").read_text())
    assert limit["reason"] == "budget" and limit["stop_at"] > 0
    assert sorted(p.name for p in run_dir.iterdir()) == ["limit.json"]  # no temporary file left behind


def test_two_stops_of_one_attempt_at_once_keep_the_first_and_signal_the_runner_once(tmp_path):
    """An API fault and the engine's budget stop can stop one attempt at once. With one shared ``stop.json.tmp`` the
    second ``os.replace`` found it gone (FileNotFoundError), and both could send a SIGTERM, the second cutting the
    first's grace period short. Now the first stop's file is kept whole and only its writer signals."""
    launcher = LocalLauncher(tmp_path / "runs")
    signalled: list[str] = []
    launcher._signal_runner = lambda run_dir, sig: signalled.append(run_dir.name)  # no runner process here
    errors: list[BaseException] = []
    for i in range(150):
        attempt = f"j-{i}-a1"
        run_dir = tmp_path / "runs" / attempt
        run_dir.mkdir(parents=True)
        start = threading.Barrier(2)

        def stopper(reason: str) -> None:
            start.wait()
            try:
                launcher.stop(attempt, grace_seconds=30, reason=reason)
            except BaseException as exc:  # noqa: BLE001 (any of them fails the test, with what it was)
                errors.append(exc)

        threads = [threading.Thread(target=stopper, args=(r,)) for r in ("preempted", "budget")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == [], errors
        stop = json.loads((run_dir / "stop.json").read_text())
        assert stop["reason"] in ("preempted", "budget") and stop["grace_seconds"] == 30
        assert sorted(p.name for p in run_dir.iterdir()) == ["stop.json"]  # no temporary file left behind
    assert sorted(signalled) == sorted(f"j-{i}-a1" for i in range(150))  # each attempt's runner signalled once
