"""Observation wrappers that env configs list under `wrappers:` (each a `_partial_` factory)."""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

from rl_hydra.config import ConfigError, check_int


class MaskObservation(gym.ObservationWrapper):
    """Zero the observation components at `indices`, making the task partially observed.

    The components stay in the observation (always 0), so a network built for the
    full env fits the masked one; only memory can recover what they carried.
    """

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"MaskObservation needs a 1-d Box observation space; the env has {space}")
        size = space.shape[0]
        self.indices = np.array([check_int(f"env.wrappers.indices[{k}]", i, 0, size - 1)
                                 for k, i in enumerate(indices)], dtype=np.int64)
        low, high = space.low.copy(), space.high.copy()
        low[self.indices] = high[self.indices] = 0.0
        self.observation_space = gym.spaces.Box(low, high, dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        masked = np.array(observation, copy=True)
        masked[self.indices] = 0.0
        return masked
