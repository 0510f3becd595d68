"""The GPUs' random states restored where fewer (or more) GPUs are visible than were saved.

This host has no GPU, so ``torch.cuda`` is replaced by a stand-in that keeps each device's generator state and, as
torch's own lazy callback does, fails on an index past the last device: the boundary this machine cannot reach. The
rest (the checkpoint's GlobalRNG, its save and restore) is the library's real path on a local directory.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from checkpoint import Checkpointer, CheckpointWarning, GlobalRNG


class FakeCuda:
    """``torch.cuda``'s RNG calls over ``devices`` generators (named as a fake: no GPU here)."""

    def __init__(self, devices: int):
        self.states = [torch.tensor([i], dtype=torch.uint8) for i in range(devices)]

    def is_available(self) -> bool:
        return bool(self.states)

    def device_count(self) -> int:
        return len(self.states)

    def get_rng_state_all(self):
        return [s.clone() for s in self.states]

    def set_rng_state(self, state, device=0):
        self.states[device] = state.clone()  # IndexError past the last device, as torch's callback fails

    def set_rng_state_all(self, states):
        for i, state in enumerate(states):
            self.set_rng_state(state, i)


def saved_on(tmp_path, devices: int) -> list:
    cuda = FakeCuda(devices)
    cuda.states = [torch.tensor([100 + i], dtype=torch.uint8) for i in range(devices)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "cuda", cuda)
        with Checkpointer(tmp_path, every_steps=1, handle_sigterm=False) as ckpt:
            ckpt.save(1, {"rng": GlobalRNG()}, wait=True)
    return [int(s[0]) for s in cuda.states]


def restored_on(tmp_path, devices: int, monkeypatch) -> tuple[list[int], list[warnings.WarningMessage]]:
    cuda = FakeCuda(devices)
    monkeypatch.setattr(torch, "cuda", cuda)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Checkpointer(tmp_path, every_steps=1, handle_sigterm=False) as ckpt:
            assert ckpt.restore(into={"rng": GlobalRNG()}).step == 1
    return [int(s[0]) for s in cuda.states], [w for w in caught if issubclass(w.category, CheckpointWarning)]


def test_a_run_resumed_on_fewer_gpus_restores_the_first_ones_and_warns_instead_of_failing(tmp_path, monkeypatch):
    assert saved_on(tmp_path, 4) == [100, 101, 102, 103]
    states, said = restored_on(tmp_path, 2, monkeypatch)
    assert states == [100, 101]
    assert len(said) == 1 and "random state of 4 GPU(s) and 2 are visible here: restored 2" in str(said[0].message)


def test_a_run_resumed_on_more_gpus_restores_those_saved_and_says_the_others_keep_their_seeds(tmp_path, monkeypatch):
    saved_on(tmp_path, 1)
    states, said = restored_on(tmp_path, 3, monkeypatch)
    assert states == [100, 1, 2]
    assert len(said) == 1 and "the others keep their seeds" in str(said[0].message)


def test_as_many_gpus_as_saved_restores_each_silently(tmp_path, monkeypatch):
    saved_on(tmp_path, 2)
    states, said = restored_on(tmp_path, 2, monkeypatch)
    assert states == [100, 101] and said == []
