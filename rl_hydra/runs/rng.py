"""Random generators in checkpoints, loaded on whatever device the run now uses."""

from __future__ import annotations

import hashlib

import torch


def restore_generator(generator: torch.Generator, state: torch.Tensor) -> None:
    """`generator.set_state(state)`; a state saved on another kind of device (a GPU run's,
    predicted with or resumed on a CPU, or back) belongs to another algorithm, so the generator
    is seeded from it instead: the draws go on deterministically, though not as they would have there."""
    if state.numel() == generator.get_state().numel():
        generator.set_state(state)
    else:
        generator.manual_seed(int.from_bytes(hashlib.sha256(state.cpu().numpy().tobytes()).digest()[:8], "little"))
