"""A run's random streams: independent seeds spawned from its one `seed`."""

from __future__ import annotations

import dataclasses

import numpy as np


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
