"""The local launcher: each attempt is a real process tree on this host.

It serves the on-prem pools (GPU slots handed out through
``CUDA_VISIBLE_DEVICES``; zero GPUs works) and, for demos and tests, simulated
cloud zones. Each attempt runs under :mod:`launchers.local_runner` in its own
session, with its state in ``<runs dir>/<attempt id>/`` — so a broker that
restarts re-adopts running attempts by reading those folders, and launching is
idempotent per attempt id. An attempt whose runner died without recording an exit
is lost, and the processes of its job that outlived the runner are killed as it
is found so (the job resumes as a new attempt: never beside the old one).

A run folder stays after its attempt has ended (its log is what ``broker logs`` shows) until the broker no longer
holds the attempt's job: :meth:`LocalLauncher.sweep_attempt_files` removes it then, unless a process of this host
still holds it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from launchers.base import (AttemptStatus, Capabilities, Keep, LaunchError, LaunchRequest, Phase, next_round,
                            state_domain)
from launchers.local_runner import NOTICE, kill_processes_of, private_open, private_write, read_output
from launchers.run_as import job_folder
from launchers.simzones import SimZone

STARTUP_GRACE_SECONDS = 10.0
"""How long a run folder without a live runner counts as starting rather than lost (on a host without ``/proc``,
also how long a spawned runner may take to start)."""
STARTUP_LIMIT_SECONDS = 120.0
"""How long a spawned runner whose process is alive may take to start (take its lock) before it counts as hung:
it is killed, and its attempt lost."""
REMOVING = ".rm-"
"""In the name of a run folder being removed (``.<attempt id>.rm-<random>``): renamed first, so that no half-removed
folder is ever read as an attempt's; one a removal cut short left is removed by the next sweep."""

log = logging.getLogger(__name__)


def private_dir(folder: Path) -> None:
    """Make ``folder`` (and the folders above it that are missing) the broker's user's alone, 0700: the run folders
    hold every attempt's output, its request (the task's secrets, the job's token) and its exit, and were made 0755,
    so any user of the host could read a job's output wherever the data dir let them pass (one made by hand, or
    by a broker before its data dir was made 0700). One an older broker made open is closed here too: a job run as
    another user (``run_as``) never reads the run folders, and the launcher reads them as the broker's user. One the
    broker's user cannot change (another's) is left, said in the log."""
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the data dir, where missing: the broker's too
    folder.mkdir(mode=0o700, exist_ok=True)
    try:
        if folder.stat().st_mode & 0o077:
            os.chmod(folder, 0o700)
    except OSError as exc:
        log.warning("%s is open to other users of this host and could not be made 0700: %s", folder, exc)


