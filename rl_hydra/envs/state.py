"""Capturing and restoring a vector env's state, for envs where that is safe.

Classic-control envs keep their whole dynamic state in a few plain attributes
(`state`, `steps_beyond_terminated`, `last_u`, the RNG) plus the TimeLimit
counter, and so do the toy-text ones (FrozenLake's, CliffWalking's and Taxi's
state index `s` and last action, Taxi's orientation, Blackjack's hands as lists
of ints), so a resumed run can continue the very episodes it stopped in. Other
envs hold state in native objects (Box2D, MuJoCo, ALE) or in nested game objects
and wrapper buffers (MinAtar, frame stacks): for them capture returns None and a
resumed run starts fresh episodes.

A checkpoint may come from someone else, so only what each env class holds as its dynamic state
(STATE_ATTRIBUTES) is captured and restored, each value checked for its kind and shape first: never
a parameter (gravity), nor what chooses a side effect (render_mode would open a window).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

CAPTURABLE_MODULES = ("gymnasium.envs.classic_control.", "gymnasium.envs.toy_text.")
_PLAIN = (bool, int, float, type(None))

# {env class: {attribute: its kind}}: the dynamic state each capturable env keeps, and nothing else.
# Kinds: "vector:N" (N floats), "count" (a whole number >= 0 or None), "number" (a finite number or
# None), "hand" (Blackjack's cards: a list of ints from 1 to 10)
STATE_ATTRIBUTES: dict[str, dict[str, str]] = {
    "CartPoleEnv": {"state": "vector:4", "steps_beyond_terminated": "count"},
    "AcrobotEnv": {"state": "vector:4"},
    "MountainCarEnv": {"state": "vector:2"},
    "Continuous_MountainCarEnv": {"state": "vector:2"},
    "PendulumEnv": {"state": "vector:2", "last_u": "number"},
    "FrozenLakeEnv": {"s": "count", "lastaction": "count"},
    "CliffWalkingEnv": {"s": "count", "lastaction": "count"},
    "TaxiEnv": {"s": "count", "lastaction": "count", "taxi_orientation": "count"},
    "BlackjackEnv": {"dealer": "hand", "player": "hand"},
}
MAX_ELAPSED_STEPS = 2**53  # a TimeLimit's step counter: a whole number of steps, below this


def can_capture(vec_env) -> bool:
    """Whether the envs are in this process (env.vectorization=sync) and of a capturable kind."""
    return hasattr(vec_env, "envs") and all(
        type(env.unwrapped).__module__.startswith(CAPTURABLE_MODULES)
        and type(env.unwrapped).__name__ in STATE_ATTRIBUTES
        for env in vec_env.envs
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
        kept = STATE_ATTRIBUTES[type(core).__name__]
        attributes = {k: _to_checkpoint(v) for k, v in vars(core).items() if k in kept and _captured(v)}
        wrappers, layer = [], env
        while isinstance(layer, gym.Wrapper):
            wrappers.append(getattr(layer, "_elapsed_steps", None))
            layer = layer.env
        states.append({"attributes": attributes, "rng": core.np_random.bit_generator.state, "elapsed_steps": wrappers})
    return states


def restore_env_state(vec_env, states: list[dict[str, Any]]) -> None:
    """Put each env back in the state a checkpoint captured: every value is checked first
    (ValueError naming the attribute), so that a wrong one never reaches a step."""
    envs = list(vec_env.envs)
    if not isinstance(states, list) or len(states) != len(envs):
        held = len(states) if isinstance(states, list) else "no list of"
        raise ValueError(f"env state holds {held} envs, not {len(envs)}")
    for env, state in zip(envs, states):
        check_env_state(env, state)
    for env, state in zip(envs, states):
        core = env.unwrapped
        kept = STATE_ATTRIBUTES[type(core).__name__]
        for key, value in state["attributes"].items():
            if key in kept:  # others equal the env's own (an older capture's parameters): not applied
                setattr(core, key, _from_checkpoint(value))
        core.np_random.bit_generator.state = state["rng"]
        for layer, elapsed in zip(time_limit_layers(env), state["elapsed_steps"]):
            if elapsed is not None:
                layer._elapsed_steps = elapsed


def time_limit_layers(env) -> list:
    """The wrappers of `env`, outermost first (their `_elapsed_steps` is part of the state)."""
    layers, layer = [], env
    while isinstance(layer, gym.Wrapper):
        layers.append(layer)
        layer = layer.env
    return layers


def check_env_state(env, state: Any) -> None:
    """ValueError unless `state` is one env's state as capture_env_state makes it for this env's
    class: only its STATE_ATTRIBUTES, each of its kind; an RNG state of its bit generator; one
    step counter (a whole number >= 0, or None) per wrapper."""
    core = env.unwrapped
    kept = STATE_ATTRIBUTES.get(type(core).__name__, {})
    if not isinstance(state, dict) or set(state) != {"attributes", "rng", "elapsed_steps"}:
        raise ValueError("env state is not a mapping of attributes, rng and elapsed_steps")
    if not isinstance(state["attributes"], dict):
        raise ValueError("env state's attributes are not a mapping")
    own = vars(core)
    for key, value in state["attributes"].items():
        if key not in kept:
            if key in own and same_value(own[key], value):
                continue  # an older capture kept the env's parameters too: the same, so nothing to restore
            raise ValueError(
                f"env state sets {key!r} to {value!r}, which is not state {type(core).__name__} keeps "
                f"(its state: {', '.join(kept) or 'none'}); a checkpoint restores nothing else"
            )
        problem = attribute_problem(kept[key], value)
        if problem:
            raise ValueError(f"env state {key!r} {problem}")
    rng = state["rng"]
    generator = core.np_random.bit_generator
    if not isinstance(rng, dict) or rng.get("bit_generator") != type(generator).__name__:
        raise ValueError(f"env state's rng is not a {type(generator).__name__} state")
    elapsed = state["elapsed_steps"]
    if not isinstance(elapsed, list) or len(elapsed) != len(time_limit_layers(env)):
        raise ValueError(f"env state's elapsed_steps is not a list of {len(time_limit_layers(env))} step counters")
    for count in elapsed:
        if count is not None and (type(count) is not int or not 0 <= count < MAX_ELAPSED_STEPS):
            raise ValueError(f"env state's elapsed_steps holds {count!r}, not a whole number of steps >= 0")


def same_value(own: Any, value: Any) -> bool:
    """Whether a checkpoint's `value` is what the env holds (`own`), tensors and numpy alike."""
    try:
        return bool(np.array_equal(np.asarray(_from_checkpoint(value)), np.asarray(own))) and (
            (own is None) == (value is None)
        )
    except (TypeError, ValueError):
        return False


def attribute_problem(kind: str, value: Any) -> str | None:
    """What is wrong with a state attribute's value for its kind (None: nothing)."""
    if kind.startswith("vector:"):
        size = int(kind.split(":")[1])
        if not torch.is_tensor(value) or not value.is_floating_point() or tuple(value.shape) != (size,):
            shown = f"a {value.dtype} tensor of shape {tuple(value.shape)}" if torch.is_tensor(value) else repr(value)
            return f"is {shown}, not {size} floats"
        return None if bool(torch.isfinite(value).all()) else "holds a value that is not finite"
    if kind == "hand":
        fine = isinstance(value, list) and len(value) <= 32 and all(type(c) is int and 1 <= c <= 10 for c in value)
        return None if fine else f"is {value!r}, not a hand of cards (ints from 1 to 10)"
    if value is None:
        return None
    if kind == "count":
        return None if type(value) is int and 0 <= value < MAX_ELAPSED_STEPS else f"is {value!r}, not a count"
    fine = type(value) in (int, float) and np.isfinite(value)
    return None if fine else f"is {value!r}, not a finite number"
