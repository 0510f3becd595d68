"""The ranks of a ``torch.distributed`` run as checkpoints see them: which one this process is, and each rank's
random state handed to rank 0 — the only rank that writes — so that a checkpoint holds every rank's.

Each rank's generators differ (its dropout masks, its data augmentation), and only rank 0 writes: before, a
checkpoint held rank 0's state alone and a resume gave it to every rank, so from then on all ranks drew the same
masks. The states travel through the process group's own key-value store (the one ``init_process_group`` set up:
torchrun's TCP store, or the ``file://`` one), not through a collective: a collective needs every rank to call it
at the same step, and the ranks do not agree on when a save is due — ``every_seconds`` is read on each rank's own
clock, and a preemption notice reaches each at its own step — so rank 0 would wait in it until the grace period
killed the run without its checkpoint. A store write waits for nobody.

Event sequence, DDP with 2 ranks, a save at step 3::

    rank 1: due(1) publishes (1, state) … due(3) publishes (3, state); save(3) writes nothing; step 4 runs
    rank 0: due(3) → save(3) reads rank 1's key until it says step 3 → captures both states → uploads

Rank 1 reaches ``due(3)`` without rank 0 (step 3's collectives are done), so rank 0 waits milliseconds as a rule;
at most :data:`WAIT_S`. A rank that has not handed its state over by then (a loop that calls ``due()`` and ``save()``
on rank 0 only, a rank that hangs) is left out of that checkpoint with a warning, and not waited for again unless
it turns up; at a resume it keeps its seed. Ranks publish only once the script made a :class:`~checkpoint.GlobalRNG`
(the one thing that reads them), each step: 20 kB and one store round trip; capturing and encoding the states took
about 1.4 ms a step on the loaded 2-core test host (well under 1 % of a GPU training step).

The key holds the restart count torchrun gives (``TORCHELASTIC_RESTART_COUNT``): its store outlives a restart of
the workers, and a key left by the run before it, further on in steps than the resume, must not be taken for
this run's.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterable

from checkpoint import serialization

log = logging.getLogger("checkpoint")


class RankTag(logging.Filter):
    """Leads each of the library's lines with the rank that said it (``[rank 1] preemption notice: …``) in a run of
    several ranks (torchrun's ``RANK`` and ``WORLD_SIZE``): every rank says its notice, its grace period and its
    stop, and the log of a 2-rank run had each line twice with no way to tell whose it was."""

    def filter(self, record: logging.LogRecord) -> bool:
        rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
        if rank and world and world != "1" and not getattr(record, "rank_tagged", False):
            record.msg, record.rank_tagged = f"[rank {rank}] {record.msg}", True
        return True


for _name in ("checkpoint", "checkpoint.progress"):  # a child's lines skip the parent's filters
    logging.getLogger(_name).addFilter(RankTag())

#: The longest rank 0's save waits for another rank's random state of the step it saves (seconds). In DDP the
#: ranks are within one step of each other, and the rank waited for needs nothing from rank 0 to get there.
WAIT_S = 10.0
_POLL_S = 0.005


def group() -> tuple[int, int] | None:
    """(rank, world size) in an initialized torch.distributed default group, else None. torch is not imported for
    this: a script that never imported torch.distributed has no group."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except (AttributeError, RuntimeError, ValueError):
        pass
    return None


def _store():
    try:
        return sys.modules["torch.distributed"].distributed_c10d._get_default_store()
    except (AttributeError, KeyError, RuntimeError, ValueError):
        return None


def _key(rank: int) -> str:
    return f"spot-broker/checkpoint/rng/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{rank}"


_said_cannot_publish = False


def publish(rank: int, step: int) -> None:
    """Hand this rank's random state after ``step`` to rank 0. Never raises: a store that is gone (rank 0 exited
    after a preemption's save) must not end this rank's training."""
    global _said_cannot_publish
    store = _store()
    if store is None:
        return
    try:
        store.set(_key(rank), serialization.rng_state_to_wire(step, serialization.rng_state()))
    except Exception as e:  # noqa: BLE001 - the store's errors are RuntimeErrors, DistStoreErrors, OSErrors
        if not _said_cannot_publish:
            _said_cannot_publish = True
            log.warning("rank %d: cannot hand its random state to rank 0 (%s); a checkpoint will lack it", rank, e)


def collect(step: int, waited: Iterable[int], glanced: Iterable[int], timeout: float) -> dict[int, dict]:
    """The random states the ranks published for ``step``: each rank in ``waited`` for up to ``timeout`` seconds
    in all, each in ``glanced`` only if it is there now. A rank whose key says a later step (a script whose ranks
    are not in lockstep) is left out at once."""
    store = _store()
    if store is None:
        return {}
    found: dict[int, dict] = {}
    glanced = set(glanced)
    pending = set(waited) | glanced
    deadline = time.monotonic() + timeout
    while pending:
        for rank in sorted(pending):
            key = _key(rank)
            try:
                if store.check([key]):
                    at, state = serialization.rng_state_from_wire(store.get(key))
                    if at == step:
                        found[rank] = state
                        pending.discard(rank)
                    elif at > step:
                        pending.discard(rank)
            except Exception as e:  # noqa: BLE001 - a store error leaves the rank out, as a timeout does
                log.warning("cannot read rank %d's random state: %s", rank, e)
                pending.discard(rank)
        pending -= glanced  # looked at once
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    return found
