"""The process that runs one attempt on this host: ``python -m launchers.local_runner RUN_DIR``.

It is started by :class:`launchers.local.LocalLauncher` in a session of its own,
so it outlives a broker that crashes or restarts; everything it knows and
reports lives in ``RUN_DIR``:

* ``request.json`` — the launch request (written before the runner starts). The runner keeps the
  task's secret values in memory and rewrites the file without them once read: the run folder, kept
  after the attempt, never holds them at rest.
* ``runner.lock`` — held (``flock``) for the runner's whole life. A second runner
  for the same attempt cannot take it and exits (after ``LOCK_WAIT_S``: a broker's
  probe holds it for an instant too): an attempt runs once.
* ``runner.pid`` — whom to signal.
* ``stop.json`` — a stop request: ``{"reason": ..., "grace_seconds": ...}``.
* ``stop.sooner.json`` — ``{"reason": ..., "grace_seconds": ..., "at": ..., "kill_at": <epoch seconds>}``: a stop
  asked for while the attempt was already stopping (a budget stop or a cancel during a preemption's notice), whose
  SIGKILL comes sooner than the first stop's. No second SIGTERM is sent (it would cut a checkpoint's save short):
  the runner reads it (as it reads ``limit.json``) and brings the SIGKILL forward to ``kill_at``.
* ``limit.json`` — ``{"stop_at": <epoch seconds>, "reason": "budget"}``: when the runner stops the
  attempt by itself, as if asked, if nobody has (the job's budget, kept while no broker runs). The runner
  reads each new ``stop_at`` as seconds from then and counts them on its monotonic clock, so that the host's
  wall clock stepping back does not put the stop off (nor a step forward bring it early).
* ``output.log`` — setup and run output (and, first, the clone of a workdir given as a git repository:
  :mod:`launchers.git_workdir`, credentials hidden), through a pipe the runner drains. Capped (:class:`CappedLog`,
  ``BROKER_LOCAL_OUTPUT_CAP``, 64 MiB by default): past its first quarter, the output goes on in
  ``output.log.tail.<offset>`` segments, of which only the two newest are kept; :func:`read_output` reads them as
  one log, with a line saying how much was left out between.
* ``notice.json`` — the stop notice, written when the runner is told to stop; its path is
  the job's ``BROKER_NOTICE_FILE``. ``notice.json.listeners/<pid>`` — processes whose
  checkpoint library watches that file (:mod:`checkpoint.notice_file`). A job run as another
  user (``run_as`` in ``request.json``) has both in a folder of its own instead, and its own
  working directory: :mod:`launchers.run_as`.
* ``exit.json`` — written last, atomically: how the attempt ended.

On SIGTERM (a stop: preemption, cancel, budget) the runner writes the notice file, then
SIGTERMs the job's process group — at once when no live process listens for the file;
otherwise only ``LAST_WARNING_S`` before the grace period ends, as a VM's shutdown follows
the cloud's notice, so that helper processes (``DataLoader`` workers, which die of SIGTERM)
live until the training loop has saved. At the end of the grace period it SIGKILLs the group, and every
other process of the job (found by its ``BROKER_NOTICE_FILE``: torchrun's workers run in sessions of their own).
While stopping, the SIGKILL comes sooner where a later stop (``stop.sooner.json``) or the attempt's limit
(``limit.json``'s ``stop_at`` and the stop grace after it) says so: a preemption's long grace never outlasts the
budget.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

from launchers.base import elapsed
from launchers.git_workdir import (CLONE_TIMEOUT_S, TOKEN_ENV, GitWorkdir, clone_commands, git, git_env, last_words,
                                   listing_command, redact, ref_kind)
from launchers.run_as import JobUser, acting_as, job_folder, prepare
from launchers.skypilot_task import CHECKPOINT_MOUNT

#: How long a starting runner tries for the attempt's lock before it takes it for another runner's.
LOCK_WAIT_S = 2.0
#: With a listener, the group's SIGTERM comes this long (at most a quarter of the grace) before the SIGKILL.
LAST_WARNING_S = 5.0
NOTICE = "notice.json"
#: The most of one attempt's output kept on disk (bytes; ``K``/``M``/``G`` suffixes are KiB/MiB/GiB), read by the
#: runner from its environment (the broker's): a job printing without end (``run: yes``) filled the broker host's
#: disk. The first quarter of it is kept (the setup, the start of the run), and the newest output after it.
OUTPUT_CAP_ENV = "BROKER_LOCAL_OUTPUT_CAP"
DEFAULT_OUTPUT_CAP = 64 << 20
MIN_OUTPUT_CAP = 4096
OUTPUT_LOG = "output.log"
TAIL_PREFIX = OUTPUT_LOG + ".tail."  # + the offset in the whole output where the segment starts
CAP_FILE = OUTPUT_LOG + ".cap"  # the cap, written once output was left out (for the line that says so)
#: After a command exits, the runner reads on what a process of it left running (`cmd &`, a DataLoader's workers)
#: still writes to its output until that output has been quiet this long, and at most ``PUMP_MAX_S``. Quiet is
#: judged by the reading thread itself: a loaded host that let it fall behind (it had read only as far as a
#: "step 6" line's predecessor when a fixed 2 s wait ran out) costs time, never lines already written.
PUMP_LINGER_S = 2.0
PUMP_MAX_S = 10.0
#: The broker's own secrets, left out of a job's environment: a job here runs in the broker's environment (its
#: PATH, its cloud's variables), and any team's ``run: env`` printed these into logs the team reads — the admin
#: token, every team's token, the store's password, the key that seals every job's secrets. (Running as the broker's
#: user, a job can still read them in the broker's /proc/<pid>/environ, unless its pool sets run_as: docs/deploy.md.)
BROKER_SECRETS = ("BROKER_ADMIN_TOKEN", "BROKER_TEAM_TOKENS", "BROKER_SECRETS_KEY", "BROKER_SECRETS_OLD_KEYS",
                  "BROKER_STORE_URL", "BROKER_SLACK_SIGNING_SECRET", "BROKER_SLACK_BOT_TOKEN", "BROKER_METRICS_TOKEN",
                  "BROKER_TOKEN")


#: What of the broker's environment a job run as another user (``run_as``) gets: how the host runs programs (its
#: Python, libraries, GPUs, locale), none of what the broker holds. The rest it has from its task and the broker.
HOST_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "TERM")
HOST_ENV_PREFIXES = ("LC_", "CUDA_", "NCCL_", "NVIDIA_")


def host_program(name: str) -> str:
    """``name`` (``bash``, ``git``) as an absolute path, looked up in the runner's own PATH (the broker's), never in
    the job's: a job setting PATH in its ``envs`` or ``secrets`` changes what its own script finds, not which bash
    runs that script. With the job's PATH, ``bash`` was not found, the runner died without recording an exit, and the
    attempt read as a node lost, retried as the infrastructure's fault. The name itself where it is not found (the
    command then cannot be started, and the attempt fails saying so)."""
    return shutil.which(name) or name


def private_open(path: str | Path, mode: str = "ab", buffering: int = -1):
    """``open(path, mode)`` for a file of the launcher's own, made readable by the broker's user alone (0600): an
    attempt's output, its exit and the runner's pid and log were 0644, readable by any user of the host wherever
    the folders above let them pass. ``mode``: ``ab``, ``a+``, ``w`` or ``wb``; a file already there keeps its mode."""
    flags = {"a": os.O_WRONLY | os.O_APPEND, "a+": os.O_RDWR | os.O_APPEND, "w": os.O_WRONLY | os.O_TRUNC}[
        mode.replace("b", "")]
    fd = os.open(path, flags | os.O_CREAT, 0o600)
    try:
        return os.fdopen(fd, mode, buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def private_write(path: str | Path, text: str) -> None:
    """``Path.write_text`` for a file of the launcher's own, 0600 (:func:`private_open`)."""
    with private_open(path, "w") as fh:
        fh.write(text)


