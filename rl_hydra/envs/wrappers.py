"""Observation wrappers that env configs list under `wrappers:` (each a `_partial_` factory).

They follow gymnasium's conventions: each records its constructor arguments
(`RecordConstructorArgs`), so an env's spec can recreate it, and declares the observation
space its observations lie in (`gymnasium.utils.env_checker.check_env` passes).
"""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

from rl_hydra.config import ConfigError, check_int


class MaskObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Zero the observation components at `indices`, making the task partially observed.

    The components stay in the observation (always 0), so a network built for the
    full env fits the masked one; only memory can recover what they carried.
    """

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        gym.utils.RecordConstructorArgs.__init__(self, indices=list(indices))
        gym.ObservationWrapper.__init__(self, env)
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


class ScaleObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Multiply each observation component by a fixed factor (e.g. 1 / its typical range).

    A linear rescale keeps every bit of information; it only saves the network from
    having to learn large input weights, which matters when what it must pick up is a
    small difference between consecutive observations (velocities from positions).
    """

    def __init__(self, env: gym.Env, scale: Sequence[float]):
        gym.utils.RecordConstructorArgs.__init__(self, scale=list(scale))
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (len(scale),):
            raise ConfigError(f"ScaleObservation needs {len(scale)} factors for a Box of that length; "
                              f"the env has {space}")
        self.scale = np.asarray(scale, dtype=space.dtype)
        if not np.all(np.isfinite(self.scale) & (self.scale > 0)):
            raise ConfigError(f"env.wrappers.scale={list(scale)} is not allowed; expected finite factors > 0")
        self.observation_space = gym.spaces.Box(space.low * self.scale, space.high * self.scale, dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return (observation * self.scale).astype(self.observation_space.dtype, copy=False)


class ChannelsFirst(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Move an image's channel axis from last to first, (H, W, C) -> (C, H, W), keeping its dtype:
    the layout of torch's convolutions and of gymnasium's frame stacks."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ConfigError(f"ChannelsFirst needs a 3-d Box observation space (H, W, C); the env has {space}")
        self.observation_space = gym.spaces.Box(np.moveaxis(space.low, -1, 0), np.moveaxis(space.high, -1, 0),
                                                dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0))
