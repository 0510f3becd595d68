"""The process-global random generators as a stateful object you can put in a save.

    ckpt.save(step, {"model": model, "rng": GlobalRNG()})
    ckpt.restore(into={"model": model, "rng": GlobalRNG()})

covers python ``random``, numpy's global generator and torch's CPU (and CUDA) generators.
"""

from __future__ import annotations

from typing import Any

from checkpoint import serialization


class GlobalRNG:
    """``state_dict()`` captures the global RNG states; ``load_state_dict()`` sets them."""

    def state_dict(self) -> dict[str, Any]:
        return serialization.rng_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        serialization.set_rng_state(state)
