"""Checkpoints for training scripts: asynchronous, atomically committed, verified on restore.

Import-light: torch, numpy and cloud SDKs load only when used. Never imports ``broker``,
``launchers`` or ``pricing`` — training scripts run where those are not installed.
"""

from checkpoint.checkpointer import Checkpointer, Restored, SaveStats
from checkpoint.errors import CheckpointError, CheckpointWarning, SupersededError, UnsafeCheckpointError
from checkpoint.rng import GlobalRNG
from checkpoint.storage import TransferOptions

__all__ = [
    "Checkpointer",
    "CheckpointError",
    "CheckpointWarning",
    "GlobalRNG",
    "Restored",
    "SaveStats",
    "SupersededError",
    "TransferOptions",
    "UnsafeCheckpointError",
]
