"""The training script's entry point: due / save / restore / close.

    ckpt = Checkpointer()                       # base URI from BROKER_CHECKPOINT_URI
    state = ckpt.restore(default=None)          # newest verified checkpoint, or None
    for step in range(start, total):
        ...
        if ckpt.due(step + 1):
            ckpt.save(step + 1, {"model": model, "optim": opt, "rng": GlobalRNG()})
    ckpt.close()

Environment read (all optional):

* ``BROKER_CHECKPOINT_URI`` — base URI when none is passed;
* ``BROKER_RESUME_FROM`` — URI of one committed checkpoint the broker wants resumed;
  ``restore`` starts there (falling back to older ones in the same place if it is corrupt), or at a
  newer one this same job committed that the broker never heard of; one that is not there is said in a
  warning, and the newest committed one of that base is restored instead; ``restore(step=N)`` wins over it (it is
  then ignored, with a log line);
* ``BROKER_JOB_ID``, ``BROKER_ATTEMPT`` — recorded in each manifest; together they fence a superseded
  attempt (a zombie) off the base: :func:`checkpoint.commit.check_fence`;
* ``BROKER_PREEMPTION_GRACE_S`` — seconds from SIGTERM to a forced exit (default 30);
* ``BROKER_PREEMPTION_METADATA`` (``aws`` / ``gcp``), ``BROKER_METADATA_URL``,
  ``BROKER_METADATA_POLL_S`` — also watch the cloud's own spot interruption notice
  (:mod:`checkpoint.cloud_notice`; the SkyPilot launcher sets these on spot placements);
* ``BROKER_NOTICE_FILE`` — also watch this file for the broker's own stop notice
  (:mod:`checkpoint.notice_file`; the local launcher sets it for every attempt, the SkyPilot launcher on Kubernetes);
* ``BROKER_PROGRESS_URL`` + ``BROKER_JOB_TOKEN`` — each commit is reported there.
"""

from __future__ import annotations

import atexit
import errno
import concurrent.futures.thread  # noqa: F401 - imported before _register_exit_flush (see there)
import logging
import operator
import os
import sys
import signal
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field as dataclass_field
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

from checkpoint import arguments, commit, layout, ranks, restore as restoring, rng, serialization, snapshot
from checkpoint.errors import CheckpointError, CheckpointWarning, SupersededError, UnsafeCheckpointError
from checkpoint.layout import CheckpointId
from checkpoint.manifest import Manifest
from checkpoint.cloud_notice import MetadataWatcher
from checkpoint.notice_file import NoticeFileWatcher, stop_words
from checkpoint.preemption import (DEFAULT_GRACE_S, EXIT_CODE, PreemptionNotice, exiting, finish_detached,
                                  others_saving, replaced_handler, script_ended, script_handler, writers_not_saved)
from checkpoint.progress import Reporter
from checkpoint.retention import RetentionPolicy
from checkpoint.schedule import SavePolicy, is_due
from checkpoint.background import MAX_WAITING, BackgroundRunner
from checkpoint.storage import Storage, TransferOptions, as_uri, open_storage

log = logging.getLogger("checkpoint")

#: How long the exit flush waits for saves still uploading when a script ends without ``close()``, by default: no
#: limit, as long as the upload goes on (as before the limit existed). A cap on the whole upload gave up a healthy
#: final save of a large model (600 s is about 60 GB at ~100 MiB/s: a model with its optimizer state), which then
#: was not committed. A script whose store may hang (an endpoint that accepts and never answers, which botocore
#: waits on 60 s a try, and retries), keeping the finished run and its VM alive, passes its own ``exit_timeout_s``.
EXIT_TIMEOUT_S: float | None = None
#: The status of a script that ended without ``close()`` and otherwise cleanly, whose last save was not kept.
EXIT_SAVE_LOST = 1
#: How long the exit flush waits for the saves still queued of a script that died of a save's error (raised by
#: ``due()``, ``save()``, ``wait()``): its store just failed, and one that could not be reached was retried for minutes
#: more (S3 rides out about a minute a request) before the process could exit.
DEAD_SCRIPT_EXIT_WAIT_S = 5.0


