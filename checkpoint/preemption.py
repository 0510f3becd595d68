"""Preemption notices: SIGTERM means "save at the next step boundary, then leave".

Event sequence on a spot VM (grace 120 s on AWS, 30 s on GCP)::

    t=0    SIGTERM          → notice recorded; deadline = t + grace
    t=0.4  due(step) → True → save(step) snapshots, uploads, commits, exits (code 143)
    -- or --
    t=grace                 → deadline: exit at once, whatever is in flight
    -- or --
    second SIGTERM          → exit at once

Nothing here saves anything: the notice only flips a flag that ``Checkpointer.due`` reads,
so a loop that calls just ``due()`` and ``save()`` gets the whole behaviour.

Several checkpointers in one process (the run's own, and one opened to read pretrained weights and
never closed) each install a notice; only the newest one's handler is live, and it passes a SIGTERM on to
every installed notice: each checkpointer hears it. The *writers* among them (a checkpointer whose
``due()`` or ``save()`` was called: :attr:`PreemptionNotice.writing`) are the ones the exit waits for: the
grace deadline is the earliest of theirs, and a writer's notice save exits the process only once every
other writer has saved too (:func:`others_saving`) — or, for a writer not called since the notice (one that
saves rarely: the best model's), once :meth:`PreemptionNotice.idle_wait_s` has passed: the saved one's next
``due()`` then exits. One used only to restore neither sets the deadline nor
holds the exit back; only while no checkpointer has been written with yet is the earliest deadline of all
the one that counts. Before, only the newest heard SIGTERM: a reader opened after the run's checkpointer
took the notice, and the training loop's ``due()`` never saw it. A notice installed after another one heard a
notice (the run's checkpointer made after a reader took the SIGTERM, the script still loading its data) has that
notice too, from the time it came (:meth:`PreemptionNotice._inherit`) — whether the one that heard it is still open
or was closed since (a reader of pretrained weights closed once they loaded): the first notice an installed one
heard is the process's (:data:`_process_notice`), kept until the process exits. Before, a notice heard by a
checkpointer closed before the run's was made was lost with it: the run trained on until the VM went away.

Closed from another thread (training in a thread of its own), a notice cannot put the old handler back:
``signal.signal`` and ``signal.set_wakeup_fd`` are the main thread's. It is *detached* instead — the
handler and the wakeup descriptor stay ours, and act as what was there before::

    close() on a training thread → detached (handler, wakeup socket, watchdog left in place)
    SIGTERM, old handler SIG_DFL   → the watchdog exits at once (143), as SIGTERM would without us
    SIGTERM, old handler a function → the main thread puts it back and calls it
    the main thread ends, or installs a newer notice → put back for good

and a preemption save on such a thread, whose ``SystemExit`` would end only that thread (status 0: a
preempted run taken for a finished one), hands the exit to the main thread (:meth:`exit_on_main_thread`).
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

from checkpoint import arguments

log = logging.getLogger("checkpoint")

#: 128 + SIGTERM: the conventional "terminated" status, so nothing mistakes a preempted run
#: for a finished one.
EXIT_CODE = 143
DEFAULT_GRACE_S = 30.0
#: After a writer's notice save committed, how long the exit waits for another writer that has not called
#: ``due()`` or ``save()`` since the notice (one that has is waited for: it is saving): ``IDLE_STEPS`` of the
#: committing writer's steps (the time between its last two ``due()`` calls before its notice save), at least
#: ``IDLE_FLOOR_S``, at most ``IDLE_CAP_S`` (:func:`others_saving`). A writer that saves rarely (a "best model"
#: checkpointer) held the exit for the whole grace period.
IDLE_FLOOR_S = 2.0
IDLE_STEPS = 3
IDLE_CAP_S = 20.0


#: Installed notices, oldest first: each one's previous handler is the one before it. Closing one that is
#: not the newest hands its previous handler to the next, so the newest keeps hearing SIGTERM, and passes
#: it on to all of them (:func:`_signal_all`).
_chain: list[PreemptionNotice] = []
_chain_lock = threading.RLock()  # a SIGTERM passed on to every notice, and the decisions made across them
#: The first notice an installed notice heard in this process (the notice itself, as it was when heard: its time,
#: source, grace), whatever became of that notice since (closed): a notice installed later has it too
#: (:meth:`PreemptionNotice._inherit`). It ends with the process: the exit after the notice's save
#: (:func:`exiting`), or a forced one; a forked child starts without it.
_process_notice: dict | None = None


def _remember(notice: PreemptionNotice) -> None:
    """``notice``, installed, just heard its first notice: the process's, if it is the first."""
    global _process_notice
    with _chain_lock:
        if _process_notice is None and notice.noticed_at is not None:
            _process_notice = {"noticed_at": notice.noticed_at, "source": notice._source,
                               "signalled": notice._signalled, "notice_grace": notice._notice_grace,
                               "why": notice.why}


