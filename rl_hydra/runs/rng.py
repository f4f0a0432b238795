"""Random generators in checkpoints, loaded on whatever device the run now uses."""

from __future__ import annotations

import hashlib

import torch


def restore_generator(generator: torch.Generator, state: torch.Tensor) -> None:
    """`generator.set_state(state)`; a state saved on another kind of device (a GPU run's,
    predicted with or resumed on a CPU, or back) belongs to another algorithm, so the generator
    is seeded from it instead: the draws go on deterministically, though not as they would have there.
    A state is a byte tensor on the CPU for every generator: a checkpoint loaded onto the GPU
    (load_run(..., device="cuda")) brings it back first."""
    state = state.cpu()
    if state.numel() == generator.get_state().numel():
        generator.set_state(state)
    else:
        generator.manual_seed(int.from_bytes(hashlib.sha256(state.numpy().tobytes()).digest()[:8], "little"))
