"""Checks of the counts and durations a training script passes, made when the checkpointer is built.

A wrong type found later fails far from its cause: ``keep_last=2.5`` let every save commit and then
failed its retention on the upload thread, so each save was reported failed; ``grace_s="2"`` killed the
preemption watchdog at the first SIGTERM, and with it the grace deadline and the second-SIGTERM exit.
So each is refused at once, naming the argument and why. ``True`` is refused where a count or a
duration is meant (Python counts it an ``int``), and so is a numeric string: ``"50"`` read from a
config file or ``argv`` is the caller's to convert.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any


def count(name: str, value: Any, *, minimum: int = 1, why: str = "") -> int:
    """``value`` as an ``int`` of at least ``minimum`` (anything with ``__index__``: numpy integers too).

    Raises:
        TypeError: not an integer (a float, a string, ``None``, a bool).
        ValueError: below ``minimum``; ``why`` ends the message.
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {_kind(value)}") from None
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}{why}, got {number}")
    return number


def seconds(name: str, value: Any, *, zero: bool = False) -> float:
    """``value`` as a ``float`` number of seconds: above zero (or at least zero with ``zero``), not NaN.

    Raises:
        TypeError: not a real number (a string, ``None``, a bool).
        ValueError: negative, zero where ``zero`` is false, or NaN.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {_kind(value)}")
    number = float(value)
    if math.isnan(number) or number < 0 or (number == 0 and not zero):
        raise ValueError(f"{name} must be {'>= 0' if zero else '> 0'} seconds, got {value!r}")
    return number


def flag(name: str, value: Any) -> bool:
    """``value``, which must be ``True`` or ``False`` itself: anything else (``"no"``, ``0``, ``None``) is a
    ``TypeError`` naming ``name``. Read for its truth, ``allow_pickle="no"`` turned unpickling on.

    Raises:
        TypeError: not a bool.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"
