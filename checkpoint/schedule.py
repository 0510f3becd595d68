"""When a save is due. Pure: the caller passes the clock reading."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint import arguments


@dataclass(frozen=True)
class SavePolicy:
    """Save every ``every_steps`` steps (on multiples) and/or every ``every_seconds``."""

    every_steps: int | None = None
    every_seconds: float | None = 300.0

    def __post_init__(self) -> None:
        if self.every_steps is not None:
            arguments.count("every_steps", self.every_steps)
        if self.every_seconds is not None:
            arguments.seconds("every_seconds", self.every_seconds)


def is_due(
    step: int,
    now: float,
    policy: SavePolicy,
    last_step: int | None,
    last_time: float,
    preempted: bool,
) -> bool:
    """Whether to save at ``step``.

    Args:
        step: the step about to be saved (steps completed, by convention).
        now: monotonic clock reading.
        last_step: step of the last save (or restore), None if there was none.
        last_time: monotonic time of the last save, or when training started.
        preempted: a preemption notice arrived; save at once.
    """
    if step == last_step:
        return False
    if preempted:
        return True
    if policy.every_steps and step % policy.every_steps == 0:
        return True
    return policy.every_seconds is not None and now - last_time >= policy.every_seconds
