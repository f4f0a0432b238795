"""Observation spaces as the loops, buffers and networks see them: one array, or a flat dict of parts.

An observation is either one array (a Box, Discrete, MultiDiscrete or MultiBinary space) or,
for a Dict or Tuple space, a dict of such arrays, one per part: `make_env` wraps such an env
in `envs.wrappers.ObservationParts`, which names each part by its path ("image", "0",
"pos.x") and drops text parts (MiniGrid's mission) unless `env.keep_text` keeps them. Batched
observations carry a leading axis (num_envs, or time and batch) on every part.

Each part is stored in its own compact dtype (`storage_dtype`): uint8 frames and bool grids as
the env produced them, a Discrete index in the smallest integer type that holds it (Taxi's
500 states: int16, 2 bytes), MultiBinary as bool, other Box values as float32. Networks turn
indices into one-hot vectors or embeddings themselves (networks/encoders.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rl_hydra.errors import EnvMismatch

LEAVES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
SUPPORTED = "Box, Discrete, MultiDiscrete, MultiBinary, or a Dict or Tuple of them"


def parts(space: gym.Space) -> dict[str, gym.Space]:
    """{part name: space} of a flat Dict (as `ObservationParts` makes), or {"": space} for one array."""
    if isinstance(space, gym.spaces.Dict):
        return dict(space.spaces)
    return {"": space}


def check_observation_space(space: gym.Space) -> None:
    """Every part is a space the buffers store and the networks encode, or one ConfigError line
    naming the space and what to do."""
    for name, part in parts(space).items():
        if isinstance(part, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise EnvMismatch(
                f"observation part {name!r} is a nested {type(part).__name__}; make the env with "
                f"rl_hydra.envs.make_env, which flattens Dict and Tuple observations into parts "
                f"(envs/wrappers.py ObservationParts)"
            )
        if not isinstance(part, LEAVES):
            where = f"observation part {name!r}" if name else "observations"
            text = (
                " (text parts are dropped, or kept as word indices with env.keep_text=true)"
                if name and is_text(part)
                else ""
            )
            raise EnvMismatch(
                f"{where} of {part} have no encoder; supported: {SUPPORTED}{text}; add a wrapper "
                f"to env.wrappers that turns them into one of these (docs/observations.md)"
            )


def shape_of(space: gym.Space) -> tuple[int, ...]:
    """The shape of one value of `space`. Every space stored or encoded here has one; gymnasium's
    type allows None, for spaces such as Text and Graph."""
    if space.shape is None:
        raise TypeError(f"{space} has no shape")
    return space.shape


def is_text(space: gym.Space) -> bool:
    """gymnasium's Text, or a space of strings of its own (MiniGrid's MissionSpace)."""
    return isinstance(space, gym.spaces.Text) or type(space).__name__ == "MissionSpace"


def integer_dtype(low: int, high: int) -> np.dtype:
    """The smallest integer type torch stores and indexes that holds [low, high]: uint8, int16, int32, int64."""
    for dtype in (np.uint8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def storage_dtype(space: gym.Space) -> np.dtype:
    """The dtype a part is stored in: compact, and exact for every value of the space."""
    if isinstance(space, gym.spaces.Discrete):
        return integer_dtype(int(space.start), int(space.start + space.n - 1))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return integer_dtype(int(np.min(space.start)), int(np.max(space.start + space.nvec - 1)))
    if isinstance(space, gym.spaces.MultiBinary):
        return np.dtype(np.bool_)
    if np.dtype(space.dtype) in (np.dtype(np.uint8), np.dtype(np.bool_)):
        return np.dtype(space.dtype)  # raw pixels and grids, as the env produced them
    return np.dtype(np.float32)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


def layout(space: gym.Space) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """{part name: (shape of one observation, torch dtype stored)}."""
    return {name: (shape_of(part), torch_dtype(storage_dtype(part))) for name, part in parts(space).items()}


def describe_layout(space: gym.Space) -> str:
    """An observation's stored bytes and their parts, e.g. "2 B: int16" or "148 B: image (3, 7, 7)
    uint8, direction uint8", for the buffer's log line."""
    sizes = {name: int(np.prod(shape)) * dtype.itemsize for name, (shape, dtype) in layout(space).items()}
    described = ", ".join(
        " ".join(filter(None, (name, str(shape) if shape else "", str(dtype).removeprefix("torch."))))
        for name, (shape, dtype) in layout(space).items()
    )
    return f"{sum(sizes.values())} B: {described}"


def split(obs: Any) -> list:
    """An observation's parts in `parts` order: [obs], or the dict's values."""
    return list(obs.values()) if isinstance(obs, dict) else [obs]


def join(names: Iterable[str], values: Iterable) -> Any:
    """`split`'s inverse: one value for one unnamed part, else {name: value}."""
    names, values = list(names), list(values)
    return values[0] if names == [""] else dict(zip(names, values))


def apply(obs: Any, fn: Callable) -> Any:
    """`fn` on each part of an observation (an array, a tensor or a dict of them)."""
    return {key: fn(value) for key, value in obs.items()} if isinstance(obs, dict) else fn(obs)


def num_rows(obs: Any) -> int:
    """The leading size of a batched observation (num_envs, or batch)."""
    return len(next(iter(obs.values())) if isinstance(obs, dict) else obs)


def network_input(observation_space: gym.Space) -> int | gym.Space:
    """What an algorithm passes a network factory: the size of a vector observation (so that a
    network on vectors is built exactly as from an int), or the space itself (frames, grids,
    indices, a Dict of parts). Spaces that have no encoder are one ConfigError line."""
    check_observation_space(observation_space)
    if isinstance(observation_space, gym.spaces.Box) and len(observation_space.shape) == 1:
        return int(observation_space.shape[0])
    return observation_space
