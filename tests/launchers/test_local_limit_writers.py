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
