"""Small pieces every algorithm uses: space checks, observations as tensors, schedules, how the weights
change (an optimizer step with clipping, the target networks' syncs), compile."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import overload

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.errors import EnvMismatch
from rl_hydra.protocols import Observation, ObservationTensor


def require_discrete(action_space: gym.Space, algo: str) -> int:
    """Number of actions of a Discrete space, or a ConfigError naming the algorithm."""
    if not isinstance(action_space, gym.spaces.Discrete):
        raise EnvMismatch(
            f"algo={algo} needs a discrete action space but the env has {action_space}; "
            "use a discrete env (cartpole, acrobot, mountain_car, lunar_lander) "
            "or a continuous-action algo (sac, redq)"
        )
    return int(action_space.n)


def require_box(action_space: gym.Space, algo: str) -> int:
    """Action dimension of a 1-d Box space, or a ConfigError naming the algorithm."""
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise EnvMismatch(
            f"algo={algo} needs a continuous (Box) action space but the env has {action_space}; "
            "use a continuous env (pendulum, mountain_car_continuous, hopper, ...) "
            "or a discrete-action algo (dqn, qr_dqn, iqn, drqn)"
        )
    return int(action_space.shape[0])


def bounded_box(action_space: gym.Space, algo: str) -> gym.spaces.Box:
    """The action space of an actor that squashes into it: a 1-d Box with finite bounds, or one
    ConfigError line naming the algorithm."""
    require_box(action_space, algo)
    assert isinstance(action_space, gym.spaces.Box)  # require_box refused anything else
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise EnvMismatch(f"algo={algo} needs finite action bounds to squash into; the env has {action_space}")
    return action_space


def vector_features(
    observation_space: gym.Space, algo: str, device: torch.device | None = None
) -> tuple[nn.Module | None, int]:
    """For an algorithm whose networks read vectors (SAC, REDQ, TD3, CrossQ): (an encoder without
    weights, on `device`, that makes one of each observation, or None for a 1-d Box; the vector's
    size). Discrete and MultiDiscrete parts become one-hot, MultiBinary bits floats; an image is one
    ConfigError line."""
    from rl_hydra.networks.encoders import make_encoder  # an algorithm on vectors needs the encoders only here
    from rl_hydra.spaces import network_input, parts

    observation = network_input(observation_space)
    if isinstance(observation, int):
        return None, observation
    for name, part in parts(observation_space).items():
        if isinstance(part, gym.spaces.Box) and len(part.shape) > 1:
            where = f"observation part {name!r}" if name else "observations"
            raise EnvMismatch(
                f"algo={algo} reads vectors, indices and bits, not images ({where}: {part}); use a "
                f"discrete-action algo (dqn, iqn, ...), or a wrapper in env.wrappers that flattens them"
            )
    encoder, size = make_encoder(observation, "flat")  # an index grid too becomes one multi-hot vector
    if encoder is not None and device is not None:
        encoder.to(device)
    return encoder, size


def make_optimizer(
    factory: Callable[..., torch.optim.Optimizer], params: Iterable[torch.Tensor], device: torch.device
) -> torch.optim.Optimizer:
    """Call a `_partial_` optimizer (fused only on the CPU and CUDA, where torch has a fused step)."""
    if isinstance(factory, functools.partial):
        if factory.keywords.get("fused") and device.type not in ("cpu", "cuda"):
            factory = functools.partial(factory, fused=False)
        if "betas" in factory.keywords:  # a list from the config would land in the state_dict
            factory = functools.partial(factory, betas=tuple(factory.keywords["betas"]))
    return factory(params)


def optimizer_step(
    optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Sequence[torch.Tensor], max_grad_norm: float | None
) -> None:
    """One step of `optimizer` on the gradient of `loss`, clipped to `max_grad_norm` if given."""
    for param in params:  # what zero_grad(set_to_none=True) does, without its per-call profiler hooks
        param.grad = None
    loss.backward()
    if max_grad_norm is not None:
        clip_grad_norm(params, max_grad_norm)
    optimizer.step()


@torch.no_grad()
def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale gradients so their global L2 norm is at most `max_norm`; returns the norm before.
    torch.nn.utils.clip_grad_norm_'s math, without its grouping by device and dtype, which costs more
    than the math at a small network, and with no host sync."""
    grads = [p.grad for p in params if p.grad is not None]
    total_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grad) for grad in grads]))
    scale = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for grad in grads:
        grad.mul_(scale)
    return total_norm


@torch.no_grad()
def update_target(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target; tau = 1 is a hard copy."""
    move_toward(list(target.parameters()), list(online.parameters()), tau)


def move_toward(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """Each target moved in place a fraction `tau` of the way to its source (tau = 1: a copy)."""
    for target, source in zip(targets, sources):
        if tau >= 1.0:
            target.copy_(source)
        else:
            target.lerp_(source, tau)


def is_raw_pixels(obs: np.ndarray) -> bool:
    """uint8 frames or bool grids, which networks scale themselves (networks/encoders.py)."""
    return obs.dtype == np.uint8 or obs.dtype == np.bool_


@overload
def observation_tensor(obs: np.ndarray, device: torch.device) -> torch.Tensor: ...
@overload
def observation_tensor(obs: Observation, device: torch.device) -> ObservationTensor: ...
def observation_tensor(obs: Observation, device: torch.device) -> ObservationTensor:
    """`obs` as a tensor on `device`: float32, or uint8/bool kept as they are (raw pixels); a
    dict of parts as a dict of such tensors. Arrays on the CPU that need no conversion are shared,
    not copied. (Indices become float32 too: encoders read them back with .long(), exactly.)"""
    if isinstance(obs, dict):
        return {key: observation_tensor(np.asarray(part), device) for key, part in obs.items()}
    if device.type == "cpu" and (obs.dtype == np.float32 or is_raw_pixels(obs)):
        return torch.from_numpy(obs)  # shares the memory: cheaper than as_tensor, once per env step
    if is_raw_pixels(obs):
        return torch.as_tensor(obs, device=device)
    return torch.as_tensor(obs, dtype=torch.float32, device=device)


class LinearSchedule:
    """Linear interpolation from `start` to `end` over `duration` steps, then constant."""

    def __init__(self, start: float, end: float, duration: float):
        self.start, self.end, self.duration = start, end, max(duration, 1.0)

    def __call__(self, step: int) -> float:
        progress = min(step / self.duration, 1.0)
        return self.start + progress * (self.end - self.start)


def compile_pure_methods(agent) -> None:
    """Wrap each of the agent's `compiled_methods` in torch.compile.

    Those methods are pure tensor functions (forward passes, targets, the loss; autograd
    runs their compiled backward too) whose random draws are made by the caller and passed
    in. The optimiser step, schedules, counters and target syncs stay eager: they change
    Python state every update, which would make torch.compile trace again and again.
    """
    for name in agent.compiled_methods:
        setattr(agent, name, torch.compile(getattr(agent, name)))