class Restored(Mapping[str, Any]):
    """A restored checkpoint: the saved dict (stateful objects as their state dicts),
    plus ``step``, ``uri`` and ``manifest``."""

    def __init__(self, state: dict[str, Any], step: int, uri: str, manifest: Manifest):
        self._state = state
        self.step = step
        self.uri = uri
        self.manifest = manifest

    def __getitem__(self, key: str) -> Any:
        return self._state[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __repr__(self) -> str:
        return f"Restored(step={self.step}, uri={self.uri!r}, keys={list(self._state)})"


@dataclass(frozen=True)
class SaveStats:
    """Timings of one committed save (monotonic seconds), for logs and benchmarks."""

    step: int
    uri: str
    bytes: int
    blocked_s: float  # how long save() held the training loop
    commit_s: float  # from the save() call until the commit marker was written

    @property
    def throughput_mib_s(self) -> float:
        return self.bytes / 2**20 / self.commit_s if self.commit_s else float("inf")


class Checkpointer:
    """Asynchronous, atomically committed, verified checkpoints for one training run.

    Args:
        uri: base URI (``s3://bucket/run-7``, ``gs://…``, ``/path``, ``memory://…``) or an
            ``os.PathLike`` (``pathlib.Path``); defaults to ``$BROKER_CHECKPOINT_URI``.
        every_steps: ``due`` is true on multiples of this step count.
        every_seconds: ``due`` is true once this long has passed since the last save
            (default 300 s when neither interval is given).
        keep_last: committed checkpoints kept (older ones are deleted after a commit); ``None`` keeps every
            checkpoint (nothing committed is deleted; a save that died is still cleaned up).
        keep_every: additionally keep the first checkpoint of every window of this many steps.
        grace_s: SIGTERM to forced exit; default ``$BROKER_PREEMPTION_GRACE_S`` or 30 s.
        handle_sigterm: install the SIGTERM handler (main thread only) and, where the
            environment names a cloud, watch its metadata for the spot notice, and where it
            names a notice file (``$BROKER_NOTICE_FILE``), watch that.
        storage_options: passed to fsspec (e.g. ``{"token": …}`` for gcsfs).
        transfer: part size and concurrency for large uploads and downloads.
        exit_code: status the process exits with after a preemption save (0 to 255).
        exit_timeout_s: how long a script that ends without ``close()`` waits at exit for its saves still
            uploading (default :data:`EXIT_TIMEOUT_S`, None: as long as they take); a last save not committed by
            then, or failed, makes
            the process exit with status 1 (:func:`_flush_at_exit`).
        storage: an already open :class:`~checkpoint.storage.Storage` to use instead of
            ``uri`` (tests pass fakes here).
        spool_dir: where ``restore`` downloads a remote checkpoint (S3, GCS) to verify it and read it a tensor at a
            time: it needs the checkpoint's size free there. Default ``$TMPDIR`` (else ``/tmp``); with less room
            there, restore reads the checkpoint into memory instead and warns (:mod:`checkpoint.restore`).
        env: environment to read (default ``os.environ``).

    The counts (``every_steps``, ``keep_last``, ``keep_every``: integers ``>= 1``; ``keep_last`` may be ``None``) and durations
    (``every_seconds > 0``, ``grace_s >= 0``: numbers) are checked here, before anything is opened:
    a ``TypeError`` (a float count, a bool, a numeric string, ``None``) or ``ValueError`` (out of
    range) naming the argument (:mod:`checkpoint.arguments`); so is ``handle_sigterm``, which is ``True`` or ``False``
    itself (``"no"`` read for its truth installed the handler).
    """

    def __init__(
        self,
        uri: str | os.PathLike[str] | None = None,
        *,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        keep_last: int | None = 3,
        keep_every: int | None = None,
        grace_s: float | None = None,
        handle_sigterm: bool = True,
        storage_options: dict[str, Any] | None = None,
        transfer: TransferOptions | None = None,
        exit_code: int = EXIT_CODE,
        exit_timeout_s: float | None = EXIT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        env: Mapping[str, str] | None = None,
        storage: Storage | None = None,
        spool_dir: str | os.PathLike[str] | None = None,
    ):
        env = os.environ if env is None else env
        # the counts, durations and flags first (checkpoint.arguments), before any store is opened or thread started
        arguments.flag("handle_sigterm", handle_sigterm)  # read for its truth, handle_sigterm="no" installed it
        if every_steps is None and every_seconds is None:
            every_seconds = 300.0
        self._policy = SavePolicy(every_steps, every_seconds)
        self._retention = RetentionPolicy(keep_last, keep_every)
        if grace_s is None:
            grace_s = _grace_from_env(env)
        self.preemption = PreemptionNotice(grace_s, exit_code, clock=clock)
        self._exit_timeout_s = None if exit_timeout_s is None else \
            arguments.seconds("exit_timeout_s", exit_timeout_s, zero=True)
        self._storage_options = storage_options
        self._transfer = transfer or TransferOptions()
        self._spool_dir = None if spool_dir is None else os.fspath(spool_dir)
        if storage is None:
            uri = (None if uri is None else as_uri(uri)) or env.get("BROKER_CHECKPOINT_URI")
            if not uri:
                raise ValueError("no checkpoint URI: pass one or set BROKER_CHECKPOINT_URI")
            storage = open_storage(uri, storage_options, self._transfer)
        self._storage: Storage = storage
        problem = _checkpoint_not_base(storage.base_uri) or _uncreatable(_local_base(storage), files_only=True)
        if problem:  # found now, not at the first save, after the steps before it were trained
            raise CheckpointError(problem)
        self._abandoned: frozenset[CheckpointId] = frozenset()  # set by restore: see _own_newer and retention
        self._damaged: frozenset[CheckpointId] = frozenset()  # set by restore: committed, then lost or changed
        self._owners: dict[CheckpointId, str | None] = {}  # the job each manifest names: see commit.apply_retention
        self._clock = clock
        self._resume_from = env.get("BROKER_RESUME_FROM") or None
        self._job = {k: env[v] for k, v in (("id", "BROKER_JOB_ID"), ("attempt", "BROKER_ATTEMPT")) if env.get(v)}
        self._fence = _fence(self._job)  # (job id, attempt) when the broker runs us: see commit.check_fence
        self._claimed = False
        # restore() claims the base at once only if it is the job's own (not one opened to read weights)
        self._job_base = (env.get("BROKER_CHECKPOINT_URI") or "").rstrip("/")
        self._reporter = Reporter.from_env(env)
        self._cloud_notice: MetadataWatcher | None = None
        self._notice_file: NoticeFileWatcher | None = None
        #: Made on a thread other than the main one, SIGTERM unheard (only the main thread can set its handler): said
        #: at the first due()/save() (:meth:`_writes`), once
        self._deaf_on: str | None = None
        if handle_sigterm:
            self._cloud_notice = MetadataWatcher.from_env(env, lambda: self.preemption.notify("cloud"))  # may refuse the settings
            self._notice_file = NoticeFileWatcher.from_env(
                env, lambda left: self.preemption.notify("broker", grace_s=None if left is None else max(left - 1.0, 0.0),
                                                         why=self._notice_file and stop_words(self._notice_file.reason())))
            if not self.preemption.install():
                self._deaf_on = threading.current_thread().name
            if self._cloud_notice is not None:
                self._cloud_notice.start()
            if self._notice_file is not None:
                self._notice_file.start()
        self._runner = BackgroundRunner()
        self._last_step: int | None = None  # due() is not true at it: the step saved (or restored) last
        self._saved_step: int | None = None  # the step this process saved last (save() of it again does nothing)
        self._restored_step: int | None = None  # the step restored, until due()/save() of another step
        self._restored_uri: str | None = None
        self._base_checked = False  # the local base was found writable (at the first due() or save())
        self._last_time = clock()
        self._last_id: CheckpointId | None = None
        self._failed_id: CheckpointId | None = None  # the last save whose upload failed (upload thread)
        self._failed_why: BaseException | None = None  # and why
        self._failed_steps: list[tuple[BaseException, CheckpointId]] = []  # each failure and its save, until raised
        self._raised: CheckpointError | None = None  # the error raised to the script for the save _failed_id
        self._raised_id: CheckpointId | None = None  # and that save
        self._resume_point: tuple[int, str] | None = None  # (step, uri) committed or restored last: what a resume uses
        self.last_committed: str | None = None  # URI of the newest checkpoint this process committed
        self.last_stats: SaveStats | None = None
        self._closed = False
        self._said_rank = False
        self._silent_ranks: set[int] = set()  # ranks that did not hand their random state over in time (ranks.py)
        self._warned_pickled: set[str] = set()
        _watch_sys_exit()  # main thread or not: the status of a script whose last save is lost (_lost_save_status)
        _live.add(self)

    @property
    def uri(self) -> str:
        return self._storage.base_uri

    # -- saving ---------------------------------------------------------------------

    def due(self, step: int) -> bool:
        """Whether ``save(step, …)`` should be called now (interval reached or preemption).

        After this checkpointer's notice save, which returned because another that writes was still to save, it
        exits the process (``SystemExit``, as that save would have) once none is still to be waited for
        (:meth:`_exit_once_others_saved`).

        Raises CheckpointError if a previous background save failed (not after a preemption
        notice: then the save it asks for is tried first), or if the base is a local directory this
        process cannot write (or create), naming it.
        """
        step = _step(step)
        self._writes("due")
        if self.preemption.done and not self._closed:
            self._exit_once_others_saved()
        self._publish_rng(step)
        self._raise_pending(unless_preempted=True)
        if self._restored_step is not None and step != self._restored_step:
            # another step since the restore: the restored one no longer stands for what the objects hold (a
            # fine-tune counting from 0 again reaches it with other weights), so due() may come true at it
            self._restored_step = self._last_step = None
        return is_due(step, self._clock(), self._policy, self._last_step, self._last_time,
                      self.preemption.requested and not self.preemption.done)

    def _check_writable(self) -> None:
        if _distributed_rank():  # rank 0 writes; the others' machines may not even have the path
            return
        base = _local_base(self._storage)
        problem = _uncreatable(base) or _unwritable(base)
        if problem:
            raise CheckpointError(problem)

    def _writes(self, kind: str) -> None:
        """This checkpointer writes checkpoints (``due``/``save`` was called, ``kind``): the exit after a preemption
        notice waits for its save while it is active (:func:`checkpoint.preemption.others_saving`). And a local base
        that cannot be written is said now (a CheckpointError naming it), not at the first save, after the steps
        before it were trained."""
        self.preemption.label = self.uri
        self.preemption.touch(kind)
        if self._deaf_on is not None:
            self._say_deaf()
        if self.preemption.installed_here:
            _say_replaced(replaced_handler())
        if not self._base_checked and not self._closed:
            self._check_writable()  # raised again at each call until it passes: caught, the saves would all fail
            self._base_checked = True

    def _say_deaf(self) -> None:
        """Say, at the first ``due()``/``save()`` — not after a preemption, when the save is lost — that this
        checkpointer hears no SIGTERM: Python lets only the main thread set a signal handler, and it was made on
        another (training on a thread of its own). A SIGTERM (Slurm, ``kill``, a VM's shutdown) ends the process at
        once, as without the library. Made on the main thread and handed to the training thread, it hears it."""
        thread, self._deaf_on = self._deaf_on, None
        also = [what for what, on in (("the cloud's spot notice", self._cloud_notice),
                                      ("the broker's notice file", self._notice_file)) if on is not None]
        message = (f"the checkpointer of {self.uri} was made on thread {thread!r}, not the main thread, so it cannot "
                   f"handle SIGTERM (only the main thread can set a signal handler): a SIGTERM — a preemption notice "
                   f"from Slurm, kill or a VM's shutdown — ends the process at once, without a checkpoint"
                   + (f" (it still watches {' and '.join(also)})" if also else "")
                   + ". Make the Checkpointer on the main thread and hand it to the training thread")
        log.warning(message)
        warnings.warn(CheckpointWarning(message), stacklevel=4)

    def save(self, step: int, state: Mapping[str, Any], *, wait: bool = False) -> None:
        """Snapshot ``state`` now and upload it in the background.

        Blocks only while tensors are copied to host memory and the structure is frozen.
        One upload runs at a time: a save made while one is running waits for it, and a newer save made before it
        started replaces it when the newer one holds every top-level key it holds (that step is never written,
        logged at INFO naming it), so the newest state is what commits when saves come faster than uploads. A
        waiting save with a key the newer one lacks (``{"model", "ema"}`` then ``{"model"}``) is kept and written
        first: dropped, that key's newest value was in no checkpoint. ``save(..., wait=True)`` waits for the commit
        and keeps every step. After a preemption notice it also waits for the commit and exits the process.
        ``step`` must be an integer (``int``, a numpy integer, a 0-d integer tensor: recorded as an ``int``; a
        float, a string, a tensor of another shape is a ``TypeError``); saving the step
        saved last again does nothing — the first save of a step stands, unless its upload failed: then
        saving the step again writes it. Saving the step that was restored writes a second checkpoint of
        it, which restore takes (the newer): whether the objects changed since cannot be told, and a
        fine-tune that counts from 0 again and saves at that step lost its work when it was skipped.
        After a preemption notice, with another checkpointer of the process that writes still to save
        (:func:`checkpoint.preemption.others_saving`), it returns after the commit; the last one exits, or this
        one's next ``due()`` once the others still to save have not been called since the notice for a few of its
        steps (:meth:`~checkpoint.preemption.PreemptionNotice.idle_wait_s`).
        In an initialized ``torch.distributed`` group only rank 0 writes: on the other ranks it does
        nothing (several writers under one base URI would write the same directories and corrupt them).

        Raises CheckpointError if a previous background save failed — except after a
        preemption notice, when this save is tried anyway (the earlier failure is logged, also one
        that lands while this save waits for its commit): the last chance to keep the work must not
        be lost to an earlier, perhaps passing, error. The notice's own save failing is raised.
        """
        step = _step(step)
        arguments.flag("wait", wait)  # read for its truth, wait="no" waited
        self._writes("save")
        self._raise_pending(unless_preempted=True)
        if self._closed:
            raise CheckpointError("save() after close()")
        rank = _distributed_rank()
        if rank:  # another rank of a torch.distributed group: rank 0 writes (see docs/checkpoint.md)
            self._publish_rng(step)  # a loop that calls save() without due()
            if not self._said_rank:
                self._said_rank = True
                log.info("rank %d: checkpoints are written by rank 0 only; save() here writes nothing", rank)
            self._last_step, self._last_time, self._restored_step = step, self._clock(), None
            return
        if step != self._saved_step:
            if step == self._restored_step:
                log.info("step %d is the step restored from %s: saving it writes a second checkpoint of that step "
                         "(restore takes the newer of the two)", step, self._restored_uri)
            started = time.perf_counter()
            with rng.with_peers(self._peer_rngs(step, state)):
                captured = snapshot.capture(state)
            self._warn_pickled(step, captured.pickled)
            self._warn_flattened(step, captured.flattened)
            cid = layout.new_id(step, int(time.time() * 1000), self._last_id)
            self._last_id, self._last_step, self._saved_step, self._last_time = cid, step, step, self._clock()
            self._restored_step = None
            blocked = time.perf_counter() - started
            task = lambda: self._write(cid, captured, started, blocked)  # noqa: E731
            task.step = step  # type: ignore[attr-defined]
            for dropped, lost in self._runner.submit(task, frozenset(captured.tree)):
                if lost:  # more snapshots waited than memory is kept for: what only it held is in no checkpoint
                    log.warning("step %s: its snapshot was still waiting for the upload before it, and is dropped "
                                "for step %d, as more than %d snapshots waited: its %s are in no checkpoint "
                                "(save(wait=True) keeps every step)", getattr(dropped, "step", "?"), step, MAX_WAITING,
                                ", ".join(sorted(map(repr, lost))))
                else:
                    log.info("step %s: its snapshot was still waiting for the upload before it, and is dropped for "
                             "the newer step %d, which holds each of its keys (never written; save(wait=True) keeps "
                             "every step)", getattr(dropped, "step", "?"), step)
        if self.preemption.requested:
            # An earlier save may fail only now, while this one waits (it was still uploading at the notice): that
            # failure is logged, as at the top; only the notice's own save failing is raised.
            self._runner.wait()
            self._raise_pending(unless_preempted=self._failed_id != self._last_id)
            saved = self._last_id.step if self._last_id is not None else step
            self.preemption.saved_after_notice(f"the checkpoint of step {saved} ({self.last_committed})")
            waiting = others_saving(self.preemption)
            if waiting:
                # another checkpointer of this process writes too (a second model's, an EMA's): its save after the
                # notice is still to come, and exiting now would lose it; its own save exits, or this one's next
                # due()/save() once it is not coming (others_saving), or the grace deadline
                log.warning("%s: checkpoint %s committed; exiting once the other checkpointer(s) of this "
                            "process that write checkpoints (%s) have saved too, or at this one's next due() or "
                            "save() %.1f s from now if they have not been called since the notice",
                            self.preemption.ended(), self.last_committed, ", ".join(n.label for n in waiting),
                            self.preemption.idle_wait_s())
                return
            self._exit_after_preemption()
        elif wait:
            self.wait()

    def _publish_rng(self, step: int) -> None:
        """On a rank other than 0 of a script that saves a GlobalRNG: hand this rank's random state after ``step``
        to rank 0, which may save this step (:mod:`checkpoint.ranks`)."""
        if rng.made():
            group = ranks.group()
            if group is not None and group[0] > 0:
                ranks.publish(group[0], step)

    def _peer_rngs(self, step: int, state: Mapping[str, Any]) -> tuple[int, dict[int, dict]] | None:
        """On rank 0 of several, saving a GlobalRNG: the world size and the other ranks' random states of ``step``
        (for :func:`checkpoint.rng.with_peers`); None elsewhere. A rank missing once is not waited for again."""
        group = ranks.group()
        if group is None or group[1] < 2 or not (isinstance(state, Mapping) and rng.holds(state)):
            return None
        others = set(range(1, group[1]))
        wait_s = ranks.WAIT_S
        if self.preemption.requested:  # the grace period is for the save itself
            wait_s = min(wait_s, (self.preemption.seconds_left() or 0.0) / 4)
        states = ranks.collect(step, others - self._silent_ranks, others & self._silent_ranks, wait_s)
        missing = others - states.keys()
        if missing - self._silent_ranks:
            log.warning("step %d: rank(s) %s did not hand their random state to rank 0 within %.0f s: the checkpoint "
                        "lacks it, and at a resume they keep their seeds (they call neither due() nor save()?)",
                        step, ", ".join(map(str, sorted(missing - self._silent_ranks))), wait_s)
        self._silent_ranks = missing
        return group[1], states

    def wait(self) -> str | None:
        """Block until queued saves are committed; return the newest committed URI.

        Raises CheckpointError if one failed.
        """
        self._runner.wait()
        self._raise_pending()
        return self.last_committed

    def close(self) -> None:
        """Wait for uploads, stop the worker, restore the SIGTERM handler. Raises on failure."""
        if self._closed:
            return
        self._shut_down()
        self._raise_pending(closing=True)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn_pickled(self, step: int, pickled: list[str]) -> None:
        """Say at the first save, not at the resume after a preemption, that restore will refuse this state."""
        self._warn_once(pickled, lambda new: (
            f"step {step}: {new} can only be saved pickled, and restore() refuses pickled objects "
            f"unless allow_pickle=True: save plain values (numbers, strings, lists, dicts), tensors or arrays "
            f"there, or an object with state_dict()/load_state_dict()"))

    def _warn_flattened(self, step: int, flattened: list[str]) -> None:
        """Say at the first save that these mappings come back as plain dicts (a defaultdict whose factory is not a
        builtin type, a dict subclass): a resume that relies on what they were fails later (a KeyError)."""
        self._warn_once(flattened, lambda new: (
            f"step {step}: {new} will be restored as a plain dict: save a dict (and make the "
            f"defaultdict or your class again from it after restore), a Counter, an OrderedDict, or a defaultdict "
            f"of list, int, dict, set, float or str, which come back as they were"))

    def _warn_once(self, places: list[str], message: Callable[[str], str]) -> None:
        """One :class:`CheckpointWarning` (``message`` of the places, joined) for the ``places`` of the state not yet
        warned about by this checkpointer; nothing when there are none: said at the first save, not at every one."""
        new = [p for p in places if p not in self._warned_pickled]
        if not new:
            return
        self._warned_pickled.update(new)
        warnings.warn(CheckpointWarning(message(", ".join(new))), stacklevel=4)

    def _write(self, cid: CheckpointId, captured: snapshot.Captured, started: float, blocked: float) -> None:
        fence = self._fence
        files: Mapping[str, bytes] = {}
        try:
            if fence is not None and not self._claimed:
                commit.claim(self._storage, fence)  # before the upload: a zombie's retention must not eat it
                self._claimed = True
            files = captured.files()
            manifest = commit.write_checkpoint(
                self._storage, cid, files, serialization.framework_versions(), self._job,
                before_commit=None if fence is None else lambda: commit.check_fence(self._storage, fence))
        except BaseException as e:
            self._failed_id, self._failed_why = cid, e  # read by _raise_pending once the runner hands the error over
            if not self._failed_steps:  # the runner hands over the first failure (its step is looked up by it)
                self._failed_steps.append((e, cid))
            self._remove_partial(cid, list(files), e)
            raise
        uri = self._storage.uri(cid.name)
        self.last_stats = SaveStats(cid.step, uri, manifest.total_bytes, blocked, time.perf_counter() - started)
        self.last_committed = uri
        self._resumes_at(cid.step, uri)
        log.info("committed checkpoint %s (%d bytes, %.1f MiB/s)", uri, manifest.total_bytes,
                 self.last_stats.throughput_mib_s)
        self._reporter.report_checkpoint(cid.step, uri, wait=self.preemption.requested)
        try:
            deleted = commit.apply_retention(self._storage, self._retention, self._abandoned, fence, self._damaged,
                                             self._owners, just_committed=cid)
            for e in deleted:
                if e.id in self._damaged:
                    log.warning("deleted damaged checkpoint %s (restore skipped it)", self._storage.uri(e.name))
        except SupersededError as e:  # committed just before the newer attempt claimed the base
            log.error("retention after %s skipped: %s", uri, e)
        except OSError as e:  # the new checkpoint is safe; old ones are cleaned next time
            log.warning("retention after %s failed: %s", uri, e)

    def _remove_partial(self, cid: CheckpointId, names: list[str], error: BaseException) -> None:
        """Delete what the failed save of ``cid`` wrote (best effort: its own error is the one raised). Left there, a
        full disk stayed full, and each restart that failed again added another partial directory. Only on a local
        disk, or for a store that answered (full, over a quota or a size limit): one that could not be reached would
        hold the error back for another round of retries, and retention removes the debris after the next commit. A
        superseded writer (a zombie) deletes nothing under the base."""
        if isinstance(error, SupersededError) or not isinstance(error, OSError):
            return
        if _local_base(self._storage) is None and getattr(error, "errno", None) not in _DISK_ERRNOS:
            return
        paths = [layout.path(cid, layout.COMMIT)] + [layout.path(cid, n) for n in [*names, layout.MANIFEST]]
        try:
            self._storage.delete(paths[:1])  # the marker first, as commit.delete_entries does
            self._storage.delete(paths[1:])
        except Exception as e:  # noqa: BLE001 - the save's own error is what is raised
            log.warning("the failed save of step %d left files in %s, which could not be removed: %s", cid.step,
                        self._storage.uri(cid.name), _describe(e))
        else:
            log.info("removed what the failed save of step %d had written to %s", cid.step, self._storage.uri(cid.name))

    def _raise_pending(self, *, unless_preempted: bool = False, closing: bool = False) -> None:
        """Raise a background save's failure. ``unless_preempted`` (before the save a preemption notice
        asks for): log it instead, as that save is the last chance to keep the work. ``closing`` (``close()``, no
        save comes after it): also say whether the last save was lost, and the checkpoint a resume uses."""
        error = self._runner.take_error()
        if error is None:
            return
        if self._failed_id is not None and self._failed_id == self._last_id:
            self._last_step = self._saved_step = None  # that step was not saved: saving it again must write it
        cid = next((c for e, c in self._failed_steps if e is error), None)
        self._failed_steps.clear()
        what = self._failure(error, cid) + (self._lost_at_close(cid) if closing else "")
        if unless_preempted and self.preemption.requested:
            log.error("%s; not raised: the preemption notice's save comes first", what)
            return
        raised = CheckpointError(what)
        if cid is not None and cid == self._failed_id:
            self._raised, self._raised_id = raised, cid  # the exit flush does not say it again after the traceback
        raise raised from error

    def _failure(self, error: BaseException, cid: CheckpointId | None) -> str:
        """A failed background save in one sentence: its step and where it went, the error (which names the file
        where the store's error does), and what to check for a full disk, a size limit or a read-only store."""
        where = self.uri if cid is None else self._storage.uri(cid.name)
        step = "a checkpoint" if cid is None else f"the checkpoint of step {cid.step}"
        hint = _HINTS.get(getattr(error, "errno", None), "")
        if hint and getattr(error, "errno", None) == errno.ENOENT and not self._in_folder(error, cid):
            # a folder on the way that was never there (Checkpointer("/proc/x")): not one deleted under the save
            hint = " (the folder it goes in could not be created there)"
        said = _describe(error)
        to = "" if where in said else f" to {where}"  # the store's error names the file already
        return f"background checkpoint save failed: {step} could not be written{to}: {said}{hint}"

    def _lost_at_close(self, failed: CheckpointId | None) -> str:
        """What ``close()`` adds to the first failed save it raises: the last save, when it failed too, and the
        checkpoint a resume uses. The runner keeps only the first failure, so a run whose store went down near its end
        said "the checkpoint of step 20 could not be written" and nothing of step 30, its final one, also lost, nor
        that a resume goes back to step 10 (the exit flush of a script without ``close()`` says both)."""
        newest = self._last_id
        said = ""
        if newest is not None and newest != failed and self._failed_id == newest:
            said = f"; the last checkpoint (step {newest.step}) was not saved either: {_describe(self._failed_why)}"
        return f"{said}; {self._resume_words()}"

    def _in_folder(self, error: BaseException, cid: CheckpointId | None) -> bool:
        """Whether the file a save's ``FileNotFoundError`` names is in the checkpoint's own folder: made by the save,
        then gone under it. A path above it (``/proc/h2``, which cannot hold a folder) was never there."""
        named = getattr(error, "filename", None)
        if named is None or cid is None:
            return False
        local = getattr(self._storage, "local_path", None)
        folders = {self._storage.uri(cid.name), local(cid.name) if callable(local) else None} - {None}
        return any(str(named) == f or str(named).startswith(f.rstrip("/") + "/") for f in folders)

    def _exit_once_others_saved(self) -> None:
        """``due()`` after this checkpointer's notice save committed (it returned: other writers were to save too):
        exit now if none is still to be waited for — they saved, or have not called ``due()``/``save()`` since the
        notice and :meth:`~checkpoint.preemption.PreemptionNotice.idle_wait_s` has passed (a writer that saves
        rarely: the best model's). Before, such a writer held the exit until the grace deadline, which then said
        "exiting without a final checkpoint" although this one's had committed."""
        if others_saving(self.preemption):
            return
        idle = [n.label for n in writers_not_saved(self.preemption)]
        if idle:
            log.warning("%s: not waiting for the checkpointer(s) of %s: neither due() nor save() was called "
                        "there since the notice, %.1f s after this one's save committed", self.preemption.ended(),
                        ", ".join(idle), self.preemption.idle_wait_s())
        self._exit_after_preemption()

    def _exit_after_preemption(self) -> None:
        log.warning("%s: checkpoint %s committed, exiting", self.preemption.ended(), self.last_committed)
        # the script's own SIGTERM handler, which this library's took the place of, is called now that the save is
        # in: before, it never ran (a Slurm requeue, a tracker's flush), and called at the signal it could end the
        # process before the save
        handler = script_handler() if self.preemption.signalled else None
        exiting()
        # Stop this library's threads before the interpreter finalizes: a daemon thread still
        # alive then is ended by pthread_exit mid-call, and native code on its stack can turn
        # that into std::terminate — the process then dies of SIGABRT instead of exiting 143
        # (seen once in the suite: "terminate called without an active exception"). The save
        # is committed, so each stop is short; the SIGTERM handler goes back to what it was.
        self._shut_down(upload_timeout=1.0)
        sys.stdout.flush()
        if handler is not None and threading.current_thread() is threading.main_thread():
            _call_script_handler(handler)
        # On a training thread of its own, SystemExit ends only that thread, and the process then exited 0 — a
        # preempted run taken for a finished one. The main thread raises it too, from the SIGTERM handler.
        if threading.current_thread() is not threading.main_thread():
            self.preemption.exit_on_main_thread(self.preemption.exit_code)
        raise SystemExit(self.preemption.exit_code)

    def _shut_down(self, upload_timeout: float | None = None) -> bool:
        """Stop the upload worker (after what is queued), the notice pollers and the SIGTERM
        watchdog, and put the previous SIGTERM handler back. False if an upload was still running at
        ``upload_timeout`` (it is left to its daemon thread)."""
        self._closed = True
        _live.discard(self)
        finished = self._runner.close(timeout=upload_timeout)
        if self._cloud_notice is not None:
            self._cloud_notice.stop()
        if self._notice_file is not None:
            self._notice_file.stop()
        self.preemption.uninstall()
        return finished

    def _resumes_at(self, step: int, uri: str) -> None:
        """``uri`` (of ``step``) was committed or restored: what a resume uses, said when an exit loses a save."""
        self._resume_point = (step, uri)
        self.preemption.resume_point = f"the checkpoint of step {step} ({uri})"

    def _resume_words(self) -> str:
        if self._resume_point is None:
            return f"this process committed no checkpoint: a resume starts from the newest one under {self.uri}, if any"
        return f"a resume uses the checkpoint of step {self._resume_point[0]} ({self._resume_point[1]})"

    def _close_at_exit(self) -> str | None:
        """``close()`` for a script that ended without it: waits at most ``exit_timeout_s``, and instead of raising
        says in a sentence why the newest save was not kept (None when it was, or when nothing was saved).

        A script that died of a save's error raised to it waits at most :data:`DEAD_SCRIPT_EXIT_WAIT_S` for the saves
        still queued (its store just failed), and a later one not kept is said with the checkpoint a resume uses.

        Only the newest save counts: an earlier one that failed is logged, as the checkpoint a resume reads exists."""
        died = self._raised is not None and _ended_by(self._raised)
        timeout = self._exit_timeout_s
        if died:
            timeout = DEAD_SCRIPT_EXIT_WAIT_S if timeout is None else min(timeout, DEAD_SCRIPT_EXIT_WAIT_S)
        finished = self._shut_down(upload_timeout=timeout)
        error = self._runner.take_error()
        newest = self._last_id
        if newest is None:
            return None
        where = f"The last checkpoint (step {newest.step}) was not saved to {self.uri}: "
        if died:
            if newest == self._raised_id:
                return None  # raised to the script (by due(), save(), wait()), whose traceback ends with it already
            failed = self._raised_id.step if self._raised_id is not None else "?"
            dead = (f"the script died of the failed save of step {failed} (its traceback above), so the store was "
                    f"not waited on longer; {self._resume_words()}.")
            if not finished:
                return where + f"still uploading {timeout:g} s after the script ended, given up: " + dead
            if self._failed_id == newest:
                return where + f"{_describe(self._failed_why or error)}; " + dead
            return None
        status = _lost_save_status()
        own = "not 0" if status == EXIT_SAVE_LOST else f"the script's own sys.exit({status})"
        said = (f"the script ended without calling close() (which raises this), so the process exits with status "
                f"{status}, {own}.")
        if not finished:
            return (where + f"still uploading {self._exit_timeout_s:g} s after the script ended "
                    f"(exit_timeout_s), given up; " + said)
        if self._failed_id == newest:
            return where + f"{_describe(self._failed_why or error)}; " + said
        if error is not None:
            log.warning("an earlier checkpoint upload failed (%s); the last one, %s, committed", _describe(error),
                        self.last_committed)
        return None

    # -- restoring ------------------------------------------------------------------

    def restore(
        self,
        default: Any = None,
        *,
        into: Mapping[str, Any] | None = None,
        allow_pickle: bool = False,
        strict: bool = True,
        step: int | None = None,
    ) -> Restored | Any:
        """The newest committed checkpoint whose files verify, or ``default``.

        With ``step``, the committed checkpoint of that step in this base (the newest of that step, should there be
        two), verified as usual; none of that step that verifies is a :class:`CheckpointError` naming the steps the
        base holds — never a fallback to another step, nor ``default``. An explicit ``step`` wins over
        ``$BROKER_RESUME_FROM``, which is then ignored (with a log line).

        With ``$BROKER_RESUME_FROM`` set, that checkpoint is tried first and only older ones
        beside it after — unless this same job (``$BROKER_JOB_ID``) committed newer ones the broker
        never heard of: those come first (:meth:`_own_newer`). Committed checkpoints newer than the
        one restored are then left alone by retention (a rollback's abandoned steps). Corrupt or incomplete checkpoints are skipped with a
        :class:`CheckpointWarning` naming them. With ``into`` (same keys as saved, live
        objects as values), each object that has ``load_state_dict`` is loaded in place (one held in a dict too),
        and so is each tensor and numpy array held in a value that is one or a dict, list or tuple of them
        (``{"model": model.state_dict()}``, whose tensors share the parameters' memory; an EMA tensor or array): the
        saved values are copied into it. The plain values of a dict or list given (an epoch count, a list of
        losses) are put into it, so it holds what was saved; one held where nothing can be set is named in a
        :class:`CheckpointWarning`; a plain value of ``into`` itself is read from the result (:func:`_pair`). Every
        value is checked against the checkpoint before anything is loaded: a module's missing or unexpected keys,
        and the shapes of tensors and arrays (a classifier head of another size).

        A ``$BROKER_RESUME_FROM`` naming a checkpoint that is not there (deleted, or a typo) is said in a
        warning, and the newest committed checkpoint of that base is restored instead (this job's first).

        Raises:
            TypeError: ``into`` is not a mapping (a bare model: ``into={"model": model}`` is meant),
                before anything is read.
            CheckpointError: a key of ``into`` is not in the checkpoint chosen (a key renamed since it was
                saved), or a value does not match what was saved there (a module's missing or unexpected keys, a
                tensor of another shape; named with the checkpoint's URI), before anything is loaded; with
                ``strict=False`` the rest is loaded and a :class:`CheckpointWarning` names what was not. An error
                of a ``load_state_dict`` itself is raised as one too, naming the key and the checkpoint. ``step``
                given and no committed checkpoint of that step verifies.
            TypeError: ``step`` is not an integer.
            UnsafeCheckpointError: the chosen checkpoint contains pickled objects and
                ``allow_pickle`` is False.
        """
        arguments.flag("allow_pickle", allow_pickle)  # read for its truth, allow_pickle="no" unpickled
        arguments.flag("strict", strict)
        if into is not None and not isinstance(into, Mapping):  # iterated, a module gave a baffling traceback
            raise TypeError(f"restore(into=...) takes a dict of name → object, like save(), got {type(into).__name__}")
        if step is not None:
            step = _step(step)
        own_newer: list[layout.Entry] = []
        named: CheckpointId | None = None  # the checkpoint BROKER_RESUME_FROM names, when it is what restore starts at
        # claimed before the listing: a zombie's commit landing between the two was neither seen (restored, or set
        # aside as abandoned) nor fenced, and retention counted it as newest, deleting this attempt's own
        self._claim_at_restore()
        if step is not None:
            if self._resume_from:
                log.info("restore(step=%d): BROKER_RESUME_FROM (%s) is ignored, the step asked for wins", step,
                         self._resume_from)
            storage = self._storage
            entries = layout.scan(storage.list())
            candidates = [e for e in layout.committed_newest_first(entries) if e.id.step == step]
        elif self._resume_from:
            parent, cid = layout.split_checkpoint_uri(self._resume_from)
            named = cid
            storage = (self._storage if parent.rstrip("/") == self._storage.base_uri
                       else open_storage(parent, self._storage_options, self._transfer))
            entries = layout.scan(storage.list())
            wanted = [e for e in entries if e.id == cid and e.committed]
            own_newer = self._own_newer(storage, entries, cid)
            if wanted:
                older = layout.committed_newest_first(entries, cid)
                candidates = own_newer + wanted + [e for e in older if e.id != cid]
            else:
                candidates = self._gone(storage, entries, cid, own_newer)
        else:
            storage = self._storage
            entries = layout.scan(storage.list())
            candidates = layout.committed_newest_first(entries)
        damaged: set[CheckpointId] = set()
        skipped: list[tuple[layout.Entry, str]] = []
        found = restoring.first_verified(storage, candidates, lambda loaded: _decode(loaded, allow_pickle), damaged,
                                         spool_dir=self._spool_dir, skipped=skipped)
        if found is None and step is not None:  # the step asked for, or nothing: no other one, no fresh start
            raise CheckpointError(self._no_such_step(step, entries, candidates))
        if found is None and damaged:
            # committed checkpoints there, none usable and some damaged: returning ``default`` started the run over
            # from step 0, and its first commit's retention deleted the damaged ones, whose other files were whole
            raise CheckpointError(_all_damaged(storage.base_uri, skipped, damaged))
        if storage is self._storage:
            # Commits newer than the one restored (all of them if none was) are not retention's to count: a rollback's,
            # or ones this version cannot read — left alone — or damaged ones, which retention deletes. Counted, they
            # were the "newest" and each new checkpoint of this run was deleted right after its commit.
            passed = {e.id for e in entries if e.committed and (found is None or e.id > found[0].id)}
            self._damaged = frozenset(damaged)
            self._abandoned = frozenset(passed - damaged)
        if found is None:
            return default
        loaded, state = found
        try:
            return self._restored(loaded, state, into, own_newer, strict, named)
        finally:
            loaded.close()

    def _restored(self, loaded: restoring.Loaded, state: dict[str, Any], into: Mapping[str, Any] | None,
                  own_newer: list[layout.Entry], strict: bool = True, named: CheckpointId | None = None) -> Restored:
        """Load the verified checkpoint ``loaded`` (its tensors not read yet, in ``state``) into ``into``'s objects,
        read the rest, and say where it came from. ``named``: the checkpoint ``$BROKER_RESUME_FROM`` names; another
        one restored (it was damaged, or gone, and an older one was taken) is reported to the broker, whose status
        and events otherwise kept naming the one it asked for as the job's last checkpoint."""
        author = loaded.manifest.job.get("id")
        if self._fence is not None and author and author != self._fence[0]:
            log.warning("restoring %s, which job %s committed, not this job (%s): the two share a checkpoint base",
                        loaded.uri, author, self._fence[0])
        if any(e.id == loaded.id for e in own_newer):
            log.warning("restoring %s: this job committed it after %s, the checkpoint the broker named "
                        "(the broker had not heard of it)", loaded.uri, self._resume_from)
            self._reporter.report_checkpoint(loaded.id.step, loaded.uri)
        elif named is not None and loaded.id != named:
            log.warning("restoring %s (step %d), not %s, the checkpoint the broker named: that one could not be "
                        "restored (see the warnings); the broker is told which was", loaded.uri, loaded.id.step,
                        self._resume_from)
            self._reporter.report_checkpoint(loaded.id.step, loaded.uri)
        copied: dict[int, Any] = {}  # id of a saved tensor copied into a live one → that live tensor
        if into:
            missing = [k for k in into if k not in state]
            if missing:
                has = f"{loaded.uri} has no {', '.join(map(repr, missing))} (it holds {', '.join(map(repr, state))})"
                if strict:  # before anything is loaded: a key renamed since the save resumed with untrained weights
                    raise CheckpointError(f"{has}: nothing was loaded; give restore(into=...) the names it was saved "
                                          f"with, or pass strict=False to load the others and leave those as they are")
                warnings.warn(CheckpointWarning(f"{has}: those objects were not loaded (strict=False)"), stacklevel=3)
            # Every target is checked against what was saved before anything is loaded: a model whose head changed
            # size loaded the objects before it and then raised torch's own error, half loaded
            plans = {key: _plan(key, target, state[key]) for key, target in into.items() if key in state}
            for key, plan in plans.items():
                if plan.problems:
                    message = _mismatch_message(key, loaded.uri, plan, strict)
                    if strict:
                        raise CheckpointError(message)
                    warnings.warn(CheckpointWarning(message), stacklevel=3)
            stale: list[str] = []
            for key, plan in plans.items():
                target = into[key]
                if plan.cast:  # torch's load_state_dict (and copy_) casts without a word, strict or not
                    warnings.warn(CheckpointWarning(_cast_message(key, loaded.uri, plan.cast)), stacklevel=3)
                try:
                    if plan.module:
                        state[key] = _load_into(target, state[key], skip=plan.skip, strict=strict)
                    elif plan.stateful and not plan.problems:  # (with strict=False one that does not fit is left)
                        state[key] = _load_into(target, state[key])
                    else:
                        copied.update(_copy_tensors(plan.pairs))
                        for _, live, saved, sub in plan.nested:
                            if sub.module:
                                _load_into(live, saved, skip=sub.skip, strict=strict)
                            elif not sub.problems:
                                _load_into(live, saved)
                        # plain values (an epoch count, a list of losses) put where they are held: the dict given
                        # ends up holding what was saved (before, only its tensors were loaded, the rest left stale)
                        _put_values(plan, copied)
                        stale += plan.stale
                except CheckpointError:
                    raise
                except Exception as e:  # noqa: BLE001 - any load_state_dict's own error, said with where it was
                    raise CheckpointError(f"{loaded.uri}: loading {key!r} failed: {_describe(e)} (restore(into=...) "
                                          f"checked the saved shapes and keys first; what loaded before it stays "
                                          f"loaded)") from e
            if stale:  # said, not left stale without a word
                warnings.warn(CheckpointWarning(_stale_message(loaded.uri, stale)), stacklevel=3)
        state = snapshot.materialize(state, copied)
        self._last_step, self._last_time = loaded.id.step, self._clock()
        self._restored_step, self._restored_uri = loaded.id.step, loaded.uri
        self._resumes_at(loaded.id.step, loaded.uri)
        log.info("restored checkpoint %s", loaded.uri)
        return Restored(state, loaded.id.step, loaded.uri, loaded.manifest)

    def _no_such_step(self, step: int, entries: list[layout.Entry], tried: list[layout.Entry]) -> str:
        """``restore(step=step)`` found no committed checkpoint of that step that verifies: why, in a sentence."""
        steps = sorted({e.id.step for e in layout.committed_newest_first(entries)})
        holds = (f"it holds step(s) {', '.join(map(str, steps[-10:]))}" + (" and older" if len(steps) > 10 else "")
                 if steps else "it holds no committed checkpoint")
        why = ("the checkpoint(s) of that step did not verify (see the warnings)" if tried
               else "there is no committed checkpoint of that step")
        return (f"restore(step={step}): {why} in {self.uri} ({holds}); nothing was restored. Pass one of those "
                f"steps, or no step for the newest")

    def _gone(self, storage: Storage, entries: list[layout.Entry], named: CheckpointId,
              own_newer: list[layout.Entry]) -> list[layout.Entry]:
        """What to restore when the checkpoint ``$BROKER_RESUME_FROM`` names is not there (or no longer
        committed: retention deletes the commit marker first): said plainly, then the newest committed ones of
        that base, this job's newer ones first. Trying the name anyway said "not committed (no commit marker)",
        and when nothing older lay beside it the run started from scratch on a base holding its trained steps."""
        present = [e for e in entries if e.id == named]
        committed = layout.committed_newest_first(entries)
        steps = sorted({e.id.step for e in committed})
        holds = (f"it holds step(s) {', '.join(map(str, steps[-5:]))}" + (" and older" if len(steps) > 5 else "")
                 if steps else "it holds no committed checkpoint")
        instead = ("restoring the newest committed checkpoint there instead" if committed or own_newer else
                   "nothing is restored: the run starts from the beginning, its steps up to that checkpoint's trained "
                   "again")  # it said "restoring the newest committed checkpoint there" of none
        message = (f"BROKER_RESUME_FROM names {self._resume_from}, which "
                   f"{'is not committed (no commit marker)' if present else 'does not exist'} in {storage.base_uri} "
                   f"({holds}): {instead}")
        log.warning(message)
        warnings.warn(CheckpointWarning(message), stacklevel=3)
        return own_newer + [e for e in committed if e not in own_newer]

    def _claim_at_restore(self) -> None:
        """Claim the job's base as the resume starts: waiting for the first save (minutes away) let a zombie
        attempt go on committing newer steps, which this attempt's retention then counted as newest and
        deleted its own new checkpoints for. Not fatal here: the first save claims again, and raises."""
        if self._fence is None or self._claimed or self.uri != self._job_base:
            return
        try:
            commit.claim(self._storage, self._fence)
            self._claimed = True
        except OSError as e:
            log.warning("could not claim %s for attempt %d yet: %s", self.uri, self._fence[1], e)

    def _own_newer(self, storage: Storage, entries: list[layout.Entry], named: CheckpointId) -> list[layout.Entry]:
        """Committed checkpoints newer than the one the broker named that this same job wrote (its manifest
        says so), newest first: a commit whose report never reached the broker (it was down or restarting
        when the save committed, a preemption's last save above all). Resuming from the named one would
        throw that work away. Without a job id (a run started by hand) the named checkpoint is taken as
        asked: that is a deliberate rollback."""
        job_id = self._job.get("id")
        if not job_id:
            return []
        own = []
        for entry in layout.committed_newest_first([e for e in entries if e.id > named]):
            try:
                manifest = Manifest.from_json(storage.read(layout.path(entry.id, layout.MANIFEST)))
            except (OSError, ValueError):
                continue  # unreadable: not this job's to prefer (restore would skip it anyway)
            if manifest.job.get("id") == job_id:
                own.append(entry)
        return own

def _all_damaged(base: str, skipped: list[tuple[layout.Entry, str]], damaged: set[CheckpointId]) -> str:
    """``restore()`` found committed checkpoints under ``base`` and none that verifies, some ``damaged`` (``skipped``:
    each with why): the sentence of the :class:`CheckpointError` it raises instead of returning ``default``."""
    shown = "; ".join(f"step {e.id.step} ({e.name}): {why}" for e, why in skipped[:5])
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    every = ("every checkpoint under {base} is damaged" if all(e.id in damaged for e, _ in skipped)
             else "no checkpoint under {base} can be restored, and some are damaged").format(base=base)
    return (f"{every}: {shown}{more}. Nothing was restored, and the run does not "
            f"start over (its retention would delete them). Check them with `checkpoint verify {base}`; "
            f"to start afresh, move them away or delete them (or pass another base)")


#: SIGTERM handlers already said to have taken the place of a checkpointer's (:func:`_say_replaced`), by id
_said_replaced: set[int] = set()


def _say_replaced(handler: object | None) -> None:
    """Say once per handler, at a ``due()``/``save()`` — long before a preemption — that the script set SIGTERM's
    handler after making its checkpointer (``handler``, :func:`checkpoint.preemption.replaced_handler`): a handler of
    its own that exits at once loses the preemption's checkpoint (the process ended with status 0 and nothing
    saved, the log having said "saving at the next step"); the default ends it at once; ignoring it, no notice."""
    if handler is None or id(handler) in _said_replaced:
        return
    _said_replaced.add(id(handler))
    if handler == signal.SIG_IGN:
        what = "SIGTERM is now ignored: a preemption notice by SIGTERM is not heard, and no checkpoint is saved for it"
    elif handler == signal.SIG_DFL or handler is None:
        what = "SIGTERM now ends the process at once, without a checkpoint"
    else:
        name = getattr(handler, "__qualname__", None) or repr(handler)
        what = (f"SIGTERM's handler is now {name}: the checkpointer still hears a preemption notice and saves at the "
                f"next step, unless {name} ends the process first, which loses that checkpoint")
    message = (f"the script set SIGTERM's handler after making its Checkpointer: {what}. Set your handler before "
               f"making the Checkpointer: it is then called once the preemption's checkpoint has committed")
    log.warning(message)
    warnings.warn(CheckpointWarning(message), stacklevel=4)


def _call_script_handler(handler: Callable[..., object]) -> None:
    """Call the script's own SIGTERM handler after a preemption's checkpoint committed (:func:`script_handler`). The
    exit that follows is this library's, with the preemption's status: a handler's ``sys.exit(0)`` would have the run
    taken for a finished one."""
    name = getattr(handler, "__qualname__", None) or repr(handler)
    log.info("calling the script's own SIGTERM handler %s, as the checkpoint has committed", name)
    try:
        handler(signal.SIGTERM, None)
    except (SystemExit, KeyboardInterrupt):
        pass
    except Exception:  # noqa: BLE001 - the checkpoint is in; the exit goes on whatever the handler did
        log.exception("the script's own SIGTERM handler %s failed (the checkpoint is committed; exiting)", name)


def _local_base(storage: Storage) -> str | None:
    """The directory of a store on this machine's file system, or None (an object store, ``memory://``)."""
    local = getattr(storage, "local_path", None)
    where = local("x") if callable(local) else None
    return None if where is None else os.path.dirname(os.path.abspath(where))


def _checkpoint_not_base(uri: str) -> str | None:
    """Why ``uri`` cannot be a base: it names one checkpoint (``…/step-000000000035-1733011200123``, as
    ``last_committed``, ``Restored.uri`` and ``checkpoint ls`` print them), in a sentence saying what to pass
    instead; None for anything else. Taken as a base, it held no checkpoint (restore started afresh) and saves
    were nested inside that checkpoint."""
    try:
        parent, cid = layout.split_checkpoint_uri(uri)
    except ValueError:
        return None
    return (f"{uri} is a checkpoint, not a checkpoint base: pass its parent, Checkpointer({parent!r}), and "
            f"restore(step={cid.step}) to restore that step (or set BROKER_RESUME_FROM={uri})")


def _uncreatable(base: str | None, *, files_only: bool = False) -> str | None:
    """Why the local base ``base`` cannot be made into a directory (a file on its path, a parent this process
    cannot write), in a sentence naming the path; None when it can or is one. Nothing is left behind (whether the
    parent can be written is tried with a file made and removed there): a checkpointer opened only to read leaves
    no trace, and the first save makes the directories. ``files_only`` (when the
    checkpointer is made, before anyone knows it writes): only a file on the path, which no checkpoint can be
    read from either; a parent that cannot be written is said at the first ``due()``/``save()``."""
    if base is None:
        return None
    if os.path.exists(base):
        return None if os.path.isdir(base) else f"checkpoint base {base} is a file, not a directory"
    parent = base
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"checkpoint base {base} cannot be created: {parent} is a file, not a directory"
    if not files_only and (failed := _cannot_write_in(parent)):
        # worded by the errno: "this process cannot write in /proc ([Errno 2] No such file or directory)" gave a
        # reason the error did not
        said = f"[Errno {failed.errno}] {failed.strerror}" if failed.errno is not None else str(failed)
        if failed.errno in (errno.EACCES, errno.EPERM):
            return f"checkpoint base {base} cannot be created: this process cannot write in {parent} ({said})"
        if failed.errno == errno.EROFS:
            return f"checkpoint base {base} cannot be created: {parent} is on a read-only file system ({said})"
        child = os.path.join(parent, os.path.relpath(base, parent).split(os.sep)[0])
        return (f"checkpoint base {base} cannot be created: cannot create {child}: {said} (a folder cannot be made "
                "there)")
    return None


def _unwritable(base: str | None) -> str | None:
    """Why checkpoints cannot be written in the existing local directory ``base`` (read-only), or None. Asked at
    the first ``due()``/``save()``, not before: a read-only directory is a fine place to restore weights from."""
    if base is None or not os.path.isdir(base) or not (failed := _cannot_write_in(base)):
        return None
    said = f"[Errno {failed.errno}] {failed.strerror}" if failed.errno is not None else str(failed)
    why = ("its permissions" if failed.errno in (errno.EACCES, errno.EPERM) else
           "a read-only file system" if failed.errno == errno.EROFS else "nothing can be made in it")
    return f"checkpoint base {base} is not writable by this process ({why}: {said}): no checkpoint could be saved there"


def _cannot_write_in(directory: str) -> OSError | None:
    """Why a file cannot be made in ``directory`` (the ``OSError``: ``[Errno 30] Read-only file system``), found by
    making one and removing it; None when it can. Not ``os.access``, which passes for root whatever the mode, and for
    a directory in which nothing can be made (``/proc``): root is what a container runs as."""
    probe = os.path.join(directory, f".checkpoint-probe-{os.getpid()}-{threading.get_ident()}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # a probe of this thread's left by a kill: the directory took it
        return None
    except OSError as e:
        return e
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:  # made, so the directory can be written; its removal is best effort
        pass
    return None


def _cast_on_load(target: Any, saved: Any) -> list[tuple[str, str, str]]:
    """The tensors of ``saved`` that a module's ``load_state_dict`` casts to another dtype as it copies them into
    ``target`` (a model saved in float32, now bfloat16): (key, saved dtype, live dtype) each; [] for anything else."""
    module = serialization.unwrap_parallel(target)
    if not (serialization.is_module(module) and isinstance(saved, dict)):
        return []
    live = module.state_dict(keep_vars=True)
    cast = []
    for key, value in saved.items():
        name = key.removeprefix("module.") if key not in live else key
        tensor = live.get(name)
        if isinstance(value, serialization.Pending) and serialization.is_tensor(tensor):
            was, now = value.dtype_name(), str(tensor.dtype).removeprefix("torch.")
            if was is not None and was != now:
                cast.append((name, was, now))
    return cast


def _cast_message(key: str, uri: str, cast: list[tuple[str, str, str]]) -> str:
    shown = ", ".join(f"{name!r} {was} → {now}" for name, was, now in cast[:5])
    more = f" and {len(cast) - 5} more" if len(cast) > 5 else ""
    return (f"{uri}: {len(cast)} tensor(s) of {key!r} were saved with another dtype and are cast as they load: "
            f"{shown}{more} (restored all the same; save and restore with one dtype to keep the values as saved)")


@dataclass
class _Plan:
    """How one value of ``restore(into=...)`` is loaded, found before anything is (:func:`_plan`)."""

    module: bool = False  # a torch module: load_state_dict, a tensor at a time (_load_into)
    stateful: bool = False  # another object with load_state_dict (an optimizer)
    # (path, live tensor or array, saved Pending)
    pairs: list[tuple[str, Any, Any]] = dataclass_field(default_factory=list)
    # plain values put where they are held: (path, dict or list, its key / index or slice(None) for a list's contents,
    # saved value)
    sets: list[tuple[str, Any, Any, Any]] = dataclass_field(default_factory=list)
    # objects with load_state_dict held inside a value (a scheduler in a dict): (path, live object, saved, its plan)
    nested: list[tuple[str, Any, Any, Any]] = dataclass_field(default_factory=list)
    stale: list[str] = dataclass_field(default_factory=list)  # plain values held where they cannot be set
    problems: list[str] = dataclass_field(default_factory=list)  # what does not match, a phrase each
    skip: set[str] = dataclass_field(default_factory=set)  # a module's saved keys left out (strict=False)
    cast: list[tuple[str, str, str]] = dataclass_field(default_factory=list)  # loaded with another dtype


def _shape(shape: Any) -> str:
    return str(tuple(shape))


def _plan(key: str, target: Any, saved: Any) -> _Plan:
    """Check ``target`` (a value of ``into``) against ``saved`` (its pending entry) without loading anything: a
    module's keys (missing, unexpected) and shapes; tensors and numpy arrays held in a tensor, array, dict, list or
    tuple (a state dict of a model, an EMA tensor) paired with the saved ones, shapes compared; plain values (an epoch count, a list of losses) to be put where they are held
    (:func:`_pair`)."""
    plan = _Plan()
    module = serialization.unwrap_parallel(target)
    if serialization.is_module(module) and isinstance(saved, dict):
        plan.module = True
        live = module.state_dict(keep_vars=True)
        names: dict[str, str] = {}  # live name → saved key (a save through DDP: every key "module.…")
        for saved_key in saved:
            names[saved_key.removeprefix("module.") if saved_key not in live else saved_key] = saved_key
        migrates = _may_migrate(live, saved)
        for name in live:
            if name not in names and not migrates(name):
                plan.problems.append(f"{name!r} missing from the checkpoint")
        for name, saved_key in names.items():
            tensor, value = live.get(name), saved[saved_key]
            if name not in live:
                if not migrates(name):
                    plan.problems.append(f"{saved_key!r} saved, not in the model")
            elif (serialization.is_tensor(tensor) and isinstance(value, serialization.Pending)
                  and name.rpartition(".")[2] != "_extra_state" and tuple(value.shape()) != tuple(tensor.shape)):
                plan.problems.append(f"{name!r} saved {_shape(value.shape())}, live {_shape(tensor.shape)}")
                plan.skip.add(saved_key)
        plan.cast = _cast_on_load(target, saved)
        return plan
    if snapshot.is_stateful(target):
        plan.stateful = True
        groups, saved_groups = _param_groups(target), saved.get("param_groups") if isinstance(saved, dict) else None
        if groups is not None and isinstance(saved_groups, list):  # an optimizer's own check raises, said below
            sizes = [len(g.get("params", ())) for g in saved_groups if isinstance(g, dict)]
            if sizes != groups:
                plan.problems.append(f"parameter groups of sizes {sizes} saved, {groups} live")
            else:
                plan.problems.extend(_optimizer_problems(target, saved))
        return plan
    _pair(key, target, saved, plan)
    for path, live, value in plan.pairs:
        was, now = value.dtype_name(), serialization.dtype_name(live)
        if was is not None and was != now:
            plan.cast.append((path, was, now))
    for _, _, _, sub in plan.nested:
        plan.problems.extend(sub.problems)
        plan.cast.extend(sub.cast)
    return plan


def _may_migrate(live: Any, saved: Any) -> Callable[[str], bool]:
    """Whether the submodule holding a key may convert a state of another version as it loads (torch's
    ``_load_from_state_dict`` with the saved ``_metadata`` version: BatchNorm before version 2 had no
    ``num_batches_tracked``): its saved version is unknown or not the live one. Such keys are left to
    ``load_state_dict`` to judge; the others' missing and unexpected keys are found before anything loads."""
    live_meta = getattr(live, "_metadata", None) or {}
    saved_meta = getattr(saved, "_metadata", None) or {}

    def version(meta: Any, prefix: str) -> Any:
        entry = meta.get(prefix)
        if entry is None:
            entry = meta.get(f"module.{prefix}" if prefix else "module")
        return entry.get("version") if isinstance(entry, Mapping) else None

    def migrates(name: str) -> bool:
        prefix = name.rpartition(".")[0]
        now = version(live_meta, prefix)
        return now is not None and version(saved_meta, prefix) != now

    return migrates


def _optimizer_problems(target: Any, saved: dict) -> list[str]:
    """What an optimizer's saved state holds that does not fit ``target`` (groups of the same sizes), though its own
    ``load_state_dict`` takes it without a word and the first ``step()`` then fails inside torch: another optimizer's
    (AdamW's groups in an SGD: ``KeyError: 'momentum'``) — its groups' settings both lack some of this one's and hold
    some it does not know (a newer torch's added setting is only one way, and ``load_state_dict`` fills it in) — and
    state tensors of another shape than the parameter they are paired with (a layer that changed size: "The size of
    tensor a (64) must match…"). Torch pairs the saved parameters with the live ones in order, group by group."""
    problems: list[str] = []
    live_groups, saved_groups = target.param_groups, saved.get("param_groups") or []
    live_keys = {k for g in live_groups for k in g if k != "params"}
    saved_keys = {k for g in saved_groups if isinstance(g, dict) for k in g if k != "params"}
    lacks, unknown = sorted(live_keys - saved_keys), sorted(saved_keys - live_keys)
    if lacks and unknown:
        problems.append(f"saved by another optimizer than this {type(target).__name__}: its parameter groups hold "
                        f"{', '.join(unknown)}, not {', '.join(lacks)}")
    states = saved.get("state")
    if not isinstance(states, Mapping):
        return problems
    index = 0
    for live_group, saved_group in zip(live_groups, saved_groups):
        for param, saved_id in zip(live_group.get("params", ()), saved_group.get("params", ())):
            entry = states.get(saved_id)
            if isinstance(entry, Mapping) and serialization.is_tensor(param):
                for name, value in entry.items():
                    if (isinstance(value, serialization.Pending) and tuple(value.shape()) != ()
                            and tuple(value.shape()) != tuple(param.shape)):
                        problems.append(f"the state {name!r} of parameter {index} saved {_shape(value.shape())}, "
                                        f"the parameter is {_shape(param.shape)}")
            index += 1
    return problems


def _param_groups(target: Any) -> list[int] | None:
    """The number of parameters in each of an optimizer's groups, or None for anything else."""
    groups = getattr(target, "param_groups", None)
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return None
    return [len(g.get("params", ())) for g in groups]


def _holds(x: Any, leaf: Callable[[Any], bool]) -> bool:
    """Whether ``x``, or anything in the dicts, lists and tuples it is made of, is a ``leaf``."""
    if leaf(x):
        return True
    if isinstance(x, Mapping):
        return any(_holds(v, leaf) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_holds(v, leaf) for v in x)
    return False


def _loadable(x: Any) -> bool:
    """A tensor or a numpy array: loaded in place, the saved values copied into it."""
    return serialization.is_tensor(x) or serialization.is_ndarray(x)


def _holds_loadable(x: Any) -> bool:
    return _holds(x, _loadable)


def _holds_array_data(x: Any) -> bool:
    """Whether a saved value holds a tensor or an array (a numpy scalar, saved as a 0-d array, is a plain value)."""
    return _holds(x, lambda v: isinstance(v, serialization.Pending) and not v.is_scalar())


def _pair(path: str, live: Any, saved: Any, plan: _Plan, holder: tuple[Any, Any] | None = None) -> None:
    """Pair each tensor and numpy array of ``live`` (one itself, or a dict / list / tuple holding some) with the
    saved one at the same place, into ``plan.pairs``; what does not match (a key, a length, a shape, a tensor
    saved for an array) into ``plan.problems``.

    A plain value (a number, a string, a numpy scalar, a list of them) is put where it is held (``holder``: its
    dict and key, or list and index) into ``plan.sets``, so a dict given to ``into`` ends up holding what was saved,
    as its tensors do; a list's own contents are replaced. A tuple is rebuilt around its live tensors where it is
    held. One held where nothing can be set (an item of a tuple that is itself held nowhere settable, a mapping that
    cannot change) and not equal to the saved one goes into ``plan.stale``, to be warned about. ``holder`` None: a
    value of ``into`` itself, whose plain values are read from the result (the mapping given is not changed). An
    object with ``load_state_dict`` held inside (a scheduler in a dict) is checked as a value of ``into`` is, into
    ``plan.nested``."""
    if serialization.is_tensor(live):
        if not isinstance(saved, serialization.Pending) or saved.is_array():
            what = "a numpy array" if isinstance(saved, serialization.Pending) else f"a {type(saved).__name__}"
            plan.problems.append(f"{path!r} is a tensor here, {what} in the checkpoint")
        elif tuple(saved.shape()) != tuple(live.shape):
            plan.problems.append(f"{path!r} saved {_shape(saved.shape())}, live {_shape(live.shape)}")
        else:
            plan.pairs.append((path, live, saved))
        return
    if serialization.is_ndarray(live):
        if not isinstance(saved, serialization.Pending) or not saved.is_array():
            what = "a tensor" if isinstance(saved, serialization.Pending) else f"a {type(saved).__name__}"
            plan.problems.append(f"{path!r} is a numpy array here, {what} in the checkpoint")
        elif tuple(saved.shape()) != tuple(live.shape):
            plan.problems.append(f"{path!r} saved {_shape(saved.shape())}, live {_shape(live.shape)}")
        elif not serialization.writable(live):
            plan.problems.append(f"{path!r} is a read-only numpy array here: it cannot be loaded in place (give a "
                                 f"writeable one, or read it from the result)")
        else:
            plan.pairs.append((path, live, saved))
        return
    if holder is not None and (snapshot.is_stateful(live) or serialization.is_module(live)) \
            and not isinstance(live, Mapping):
        plan.nested.append((path, live, saved, _plan(path, live, saved)))
        return
    if isinstance(live, Mapping) and (isinstance(saved, Mapping) or _holds_loadable(live)):
        if not isinstance(saved, Mapping):
            plan.problems.append(f"{path!r} is a dict here, a {type(saved).__name__} in the checkpoint")
            return
        for k, v in live.items():
            if k in saved:
                _pair(f"{path}.{k}", v, saved[k], plan, (live, k))
            elif _holds_loadable(v):
                plan.problems.append(f"{f'{path}.{k}'!r} missing from the checkpoint")
            # a plain value the checkpoint lacks (a key added since the save) keeps its value
        for k, v in saved.items():
            if k in live:
                continue
            if _holds_array_data(v):
                plan.problems.append(f"{f'{path}.{k}'!r} saved, not in the live dict")
            else:  # a plain value saved, not in the live dict: added, so the dict holds what was saved
                _put(f"{path}.{k}", (live, k), _MISSING, v, plan)
        return
    if isinstance(live, (list, tuple)) and _holds_loadable(live):
        if not isinstance(saved, (list, tuple)) or len(saved) != len(live):
            what = f"{len(saved)} item(s)" if isinstance(saved, (list, tuple)) else f"a {type(saved).__name__}"
            plan.problems.append(f"{path!r} holds {len(live)} item(s) here, {what} in the checkpoint")
            return
        if isinstance(live, list):
            for i, (v, s) in enumerate(zip(live, saved)):
                _pair(f"{path}[{i}]", v, s, plan, (live, i))
            return
        # a tuple: its items are set in a list, made a tuple again (its live tensors in it) where the tuple is held
        items, first = list(live), len(plan.sets)
        for i, (v, s) in enumerate(zip(live, saved)):
            _pair(f"{path}[{i}]", v, s, plan, (items, i))
        own = [entry for entry in plan.sets[first:] if entry[1] is items]  # (deeper ones set a dict or list in it)
        if not own:
            return
        if holder is not None and isinstance(holder[0], (MutableMapping, list)) and not hasattr(live, "_fields"):
            plan.sets.append((path, holder[0], holder[1], _Rebuilt(items)))
            return
        # held in the mapping given to into, or somewhere that cannot change: those items keep their values
        plan.sets[first:] = [entry for entry in plan.sets[first:] if entry[1] is not items]
        plan.stale.extend(where for where, _, i, value in own
                          if isinstance(value, _Rebuilt) or not _same(live[i], value))
        return
    if isinstance(live, list) and isinstance(saved, (list, tuple)):  # its contents, so the list itself holds them
        plan.sets.append((path, live, slice(None), saved))
        return
    if holder is not None:
        _put(path, holder, live, saved, plan)


_MISSING = object()


class _Rebuilt:
    """A tuple of ``restore(into=...)`` to be made again from its items once they are set (:func:`_pair`)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]):
        self.items = items


def _put(path: str, holder: tuple[Any, Any], live: Any, saved: Any, plan: _Plan) -> None:
    """A plain value to be put where it is held (a dict's key, a list's item); one held where nothing can be set
    (a mapping that cannot change) is stale, unless it equals the saved one."""
    container, key = holder
    if isinstance(container, (MutableMapping, list)):
        plan.sets.append((path, container, key, saved))
    elif live is _MISSING or not _same(live, saved):
        plan.stale.append(path)


def _same(live: Any, saved: Any) -> bool:
    """Whether a live plain value already is the saved one (one that cannot be set then loses nothing)."""
    if _holds(saved, lambda v: isinstance(v, serialization.Pending)):
        return False
    try:
        return type(live) is type(saved) and bool(live == saved)
    except Exception:  # noqa: BLE001 - a comparison that fails (or is ambiguous) is no proof of sameness
        return False


def _put_values(plan: _Plan, copied: dict[int, Any]) -> None:
    """Put the plain values of ``plan.sets`` in place, in order (a tuple's items before the tuple), each read from
    the checkpoint (and the arrays in it with it)."""
    for _, container, key, saved in plan.sets:
        if isinstance(saved, _Rebuilt):
            value = tuple(saved.items)
        else:
            value = snapshot.materialize(saved, copied)
            if isinstance(saved, serialization.Pending):
                copied[id(saved)] = value
        if isinstance(key, slice):
            container[key] = list(value)
        else:
            container[key] = value


def _stale_message(uri: str, stale: list[str]) -> str:
    shown = ", ".join(map(repr, stale[:5])) + (f" and {len(stale) - 5} more" if len(stale) > 5 else "")
    return (f"{uri}: restore(into=...) could not put the saved value of {shown} in place (held in a tuple or a "
            f"mapping that cannot be changed): they keep the values they had here; read them from the result "
            f"(restored[...]), or hold them in a dict or a list")


def _mismatch_message(key: str, uri: str, plan: _Plan, strict: bool) -> str:
    shown = "; ".join(plan.problems[:5]) + (f"; and {len(plan.problems) - 5} more" if len(plan.problems) > 5 else "")
    if not strict and plan.stateful:
        return (f"{uri}: {key!r} does not match what was saved ({shown}): it was not loaded, and keeps the state it "
                f"has (an optimizer's starts afresh); the rest were loaded (strict=False)")
    if not strict:
        return (f"{uri}: {key!r} does not match what was saved ({shown}): those tensors were not loaded, the rest "
                f"were (strict=False)")
    return (f"{uri}: restore(into=...) {key!r} does not match what was saved: {shown}. Nothing was loaded. A model "
            f"that changed since this checkpoint was saved should start on a new checkpoint base; or load the matching "
            f"parts yourself from restore() without into= (or pass strict=False to load everything that matches)")


def _copy_tensors(pairs: list[tuple[str, Any, Any]]) -> dict[int, Any]:
    """Copy each saved tensor into its live one, in place (one read at a time); the live tensors by saved id."""
    copied = {}
    for _, live, saved in pairs:
        serialization.copy_into(live, saved)
        copied[id(saved)] = live
    return copied


def _load_into(target: Any, saved: Any, *, skip: set[str] = frozenset(), strict: bool = True) -> Any:
    """Load ``saved`` (tensors pending, :func:`snapshot.decode_pending`) into ``target``; what ``Restored`` holds for it.

    A module's parameters and buffers are read one at a time as ``load_state_dict`` copies each into place
    (:class:`serialization.LazyTensor`), so the load holds one tensor of the checkpoint at a time; the result is then
    the module's own ``state_dict()`` (its live tensors, no copy). Other objects (an optimizer, which keeps the
    tensors it is given) get every tensor read first, and the result is what they were given. ``skip``: a module's
    saved keys left out (a shape that does not match, with ``strict=False``), which is passed on to
    ``load_state_dict``."""
    module = serialization.unwrap_parallel(target)
    if serialization.is_module(module) and isinstance(saved, dict):
        live = module.state_dict(keep_vars=True)

        def lazy(key: str, value: Any) -> bool:  # a parameter or buffer copied into place, nothing kept
            name = key.removeprefix("module.") if key not in live else key
            return (isinstance(value, serialization.Pending) and serialization.is_tensor(live.get(name))
                    and not name.rpartition(".")[2] == "_extra_state")

        given = OrderedDict((k, v.lazy() if lazy(k, v) else snapshot.materialize(v)) for k, v in saved.items()
                            if k not in skip)
        if getattr(saved, "_metadata", None) is not None:  # torch's module versions: load_state_dict reads them
            given._metadata = saved._metadata
        serialization.load_state(target, given, strict=strict)
        return module.state_dict()
    saved = snapshot.materialize(saved)
    serialization.load_state(target, saved)
    return saved


def _decode(loaded: restoring.Loaded, allow_pickle: bool) -> dict[str, Any]:
    try:
        return snapshot.decode_pending(loaded.files, allow_pickle)
    except UnsafeCheckpointError as e:
        raise UnsafeCheckpointError(f"{loaded.uri}: {e}") from None


def _fence(job: Mapping[str, str]) -> tuple[str, int] | None:
    """(job id, attempt) from the manifest's job fields, or None: no fencing without both (a run by hand)."""
    try:
        return (job["id"], int(job["attempt"]))
    except (KeyError, ValueError):
        return None


def _grace_from_env(env: Mapping[str, str]) -> float:
    text = env.get("BROKER_PREEMPTION_GRACE_S") or ""
    if not text.strip():
        return DEFAULT_GRACE_S
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"BROKER_PREEMPTION_GRACE_S must be a number of seconds, got {text!r}") from None


def _step(step: Any) -> int:
    """``step`` as a Python ``int`` (what is recorded): an ``int``, a numpy integer, a 0-d integer tensor (its value,
    read once here). A tensor of any other shape is refused, though torch lets a one-element one index."""
    if serialization.is_tensor(step) and step.dim() != 0:
        raise TypeError(f"step must be an integer (or a 0-d integer tensor), got a tensor of shape "
                        f"{tuple(step.shape)}: pass int(...) of the step")
    if isinstance(step, bool):  # an int to Python: save(True, state) was saved as step 1
        raise TypeError(f"step must be an integer, got bool {step!r}")
    try:
        return operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an integer, got {type(step).__name__} {step!r}") from None


def _distributed_rank() -> int | None:
    """This process's rank in an initialized torch.distributed default group, else None (:func:`ranks.group`)."""
    group = ranks.group()
    return None if group is None else group[0]


#: A store that answered, refusing the write for its room or size: a failed save's partial files are removed then
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

_HINTS = {
    errno.ENOSPC: (" (the disk is full: free space there, or checkpoint to another disk or a bucket; keep_last=N "
                   "needs room for N + 1 checkpoints, the N kept and the one being written, so a lower keep_last "
                   "frees room)"),
    errno.EDQUOT: " (over the disk quota there)",
    errno.EFBIG: " (a file is over the size limit: the process's `ulimit -f`, or the file system's largest file)",
    errno.EROFS: " (a read-only file system)",
    errno.EACCES: " (no permission to write there)",
    errno.EPERM: (" (the operation is not permitted there: a file made immutable or append-only (chattr), a mount or "
                  "security policy that forbids it, or a directory owned by another user)"),
    # its own folder gone while it was written: another process's retention on the same base took it as the debris of
    # an older step (a run by hand, with no BROKER_ATTEMPT, is not fenced against another writer: one base per run)
    errno.ENOENT: (" (the checkpoint's folder was deleted while it was written: is another process saving checkpoints "
                   "to this base? Runs started by hand, with no BROKER_ATTEMPT, are not fenced against each other: "
                   "give each run a base of its own)"),
}


def _describe(error: BaseException) -> str:
    """An error in one line: its type and message (an OSError keeps its path), at most 500 characters."""
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= 500 else text[:497] + "..."


def _ended_by(error: BaseException) -> bool:
    """Whether the uncaught exception that ended the script (``sys.last_value``, set as its traceback was printed)
    is ``error``, or was raised while handling it or from it."""
    seen: set[int] = set()
    ending = getattr(sys, "last_value", None)
    while ending is not None and id(ending) not in seen:
        if ending is error:
            return True
        seen.add(id(ending))
        ending = ending.__cause__ or ending.__context__
    return False


_live: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


def _flush_at_exit() -> None:
    """A script that forgets ``close()`` still gets its queued saves committed, waiting at most each checkpointer's
    ``exit_timeout_s``. If its last save was not kept (the store refused it, or it was still uploading then), the
    process says so in one sentence on stderr and exits with status 1: before, the failure was at most a log line
    and a run whose final checkpoint did not exist exited 0, a success to the broker and to its user.

    A script that ended with an uncaught exception has status 1 already, and its traceback is the reason: the
    sentence then follows it as ``checkpoint upload failed at exit: …``, the line the broker's diagnosis reads as
    shutdown noise after the real error. A script ended by ``sys.exit(n)`` (``n`` 1 to 255) keeps ``n``
    (:func:`_watch_sys_exit`); ``sys.exit(0)`` becomes 1, as a normal end does."""
    lost, hung = [], False
    ended_by_exception = getattr(sys, "last_value", None) is not None  # set as the uncaught traceback was printed
    if _live:  # a SIGTERM from now on finds no next step to save at, and keeps the script's status
        script_ended(1 if ended_by_exception else _lost_save_status())
    for ckpt in list(_live):
        try:
            sentence = ckpt._close_at_exit()
        except Exception as e:  # noqa: BLE001 - nothing left to raise to; whether the save was kept is not known
            log.error("the checkpointer of %s could not be closed at exit: %s", ckpt.uri, _describe(e))
            continue
        if sentence:
            lost.append(sentence)
            hung = hung or ckpt._runner.busy()
    finish_detached()  # a checkpointer closed on a training thread could not put the SIGTERM handler back
    if not lost:
        return
    for sentence in lost:
        print(f"checkpoint upload failed at exit: {sentence}" if ended_by_exception else sentence,
              file=sys.stderr, flush=True)
    if hung:  # the rest of shutdown joins the thread pools the hung upload holds, and would hang with it
        _exit_with(1 if ended_by_exception else _lost_save_status())
    elif not ended_by_exception:
        atexit.register(_exit_with, _lost_save_status())


#: The status ``sys.exit(n)`` ended the script with, on the main thread (:class:`_ExitStatus`); None before.
_script_status: Any = None


class _ExitStatus:
    """Rides on the ``SystemExit`` that ``sys.exit`` raises on the main thread (:func:`_watch_sys_exit`), and learns
    as that exception is let go whether it ended the script: the interpreter lets go of it as it reads the script's
    status, with no Python frame left on the main thread; one the script caught is let go inside the code that
    caught it. The status itself is fixed before the exit flush runs, and nothing else tells it to Python: without
    this, ``sys.exit(3)`` with the last save lost exited 1, not 3."""

    __slots__ = ("code",)

    def __init__(self, code: Any):
        self.code = code

    def __del__(self) -> None:
        global _script_status
        try:
            if threading.current_thread() is not threading.main_thread():
                return
            try:
                sys._getframe(1)  # a caller: let go by Python code, which caught it (or kept it and dropped it)
            except ValueError:
                _script_status = self.code
        except Exception:  # noqa: BLE001 - a finalizer must not raise (nor print), whatever state the interpreter is in
            pass


def _watch_sys_exit() -> None:
    """Wrap ``sys.exit`` (once; the one found is still what exits) so that the status a script ends with through it
    on the main thread is known to the exit flush (:class:`_ExitStatus`). ``raise SystemExit(n)`` is not seen: it
    exits 1 when the last save is lost, as before."""
    original = sys.exit
    if getattr(original, "_checkpoint_watch", False):
        return

    def exit(status: Any = None, /) -> None:  # noqa: A001 - sys.exit's own name, for tracebacks and help()
        try:
            original(status)
        except SystemExit as e:
            if threading.current_thread() is threading.main_thread():
                try:
                    e._checkpoint_status = _ExitStatus(e.code)
                except Exception:  # noqa: BLE001 - whatever the exception, it exits as it would have
                    pass
            raise

    exit.__doc__ = original.__doc__
    exit._checkpoint_watch = True  # type: ignore[attr-defined]
    sys.exit = exit


def _lost_save_status() -> int:
    """The status of a script whose last save was lost: its own ``sys.exit(n)`` if it ended by one with ``n`` from
    1 to 255 (a status that already says it failed, perhaps how: a scheduler's "requeue me"), else
    :data:`EXIT_SAVE_LOST`."""
    code = _script_status
    if isinstance(code, int) and not isinstance(code, bool) and 1 <= code <= 255:
        return code
    return EXIT_SAVE_LOST


def _exit_with(status: int) -> None:
    """End the process with ``status``, once the rest of shutdown has run.

    The status of a script is fixed when its main thread ends, before the exit flush runs (CPython's ``Py_RunMain``
    computes it, then finalizes): ``sys.exit`` here would be ignored, and only ``os._exit`` changes it. Called from
    :func:`_flush_at_exit`, it would also skip what comes after: joining the script's non-daemon threads, and every
    ``atexit`` hook (a tracker's ``finish()``, logging's flush). So it is registered as an ``atexit`` hook *at exit*:
    the newest, it runs first, after those threads are joined; it runs the other hooks itself, in their order,
    then flushes the standard streams and leaves. After an upload given up on, the exit flush calls it at once."""
    atexit.unregister(_exit_with)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(status)


def _register_exit_flush() -> None:
    """Run :func:`_flush_at_exit` while thread pools still take work. An ``atexit`` hook runs too
    late: by then ``concurrent.futures`` has shut down (its own hook runs as the interpreter stops
    its threads) and every upload — ours, boto3's — fails with "cannot schedule new futures after
    interpreter shutdown". Hooks registered with ``threading`` run newest first, and
    ``concurrent.futures.thread`` registered its hook when it was imported, above: ours runs before it."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # not CPython's threading: the best there is
        atexit.register(_flush_at_exit)
    else:
        register(_flush_at_exit)


_register_exit_flush()


def _forget_after_fork() -> None:
    """A forked child (a multiprocessing worker, a helper process) is not the writer of its parent's checkpoints:
    ending as scripts end, it ran the exit flush of the parent's checkpointers, and waited for good for an upload
    the parent's upload thread — not running in the child — was doing."""
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