#: The status the process ends with once its script has ended (its exit flush runs): set by
#: :func:`script_ended`. A SIGTERM then saves nothing more (there is no next step), and a forced exit keeps it.
_ended_status: int | None = None


def script_ended(status: int) -> None:
    """The script has ended (the checkpointer's exit flush runs), with ``status`` as it stands (1 after an uncaught
    exception): a SIGTERM from now on is not "saving at the next step", and an exit it forces keeps ``status``,
    not the preemption's 143 (a crash then read as a preemption)."""
    global _ended_status
    _ended_status = status


def _resume_words(notices: list[PreemptionNotice]) -> str:
    """Which committed checkpoint a resume uses, in the log's words, from the notices' :attr:`resume_point`."""
    points = list(dict.fromkeys(n.resume_point for n in notices if n.resume_point))
    if points:
        return f"a resume uses {' and '.join(points)}"
    return "this process committed (or restored) no checkpoint: a resume starts from the newest one there, if any"


def _forget() -> None:
    """The process exits (or, in a test, stands for one that did): its notice is spent."""
    global _process_notice
    with _chain_lock:
        _process_notice = None


def _hard_exit(code: int) -> None:
    sys.stderr.flush()
    os._exit(code)


class PreemptionNotice:
    """Records the first SIGTERM and enforces the grace deadline.

    Signals are watched by a thread of our own, through :func:`signal.set_wakeup_fd`: the
    interpreter writes each signal's number to that descriptor from whichever thread the kernel
    delivered it to. Waiting for the Python-level handler instead would miss notices, because that
    handler only runs when the *main* thread next executes bytecode — and a main thread asleep in
    a long step is not woken when the signal lands on another thread (an upload thread, say).

    Args:
        grace_s: seconds from the notice to a forced exit (a number ``>= 0``: ``TypeError`` or
            ``ValueError`` otherwise, naming it).
        exit_code: status for both the clean and the forced exit (an integer, 0 to 255).
        force_exit: how to leave when the deadline passes or a second signal comes
            (``os._exit``; tests pass a recorder).
    """

    def __init__(
        self,
        grace_s: float = DEFAULT_GRACE_S,
        exit_code: int = EXIT_CODE,
        force_exit: Callable[[int], None] = _hard_exit,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.grace_s = arguments.seconds("grace_s", grace_s, zero=True)  # a str here killed the watchdog at SIGTERM
        self.exit_code = arguments.count("exit_code", exit_code, minimum=0)
        if self.exit_code > 255:
            raise ValueError(f"exit_code must be <= 255 (a process's exit status), got {exit_code}")
        self._force_exit = force_exit
        self._clock = clock
        self.noticed_at: float | None = None
        self._signalled = False
        self._source = "signal"
        #: Why the broker stops the job when it is not a preemption ("the job is at its budget"), as its notice said:
        #: the log then says a stop, not a preemption (a user read a budget stop as their job preempted)
        self.why: str | None = None
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._watchdog: threading.Thread | None = None
        self._stop_watchdog = False
        self._sockets: tuple[socket.socket, socket.socket] | None = None
        self._previous = None
        self._previous_wakeup = -1
        self._installed = False
        self._detached = False  # uninstalled off the main thread (its handler live until the main thread runs)
        self._exit_main: int | None = None  # SystemExit the main thread raises in our handler (exit_on_main_thread)
        #: Set by the checkpointer at its first ``due()`` or ``save()``: it writes checkpoints, and the exit after
        #: a notice waits for it (module docstring); one used only to restore never sets it.
        self.writing = False
        #: Set once its save after the notice committed (the process exits when no other writer still saves).
        self.done = False
        #: What ``done`` committed ("the checkpoint of step 5 (uri)"), and when: said at the deadline, and the start of
        #: the wait for the other writers (:meth:`idle_wait_s`).
        self.committed: str | None = None
        self.committed_at: float | None = None
        #: The committed checkpoint a resume uses as things stand ("the checkpoint of step 5 (uri)": the one its
        #: checkpointer committed or restored last), set by the checkpointer: said when the exit loses a save.
        self.resume_point: str | None = None
        #: Who this notice is for (the checkpointer's base), in messages.
        self.label = "a checkpointer"
        self.touched_at: float | None = None  # its checkpointer's last due() or save()
        self._last_call: dict[str, float] = {}  # "due"/"save" -> the time of the last call of that kind
        self._step_s: dict[str, float] = {}  # "due"/"save" -> the time between the last two calls of that kind
        self._stood_down = False  # exiting(): its deadline no longer ends the process
        self._notice_grace: float | None = None  # what the notice itself left (the broker's runner says), if it said

    @property
    def requested(self) -> bool:
        return self.noticed_at is not None

    @property
    def signalled(self) -> bool:
        """Whether a SIGTERM came (the notice's own, or the one after a cloud's or the broker's notice)."""
        return self._signalled

    @property
    def installed_here(self) -> bool:
        """Whether this notice's SIGTERM handler is installed (on the main thread) and not detached."""
        return self._installed and not self._detached

    def seconds_left(self) -> float | None:
        if self.noticed_at is None:
            return None
        return max(0.0, self.noticed_at + self.grace_s - self._clock())

    def touch(self, kind: str) -> None:
        """Its checkpointer's ``due()`` (``kind`` ``"due"``) or ``save()`` (``"save"``) was called: it writes, and
        is active (:func:`others_saving`). The time between calls is kept until its notice save commits: the step
        of the loop, for :meth:`idle_wait_s` (the notice save's own commit is no step)."""
        now = self._clock()
        self.writing = True
        self.touched_at = now
        if not self.done:
            last = self._last_call.get(kind)
            if last is not None:
                self._step_s[kind] = now - last
            self._last_call[kind] = now

    def saved_after_notice(self, what: str) -> None:
        """Its save after the notice committed (``what``: "the checkpoint of step N (uri)"). The wait for the other
        writers starts at the first one: saves again after it do not put the exit off."""
        with _chain_lock:
            if not self.done:
                self.committed_at = self._clock()
            self.done = True
            self.committed = what

    def active_since_notice(self) -> bool:
        """Whether its checkpointer's ``due()`` or ``save()`` was called after the notice (it comes to save)."""
        return self.noticed_at is not None and self.touched_at is not None and self.touched_at >= self.noticed_at

    def idle_wait_s(self) -> float:
        """How long after this notice's save committed the exit waits for a writer not active since the notice:
        ``IDLE_STEPS`` of this checkpointer's steps (between its ``due()`` calls; else its ``save()`` calls), within
        [``IDLE_FLOOR_S``, ``IDLE_CAP_S``]."""
        step = self._step_s.get("due", self._step_s.get("save"))
        return IDLE_FLOOR_S if step is None else min(IDLE_CAP_S, max(IDLE_FLOOR_S, IDLE_STEPS * step))

    def install(self) -> bool:
        """Handle SIGTERM from now on. Only possible on the main thread; False elsewhere."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return self._installed
        finish_detached()  # a detached notice's handler is the live one: put back what it stands for first
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        self._sockets = (reader, writer)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._stop_watchdog = False
        self._detached, self._exit_main = False, None
        self._watchdog = threading.Thread(target=self._watch, args=(reader,), name="checkpoint-preemption",
                                          daemon=True)
        with _chain_lock:
            self._inherit([n for n in _listening() if n.noticed_at is not None], _process_notice)
            self._watchdog.start()
            self._installed = True
            _chain.append(self)
        return True

    def _inherit(self, heard: list[PreemptionNotice], process: dict | None = None) -> None:
        """A notice that came before this one was installed (``heard``: the installed notices that have one;
        ``process``: :data:`_process_notice`, the first an installed one heard, open or closed since) is this
        one's too: a checkpointer made after a SIGTERM that a reader opened earlier took (its pretrained weights
        loading when the notice came, and the reader perhaps closed since) saves at its first ``due()``, and its
        exit waits for it. Before, it knew nothing of the notice: the loop trained on and the reader's deadline
        killed the process without the notice's checkpoint (or, the reader closed, the VM went away with the run
        still training). The deadline still counts from when the notice came."""
        notices = [{"noticed_at": n.noticed_at, "source": n._source, "signalled": n._signalled,
                    "notice_grace": n._notice_grace, "why": n.why} for n in heard]
        if process is not None:
            notices.append(process)
        if not notices or self.noticed_at is not None:
            return
        first = min(notices, key=lambda n: n["noticed_at"])
        with self._lock:
            self.noticed_at, self._source, self.why = first["noticed_at"], first["source"], first.get("why")
            self._signalled = any(n["signalled"] for n in notices)
            grace = [n["notice_grace"] for n in notices if n["notice_grace"] is not None]
            if grace:
                self._notice_grace = min(grace)
                self.grace_s = min(self.grace_s, self._notice_grace)
        log.warning("a %s came before this checkpointer was made (%.1f s ago): saving at the next step, exiting "
                    "within %s s", self.name(), self._clock() - first["noticed_at"], seconds(self.seconds_left() or 0.0))

    def uninstall(self) -> None:
        """Stop handling SIGTERM and put the previous handler back. Off the main thread, where that cannot be
        done, a notice whose handler is the live one is detached instead (module docstring): closing the
        wakeup socket under the handler left SIGTERM ignored for the rest of the process."""
        if self._installed:
            above = _chain[_chain.index(self) + 1:]
            if above:  # a newer notice handles SIGTERM now: it inherits what we would have put back
                above[0]._previous, above[0]._previous_wakeup = self._previous, self._previous_wakeup
            elif threading.current_thread() is not threading.main_thread():
                self._detached = True
                return
            else:
                signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
                signal.set_wakeup_fd(self._previous_wakeup)
            _chain.remove(self)
            self._installed = False
        self._stop_watchdog = True
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(1.0)
        self._watchdog = None
        if self._sockets is not None:
            for sock in self._sockets:
                sock.close()
            self._sockets = None
        if self._timer is not None:
            self._timer.cancel()

    def name(self) -> str:
        """What the log calls this notice: a preemption notice, or the broker's stop notice and why."""
        return f"stop notice ({self.why})" if self.why else "preemption notice"

    def ended(self) -> str:
        """What the log says of the job once the notice's checkpoint committed: preempted, or stopped and why."""
        return f"stopped ({self.why})" if self.why else "preempted"

    def notify(self, source: str = "signal", *, grace_s: float | None = None, why: str | None = None) -> None:
        """A preemption notice arrived: ``source`` is ``"signal"`` (SIGTERM), ``"cloud"`` (the
        metadata endpoint, :mod:`checkpoint.cloud_notice`) or ``"broker"`` (the runner's notice
        file, :mod:`checkpoint.notice_file`).

        A second *signal* forces the exit at once. The SIGTERM that follows a notice from the
        cloud or the broker (the OS shutting the VM down, the runner's last warning) is the first
        signal: the save under way goes on until the grace deadline set by the first notice.
        ``grace_s``: what the notice itself leaves (the broker's runner says); it shortens, never
        lengthens, this process's grace period. ``why``: the broker's reason, in words, when it stops the job
        for something other than a preemption (its budget, a cancel): the log says so (:meth:`name`).
        """
        with self._lock:  # the signal watchdog and the notice pollers may call at once
            heard = self._hear(source, grace_s, why)
        if heard == "new" and self._installed:
            _remember(self)
        _act([(self, heard)])

    def _hear(self, source: str, grace_s: float | None, why: str | None = None) -> str:
        """Record a notice; what it was: ``"new"``, ``"after"`` (the SIGTERM after a cloud's or the broker's
        notice), ``"again"`` (a second signal: exit now) or ``"ignored"`` (another notice after the first)."""
        with self._lock:
            if self.noticed_at is not None:
                if source != "signal":
                    return "ignored"
                if not self._signalled:
                    self._signalled = True
                    return "after"
                return "again"
            self._signalled = source == "signal"
            self._source = source
            self.why = why
            if grace_s is not None:
                self._notice_grace = grace_s
                self.grace_s = min(self.grace_s, grace_s)
            self.noticed_at = self._clock()
            if self._watchdog is None:  # no watchdog thread (never installed): a timer enforces the deadline
                self._timer = threading.Timer(self.grace_s, self._deadline)
                self._timer.daemon = True
                self._timer.start()
            return "new"

    def exit_on_main_thread(self, code: int) -> bool:
        """Have the main thread raise ``SystemExit(code)``, from a detached notice's handler; False if this notice
        is not detached (on the main thread, or never installed: the caller's own ``SystemExit`` is the exit).

        A SIGTERM to the main thread runs the handler promptly (it interrupts a ``join()`` or a sleep); the
        watchdog ignores that SIGTERM, and still forces the exit at the grace deadline if the main thread
        never runs Python again."""
        if not (self._detached and self._installed):
            return False
        self._exit_main = code
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        return True

    def _on_signal(self, signum, frame) -> None:
        """Nothing to do here while installed: the watchdog saw the signal on the wakeup descriptor already.
        Detached (closed off the main thread), this is the main thread's chance to put the old handler back."""
        if not self._detached:
            return
        code, previous = self._exit_main, self._previous
        self.uninstall()  # on the main thread now: the old handler and wakeup descriptor go back
        if code is not None:
            raise SystemExit(code)
        if callable(previous):
            previous(signum, frame)
        elif previous in (None, signal.SIG_DFL):
            signal.raise_signal(signum)  # the default now: the process ends of it (unless the watchdog was first)

    def _watch(self, reader: socket.socket, poll_s: float = 0.05) -> None:
        while not self._stop_watchdog:
            ready, _, _ = select.select([reader], [], [], poll_s)
            if ready:
                try:
                    data = reader.recv(64)
                except (BlockingIOError, OSError):
                    data = b""
                for signum in data:
                    if signum == signal.SIGTERM and self._detached and not _listening():
                        self._after_close()
                    elif signum == signal.SIGTERM:
                        _signal_all(self)
                    elif self._previous_wakeup >= 0:  # someone else's signal: pass it on
                        try:
                            os.write(self._previous_wakeup, bytes([signum]))
                        except OSError:
                            pass
            if self._deadline_passed():
                self._deadline()
                return

    def _deadline_passed(self) -> bool:
        """Whether this watchdog ends the process now: its own deadline passed, and it is the deadline that
        counts (:func:`_governing`: a reader's never does while a writer saves). A detached notice keeps its own."""
        if self.noticed_at is None or (self._detached and self._exit_main is None):
            return False
        if self._clock() - self.noticed_at < self.grace_s:
            return False
        if self._detached or not self._installed:
            return True
        with _chain_lock:
            return _governing(_listening()) is self

    def _after_close(self) -> None:
        """A SIGTERM after a close() off the main thread: what the old handler would do. A default one
        exits at once, from here (the main thread may be deep in a step); a function of the script's is
        called by the main thread (:meth:`_on_signal`); SIG_IGN, or the exit handed to the main thread, does nothing."""
        if self._exit_main is None and self._previous in (None, signal.SIG_DFL):
            log.warning("SIGTERM after the checkpointer was closed: exiting")
            self._force_exit(128 + signal.SIGTERM)

    def _forget_after_fork(self) -> None:
        """In a forked child (:func:`_after_fork_in_child`): the watchdog thread is the parent's, not running here,
        and the sockets are the parent's watchdog's; this process is no preemption's to handle."""
        self._installed = self._detached = False
        self._stop_watchdog = True
        self._watchdog = self._timer = None
        if self._sockets is not None:
            for sock in self._sockets:
                sock.close()  # this process's copies: the parent's stay open
            self._sockets = None

    def _deadline(self) -> None:
        if self._stood_down:  # a writer's notice save committed and the process is on its way out (exiting())
            return
        with _chain_lock:
            notices = list(dict.fromkeys([*_chain, self]))
            saved = [n.committed for n in notices if n.done and n.committed]
            unsaved = [n.label for n in notices if n.writing and not n.done and n.requested and n in _listening()]
        if saved:  # a writer's notice save committed; another writer's (or a later one) did not come in time
            log.warning("preemption grace period (%s s) is over: exiting; %s committed after the notice%s",
                        seconds(self.grace_s), " and ".join(saved),
                        f", none of {', '.join(unsaved)}" if unsaved else "")
        else:
            log.error("preemption grace period (%s s) is over: exiting without a final checkpoint; %s",
                      seconds(self.grace_s), _resume_words(notices))
        _forget()
        self._force_exit(self.exit_code if _ended_status is None else _ended_status)