def errno_name(number: int | None) -> str:
    return errno.errorcode.get(number or 0, str(number))


def _write_atomic(path: Path, data: dict, tmp: Path | None = None, mode: int = 0o600) -> None:
    """``data`` as JSON at ``path``, whole or not at all; the file's ``mode`` (the notice, which a job run as another
    user reads: 0644, as it always was; the runner's own files the broker's user's alone)."""
    tmp = tmp or path.with_suffix(".tmp")
    with private_open(tmp, "w") as fh:
        os.fchmod(fh.fileno(), mode)  # a tmp an earlier runner left keeps its mode otherwise
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class Runner:
    def __init__(self, run_dir: Path, *, wall=time.time, monotonic=elapsed):
        """``wall``, ``monotonic``: the clocks (``limit.json`` is on the first; the wait for it on the second)."""
        self.dir = run_dir
        self.wall = wall
        self.monotonic = monotonic
        self._limit: tuple[float, float] | None = None  # (the stop_at read last, when it comes on ``monotonic``)
        self.request = json.loads((run_dir / "request.json").read_text())
        self.child: subprocess.Popen | None = None
        self.stop_reason: str | None = None
        self.grace = float(self.request.get("stop_grace_seconds", 30))
        self.stop_grace = self.grace  # the grace period of the stop asked for (its stop.json's)
        self._killer: threading.Timer | None = None
        self._kill_at: float | None = None  # when the stop's SIGKILL comes (time.monotonic), once the killer is set
        self._term_at = 0.0  # when a group's SIGTERM held back for a listener comes at the latest (time.monotonic)
        self._sooner: tuple[float, float] | None = None  # (stop.sooner.json's kill_at read last, on ``monotonic``)
        self.finished = False  # the commands are done: a limit reached now stops nothing
        self.notice = self.dir / NOTICE  # a job run as another user has it in its own folder (launchers/run_as.py)
        self.user: JobUser | None = None  # a job run as another user: set by run()

    def _read_stop(self) -> dict | None:
        try:
            return json.loads((self.dir / "stop.json").read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def on_sigterm(self, signum, frame) -> None:
        stop = self._read_stop() or {}
        if self.stop_reason is not None:
            self._kill_now()  # a second SIGTERM: no more waiting
            return
        self.stop_reason = stop.get("reason", "stopped")
        self.stop_grace = float(stop.get("grace_seconds", self.grace))
        # written in the run folder and renamed into place: the job's user may own the notice's folder
        _write_atomic(self.notice, {"reason": self.stop_reason, "grace_seconds": self.stop_grace, "at": time.time()},
                      tmp=self.dir / "notice.tmp", mode=0o644)
        self._stop_child()

    def _stop_child(self) -> None:
        """The stop asked for, delivered to the command running now: SIGTERM to its group (at once, or once no
        listener of the notice is left), SIGKILL at the end of the grace period. Once per stop. Called by the
        SIGTERM handler, and after each command is started: a stop that came while it was being started (the
        handler then found no live child) reaches it then, or the command would run to its end."""
        if self._killer is not None or not (self.child and self.child.poll() is None):
            return
        grace = self.stop_grace
        now = time.monotonic()
        self._kill_at = now + grace
        if self._listening():
            self._term_at = now + max(0.0, grace - min(LAST_WARNING_S, grace / 4))
            threading.Thread(target=self._term_when_unheard, args=(self.child,),
                             name="last-warning", daemon=True).start()
        else:
            self._term(self.child)
        killer = threading.Timer(grace, self._kill_now)
        killer.daemon = True
        killer.start()
        self._killer = killer  # set last: the watcher (_kill_within) moves only a killer whose moment is set

    def _kill_within(self, seconds: float, cause: str | None = None) -> None:
        """Bring the stop under way's SIGKILL forward to ``seconds`` from now, where that is sooner than the one set:
        a later stop with a shorter grace (a budget stop or a cancel during a preemption's notice), or the attempt's
        limit, came while it was already stopping. Its job is not sent a second SIGTERM (that would cut a checkpoint's
        save short); a group's SIGTERM held back for a listener comes before the new SIGKILL, and the notice says the
        time left. Called by the watcher thread alone (never by the signal handler's thread: no lock to take)."""
        killer, kill_at = self._killer, self._kill_at
        if killer is None or kill_at is None:
            return
        now = time.monotonic()
        at = now + max(0.0, seconds)
        if at >= kill_at - 0.5:  # not sooner (a stop asked again, a limit the stop came at)
            return
        self._kill_at = at
        self._term_at = min(self._term_at, at - min(LAST_WARNING_S, (at - now) / 4))
        # what ends the attempt if this SIGKILL is the one that fires: the attempt's limit is a budget stop, whatever
        # stop came first (a preemption's notice, read so, had the job "restart from the beginning", then stopped)
        sooner = threading.Timer(at - now, self._kill_now, kwargs={"cause": cause})
        sooner.daemon = True
        sooner.start()
        self._killer = sooner  # before the old one is cancelled: run() waiting on that one then finds this one
        killer.cancel()
        print(f"local_runner: attempt {self.request.get('attempt_id')}: its stop's SIGKILL comes sooner, in "
              f"{at - now:.1f} s", file=sys.stderr, flush=True)
        try:  # what the job's checkpointer reads as the time it has left (the reason stays the first stop's)
            _write_atomic(self.notice, {"reason": self.stop_reason, "grace_seconds": at - now, "at": time.time()},
                          tmp=self.dir / "notice.tmp", mode=0o644)
        except OSError:
            pass

    def _read_sooner(self) -> float | None:
        try:
            kill_at = json.loads((self.dir / "stop.sooner.json").read_text())["kill_at"]
            return float(kill_at) if isinstance(kill_at, (int, float)) else None
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
            return None

    def keep_deadline(self) -> None:
        """While stopping: the SIGKILL no later than a later stop's (``stop.sooner.json``) nor than the attempt's
        limit's (its ``stop_at`` and the stop grace after it, when the runner's own stop would have killed it), each
        read as seconds from then and counted on the monotonic clock, as :meth:`limit_reached` does."""
        if self._killer is None:
            return
        limit = self._read_limit()
        if limit is not None:
            if self._limit is None or self._limit[0] != limit["stop_at"]:
                self._limit = (limit["stop_at"], self.monotonic() + limit["stop_at"] - self.wall())
            self._kill_within(self._limit[1] + self.grace - self.monotonic(), cause=limit.get("reason") or "budget")
        kill_at = self._read_sooner()
        if kill_at is not None:
            if self._sooner is None or self._sooner[0] != kill_at:
                self._sooner = (kill_at, self.monotonic() + kill_at - self.wall())
            self._kill_within(self._sooner[1] - self.monotonic())

    def _read_limit(self) -> dict | None:
        try:
            limit = json.loads((self.dir / "limit.json").read_text())
            return limit if isinstance(limit.get("stop_at"), (int, float)) else None
        except (FileNotFoundError, json.JSONDecodeError, AttributeError):
            return None

    def limit_reached(self) -> bool:
        """Whether the attempt's limit has come; if so, ask for the stop as a broker would have. A new
        ``stop_at`` is turned into a moment of the monotonic clock when first read: the wait follows the
        seconds that pass, whatever the wall clock does meanwhile."""
        limit = self._read_limit()
        if limit is None:
            return False
        if self._limit is None or self._limit[0] != limit["stop_at"]:
            self._limit = (limit["stop_at"], self.monotonic() + limit["stop_at"] - self.wall())
        if self.monotonic() < self._limit[1] or self._read_stop() is not None:
            return False
        # linked in only where no stop.json is yet (as LocalLauncher.stop does): a stop the broker asked for between
        # the look above and this write (a preemption injected at the budget's limit) keeps its reason and grace
        mine = self.dir / "stop.json.runner"
        _write_atomic(mine, {"reason": limit.get("reason") or "budget", "grace_seconds": self.grace,
                             "at": time.time(), "by": "runner"}, tmp=self.dir / "stop.runner.tmp")
        try:
            os.link(mine, self.dir / "stop.json")
        except FileExistsError:
            return False  # the broker's stop came first: it is the one under way
        finally:
            mine.unlink(missing_ok=True)
        return True

    def watch_limit(self) -> None:
        """Thread body: stop the attempt (the SIGTERM path) once its limit comes; while it is stopping, bring the
        SIGKILL forward where its limit or a later stop says so (:meth:`keep_deadline`)."""
        while not self.finished or self._killer is not None:
            if self.stop_reason is None:
                if not self.finished and self.limit_reached():
                    os.kill(os.getpid(), signal.SIGTERM)
            else:
                self.keep_deadline()
            time.sleep(0.5)

    def _listening(self) -> bool:
        """Whether a live process of this attempt watches the notice file."""
        try:
            names = os.listdir(self.notice.with_name(NOTICE + ".listeners"))
        except OSError:
            return False
        for name in names:
            try:
                os.kill(int(name), 0)
            except (ValueError, ProcessLookupError):
                continue
            except PermissionError:
                pass
            return True
        return False

    def _term_when_unheard(self, child: subprocess.Popen) -> None:
        """SIGTERM the group at ``_term_at`` (brought forward with the SIGKILL by a sooner stop), or sooner once no
        listener is left (it closed its checkpointer, say, and the script goes on without one)."""
        while child.poll() is None and time.monotonic() < self._term_at and self._listening():
            time.sleep(0.1)
        self._term(child)

    @staticmethod
    def _term(child: subprocess.Popen) -> None:
        if child.poll() is None:
            try:
                os.killpg(child.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def _kill_now(self, cause: str | None = None) -> None:
        if cause is not None and self.child and self.child.poll() is None:
            self.stop_reason = cause  # it ends killed at its limit: the budget's stop, not the first stop's
        if self.child and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        # and what of the job left that group: torchrun starts each worker in a session of its own, so a rank
        # that did not die of the notice (blocked in a collective) outlived torchrun's SIGKILL, holding its GPU
        # after the job was recorded stopped and its slots handed to the next job
        kill_processes_of([self.notice])

    def env(self, step: str = "run") -> dict[str, str]:
        if self.user:  # kept from the broker: what it holds (a cloud key, a kubeconfig, an agent socket) too
            env = {k: v for k, v in os.environ.items() if k in HOST_ENV or k.startswith(HOST_ENV_PREFIXES)}
        else:
            env = {k: v for k, v in os.environ.items() if k not in BROKER_SECRETS}
        task = self.request["task"]
        env.update({k: str(v) for k, v in (task.get("envs") or {}).items() if v is not None})
        env.update({k: str(v) for k, v in (task.get("secrets") or {}).items() if v is not None})  # as SkyPilot: over envs
        env.update(skypilot_envs(self.request, step))
        env.update(self.request.get("envs") or {})
        with acting_as(self.user):  # a broker.checkpoint the team chose: made only where its user may make it
            folder = local_checkpoint_dir(self.request)
        if folder is not None:
            env["BROKER_CHECKPOINT_DIR"] = folder
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(s) for s in self.request.get("slots") or []) \
            if self.request.get("placement", {}).get("accelerator") else ""
        env["PYTHONUNBUFFERED"] = "1"
        env["BROKER_NOTICE_FILE"] = str(self.notice.resolve())
        # jobs on this host run with the broker's own Python environment first on PATH
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        return self.user.env(env) if self.user else env

    def run(self) -> dict:
        task = self.request["task"]
        workdir = task.get("workdir")
        repo = GitWorkdir.of(workdir)  # cloned into the folder of its own, before the setup (_clone)
        cwd = os.path.expanduser(workdir) if isinstance(workdir, str) and workdir else self._own_folder()
        started = time.time()
        result = {"exit_code": 0, "signal": None, "step": None, "started_at": started}
        try:
            if not os.path.isdir(cwd):  # refused, as `sky launch` does: run from another folder, it failed further on
                raise NotRun(f"workdir {workdir}: not run: there is no such directory on this host")
            if self.request.get("run_as"):  # its own folders, never the run folder (request.json has its token)
                user = JobUser.named(self.request["run_as"]["user"])
                prepared = prepare(self.request, user, cwd if isinstance(workdir, str) and workdir else None)
                cwd, self.notice, self.user = prepared.cwd, prepared.notice, user
            with acting_as(self.user):  # made as the job's user: only where it may write itself
                links, link_notes = link_mounts(task, home=self.user.home if self.user else None)
        except NotRun as exc:
            links, link_notes, repo = [], [str(exc)], None
            result.update(exit_code=1, step="setup")
            task = {k: v for k, v in task.items() if k not in ("setup", "run")}  # nothing runs
        except (KeyError, OSError) as exc:  # never as the broker's own user instead
            why = ("there is no such user on this host" if isinstance(exc, KeyError)
                   else f"its folders cannot be given to it ({exc})")
            links, link_notes, repo = [], [f"not run: its pool runs it as user {self.request['run_as']['user']!r}, "
                                           f"and {why}"], None
            result.update(exit_code=1, step="setup")
            task = {k: v for k, v in task.items() if k not in ("setup", "run")}
        try:
            self._steps(task, cwd, result, link_notes, repo)
        finally:
            with acting_as(self.user):
                unlink_mounts(links)
        self.finished = True
        if self._killer:
            while self.stop_reason is not None and processes_of([self.notice]):
                killer = self._killer
                killer.join()  # a stop: what of the job outlived its command goes at the end of the grace
                if killer is self._killer:
                    break  # else the SIGKILL was brought forward (_kill_within): wait for that one
            self._killer.cancel()
        stop = self._read_stop()
        if self.stop_reason is None and stop and result["step"] is None:
            self.stop_reason = stop.get("reason", "stopped")
        result.update(stopped=self.stop_reason is not None, reason=self.stop_reason or result.get("reason", ""),
                      ended_at=time.time())
        return result

    def _own_folder(self) -> str:
        """Where a job without a workdir runs (or whose workdir is a git repository: cloned there, :meth:`_clone`): a
        fresh folder of its own, ``<data dir>/workdirs/jobs/<attempt>/work``
        (as a job run as another user: :mod:`launchers.run_as`), removed with the attempt's copies once it has
        ended — not the run folder, where a job writing ``output.log`` (``| tee output.log``) wrote over its log
        and one cleaning its folder took the runner's. The run folder for a request of an older launcher."""
        data_dir = self.request.get("data_dir")
        if not data_dir or self.request.get("run_as"):  # run_as: prepare() gives it its folder
            return str(self.dir)
        folder = job_folder(data_dir, str(self.request["attempt_id"])) / "work"
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            return str(self.dir)
        return str(folder)

    def _steps(self, task: dict, cwd: str, result: dict, link_notes: list[str], repo: GitWorkdir | None) -> None:
        with CappedLog(self.dir, output_cap()) as log:
            for note in host_notes(self.request) + link_notes:
                log.write(f"[spot-broker] {note}\n".encode())
            if repo is not None and (task.get("setup") or task.get("run")) \
                    and not (self.stop_reason or self._read_stop()):
                result["step"] = "workdir"
                cloned = self._clone(repo, cwd, log, result)
                if cloned is None:
                    if "reason" not in result:  # a stop came: read as one that came before the first command
                        result["step"] = None
                    return
                cwd = cloned
            for step in ("setup", "run"):
                script = task.get(step)
                if not script:
                    continue
                if self.stop_reason or self._read_stop():
                    break
                result["step"] = step
                # through a pipe the runner drains into the capped log: never a file the job writes without end
                read_end, write_end = os.pipe()
                try:
                    self.child = subprocess.Popen(
                        [host_program("bash"), "-c", script], cwd=cwd, env=self.env(step), stdout=write_end,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                        **(self.user.popen() if self.user else {}),
                    )
                except BaseException as exc:
                    os.close(read_end)
                    if not isinstance(exc, (OSError, subprocess.SubprocessError)):
                        raise
                    self._launch_failed(step, exc, log, result)
                    break
                finally:
                    os.close(write_end)
                exited = threading.Event()
                pump = threading.Thread(target=log.drain, args=(read_end, exited), name=f"output-{step}",
                                        daemon=True)
                pump.start()
                if self.stop_reason is not None:
                    self._stop_child()  # the stop came while the command was being started
                code = self.child.wait()
                # the rest of its output; a process of it left running (`cmd &`) may hold the pipe: read until it is
                # quiet (the pump's own judgement, PUMP_LINGER_S), then not waited for
                exited.set()
                pump.join(PUMP_MAX_S + PUMP_LINGER_S)
                if code < 0:
                    result.update(exit_code=128 - code, signal=-code)
                else:
                    result.update(exit_code=code, signal=None)
                if code != 0:
                    break

    def _launch_failed(self, step: str, exc: BaseException, log, result: dict) -> None:
        """The job's ``step`` command could not be started (``exc``, from ``Popen``): said in its log (a line the
        broker's diagnosis keeps and quotes, as nothing of the command ran) and in ``runner.log`` (the runner's
        stderr), and recorded as the command failing (no exit code: nothing ran; ``reason`` says why) — never a runner
        dying without an exit, which reads as a node lost and is retried as the infrastructure's fault."""
        why = (f"{exc.strerror} ({errno_name(exc.errno)})" if isinstance(exc, OSError) and exc.strerror
               else f"{type(exc).__name__}: {exc}")
        if isinstance(exc, OSError) and exc.errno == errno.E2BIG:
            why += ": its environment and its script together are larger than this host's kernel takes"
        reason = f"the {step} command could not be started on this host: {why}"
        log.write(f"[spot-broker] {step} command: not run: it could not be started on this host: {why}\n".encode())
        print(f"local_runner: attempt {self.request.get('attempt_id')}: {reason}", file=sys.stderr, flush=True)
        self.child = None
        result.update(exit_code=None, signal=None, reason=reason)

    def _clone(self, repo: GitWorkdir, cwd: str, log, result: dict) -> str | None:
        """Make ``cwd``, the attempt's fresh folder, a clone of the task's git workdir at its ref, as the job's user
        and in its environment, in at most ``CLONE_TIMEOUT_S``: where setup and run then go, as on a SkyPilot node.
        None when it cannot be cloned — the attempt fails before its setup, saying why in its log and its reason
        (no exit code: no command of the job ran) — or when a stop came meanwhile (git is stopped as a setup is)."""
        if os.path.realpath(cwd) == os.path.realpath(self.dir):  # a request of an older launcher: no folder of its own
            cwd = str(self.dir / "workdir")
            os.makedirs(cwd, exist_ok=True)
        env = git_env(self.env("setup"))
        secrets = [env.get(TOKEN_ENV, ""), *repo.secrets]
        deadline = time.monotonic() + CLONE_TIMEOUT_S
        log.write(f"[spot-broker] workdir: cloning {repo.at} into {cwd}\n".encode())

        def failed(what: str) -> None:
            reason = f"the git repository {what}"
            log.write(f"[spot-broker] workdir not cloned, so nothing of the job runs: {reason}\n".encode())
            result.update(exit_code=None, signal=None, reason=reason)

        code, said = self._git(listing_command(repo), cwd, env, deadline, log, secrets, quiet=True)
        if code != 0:
            if not self.stop_reason:
                failed(f"{repo.shown} could not be cloned: {said}" if code is None else
                       f"{repo.shown} cannot be read (no such repository, no access to it, or no network): "
                       f"{last_words(said) or f'git exited with code {code}'}")
            return None
        kind = ref_kind(said, repo.ref) if repo.ref else None
        if repo.ref and kind is None:
            failed(f"{repo.shown} has no branch, tag or commit named {repo.ref!r}")
            return None
        for command in clone_commands(repo, kind):
            if self.stop_reason or self._read_stop():
                return None
            code, said = self._git(command, cwd, env, deadline, log, secrets)
            if code == 0:
                continue
            if not self.stop_reason:
                failed(f"{repo.at} could not be cloned: {said}" if code is None else
                       f"{repo.shown} has no commit {repo.ref}" if command[-1].endswith("^{commit}") else
                       f"{repo.at} could not be cloned: {last_words(said) or f'git exited with code {code}'}")
            return None
        code, head = self._git(git("rev-parse", "HEAD"), cwd, env, deadline, log, secrets, quiet=True)
        log.write((f"[spot-broker] workdir: {repo.at} cloned"
                   + (f", commit {head.strip()}" if code == 0 else "") + "\n").encode())
        return cwd

    def _git(self, command: list[str], cwd: str, env: dict[str, str], deadline: float, log, secrets: list[str],
             quiet: bool = False) -> tuple[int | None, str]:
        """Run one git command of a clone as the job's commands are run (its own session, the job's user, stopped
        by a stop), its output kept and written to the log with credentials hidden (``quiet``: only if it failed):
        (its exit code, the output), or (None, why) when it could not run or ran past ``deadline``."""
        command = [host_program(command[0]), *command[1:]]  # git from the runner's PATH, not the job's
        try:
            self.child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          **(self.user.popen() if self.user else {}))
        except OSError as exc:
            return None, ("git is not installed on this host" if isinstance(exc, FileNotFoundError)
                          else f"git could not be started ({exc.strerror})")
        if self.stop_reason is not None:
            self._stop_child()  # the stop came while it was being started
        try:
            out, _ = self.child.communicate(timeout=max(0.0, deadline - time.monotonic()))
            code = self.child.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, _ = self.child.communicate()
            code = None
        said = redact(out.decode("utf-8", "replace"), secrets)
        if said and (code != 0 or not quiet):
            log.write(said.encode() if said.endswith("\n") else (said + "\n").encode())
        if code is None:
            return None, (f"it took longer than {CLONE_TIMEOUT_S:.0f} s and was stopped (a host without network, or "
                          "a server that does not answer)")
        return code, said


