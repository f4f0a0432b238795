"""A run's random streams: independent seeds spawned from its one `seed`, and generators' states
in checkpoints, loaded on whatever device the run now uses."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class RunSeeds:
    """One seed per random stream of a run, each spawned from the run's `seed` (numpy's
    SeedSequence), so that no two streams start from the same bits."""

    torch: int  # torch's global generator: the networks' initial weights
    agent: int  # the agent's own generators: exploration, sampled noise
    buffer: int  # replay sampling
    env: int  # the training envs (env i takes env + i) and their action space
    evaluation: int  # the evaluation envs


def spawn_seeds(seed: int) -> RunSeeds:
    """The run's streams, the same for the same `seed`. Each is below 2**30, so that an env's index
    or an evaluation round added to it stays a 32-bit int (EnvPool takes a C int)."""
    streams = np.random.SeedSequence(seed).spawn(len(dataclasses.fields(RunSeeds)))
    return RunSeeds(*(int(stream.generate_state(1, np.uint32)[0]) >> 2 for stream in streams))


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