class LocalLauncher:
    """:class:`~launchers.base.Launcher` running attempts as local processes."""

    name = "local"
    capabilities = Capabilities(simulated=False, preemption_notice=True, follow_logs=True)

    def __init__(self, runs_dir: str | Path, *, zones: tuple[SimZone, ...] = (), python: str = sys.executable,
                 clock=time.time):
        self.runs_dir = Path(runs_dir)
        private_dir(self.runs_dir)
        #: every broker process using this runs directory sees the same attempts
        self.domain = state_domain("local", self.runs_dir)
        self.python = python
        self.clock = clock
        self.zones = {z.name: z for z in zones}
        if zones:
            self.capabilities = Capabilities(simulated=True, preemption_notice=True, follow_logs=True)
        self._zone_dir = self.runs_dir.parent / "zones"
        private_dir(self._zone_dir)
        self._epoch = self._replay_epoch()
        self._swept_after = ""  # where the last sweep of run folders stopped (next_round)
        self._ended_seen: set[str] = set()  # run folders seen with their exit.json: never live again

    # -- simulated zones ------------------------------------------------------------------------

    def _replay_epoch(self) -> float:
        """When trace replay started: shared by every broker process on this data dir."""
        path = self._zone_dir / "epoch"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(repr(self.clock()))
        except FileExistsError:
            pass
        try:
            return float(path.read_text() or self.clock())
        except ValueError:
            return self.clock()

    def set_zone_available(self, zone: str, available: bool | None) -> None:
        """Fault injection: take a zone's capacity away (False), give it back (True), or follow its trace (None)."""
        if zone not in self.zones:
            raise KeyError(zone)
        if self.zones[zone].tier != "spot" and available is not None:
            # placement reads only spot zones' capacity (availability()): "no capacity" was answered and nothing changed
            raise ValueError(f"{zone} is an on-demand zone, whose capacity the simulation always has: only a spot "
                             f"zone's can be taken away or given back (spot zones: "
                             f"{', '.join(n for n, z in self.zones.items() if z.tier == 'spot') or 'none'})")
        path = self._zone_dir / f"{zone}.json"
        if available is None:
            path.unlink(missing_ok=True)
        else:
            tmp = path.with_suffix(".tmp")
            private_write(tmp, json.dumps({"available": available}))
            os.replace(tmp, path)

    def zone_available(self, zone: str, now: float | None = None) -> bool:
        z = self.zones.get(zone)
        if z is None:
            return True
        try:
            return bool(json.loads((self._zone_dir / f"{zone}.json").read_text())["available"])
        except (FileNotFoundError, ValueError, KeyError):
            return z.trace_available((now if now is not None else self.clock()) - self._epoch)

    def availability(self) -> dict[str, bool]:
        """Spot capacity per simulated zone right now (the capacity a real cloud hides until you try)."""
        now = self.clock()
        return {name: self.zone_available(name, now) for name, z in self.zones.items() if z.tier == "spot"}

    def preempt(self, attempt_id: str, *, grace_seconds: float | None = None) -> bool:
        """Fault injection, and what a spot zone does: notice (SIGTERM), grace, SIGKILL.

        Returns False if the attempt was already stopping or had ended."""
        run_dir = self._dir(attempt_id)
        if not run_dir.exists() or (run_dir / "exit.json").exists() or (run_dir / "stop.json").exists():
            return False
        zone = self.zones.get(self._request(run_dir).get("placement", {}).get("zone") or "")
        grace = grace_seconds if grace_seconds is not None else (zone.grace if zone else 30.0)
        self.stop(attempt_id, grace_seconds=grace, reason="preempted")
        return True

    @staticmethod
    def _request(run_dir: Path) -> dict:
        try:
            return json.loads((run_dir / "request.json").read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _check_zone(self, attempt_id: str, run_dir: Path, started: float | None) -> None:
        request = self._request(run_dir)
        zone = self.zones.get(request.get("placement", {}).get("zone") or "")
        if zone is None or zone.tier != "spot" or (run_dir / "stop.json").exists():
            return
        now = self.clock()
        running_for = now - started if started else 0.0
        if not self.zone_available(zone.name, now) or zone.scripted_preemption(int(request.get("attempt", 0)), running_for):
            self.preempt(attempt_id)

    def _dir(self, attempt_id: str) -> Path:
        if not attempt_id or "/" in attempt_id or attempt_id.startswith("."):
            raise ValueError(f"bad attempt id {attempt_id!r}")
        return self.runs_dir / attempt_id

    # -- launch ---------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> None:
        run_dir = self._dir(request.attempt_id)
        if not request.task.get("run") and not request.task.get("setup"):
            raise LaunchError("the task has no run command", permanent=True)
        run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with private_open(run_dir / "launch.lock", "a+") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)  # one launch() at a time per attempt, across processes
            if (run_dir / "exit.json").exists() or self._runner_alive(run_dir):
                return
            if self._starting(run_dir):
                return  # a runner was just spawned and is taking its lock
            body = {
                "attempt_id": request.attempt_id, "job_id": request.job_id, "attempt": request.attempt,
                "task": request.task, "placement": request.placement, "envs": request.envs,
                "slots": list(request.slots), "stop_grace_seconds": request.stop_grace_seconds,
                "data_dir": str(self.runs_dir.parent.resolve()),  # a job without a workdir runs in a folder under it
            }
            if request.run_as is not None:  # launchers/run_as.py: what the runner gives the user, under this data dir
                body["run_as"] = {"user": request.run_as.user, "folders": list(request.run_as.folders),
                                  "data_dir": str(self.runs_dir.parent.resolve())}
            tmp = run_dir / "request.json.tmp"
            # the task's secrets and the job's token are in it: readable by this user only
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(body))
            os.chmod(tmp, 0o600)  # an older tmp left by a killed launch keeps its mode otherwise
            os.replace(tmp, run_dir / "request.json")
            if request.stop_in_seconds is not None:
                self._write_limit(run_dir, request.stop_in_seconds)
            with private_open(run_dir / "runner.log", "ab") as out:
                child = subprocess.Popen(
                    [self.python, "-m", "launchers.local_runner", str(run_dir)],
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, cwd=str(Path(__file__).resolve().parent.parent),
                )
            private_write(run_dir / "spawned", str(child.pid))
        _collect_when_it_exits(child, request.attempt_id)

    # -- status ---------------------------------------------------------------------------------

    @staticmethod
    def _runner_alive(run_dir: Path) -> bool:
        lock_path = run_dir / "runner.lock"
        if not lock_path.exists():
            return False
        with private_open(lock_path, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False

    def status(self, attempt_id: str) -> AttemptStatus:
        run_dir = self._dir(attempt_id)
        if not run_dir.exists():
            return AttemptStatus(Phase.GONE, reason="no such attempt on this host")
        exit_file = run_dir / "exit.json"
        if exit_file.exists():
            return self._ended(json.loads(exit_file.read_text()))
        if self._runner_alive(run_dir):
            if exit_file.exists():  # finished between the two looks
                return self._ended(json.loads(exit_file.read_text()))
            started = (run_dir / "runner.pid").stat().st_mtime if (run_dir / "runner.pid").exists() else None
            if self.zones:
                self._check_zone(attempt_id, run_dir, started)
            return AttemptStatus(Phase.RUNNING, started_at=started)
        if exit_file.exists():
            return self._ended(json.loads(exit_file.read_text()))
        spawned = run_dir / "spawned"
        if not spawned.exists() and not (run_dir / "runner.pid").exists():
            if self._cut_short(run_dir):
                # launch() stopped (its broker killed) after making the folder, before the process was spawned:
                # nothing runs, so the engine launches it again (launch() is idempotent per attempt)
                return AttemptStatus(Phase.GONE, reason="the launch was cut short before its process started")
            return AttemptStatus(Phase.PENDING)
        if self._starting(run_dir):
            return AttemptStatus(Phase.PENDING)
        # the runner spawned is not starting: it holds its lock by now, or it is gone — looked at again in that
        # order, so that a runner that took its lock since the first look is not called lost (and run again)
        if self._runner_alive(run_dir):
            return AttemptStatus(Phase.PENDING)  # running: the next look says so
        if exit_file.exists():
            return self._ended(json.loads(exit_file.read_text()))
        left = _kill_left_behind(run_dir)
        return AttemptStatus(Phase.LOST, reason="the process running the attempt vanished without recording an exit"
                             + (f"; {left} process(es) of its job it left running were killed" if left else ""))

    @staticmethod
    def _starting(run_dir: Path) -> bool:
        """Whether the runner launch() spawned may still be starting (not yet holding its lock): its process is
        alive and younger than ``STARTUP_LIMIT_SECONDS`` (its age on the host's boot clock), or — where the host
        has no ``/proc`` to say — no runner wrote its pid and it was spawned within the start-up grace. Asked of
        the process, not of the wall clock: a runner still starting when the host's clock stepped forward (or on
        a host too loaded to start it within the grace) read as lost, and its job was launched again beside it
        once it started. One alive past the limit is hung: it is killed, so that it never starts the attempt
        after the attempt is called lost."""
        spawned = run_dir / "spawned"
        if not Path("/proc/self").exists():
            try:
                return not (run_dir / "runner.pid").exists() and \
                    time.time() - spawned.stat().st_mtime < STARTUP_GRACE_SECONDS
            except FileNotFoundError:
                return False
        try:
            pid = int(spawned.read_text())
            args = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            age = float(Path("/proc/uptime").read_text().split()[0]) - int(stat[19]) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return False  # nothing spawned, or that process is gone
        if stat[0] in ("Z", "X"):
            return False  # it exited (not yet reaped)
        if not args:  # in the middle of an exec (its new command line not yet set up): Popen returns then, too
            return age < STARTUP_LIMIT_SECONDS
        parts = args.split(b"\0")
        if b"launchers.local_runner" not in parts or not any(os.path.basename(os.fsdecode(a)) == run_dir.name
                                                             for a in parts):
            return False  # another process has its pid now
        if age < STARTUP_LIMIT_SECONDS:
            return True
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        return False

    def _cut_short(self, run_dir: Path) -> bool:
        """Whether a launch of this attempt began and ended without spawning its process: no launch()
        holds its lock (in any process), nothing was spawned or ran — looked at while holding that lock,
        so a launch finishing meanwhile is seen — and the folder is older than the start-up grace (a
        launch() between making the folder and taking the lock is not mistaken for one cut short)."""
        if time.time() - run_dir.stat().st_mtime < STARTUP_GRACE_SECONDS:
            return False
        with private_open(run_dir / "launch.lock", "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a launch() is under way
            try:
                return not ((run_dir / "spawned").exists() or (run_dir / "runner.pid").exists()
                            or (run_dir / "exit.json").exists() or self._runner_alive(run_dir))
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def owns(self, attempt_id: str) -> bool:
        """Whether this launcher ever began launching the attempt (its run folder exists)."""
        return self._dir(attempt_id).exists()

    @staticmethod
    def _ended(r: dict) -> AttemptStatus:
        if r.get("stopped"):
            phase = Phase.PREEMPTED if r.get("reason") == "preempted" else Phase.STOPPED
        else:
            phase = Phase.SUCCEEDED if r.get("exit_code") == 0 else Phase.FAILED
        return AttemptStatus(phase, exit_code=r.get("exit_code"), signal=r.get("signal"), reason=r.get("reason", ""),
                             started_at=r.get("started_at"), ended_at=r.get("ended_at"), step=r.get("step"))

    # -- stop -----------------------------------------------------------------------------------

    def stop(self, attempt_id: str, *, grace_seconds: float, reason: str = "stopped") -> None:
        run_dir = self._dir(attempt_id)
        if not run_dir.exists() or (run_dir / "exit.json").exists():
            return
        stop_file = run_dir / "stop.json"
        if stop_file.exists():
            # already stopping: a second SIGTERM would cut the grace period short, but a stop whose SIGKILL comes
            # sooner (a budget stop or a cancel during a preemption's long grace) must not be dropped
            self._stop_sooner(run_dir, grace_seconds=grace_seconds, reason=reason)
            return
        # two stops of one attempt can come at once (an API fault and the engine's budget stop): each writes a
        # temporary file of its own and links it in only where no stop.json is yet, so the first stop's reason and
        # grace are the ones kept, and only its writer signals the runner (one shared "stop.json.tmp" made the
        # second os.replace find it gone, as limit.json's did)
        tmp = run_dir / f"stop.json.tmp.{os.getpid()}.{threading.get_ident()}"
        private_write(tmp, json.dumps({"reason": reason, "grace_seconds": grace_seconds, "at": time.time()}))
        try:
            os.link(tmp, stop_file)
        except FileExistsError:
            self._stop_sooner(run_dir, grace_seconds=grace_seconds, reason=reason)  # another stop came first
            return
        finally:
            tmp.unlink(missing_ok=True)
        self._signal_runner(run_dir, signal.SIGTERM)

    @staticmethod
    def _stop_sooner(run_dir: Path, *, grace_seconds: float, reason: str) -> None:
        """A stop of an attempt already stopping: no second SIGTERM, but where its SIGKILL (``grace_seconds`` from
        now) comes sooner than the first stop's and than any such stop's before, ``stop.sooner.json`` says when, and
        the runner brings its SIGKILL forward to then (``Runner.keep_deadline``). A preemption's notice gave a job
        that ignored its SIGTERM the zone's whole grace (40 s at $36/h), past its budget, and a budget stop or a
        cancel then changed nothing. The first stop's reason stays the one the attempt ends with (``stop.json``)."""
        try:
            first = open(run_dir / "stop.json", "rb")
        except FileNotFoundError:
            return
        with first:
            fcntl.flock(first, fcntl.LOCK_EX)  # its writers one at a time: the soonest SIGKILL is the one kept
            kill_at = time.time() + max(0.0, float(grace_seconds))  # read after stop.json was linked in
            try:
                stop = json.loads(first.read())
                soonest = float(stop["at"]) + float(stop["grace_seconds"])
            except (ValueError, KeyError, TypeError):
                soonest = float("inf")
            sooner = run_dir / "stop.sooner.json"
            try:
                soonest = min(soonest, float(json.loads(sooner.read_text())["kill_at"]))
            except (FileNotFoundError, ValueError, KeyError, TypeError):
                pass
            if kill_at >= soonest:
                return
            tmp = run_dir / f"stop.sooner.json.tmp.{os.getpid()}.{threading.get_ident()}"
            private_write(tmp, json.dumps({"reason": reason, "grace_seconds": grace_seconds, "at": time.time(),
                                           "kill_at": kill_at}))
            os.replace(tmp, sooner)

    def after_run_seconds(self, placement: Mapping[str, Any] | None = None) -> int:
        """Nothing is billed after the run: a pool's or simulated zone's slots are free when the runner ends."""
        return 0

    def set_stop_in(self, attempt_id: str, seconds: float) -> bool:
        """Move the attempt's own budget stop to ``seconds`` from now (its runner reads ``limit.json``);
        False when the attempt has ended or is unknown, or is being stopped already (its limit came, or a
        stop was asked): that stop goes on, and the limit it came at is the one the attempt keeps."""
        run_dir = self._dir(attempt_id)
        if run_dir.exists() and not (run_dir / "exit.json").exists() and not (run_dir / "stop.json").exists():
            self._write_limit(run_dir, seconds)
            return True
        return False

    @staticmethod
    def _write_limit(run_dir: Path, seconds: float) -> None:
        # a temporary file of this writer's own: the API's lowered budget (BrokerService._lower_limit) and the
        # engine's next look (Engine._keep_limit) write the same limit at once by design, and with one shared
        # "limit.json.tmp" the second os.replace found it gone (FileNotFoundError: a 500 on `broker budget`)
        tmp = run_dir / f"limit.json.tmp.{os.getpid()}.{threading.get_ident()}"
        private_write(tmp, json.dumps({"stop_at": time.time() + seconds, "reason": "budget"}))
        os.replace(tmp, run_dir / "limit.json")

    def kill(self, attempt_id: str) -> None:
        """SIGKILL the attempt and its runner with no notice (a node lost). For fault injection."""
        run_dir = self._dir(attempt_id)
        pid = self._runner_pid(run_dir)
        # a runner that has ended is collected at once (_collect_when_it_exits): its pid may be another process's now
        if pid is None or not self._runner_alive(run_dir):
            return
        groups = _child_pgids(pid)  # looked up while the runner is their parent
        # the runner first: killed after its job, a runner on a busy host could see the job die by SIGKILL and
        # record an exit (a failure, "killed by the kernel") where a lost node records nothing
        for target, kill in [(pid, os.kill)] + [(g, os.killpg) for g in groups]:
            try:
                kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass

    @staticmethod
    def _runner_pid(run_dir: Path) -> int | None:
        try:
            return int((run_dir / "runner.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _signal_runner(self, run_dir: Path, sig: int) -> None:
        pid = self._runner_pid(run_dir)
        if pid is not None and self._runner_alive(run_dir):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def live_attempts(self) -> list[str]:
        """The attempts of this runs directory that may still run and spend: no exit recorded, and their runner
        alive (or starting). Cheap to ask often: a folder once seen with its ``exit.json`` is not looked at again
        (an attempt ends once), so a call lists the directory and looks only at the attempts not ended. What the
        engine asks to find the runs of attempts the store has ended or moved past (``Engine._stop_superseded``)."""
        names = self.attempt_files()
        self._ended_seen &= set(names)
        live = []
        for name in names:
            if name in self._ended_seen:
                continue
            run_dir = self.runs_dir / name
            if (run_dir / "exit.json").exists():
                self._ended_seen.add(name)
                continue
            if self._runner_alive(run_dir) or self._starting(run_dir):
                live.append(name)
        return live

    # -- run folders nothing needs any more -----------------------------------------------------

    def attempt_files(self) -> list[str]:
        """The attempts that have a run folder here (hidden names are the launcher's own: ``.domain``, a removal)."""
        try:
            return sorted(e.name for e in os.scandir(self.runs_dir)
                          if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []

    def sweep_attempt_files(self, keep: Keep, *, limit: int) -> list[str]:
        """Remove the run folders of up to ``limit`` attempts (the next ones after the last sweep's) that ``keep``
        does not keep — asked after the listing, so an attempt launched meanwhile is not in it — and that no
        process of this host holds (:func:`_held_run_dirs`: the runner, a process of the job it left behind, one
        with a file of it open or working in it), nor a ``launch()`` of it under way; and what a removal cut short
        left. Returns the attempts whose folder this call removed (not one another broker on this data dir
        removed first), logged when there are any."""
        self._remove_leftovers()
        listed, self._swept_after = next_round(self.attempt_files(), self._swept_after, limit)
        if not listed:
            return []
        kept = keep(listed)
        due = [a for a in listed if a not in kept]
        if not due:
            return []
        held = _held_run_dirs(self.runs_dir, due)
        removed = [a for a in due if a not in held and self._remove_run_dir(a)]
        if removed:
            log.info("removed the run folders of %d attempt(s) whose job the broker no longer holds: %s",
                     len(removed), ", ".join(removed))
        return removed

    def _remove_run_dir(self, attempt_id: str) -> bool:
        """Rename the attempt's run folder out of the way, then remove it, unless its runner lives (or is starting)
        or a ``launch()`` of it holds its lock; whether this call removed it."""
        run_dir = self._dir(attempt_id)
        try:
            guard = private_open(run_dir / "launch.lock", "a+")
        except OSError:  # removed meanwhile, by another broker on this data dir (or not the broker's to open)
            return False
        with guard:
            try:
                fcntl.flock(guard, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a launch() under way
            if self._runner_alive(run_dir) or self._starting(run_dir):
                return False
            doomed = self.runs_dir / f".{attempt_id}{REMOVING}{uuid.uuid4().hex}"
            try:
                os.rename(run_dir, doomed)
            except OSError:
                return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def _remove_leftovers(self) -> None:
        """Remove what a removal cut short (its broker stopped mid-way) left: folders renamed to be removed."""
        try:
            doomed = [e.path for e in os.scandir(self.runs_dir) if e.name.startswith(".") and REMOVING in e.name]
        except FileNotFoundError:
            return
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    # -- logs -----------------------------------------------------------------------------------

    def logs(self, attempt_id: str, *, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
        """The attempt's output from ``offset`` on: its log is capped on disk (``BROKER_LOCAL_OUTPUT_CAP``), its
        start and newest output kept, and a line says where output was left out (local_runner.read_output)."""
        return read_output(self._dir(attempt_id), offset, limit)


def _collect_when_it_exits(child: subprocess.Popen, attempt_id: str) -> None:
    """Wait for a runner this process spawned, in a thread of its own, so that it is collected as soon as it exits.

    A runner is this process's child, and a child that exits stays a zombie, holding its pid, until its parent
    waits for it. The runner was waited for only when this launcher asked the status of its attempt and found it
    exited, which it seldom did: the runner writes ``exit.json`` just before it exits, so the look that reads the
    attempt's end found it still alive, and nothing looked again; the attempts another broker on this data dir
    watches are never asked of this one at all. A QA run left 75 zombies under one of two brokers after 230 jobs,
    on the way to using up the host's pids. Waiting in a thread collects the runner whoever watches its attempt and
    whatever ends or removes it, at no cost while it runs (a thread blocked in ``waitpid``, one per runner this
    process spawned and that still runs). Nothing else changes: the runner keeps its own session and is still
    found, stopped and signalled by the pid it writes in its run folder, and it outlives this process as before (a
    broker that restarts adopts it by its folder; it is then the host's init's to collect). A double fork would
    have kept the runner from being this process's child, but its pid would then have to be passed back, and in a
    container whose first process is the broker (deploy/Dockerfile) the orphaned runners are its children again,
    with nothing waiting for them."""
    try:
        threading.Thread(target=child.wait, name=f"wait-{attempt_id}", daemon=True).start()
    except RuntimeError as exc:  # no thread to be had (the host at its limit): Popen's own clean-up collects it
        log.warning("the runner of attempt %s (pid %d) will be collected late: no thread to wait for it: %s",
                    attempt_id, child.pid, exc)


def _kill_left_behind(run_dir: Path) -> int:
    """SIGKILL the processes of an attempt whose runner died without recording an exit (SIGKILLed alone, or
    crashed): the job runs in a session of its own, so it outlived its runner, and the attempt that resumes the
    job would run beside it. Found by the environment every process of the job inherits (its notice file's
    path: in the run folder, or in the folder a job run as another user is given). Returns how many were killed."""
    notices = [run_dir / "notice.json"]
    run_as = LocalLauncher._request(run_dir).get("run_as")
    if run_as:
        notices.append(job_folder(run_as["data_dir"], run_dir.name) / "notice.json")
    return kill_processes_of(notices)


def _held_run_dirs(runs_dir: Path, names: Iterable[str]) -> set[str]:
    """Which of the run folders ``names`` (under ``runs_dir``) a process of this host still holds, in one look at
    ``/proc``: its working directory is in the folder, or it has a file in it open (a runner, with its lock and
    log; a process the job left behind, writing to the log it inherited), or its environment names the attempt's
    notice file (``BROKER_NOTICE_FILE``: every process of the attempt's job has it, also one that outlived its
    runner, and one run as another user, whose notice file is in a folder of its own). Best effort, as
    :func:`~launchers.local_runner.processes_of`: another user's processes are seen by root only (a pool's
    ``run_as`` runs the broker as root); a host without ``/proc`` shows none (the runner's lock is looked at by
    itself)."""
    root = Path(runs_dir).resolve()
    data_dir = Path(runs_dir).parent.resolve()  # as the launcher gives it to the runner
    wanted = set(names)
    markers = {}
    for name in wanted:
        for notice in (root / name / NOTICE, job_folder(data_dir, name) / NOTICE):
            markers[b"BROKER_NOTICE_FILE=" + os.fsencode(str(notice.resolve()))] = name
    prefix = str(root) + os.sep
    held: set[str] = set()
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return held
    for pid in pids:
        base = f"/proc/{pid}"
        paths = []
        try:
            paths.append(os.readlink(f"{base}/cwd"))
        except OSError:
            pass
        try:
            fds = os.listdir(f"{base}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                paths.append(os.readlink(f"{base}/fd/{fd}"))
            except OSError:
                continue
        for path in paths:
            if path.startswith(prefix) and (name := path[len(prefix):].split(os.sep, 1)[0]) in wanted:
                held.add(name)
        try:
            with open(f"{base}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        held.update(markers[entry] for entry in env if entry in markers)
    return held


def _child_pgids(pid: int) -> list[int]:
    """Process groups of the runner's children (the job runs in a session of its own)."""
    groups = set()
    try:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:  # ppid
                groups.add(int(fields[2]))  # pgrp
    except OSError:
        pass
    return sorted(groups)
