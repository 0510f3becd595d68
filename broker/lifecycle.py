"""The job state machine: states, events, the transition table, and ``apply``.

Nothing else in the broker assigns a job state. Every change goes through
:func:`apply`, which returns the new state and the :class:`~broker.models.Event`
to store with it; an event the table does not allow raises
:class:`IllegalTransition` (the API answers 409).

::

      submit ─▶ queued ──place──▶ placed ──launch──▶ launching ──start──▶ running ──succeed──▶ succeeded
                  ▲  ▲               │                  │  │                 │  │
                  │  └───unplace─────┘                  │  └─succeed────────────────────────▶ succeeded
                  │  ◀──launch_failed───────────────────┘                    │  │
                  │  ◀──recover (preempted, node lost, retried error)────────┘  ├──fail──────▶ failed
                  │                                                             └─stop_budget─▶ stopping
                  │                                              stopping ──ended (checkpointed, stopped)──▶ stopped_budget
                  └──resume── failed | stopped_budget

      from launching as from running (a short job, a launch that fails or is lost, a budget stop before the
      start): succeed ▶ succeeded, fail ▶ failed, recover ▶ queued, stop_budget ▶ stopping

      stop_budget: queued | placed ──▶ stopped_budget (nothing runs: nothing to stop)

      cancel: queued | placed ──▶ cancelled
              launching | running | stopping ──▶ cancelling ──ended (the attempt stopped)──▶ cancelled

      succeed: cancelling | stopping ──▶ succeeded (the run finished before the stop reached it)

Final states: succeeded, cancelled, failed, stopped_budget — the engine leaves
them alone; a user may ``resume`` a failed or budget-stopped job.

A state a newer broker wrote to a shared store (a rolling upgrade) reads as a
:class:`ForeignState`: no event applies to it here, and the record is never written back.

Attempts have their own, simpler life (see :class:`AttemptState`): one job runs
through one or more attempts; only the newest may be active.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class JobState(str, Enum):
    QUEUED = "queued"
    PLACED = "placed"
    LAUNCHING = "launching"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLING = "cancelling"
    STOPPING = "stopping"
    CANCELLED = "cancelled"
    STOPPED_BUDGET = "stopped_budget"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES

    @property
    def is_active(self) -> bool:
        """Holds (or is about to hold) capacity."""
        return self in (JobState.PLACED, JobState.LAUNCHING, JobState.RUNNING, JobState.CANCELLING, JobState.STOPPING)


FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.STOPPED_BUDGET})
"""States the engine leaves alone. ``failed`` and ``stopped_budget`` can still be resumed by a user."""


class JobEvent(str, Enum):
    SUBMIT = "submit"
    PLACE = "place"
    UNPLACE = "unplace"
    LAUNCH = "launch"
    LAUNCH_FAILED = "launch_failed"
    START = "start"
    SUCCEED = "succeed"
    FAIL = "fail"
    RECOVER = "recover"
    STOP_BUDGET = "stop_budget"
    CANCEL = "cancel"
    ENDED = "ended"
    RESUME = "resume"


S, E = JobState, JobEvent

TRANSITIONS: dict[tuple[JobState | None, JobEvent], JobState] = {
    (None, E.SUBMIT): S.QUEUED,
    (S.QUEUED, E.PLACE): S.PLACED,
    (S.PLACED, E.UNPLACE): S.QUEUED,
    (S.PLACED, E.LAUNCH): S.LAUNCHING,
    (S.LAUNCHING, E.LAUNCH_FAILED): S.QUEUED,
    (S.LAUNCHING, E.START): S.RUNNING,
    (S.LAUNCHING, E.SUCCEED): S.SUCCEEDED,  # a job shorter than one engine tick
    (S.LAUNCHING, E.FAIL): S.FAILED,
    (S.LAUNCHING, E.RECOVER): S.QUEUED,
    (S.RUNNING, E.SUCCEED): S.SUCCEEDED,
    (S.RUNNING, E.FAIL): S.FAILED,
    (S.RUNNING, E.RECOVER): S.QUEUED,
    (S.QUEUED, E.STOP_BUDGET): S.STOPPED_BUDGET,
    (S.PLACED, E.STOP_BUDGET): S.STOPPED_BUDGET,
    (S.LAUNCHING, E.STOP_BUDGET): S.STOPPING,
    (S.RUNNING, E.STOP_BUDGET): S.STOPPING,
    (S.STOPPING, E.ENDED): S.STOPPED_BUDGET,
    (S.STOPPING, E.CANCEL): S.CANCELLING,
    (S.FAILED, E.RESUME): S.QUEUED,
    (S.STOPPED_BUDGET, E.RESUME): S.QUEUED,
    (S.QUEUED, E.CANCEL): S.CANCELLED,
    (S.PLACED, E.CANCEL): S.CANCELLED,
    (S.LAUNCHING, E.CANCEL): S.CANCELLING,
    (S.RUNNING, E.CANCEL): S.CANCELLING,
    (S.CANCELLING, E.ENDED): S.CANCELLED,
    # the run finished on its own before the cancel or the budget stop reached it: its work is done and paid
    (S.CANCELLING, E.SUCCEED): S.SUCCEEDED,
    (S.STOPPING, E.SUCCEED): S.SUCCEEDED,
}
"""(from, event) → to. The only source of truth for what may happen to a job."""


class ForeignState(str):
    """A state this broker version does not know, read from a record a newer broker wrote to the shared store
    (a rolling upgrade runs both at once); it stands in for a :class:`JobState` or an :class:`AttemptState`.

    It is the stored text (``value``), equal to no state this version knows, in no transition (every event on
    it is an :class:`IllegalTransition`), neither final nor active: what it means is the newer broker's to
    say. A record holding one is shown as stored and never written back (the stores refuse it), and the
    engine leaves its job alone.
    """

    foreign = True
    is_final = False
    is_active = False

    @property
    def value(self) -> str:
        return str(self)


def job_state(text: str) -> JobState | ForeignState:
    """A stored job's state: this version's :class:`JobState`, else the text as a :class:`ForeignState`."""
    try:
        return JobState(text)
    except ValueError:
        return ForeignState(text)


def attempt_state(text: str) -> AttemptState | ForeignState:
    """A stored attempt's state: this version's :class:`AttemptState`, else the text as a :class:`ForeignState`."""
    try:
        return AttemptState(text)
    except ValueError:
        return ForeignState(text)


def is_foreign(state) -> bool:
    return isinstance(state, ForeignState)


class IllegalTransition(Exception):
    """The event is not allowed from the job's current state."""

    def __init__(self, state: JobState | ForeignState | None, event: JobEvent):
        self.state = state
        self.event = event
        where = state.value if state else "nothing"
        if is_foreign(state):
            where += (" (a state this broker's version does not know: a newer broker sharing its store set it; "
                      "ask a broker of that version)")
        super().__init__(f"cannot {event.value} a job that is {where}")


@dataclass(frozen=True)
class Transition:
    from_state: JobState | None
    to_state: JobState
    event: JobEvent


def apply(state: JobState | None, event: JobEvent) -> Transition:
    """Apply ``event`` to a job in ``state``; raise :class:`IllegalTransition` if the table forbids it."""
    try:
        to = TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None
    return Transition(from_state=state, to_state=to, event=event)


class AttemptState(str, Enum):
    """One try at running the job on one placement."""

    LAUNCHING = "launching"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    LOST = "lost"
    STOPPED = "stopped"

    @property
    def is_final(self) -> bool:
        return self not in (AttemptState.LAUNCHING, AttemptState.RUNNING)
