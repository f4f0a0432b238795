"""Do the chosen groups fit together? One check, before anything is built, read from what the
algorithm class declares (`capabilities`, rl_hydra/protocols.py): the env's action space, the
network group's class, the buffer's kind and n-step returns. Each refusal is one ConfigError line
naming the choice, what the algorithm needs and the options that fit."""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import gymnasium as gym
from hydra.utils import get_class
from omegaconf import DictConfig

from rl_hydra.config import CONF_DIR, compose_option
from rl_hydra.errors import ClassMismatch, EnvMismatch
from rl_hydra.protocols import Capabilities

ACTION_KINDS = {"discrete": "a discrete action space", "continuous": "a continuous (Box) action space"}
# env groups named in messages (building every env to find its action space would be slow)
ENV_EXAMPLES = {
    "discrete": ["cartpole", "acrobot", "mountain_car", "lunar_lander", "minatar", "atari"],
    "continuous": ["pendulum", "mountain_car_continuous", "hopper", "half_cheetah"],
}


def action_kind(space: gym.Space) -> str | None:
    if isinstance(space, gym.spaces.Discrete):
        return "discrete"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        return "continuous"
    return None


def import_class(target: Any, key: str) -> type[Any]:
    try:
        return get_class(str(target))
    except Exception as error:  # noqa: BLE001 - any import failure: one line naming the key
        raise ClassMismatch(f"{key}={target!r} cannot be imported ({type(error).__name__}: {error})") from None


def check_fit(cfg: DictConfig, action_space: gym.Space, choice) -> Capabilities:
    """Refuse, in one line each, an algorithm whose declared capabilities the env, network, buffer
    or algo.n_step do not fit. `choice(group)` names a group's chosen option for messages."""
    algo = import_class(cfg.algo._target_, "algo._target_")
    can: Capabilities | None = getattr(algo, "capabilities", None)
    if can is None:
        raise ClassMismatch(
            f"algo._target_={cfg.algo._target_} declares no `capabilities` (rl_hydra/protocols.py "
            f"Capabilities: action space, network, buffers, n-step); see docs/extending.md"
        )
    name = choice("algo")
    kind = action_kind(action_space)
    if kind != can.actions:
        others = [option for option, other in algo_options().items() if other.capabilities.actions == kind]
        instead = f" or a {kind}-action algo ({', '.join(others)})" if others else ""
        raise EnvMismatch(
            f"algo={name} needs {ACTION_KINDS[can.actions]} but the env has {action_space}; "
            f"use a {can.actions} env ({', '.join(ENV_EXAMPLES[can.actions])}){instead}"
        )
    check_network(cfg.network, can, name, choice("network"))
    check_buffer(cfg, can, name, choice("buffer"))
    # the class's declared capabilities, not a key's range: only the algorithm class can say it
    n_step = cfg.algo.n_step  # every algorithm's schedule key (rl_hydra/schema/algos.py ScheduleKeys)
    if not can.n_step and isinstance(n_step, int) and n_step > 1:
        takers = [option for option, other in algo_options().items() if other.capabilities.n_step]
        raise ClassMismatch(
            f"algo.n_step={n_step} is not supported by algo={name}, which learns from one-step "
            f"returns; allowed: 1 (n-step returns: {', '.join(takers)})"
        )
    return can


def check_network(network: DictConfig, can: Capabilities, algo: str, option: str) -> None:
    """The network group builds the class (or the parts) the algorithm builds on, or a subclass."""
    wanted = {"": can.network} if isinstance(can.network, str) else can.network
    has_parts = "_target_" not in network
    for part, class_name in wanted.items():
        node = network.get(part) if part else (None if has_parts else network)
        target = node.get("_target_") if isinstance(node, DictConfig) else None
        if target is None or not issubclass(
            import_class(target, f"network.{part}._target_" if part else "network._target_"), get_class(class_name)
        ):
            needs = ", ".join(f"{p}: {c}" if p else c for p, c in wanted.items())
            builds = (
                ", ".join(
                    f"{p!s}: {node._target_}"
                    for p, node in network.items()
                    if isinstance(node, DictConfig) and "_target_" in node
                )
                or "no network class"
                if has_parts
                else network._target_
            )
            raise ClassMismatch(
                f"network={option} builds {builds}, but algo={algo} builds on {needs}; "
                f"leave network= out (algo={algo} picks its own) or give a network of that class"
            )


def check_buffer(cfg: DictConfig, can: Capabilities, algo: str, option: str) -> None:
    buffer = import_class(cfg.buffer._target_, "buffer._target_")
    if can.recurrent != bool(getattr(buffer, "recurrent", False)):
        needs = "a sequence buffer (buffer=sequence)" if can.recurrent else "a transition buffer (buffer=replay)"
        raise ClassMismatch(f"algo={algo} needs {needs}; buffer={option} ({cfg.buffer._target_}) does not fit")
    if hasattr(buffer, "update_priorities") and not can.prioritized:
        takers = [name for name, other in algo_options().items() if other.capabilities.prioritized]
        raise ClassMismatch(
            f"buffer={option} needs an algo whose update returns per-sample priorities; "
            f"algo={algo} does not (use buffer=replay, or algo={', '.join(takers)})"
        )


@functools.cache
def algo_options() -> dict[str, type[Any]]:
    """{option: class} for the algo options (conf/algo/*.yaml) whose class imports and declares
    its capabilities; each option's `_target_` as Hydra composes it (`base/c51@_here_` followed)."""
    options = {}
    for path in sorted((CONF_DIR / "algo").glob("*.yaml")):
        with contextlib.suppress(Exception):
            algo = get_class(compose_option("algo", path.stem).algo._target_)
            if isinstance(getattr(algo, "capabilities", None), Capabilities):
                options[path.stem] = algo
    return options