def output_cap(environ: Mapping[str, str] = os.environ) -> int:
    """The cap on an attempt's output kept on disk: ``BROKER_LOCAL_OUTPUT_CAP`` (:func:`parse_output_cap`), else
    :data:`DEFAULT_OUTPUT_CAP`. Never raises: ``broker serve`` and ``broker worker`` refuse a value that is no size
    at start (``broker.config``), and a runner given one anyway (a broker started before that check) keeps the
    default. ``inf`` raised an ``OverflowError`` here, and every launch of every job ended as a lost node."""
    try:
        return parse_output_cap(environ.get(OUTPUT_CAP_ENV) or "")
    except ValueError:
        return DEFAULT_OUTPUT_CAP


_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([KMG])(?:I?B)?|B)?", re.ASCII)
_SCALE = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_output_cap(text: str) -> int:
    """A size of output, as ``BROKER_LOCAL_OUTPUT_CAP`` takes it: bytes, or a number with a ``K``, ``M`` or ``G``
    suffix (KiB, MiB, GiB; ``KiB``/``KB`` read alike), at least :data:`MIN_OUTPUT_CAP`; empty: the default. A value
    that is not one (``64X``, ``1T``, ``inf``, ``-1``) raises a ``ValueError`` saying what is taken: read as the
    default, a typo went unseen, and ``inf`` (which ``float`` takes) overflowed."""
    text = text.strip()
    if not text:
        return DEFAULT_OUTPUT_CAP
    found = _SIZE.fullmatch(text.upper())
    if found is None:
        raise ValueError(f"{text!r} is not a size: give bytes, or a number with K, M or G (256K, 64M, 1G)")
    number, unit = found.groups()
    return max(MIN_OUTPUT_CAP, int(Decimal(number) * _SCALE.get(unit or "", 1)))


