"""The process-global random generators as a stateful object you can put in a save.

    ckpt.save(step, {"model": model, "rng": GlobalRNG()})
    ckpt.restore(into={"model": model, "rng": GlobalRNG()})

covers python ``random``, numpy's global generator and torch's CPU (and CUDA) generators.

In a ``torch.distributed`` run each rank's generators are its own (its dropout masks, its augmentation), and a
checkpoint holds each rank's: rank 0's at the top, as a single process saves it, and the others' under ``ranks``
(rank → state) beside the ``world_size`` that saved them (:mod:`checkpoint.ranks` gets them to rank 0, which writes).
At a restore each rank takes its own. Before, every rank restored rank 0's state, and after a resume all ranks drew
the same masks. A checkpoint with one state (a single process's, or one written before) restores it on every
rank, as then; an earlier version reading a checkpoint of this one finds rank 0's state where it looks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from checkpoint import ranks, serialization
from checkpoint.errors import CheckpointWarning

log = logging.getLogger("checkpoint")

_made = False  # a GlobalRNG exists in this process: its ranks hand their states to rank 0 (Checkpointer.due)
_peers = threading.local()  # the other ranks' states while rank 0 captures a save (Checkpointer.save)
_said_one_state = False


class GlobalRNG:
    """``state_dict()`` captures the global RNG states; ``load_state_dict()`` sets them (this rank's, in a
    torch.distributed run)."""

    def __init__(self) -> None:
        global _made
        _made = True

    def state_dict(self) -> dict[str, Any]:
        state = serialization.rng_state()
        peers = getattr(_peers, "value", None)
        if peers is not None:
            world_size, states = peers
            state["world_size"] = world_size
            state["ranks"] = dict(states)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rank, world_size = ranks.group() or (0, 1)
        saved_world = state.get("world_size")
        if saved_world is None:  # one state, every rank restores it
            global _said_one_state
            if rank and not _said_one_state:
                _said_one_state = True
                log.info("rank %d: the checkpoint holds one random state (one process saved it, or an earlier "
                         "version): restored on every rank", rank)
            serialization.set_rng_state(state)
            return
        own = state if rank == 0 else state.get("ranks", {}).get(rank)
        if own is not None:
            serialization.set_rng_state(own)
        if saved_world != world_size:
            warnings.warn(CheckpointWarning(
                f"the checkpoint holds the random state of {saved_world} rank(s) and this run has {world_size}: "
                + (f"rank {rank} restored its own" if own is not None else f"rank {rank} keeps its seed")
                + "; a run that needs each rank's random stream as saved should resume with as many ranks"),
                stacklevel=3)
        elif own is None:
            warnings.warn(CheckpointWarning(
                f"the checkpoint lacks rank {rank}'s random state (it had not handed it over when rank 0 saved): "
                f"rank {rank} keeps its seed"), stacklevel=3)


def made() -> bool:
    """Whether this process made a :class:`GlobalRNG` (so a save may hold its ranks' states)."""
    return _made


def holds(state: Any, depth: int = 4) -> bool:
    """Whether ``state`` (a save's dict) holds a :class:`GlobalRNG`, at the top or in dicts within (lists are not
    searched: they may hold a million numbers)."""
    if isinstance(state, GlobalRNG):
        return True
    if depth and isinstance(state, Mapping):
        return any(holds(v, depth - 1) for v in state.values())
    return False


@contextlib.contextmanager
def with_peers(peers: tuple[int, Mapping[int, dict[str, Any]]] | None) -> Iterator[None]:
    """While rank 0 captures a save: each :class:`GlobalRNG` adds ``peers``, the world size and the other ranks'
    states (rank → state). None: a single process's save, nothing added."""
    _peers.value = peers
    try:
        yield
    finally:
        _peers.value = None
