"""Capturing and restoring a vector env's state, for envs where that is safe.

Classic-control envs keep their whole dynamic state in a few plain attributes
(`state`, `steps_beyond_terminated`, `last_u`, the RNG) plus the TimeLimit
counter, and so do the toy-text ones (FrozenLake's, CliffWalking's and Taxi's
state index `s` and last action, Taxi's orientation, Blackjack's hands as lists
of ints), so a resumed run can continue the very episodes it stopped in. Other
envs hold state in native objects (Box2D, MuJoCo, ALE) or in nested game objects
and wrapper buffers (MinAtar, frame stacks): for them capture returns None and a
resumed run starts fresh episodes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

CAPTURABLE_MODULES = ("gymnasium.envs.classic_control.", "gymnasium.envs.toy_text.")
_PLAIN = (bool, int, float, type(None))


def can_capture(vec_env) -> bool:
    """Whether the envs are in this process (env.vectorization=sync) and of a capturable kind."""
    return hasattr(vec_env, "envs") and all(
        type(env.unwrapped).__module__.startswith(CAPTURABLE_MODULES) for env in vec_env.envs
    )


def _captured(value) -> bool:
    """State a checkpoint keeps: arrays and lists of numbers (Blackjack's hands), numbers, numpy strings, None."""
    if isinstance(value, list):
        return all(isinstance(item, (np.number, np.bool_, *_PLAIN)) for item in value)
    if isinstance(value, np.ndarray):  # numbers (FrozenLake's map of bytes is fixed, and torch holds no bytes)
        return value.dtype.kind in "biuf"
    return isinstance(value, (np.generic, *_PLAIN))


def _to_checkpoint(value):
    """Checkpoints hold tensors and plain data only (torch.load weights_only=True)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_to_checkpoint(item) for item in value]
    return value


def _from_checkpoint(value):
    return value.numpy().copy() if torch.is_tensor(value) else list(value) if isinstance(value, list) else value


def capture_env_state(vec_env) -> list[dict[str, Any]] | None:
    if not can_capture(vec_env):
        return None
    states = []
    for env in vec_env.envs:
        core = env.unwrapped
        attributes = {k: _to_checkpoint(v) for k, v in vars(core).items() if _captured(v) and not k.startswith("_")}
        wrappers, layer = [], env
        while isinstance(layer, gym.Wrapper):
            wrappers.append(getattr(layer, "_elapsed_steps", None))
            layer = layer.env
        states.append({"attributes": attributes, "rng": core.np_random.bit_generator.state, "elapsed_steps": wrappers})
    return states


def restore_env_state(vec_env, states: list[dict[str, Any]]) -> None:
    for env, state in zip(vec_env.envs, states, strict=True):
        core = env.unwrapped
        known = vars(core)
        for key, value in state["attributes"].items():  # only what the env holds and a capture keeps
            if key.startswith("_") or key not in known or not _captured(known[key]):
                raise ValueError(f"env state names {key!r}, which is not state this env keeps")
            if not (torch.is_tensor(value) or isinstance(value, (list, str, *_PLAIN))):
                raise ValueError(f"env state {key!r} is a {type(value).__name__}, not a number, list or tensor")
            setattr(core, key, _from_checkpoint(value))
        core.np_random.bit_generator.state = state["rng"]
        layer = env
        for elapsed in state["elapsed_steps"]:
            if elapsed is not None:
                layer._elapsed_steps = elapsed
            layer = layer.env
