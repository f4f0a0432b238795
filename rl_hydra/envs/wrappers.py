"""Observation wrappers that env configs list under `wrappers:` (each a `_partial_` factory).

They follow gymnasium's conventions: each records its constructor arguments
(`RecordConstructorArgs`), so an env's spec can recreate it, and declares the observation
space its observations lie in (`gymnasium.utils.env_checker.check_env` passes).
"""

from __future__ import annotations

import logging
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence

import gymnasium as gym
import numpy as np

from rl_hydra.errors import EnvMismatch
from rl_hydra.schema.keys import Range, check
from rl_hydra.spaces import is_text

log = logging.getLogger(__name__)


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
            raise EnvMismatch(f"MaskObservation needs a 1-d Box observation space; the env has {space}")
        size = space.shape[0]
        for k, index in enumerate(indices):  # within the observation: only the wrapper, given the env, can check it
            check(index, f"env.wrappers.indices[{k}]", Range("integer", minimum=0, maximum=size - 1))
        self.indices = np.array(list(indices), dtype=np.int64)
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
            raise EnvMismatch(
                f"ScaleObservation needs {len(scale)} factors for a Box of that length; the env has {space}"
            )
        self.scale = np.asarray(scale, dtype=space.dtype)  # finite factors > 0: the schema's range
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
            raise EnvMismatch(f"ChannelsFirst needs a 3-d Box observation space (H, W, C); the env has {space}")
        self.observation_space = gym.spaces.Box(
            np.moveaxis(space.low, -1, 0), np.moveaxis(space.high, -1, 0), dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0))


def needs_parts(space: gym.Space) -> bool:
    """Whether `ObservationParts` has work to do: a Tuple, or a Dict with a nested or text part."""
    if isinstance(space, gym.spaces.Tuple):
        return True
    return isinstance(space, gym.spaces.Dict) and any(
        isinstance(part, (gym.spaces.Dict, gym.spaces.Tuple)) or is_text(part) for part in space.spaces.values()
    )


def _leaves(space: gym.Space, path: tuple = ()) -> Iterator[tuple[tuple, gym.Space]]:
    """(path, space) of each part of a Dict or Tuple space that is neither, depth first."""
    if isinstance(space, gym.spaces.Dict):
        for key, part in space.spaces.items():
            yield from _leaves(part, (*path, key))
    elif isinstance(space, gym.spaces.Tuple):
        for index, part in enumerate(space.spaces):
            yield from _leaves(part, (*path, index))
    else:
        yield path, space


_said: set[str] = set()


def _log_once(message: str) -> None:
    """Say it once per process (each env copy builds its own wrapper)."""
    if message not in _said:
        _said.add(message)
        log.info(message)


class ObservationParts(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """A Dict or Tuple observation, nested or not, as a flat Dict of its parts, each named by its
    path: "image", "direction" (MiniGrid), "0", "1", "2" (Blackjack's Tuple), "pos.x" (nested).

    What the replay buffer stores part by part and the networks encode part by part (rl_hydra/spaces.py).
    Text parts (gymnasium's Text, MiniGrid's mission) have no encoder: they are dropped, with a log
    line, or with `keep_text` kept as their first TEXT_WORDS words, each a hashed index in
    1..VOCABULARY (0 pads), a MultiDiscrete part the networks encode as they encode any other.
    `make_env` adds it after `env.wrappers` where the observation needs it (`needs_parts`).
    """

    TEXT_WORDS, VOCABULARY = 16, 1000

    def __init__(self, env: gym.Env, keep_text: bool = False):
        gym.utils.RecordConstructorArgs.__init__(self, keep_text=keep_text)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise EnvMismatch(f"ObservationParts needs a Dict or Tuple observation space; the env has {space}")
        self.keep_text = keep_text
        self.paths: list[tuple[str, tuple, bool]] = []  # (part name, path, is text)
        parts: dict[str, gym.Space] = {}
        for path, part in _leaves(space):
            name, text = ".".join(map(str, path)), is_text(part)
            if text and not keep_text:
                _log_once(
                    f"observation part {name!r} ({type(part).__name__}) is text, which no network "
                    f"encodes: dropped (env.keep_text=true keeps its words as indices)"
                )
                continue
            self.paths.append((name, path, text))
            parts[name] = gym.spaces.MultiDiscrete([self.VOCABULARY + 1] * self.TEXT_WORDS) if text else part
        if not parts:
            raise EnvMismatch(
                f"observations of {space} have only text parts, which no network encodes; "
                f"set env.keep_text=true to keep them as word indices"
            )
        self.observation_space = gym.spaces.Dict(OrderedDict(parts))

    def observation(self, observation) -> dict:
        out = {}
        for name, path, text in self.paths:
            value = observation
            for key in path:
                value = value[key]
            out[name] = self.words(value) if text else value
        return out

    @classmethod
    def words(cls, text: str) -> np.ndarray:
        """The first TEXT_WORDS words of `text`, lower-cased, each hashed to 1..VOCABULARY; 0 pads."""
        ids = [zlib.crc32(word.encode()) % cls.VOCABULARY + 1 for word in str(text).lower().split()]
        ids = ids[: cls.TEXT_WORDS] + [0] * max(0, cls.TEXT_WORDS - len(ids))
        return np.asarray(ids, dtype=np.int64)