def cap_text(cap: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if cap >= 1 << shift:
            return f"{cap / (1 << shift):.4g} {unit}"
    return f"{cap} bytes"


class CappedLog:
    """An attempt's ``output.log``, kept to at most ``cap`` bytes on disk however much the job prints: its first
    quarter in ``output.log``; past it, segments of (up to) 3/8 of the cap, ``output.log.tail.<offset>`` (where
    it starts in the whole output), of which the two newest are kept — the newest output, which a failure's
    diagnosis reads. Offsets are those of the whole output, so that a reader following it (:func:`read_output`)
    goes on across what was left out. ``write`` is thread-safe; a write that fails (a full disk) drops its output
    and never stops the draining."""

    def __init__(self, run_dir: Path, cap: int = DEFAULT_OUTPUT_CAP):
        self.dir, self.cap = run_dir, cap
        self.head_size = cap // 4
        self.segment_size = max(1, (cap - self.head_size) // 2)
        self._lock = threading.Lock()
        self.head = private_open(run_dir / OUTPUT_LOG, "ab", buffering=0)
        self.written = os.fstat(self.head.fileno()).st_size  # where the whole output is (an earlier runner's)
        self.segment = None
        self.segment_start = 0
        starts = _segments(run_dir)
        if starts:  # an earlier runner of this attempt's (it never ran to its exit): go on after its output
            self.segment_start = starts[-1]
            self.segment = private_open(run_dir / f"{TAIL_PREFIX}{starts[-1]}", "ab", buffering=0)
            self.written = self.segment_start + os.fstat(self.segment.fileno()).st_size

    def __enter__(self) -> "CappedLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for fh in (self.head, self.segment):
                if fh is not None:
                    fh.close()

    def write(self, data: bytes) -> None:
        with self._lock:
            try:
                self._write(memoryview(data))
            except (OSError, ValueError):  # a full disk (dropped), or closed meanwhile (a command's lingering output)
                pass

    def _write(self, data: memoryview) -> None:
        if self.segment is None and self.written < self.head_size:
            n = min(len(data), self.head_size - self.written)
            _write_all(self.head, data[:n])
            self.written += n
            data = data[n:]
        while len(data):
            if self.segment is None or self.written - self.segment_start >= self.segment_size:
                self._rotate()
            n = min(len(data), self.segment_size - (self.written - self.segment_start))
            _write_all(self.segment, data[:n])
            self.written += n
            data = data[n:]

    def _rotate(self) -> None:
        if self.segment is None:
            try:
                private_write(self.dir / CAP_FILE, str(self.cap))
            except OSError:
                pass
        segment = private_open(self.dir / f"{TAIL_PREFIX}{self.written}", "ab", buffering=0)
        if self.segment is not None:
            self.segment.close()
        self.segment, self.segment_start = segment, self.written
        for start in _segments(self.dir)[:-2]:  # the two newest are kept: the one just begun, and the one before
            try:
                os.unlink(self.dir / f"{TAIL_PREFIX}{start}")
            except OSError:
                pass

    def drain(self, fd: int, exited: threading.Event | None = None) -> None:
        """Thread body: copy what comes from the pipe ``fd`` into the log until its end, then close it. Never
        stops before the end while the command runs: a job whose pipe was not read would hang. Once ``exited`` is
        set (the command has exited; a process it left may hold the pipe open), it stops at the end, or once nothing
        came for ``PUMP_LINGER_S``, or ``PUMP_MAX_S`` after it saw the exit; what is already in the pipe is read
        first whenever this thread gets to run."""
        seen_exit = None
        try:
            while True:
                if exited is not None and exited.is_set():
                    now = time.monotonic()
                    seen_exit = seen_exit or now
                    if now - seen_exit >= PUMP_MAX_S:
                        return
                    wait = PUMP_LINGER_S
                else:
                    wait = 0.2 if exited is not None else None  # to notice the exit while a holder is silent
                if wait is not None:
                    try:
                        ready, _, _ = select.select([fd], [], [], wait)
                    except InterruptedError:
                        continue
                    if not ready:
                        if seen_exit is not None:
                            return  # quiet for PUMP_LINGER_S since the exit
                        continue
                try:
                    data = os.read(fd, 1 << 16)
                except InterruptedError:
                    continue
                if not data:
                    return
                self.write(data)
        finally:
            os.close(fd)


def _write_all(fh, data: memoryview) -> None:
    while len(data):
        n = fh.write(data)
        data = data[n if n else len(data):]  # a regular file takes it all (None: never, for one)


def _segments(run_dir: Path) -> list[int]:
    """The offsets where the kept tail segments of an attempt's output start, oldest first."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    return sorted(int(n[len(TAIL_PREFIX):]) for n in names
                  if n.startswith(TAIL_PREFIX) and n[len(TAIL_PREFIX):].isdigit())


def read_output(run_dir: Path, offset: int = 0, limit: int = 1 << 20) -> tuple[bytes, int]:
    """What an attempt wrote from ``offset`` of its whole output on (at most about ``limit`` bytes), and the offset
    to read on from: the kept head (``output.log``), then, where output was left out (:class:`CappedLog`), a line
    saying so and the kept tail. An offset in what was left out reads on from the oldest output kept."""
    for _ in range(5):
        try:
            return _read_output(run_dir, offset, limit)
        except FileNotFoundError:  # a segment removed as it was read: the runner went on to a new one
            continue
    return b"", offset


def _read_output(run_dir: Path, offset: int, limit: int) -> tuple[bytes, int]:
    starts = _segments(run_dir)
    try:
        head = open(run_dir / OUTPUT_LOG, "rb")
    except FileNotFoundError:
        return b"", offset
    out, pos, last = bytearray(), offset, b"\n"
    with head:
        size = os.fstat(head.fileno()).st_size
        if pos < size:  # past the end: seeking there fails on most filesystems (ext4: past 16 TiB, EINVAL)
            head.seek(pos)
            out += head.read(limit)
            pos += len(out)
        elif starts and 0 < pos <= size:  # a follower at the end of the head: did its last read end a line?
            head.seek(pos - 1)
            last = head.read(1)
    for start in starts:
        if len(out) >= limit:
            break
        with open(run_dir / f"{TAIL_PREFIX}{start}", "rb") as seg:
            end = start + os.fstat(seg.fileno()).st_size
            if pos >= end:
                continue
            if pos < start:
                # on a line of its own (a follower whose last read ended in what is now left out: a line anew)
                ended = out.endswith(b"\n") if out else last == b"\n" and pos == size
                out += _left_out_line(run_dir, start - pos, newline=not ended)
                pos = start
            seg.seek(pos - start)
            data = seg.read(limit - len(out) if len(out) < limit else 0)
            out += data
            pos += len(data)
    return bytes(out), pos


def _left_out_line(run_dir: Path, n: int, newline: bool) -> bytes:
    try:
        cap = f"its cap of {cap_text(int((run_dir / CAP_FILE).read_text()))}"
    except (OSError, ValueError):
        cap = "its cap"
    return (("\n" if newline else "") + f"[spot-broker] {n} bytes of output left out here: the attempt's output "
            f"passed {cap} (BROKER_LOCAL_OUTPUT_CAP); its start and its newest output are kept\n").encode()


def processes_of(notices: list[Path]) -> list[int]:
    """The processes of this host (but this one) whose environment names one of ``notices`` as its
    ``BROKER_NOTICE_FILE``: every process of an attempt inherits it, also those that left its process group
    (torchrun's workers, each in a session of its own; a ``setsid`` daemon). Best effort: a process that cleared
    its environment, or another user's (unless this one is root), is not found."""
    markers = {b"BROKER_NOTICE_FILE=" + os.fsencode(str(n.resolve())) for n in notices}
    try:
        entries = [e for e in Path("/proc").iterdir() if e.name.isdigit() and int(e.name) != os.getpid()]
    except OSError:
        return []
    found = []
    for entry in entries:
        try:
            if not markers.isdisjoint((entry / "environ").read_bytes().split(b"\0")):
                found.append(int(entry.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def kill_processes_of(notices: list[Path]) -> int:
    """SIGKILL :func:`processes_of` ``notices``; how many were killed."""
    killed = 0
    for pid in processes_of(notices):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            continue
    return killed


def gpus_of(request: dict) -> int:
    """The GPUs the attempt holds: its pool slots on-prem; on a simulated zone, the shape it simulates."""
    placement = request.get("placement") or {}
    if not placement.get("accelerator"):
        return 0
    slots = request.get("slots") or []
    return len(slots) or int(placement.get("accelerator_count") or 1) * int(placement.get("num_nodes") or 1)


#: What SkyPilot calls the clouds in ``SKYPILOT_CLUSTER_INFO`` (``str()`` of its cloud); others as the placement does.
CLOUD_NAMES = {"aws": "AWS", "gcp": "GCP", "azure": "Azure"}


def skypilot_envs(request: dict, step: str = "run") -> dict[str, str]:
    """The variables SkyPilot gives every node's ``setup`` and ``run``, for the one node this host is:
    a task written for SkyPilot (``torchrun --nnodes=$SKYPILOT_NUM_NODES --node_rank=$SKYPILOT_NODE_RANK
    --nproc_per_node=$SKYPILOT_NUM_GPUS_PER_NODE ...``) runs here unchanged. A ``num_nodes: N`` job runs
    as one node holding the GPUs of all N (the same world size). ``setup`` gets SkyPilot's own names for it
    too (``SKYPILOT_SETUP_NODE_RANK``, ...: a setup that downloads on node 0 only reads those), and both get
    ``SKYPILOT_CLUSTER_INFO`` as SkyPilot writes it, naming the attempt and where it was placed."""
    placement = request.get("placement") or {}
    attempt = str(request.get("attempt_id") or "")
    gpus = str(gpus_of(request))
    cloud = str(placement.get("cloud") or "")
    env = {
        "SKYPILOT_NODE_RANK": "0",
        "SKYPILOT_NODE_IPS": "127.0.0.1",
        "SKYPILOT_NUM_NODES": "1",
        "SKYPILOT_NUM_GPUS_PER_NODE": gpus,
        "SKYPILOT_TASK_ID": attempt,
        "SKYPILOT_CLUSTER_INFO": json.dumps({"cluster_name": attempt, "cloud": CLOUD_NAMES.get(cloud, cloud),
                                             "region": placement.get("region"), "zone": placement.get("zone")}),
    }
    if step == "setup":
        env.update(SKYPILOT_SETUP_NODE_RANK="0", SKYPILOT_SETUP_NODE_IPS="127.0.0.1",
                   SKYPILOT_SETUP_NUM_GPUS_PER_NODE=gpus)
    return env


def local_checkpoint_dir(request: dict, *, make: bool = True) -> str | None:
    """For a task mounting ``broker:checkpoint``: the job's checkpoint folder when it is on this host
    (a ``file://`` store), made if missing (``make``) — what ``BROKER_CHECKPOINT_DIR`` names on a SkyPilot
    cluster."""
    if CHECKPOINT_MOUNT not in ((request.get("task") or {}).get("file_mounts") or {}).values():
        return None
    parts = urlsplit((request.get("envs") or {}).get("BROKER_CHECKPOINT_URI", ""))
    if parts.scheme != "file" or not parts.path:
        return None
    try:
        if make:
            os.makedirs(parts.path, exist_ok=True)
    except OSError:
        pass  # the job says so when it saves there
    return parts.path


def _local_source(source: object) -> str | None:
    """A ``file_mounts`` source that is a path on this host (the broker's copy of an uploaded one, or a path
    its host reads), expanded; else ``None`` (a bucket, ``broker:checkpoint``, a path not here)."""
    if not isinstance(source, str) or "://" in source or ":" in source.split("/", 1)[0]:
        return None
    path = os.path.expanduser(source)
    return path if os.path.isabs(path) and os.path.exists(path) else None


def _host_path(source: object) -> bool:
    """Whether a ``file_mounts`` source names a path (not a bucket, nor ``broker:checkpoint``), there or not."""
    return isinstance(source, str) and bool(source) and "://" not in source and ":" not in source.split("/", 1)[0]


class NotRun(Exception):
    """The attempt cannot run on this host as its task asks: said in its log, and it fails before its setup."""


class MountTaken(NotRun):
    """A mount's destination holds another attempt's mounted copy."""


def _broker_copy(target: str) -> bool:
    """Whether ``target`` is an attempt's unpacked copy of an uploaded file_mounts source
    (``<data dir>/workdirs/mounts/<attempt>/<n>``, broker/workdir_store.py)."""
    parts = os.path.normpath(target).split(os.sep)
    return any(a == "workdirs" and b == "mounts" for a, b in zip(parts, parts[1:]))


def link_mounts(task: dict, home: str | None = None) -> tuple[list[tuple[str, str, str, tuple[str, ...]]], list[str]]:
    """The task's ``file_mounts`` whose source is a path on this host, linked at their destination, where a
    SkyPilot node has them: the links made, as (destination, link, source, the folders made for it), and notes
    for the log. A
    destination that exists on this host is left as it is — nothing of the host is overwritten — save a
    link to that same source (an earlier runner's of this attempt); one that cannot be made is said. ``home``:
    what ``~`` is (a job run as another user: that user's home, not the runner's)."""
    links, notes = [], []
    mounts = sorted((task.get("file_mounts") or {}).items())
    own = [os.path.realpath(p) for p in (_local_source(s) for _, s in mounts) if p is not None]
    for dest, source in mounts:
        path = _local_source(source)
        if path is None or not isinstance(dest, str):
            continue
        link = home + dest[1:] if home and (dest == "~" or dest.startswith("~/")) else os.path.expanduser(dest)
        if not os.path.isabs(link):
            notes.append(f"file_mounts {dest}: not mounted: a destination is an absolute path or one under ~")
            continue
        try:
            if os.path.islink(link) and os.readlink(link) == path:
                links.append((dest, link, path, ()))
                continue
            if os.path.islink(link) and _broker_copy(os.readlink(link)) and not os.path.exists(link):
                os.unlink(link)  # an ended attempt's, whose copy is gone (its runner was killed before it unlinked)
            if os.path.islink(link) and _broker_copy(os.readlink(link)):
                # another attempt on this host has its own copy mounted there: running would read that job's files
                unlink_mounts(links)
                raise MountTaken(f"file_mounts {dest}: not run: another job on this host has its own copy mounted "
                                 f"there now ({os.readlink(link)}); jobs on this host share its paths, so two of them "
                                 f"cannot mount the same destination at once")
            where = os.path.realpath(os.path.dirname(link))
            if _broker_copy(where) and not any(where == o or where.startswith(o + os.sep) for o in own):
                # under another attempt's mounted copy (it mounts /data, this one /data/tok): the link would be made
                # in that job's files, or find one of them there, and go with them when that job ends
                unlink_mounts(links)
                raise MountTaken(f"file_mounts {dest}: not run: it is under another job's copy mounted on this host "
                                 f"now ({where}); jobs on this host share its paths, so one cannot mount inside "
                                 f"another's mount")
            if os.path.lexists(link):
                notes.append(f"file_mounts {dest}: not mounted: it exists on this host, and is left as it is")
                continue
            made = _missing_folders(os.path.dirname(link))
            os.makedirs(os.path.dirname(link) or ".", exist_ok=True)
            os.symlink(path, link)
        except OSError as exc:
            notes.append(f"file_mounts {dest}: not mounted: it cannot be made on this host ({exc.strerror})")
            continue
        links.append((dest, link, path, made))
        notes.append(f"file_mounts {dest}: a link to {path} on this host (removed when the attempt ends)")
    return links, notes


def _missing_folders(folder: str) -> tuple[str, ...]:
    """The folders ``os.makedirs(folder)`` would make, deepest first."""
    missing = []
    while folder and not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    return tuple(missing)


def unlink_mounts(links: list[tuple[str, str, str, tuple[str, ...]]]) -> None:
    """Remove the links :func:`link_mounts` made, each only while it is still the link it made, and the folders
    made for it while they are empty: a folder left behind would read to a later job mounting it as something
    of the host's, "left as it is", and that job would run without its files."""
    for _, link, path, _made in links:
        try:
            if os.path.islink(link) and os.readlink(link) == path:
                os.unlink(link)
        except OSError:
            pass
    folders = {folder for *_, made in links for folder in made}  # one may hold another link's folders
    for folder in sorted(folders, key=lambda f: f.count(os.sep), reverse=True):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (something else was put there meanwhile), or gone
            pass


NOT_APPLIED = ("network_tier", "disk_tier", "disk_size", "labels")
"""A task's ``resources`` settings a SkyPilot cluster is given and this host does not apply (:func:`host_notes`)."""


def _said(value) -> str:
    """A setting's value as the task gave it: ``best``, ``200``, ``{team: ml}``."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def host_notes(request: dict) -> list[str]:
    """What of the task this host does not do as a SkyPilot cluster would: said at the top of the log
    (a mount of a path on this host is :func:`link_mounts`' to say)."""
    task = request.get("task") or {}
    notes = []
    nodes = int((request.get("placement") or {}).get("num_nodes") or task.get("num_nodes") or 1)
    if nodes > 1:
        notes.append(f"num_nodes: {nodes} runs on this host as one node with the GPUs of all {nodes} "
                     f"(SKYPILOT_NUM_NODES=1, SKYPILOT_NUM_GPUS_PER_NODE={gpus_of(request)})")
    mounts, missing, checkpoint = [], [], []
    for k, v in (task.get("file_mounts") or {}).items():
        if v == CHECKPOINT_MOUNT and (folder := local_checkpoint_dir(request, make=False)) is not None:
            # nothing is made at its destination here (a path such as /ckpt needs root, and a link there would be
            # the host's, shared by every job): said, with where the checkpoints are instead, as SkyPilot's
            # /ckpt/<prefix> is BROKER_CHECKPOINT_DIR there too
            checkpoint.append(f"file_mounts {k}: not mounted: {CHECKPOINT_MOUNT} is mounted by SkyPilot placements "
                              f"only; on this host nothing is made at {k}, and the job's checkpoint folder is "
                              f"BROKER_CHECKPOINT_DIR={folder} (read it from $BROKER_CHECKPOINT_DIR, not {k})")
            continue
        if v == CHECKPOINT_MOUNT:  # a bucket: nothing on this host to name, and no BROKER_CHECKPOINT_DIR
            store = (request.get("envs") or {}).get("BROKER_CHECKPOINT_URI") or "the checkpoint store"
            checkpoint.append(f"file_mounts {k}: not mounted: {CHECKPOINT_MOUNT} is mounted by SkyPilot placements "
                              f"only; on this host nothing is made at {k} and BROKER_CHECKPOINT_DIR is not set, as "
                              f"the job's checkpoints are in {store}, not on this host (the checkpoint library "
                              f"saves there from $BROKER_CHECKPOINT_URI)")
            continue
        if _local_source(v) is not None and isinstance(k, str):
            continue  # linked, or said why not, by link_mounts
        if _host_path(v) and _local_source(v) is None:
            # a path that is not there: "only SkyPilot placements mount them" was untrue of it, beside one linked
            why = "does not exist on this host" if os.path.isabs(os.path.expanduser(v)) else \
                "is not an absolute path on this host"
            missing.append(f"file_mounts {k}: not mounted: its source {v} {why}")
        else:
            mounts.append(str(k))
    if mounts:
        notes.append(f"file_mounts are not mounted on this host (only SkyPilot placements mount them): {', '.join(mounts)}")
    notes.extend(missing)
    notes.extend(checkpoint)
    resources = task.get("resources") if isinstance(task.get("resources"), dict) else {}
    if str(resources.get("image_id") or "").startswith("docker:"):
        notes.append(f"image_id {resources['image_id']} is not used on this host: the job runs in the broker's own "
                     "Python environment")
    if resources.get("ports"):
        notes.append(f"ports {resources['ports']} are not exposed on this host (only SkyPilot placements open them)")
    unset = [f"{key} {_said(resources[key])}" for key in NOT_APPLIED if resources.get(key) not in (None, "", {})]
    if unset:
        # dropped without a word before: a 2-node job's network_tier: best (the fast interconnect its DDP counts on)
        # ran on this host's network, said nowhere
        notes.append(f"resources {', '.join(unset)}: not applied on this host (only SkyPilot placements set "
                     f"{'them' if len(unset) > 1 else 'it'}): the job runs on this host's own network and disk")
    volumes = [str(k) for k in task.get("volumes") or {}] if isinstance(task.get("volumes"), dict) else []
    if volumes or resources.get("volumes"):
        # SkyPilot's named volumes (task-level, by mount path) and a resource's ephemeral ones: a path the job
        # reads from there is missing here, and said so before it fails on it
        notes.append("volumes are not attached on this host (only SkyPilot placements attach them)"
                     + (f": {', '.join(volumes)}" if volumes else ""))
    return notes


def forget_secrets(run_dir: Path, request: dict) -> None:
    """Rewrite ``request.json`` with the task's secrets' values left out (null; the names stay): the
    runner has them in memory, and a launch asked again for this attempt writes a whole request anew."""
    secrets = (request.get("task") or {}).get("secrets")
    if not isinstance(secrets, dict) or all(v is None for v in secrets.values()):
        return
    kept = {**request, "task": {**request["task"], "secrets": {k: None for k in secrets}}}
    tmp = run_dir / "request.json.forget"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the job's token is still in it
    with os.fdopen(fd, "w") as fh:
        json.dump(kept, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, run_dir / "request.json")


def _take(lock, wait: float = LOCK_WAIT_S) -> bool:
    """Take the attempt's lock, trying for ``wait`` seconds: a broker's ``status()`` holds it for an instant
    to see whether a runner does, and a runner starting in that instant must not take it for another runner's
    and leave (nothing would run, and the attempt would read as lost). Another runner holds it for good."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_dir = Path(argv[0])
    lock = private_open(run_dir / "runner.lock", "a+")
    if not _take(lock):
        return 0  # another runner holds this attempt: it runs once
    if (run_dir / "exit.json").exists():
        return 0  # it already ran
    runner = Runner(run_dir)
    forget_secrets(run_dir, runner.request)
    signal.signal(signal.SIGTERM, runner.on_sigterm)
    private_write(run_dir / "runner.pid", str(os.getpid()))
    threading.Thread(target=runner.watch_limit, name="budget-limit", daemon=True).start()
    result = runner.run()
    _write_atomic(run_dir / "exit.json", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
