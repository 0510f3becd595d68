"""What the checkpoint library raises and warns."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A save failed (raised on the call after the failure, or in ``close``)."""


class SupersededError(CheckpointError):
    """A newer attempt of the same job writes under this base: this process is a zombie and keeps
    its hands off (it commits and deletes nothing there)."""


class UnsafeCheckpointError(CheckpointError):
    """Restoring would unpickle arbitrary objects and ``allow_pickle`` was not given."""


class CorruptCheckpoint(Exception):
    """One checkpoint failed verification; restore skips it and tries the previous one.

    ``damaged``: its bytes are not what was committed (a file missing, cut short or changed, a manifest
    that no longer matches its commit marker), so retention may delete it. Not damaged: not committed (a
    save that may still be in flight), or committed whole but not readable here (a newer format): left alone.
    """

    def __init__(self, reason: str, *, damaged: bool = False):
        super().__init__(reason)
        self.damaged = damaged


class CheckpointWarning(UserWarning):
    """A checkpoint was skipped on restore (it names the checkpoint and says why), or a save holds
    values only pickle can save, which restore refuses by default (it names them), or a progress metric is left
    out of the report as the broker would refuse it (:mod:`checkpoint.progress`)."""