def seconds(value: float) -> str:
    """A grace period or what is left of it, in the log's words: whole seconds, but a tenth under ten (a grace of
    0.5 s read "exiting within 0 s")."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")


def _listening() -> list[PreemptionNotice]:
    """The installed notices that hear SIGTERM as a notice (not the detached ones), oldest first."""
    return [n for n in _chain if n._installed and not n._detached]


def _governing(notices: list[PreemptionNotice]) -> PreemptionNotice | None:
    """Of ``notices``, the noticed one whose deadline comes first among the writers still saving, or among
    all of them while none is one (a SIGTERM before the training loop's first ``due()``)."""
    noticed = [n for n in notices if n.noticed_at is not None]
    pool = [n for n in noticed if n.writing and not n.done] or noticed
    return min(pool, key=lambda n: n.noticed_at + n.grace_s - n._clock(), default=None)


def others_saving(notice: PreemptionNotice) -> list[PreemptionNotice]:
    """The other installed notices whose checkpointer writes, has not saved since its notice, and is still to be
    waited for: the process exits after ``notice``'s save only once they have (each one's own save exits when it is
    the last). One whose ``due()`` or ``save()`` was called since the notice is waited for (it saves at that step);
    one that was not, only until :meth:`PreemptionNotice.idle_wait_s` after ``notice``'s save committed — a writer
    that saves rarely (the best model's, at an eval) is not coming, and held the exit for the whole grace period."""
    with _chain_lock:
        pending = writers_not_saved(notice)
        if notice.committed_at is None or notice._clock() - notice.committed_at < notice.idle_wait_s():
            return pending
        return [n for n in pending if n.active_since_notice()]


def writers_not_saved(notice: PreemptionNotice) -> list[PreemptionNotice]:
    """The other installed notices whose checkpointer writes and has not saved since its notice (active or not)."""
    with _chain_lock:
        return [n for n in _listening() if n is not notice and n.writing and not n.done and n.requested]


def script_handler() -> Callable[..., object] | None:
    """The script's own SIGTERM handler that the first notice installed in this process took the place of (a Python
    function: a Slurm requeue, a tracker's flush), or None (the default, ignored, or no notice installed). The exit
    after a notice's checkpoint committed calls it (:meth:`checkpoint.Checkpointer._exit_after_preemption`): before,
    a handler installed before the checkpointer never ran at all."""
    with _chain_lock:
        previous = _chain[0]._previous if _chain else None
    return previous if callable(previous) else None


def replaced_handler() -> object | None:
    """On the main thread: what SIGTERM's handler was set to after the live notice was installed (a script's own
    function, ``SIG_DFL``, ``SIG_IGN``), or None while the live notice's own handler is in place (or cannot be told:
    off the main thread, none installed, a detached one live). The notice still hears SIGTERM through the wakeup
    descriptor while a Python function of the script's is the handler, unless that function ends the process first."""
    if threading.current_thread() is not threading.main_thread():
        return None
    with _chain_lock:
        if not _chain or any(n._detached for n in _chain):
            return None
        live = [n for n in _chain if n._installed]
        if not live:
            return None
        current = signal.getsignal(signal.SIGTERM)
        return None if current == live[-1]._on_signal else current


def exiting() -> None:
    """The notice's saves are committed and the process exits (``SystemExit``): the deadlines of the notices
    still installed (a reader's, never closed) no longer end it early, cutting its shutdown (the ``atexit``
    hooks, the exit flush) short with "exiting without a final checkpoint"."""
    with _chain_lock:
        for notice in _chain:
            notice._stood_down = True
        _forget()


def _signal_all(receiver: PreemptionNotice) -> None:
    """A SIGTERM, seen by the live handler's watchdog (``receiver``'s): every installed notice hears it, so
    each checkpointer of the process saves at its next step; said once, with the deadline that counts."""
    with _chain_lock:
        members = _listening() or [receiver]
        heard = [(n, n._hear("signal", None)) for n in members]
        for notice, what in heard:
            if what == "new":
                _remember(notice)
    _act(heard)


def _act(heard: list[tuple[PreemptionNotice, str]]) -> None:
    """Say what the notices just heard meant, once, and force the exit on a second signal."""
    outcomes = {h for _, h in heard}
    with _chain_lock:
        notices = [n for n, _ in heard]
        leader = _governing(notices) or notices[0]
    if "again" in outcomes:
        with _chain_lock:
            said = _resume_words([*_chain, *notices])
        if _ended_status is not None:
            log.warning("second SIGTERM after the script ended: exiting now with status %d; %s", _ended_status, said)
        else:
            log.warning("second preemption notice: exiting now; a checkpoint still being saved is lost, %s", said)
        _forget()
        leader._force_exit(leader.exit_code if _ended_status is None else _ended_status)
    elif "new" in outcomes and _ended_status is not None:
        # the script is over (an uncaught error, or its end without close()): there is no next step to save at
        log.warning("%s after the script ended: nothing more is saved; the exit goes on for at most %s s and keeps "
                    "status %d", leader.name(), seconds(leader.seconds_left() or 0.0), _ended_status)
    elif "new" in outcomes:
        from checkpoint.ranks import group  # (torch is not imported for it)

        ranked = group()
        if ranked is not None and ranked[0] != 0 and ranked[1] > 1:
            # only rank 0 writes: "saving at the next step" on rank 1 promised a save it never makes, and rank 0 saves
            # only if the notice reached it too (a preemption's does; a `kill` of this process does not)
            log.warning("%s: rank 0 writes the checkpoint, if the notice reached it too; this rank goes on until rank "
                        "0 exits or the grace period ends, within %s s", leader.name(),
                        seconds(leader.seconds_left() or 0.0))
        else:
            log.warning("%s: saving at the next step, exiting within %s s", leader.name(),
                        seconds(leader.seconds_left() or 0.0))
    elif "after" in outcomes:
        log.warning("SIGTERM after the %s's notice: still saving, exit within %s s", leader._source,
                    seconds(leader.seconds_left() or 0.0))


def finish_detached() -> None:
    """On the main thread: put back the handler a notice closed off the main thread stands for (its
    ``uninstall`` could not). Called as the main thread ends (the checkpointer's exit flush) and before a
    newer notice installs."""
    if threading.current_thread() is not threading.main_thread():
        return
    for notice in [n for n in _chain if n._detached]:
        notice.uninstall()


# -- fork -----------------------------------------------------------------------------
#
# A process forked from the training script (multiprocessing's "fork" start method: a Pool, a Process for data
# preparation or evaluation) inherits our SIGTERM handler and the wakeup socket, whose other end the parent's
# watchdog reads. A SIGTERM to that helper was written into the parent's socket and taken there for the parent's
# own notice, while the helper ignored it: Process.terminate() made the run save and exit 143 as if preempted, and a
# VM's shutdown, which signals the whole process group, was heard twice, and the second "notice" forced the exit at
# once, without the preemption's checkpoint. The child is given back what SIGTERM did before any notice was
# installed. SIGTERM is blocked in the forking thread across the fork, so one landing in the child before that is
# done is delivered to it afterwards, not written into the parent's socket (the parent's stays pending until the
# block ends, or another of its threads takes it).

_fork_state = threading.local()


def _before_fork() -> None:
    _fork_state.blocked = False
    if _chain and hasattr(signal, "pthread_sigmask"):
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        _fork_state.blocked = signal.SIGTERM not in before


def _unblock_after_fork() -> None:
    if getattr(_fork_state, "blocked", False):
        _fork_state.blocked = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _after_fork_in_child() -> None:
    try:
        if _chain:
            first = _chain[0]  # its previous handler is what SIGTERM did before any notice (see uninstall)
            try:  # the forking thread is the child's main thread: signal.signal works there
                signal.signal(signal.SIGTERM, first._previous or signal.SIG_DFL)
                try:
                    signal.set_wakeup_fd(first._previous_wakeup)
                except ValueError:  # that descriptor is unusable here: none, rather than the parent's watchdog's
                    signal.set_wakeup_fd(-1)
            except (ValueError, OSError) as e:
                log.warning("cannot give a forked process back its SIGTERM handling: %s", e)
            for notice in _chain:
                notice._forget_after_fork()
            _chain.clear()
        _forget()  # the parent's notice: this process is no preemption's to handle
    finally:
        _unblock_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_unblock_after_fork, after_in_child=_after_fork_in_child)
