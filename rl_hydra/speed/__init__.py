"""The speed layer: every shortcut past the plain torch and gymnasium path, behind this one seam.

| fast path | module | plain path | rests on |
|---|---|---|---|
| `adam` | lean_adam.py | `torch.optim.Adam(fused=True)` | `torch._fused_adam_`, the optimizer hook registries, `profile_hook_step` |
| `mirror` | numpy_mirror.py | the torch forward pass | `nn.Module`'s hook and child dicts |
| `host_memory` | host_memory.py | `torch.zeros` | `mmap.MADV_HUGEPAGE`, `torch.frombuffer`, `nn.Module._apply` |
| `vector_env` | vector_env.py | gymnasium's `SyncVectorEnv.step` | `SyncVectorEnv`'s private step buffers |
| `cuda_graph` | cuda_graph.py | the agent's `gradient_step`, run eagerly | `torch.cuda.CUDAGraph` and its generator registration |

The rest of the package calls the functions below and never a fast path itself, so an algorithm
reads like its paper and its author need not know the layer exists. Each fast path is probed
once per process (`failures`): the private names it uses must be there and a small self-check
must give the plain path's numbers. One that fails falls back to its plain path, said in one
log line when a run starts (`log_fallbacks`). `enabled(False)` runs the plain path everywhere
for a block (`fast_paths=false` on the command line; the tests compare the two).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import Any, Callable, Iterable, Iterator

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from rl_hydra.speed import cuda_graph, host_memory, lean_adam, numpy_mirror, vector_env

log = logging.getLogger(__name__)

PLAIN_PATHS = {"adam": "torch.optim.Adam's own step", "mirror": "torch forward passes when acting",
               "host_memory": "ordinary pages", "vector_env": "gymnasium's SyncVectorEnv.step",
               "cuda_graph": "eager gradient steps on CUDA"}
PROBES: dict[str, Callable[[], None]] = {"adam": lean_adam.probe, "mirror": numpy_mirror.probe,
                                         "host_memory": host_memory.probe, "vector_env": vector_env.probe,
                                         "cuda_graph": cuda_graph.probe}
_switch = {"on": True}   # set only through `enabled`, which restores it


@functools.cache
def failures() -> dict[str, str]:
    """{fast path: why it cannot be used here} for each whose probe failed, once per process."""
    failed = {}
    with torch.random.fork_rng(devices=[]):   # the probes' layers draw their weights from torch's generator
        for name, probe in PROBES.items():
            try:
                probe()
            except Exception as error:   # any surprise in private API means: take the plain path
                failed[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    return failed


def active(name: str) -> bool:
    """Whether fast path `name` is on: not switched off, and its probe passed."""
    return _switch["on"] and name not in failures()


@contextlib.contextmanager
def enabled(on: bool = True) -> Iterator[None]:
    """Every fast path on (where its probe passed) or off inside the block, as before after it."""
    before = _switch["on"]
    _switch["on"] = bool(on)
    try:
        yield
    finally:
        _switch["on"] = before


def log_fallbacks() -> None:
    """One line for each fast path that falls back, or that all are off; nothing when all run."""
    if not _switch["on"]:
        log.info("fast_paths=false: the plain torch and gymnasium path throughout")
        return
    for name, why in failures().items():
        log.info("speed: %s falls back to %s (%s)", name, PLAIN_PATHS[name], why)


# --- adam ----------------------------------------------------------------------------------
def adam(params: Iterable[nn.Parameter] | Iterable[dict], lr: float, betas: tuple[float, float] = (0.9, 0.999),
         eps: float = 1e-8, weight_decay: float = 0.0, fused: bool = True) -> torch.optim.Adam:
    """torch.optim.Adam, with the lean step (lean_adam.LeanAdam) where it is on; both keep the
    same state_dict, so a checkpoint of either loads into the other."""
    options = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "fused": fused}
    if active("adam") and fused:
        return lean_adam.LeanAdam(params, **options, allocate_moments=zeros_like)
    return torch.optim.Adam(params, **options)


# --- mirror ----------------------------------------------------------------------------------
def numpy_action_values(agent: Any, obs: np.ndarray) -> np.ndarray | None:
    """`agent.action_values(obs)` computed in numpy (float32 (n, obs_dim) -> (n, A)), or None where
    the mirror is off or has no exact twin for it (then the caller runs torch)."""
    return numpy_mirror.call_mirror(agent, "action_values", obs) if active("mirror") else None


# --- cuda graph --------------------------------------------------------------------------------
def gradient_step(agent: Any, batch: Any) -> Any:
    """`agent.gradient_step(batch)`; on a CUDA run, replayed from a CUDA graph where the step is
    one the layer knows (cuda_graph.KNOWN) and nothing it reads has moved since it was recorded."""
    replay = cuda_graph.graphed_step(agent) if active("cuda_graph") else None
    return agent.gradient_step(batch) if replay is None else replay(batch)


# --- host memory -------------------------------------------------------------------------------
def zeros(layout: host_memory.Layout, device: torch.device) -> dict[str, torch.Tensor]:
    """Zero tensors {name: (shape, dtype)} on `device`; on the CPU side by side in huge pages."""
    if active("host_memory"):
        return host_memory.zeros(layout, device)
    return {name: torch.zeros(shape, dtype=dtype, device=device) for name, (shape, dtype) in layout.items()}


def zeros_list(specs: list[tuple[tuple[int, ...], torch.dtype]], device: torch.device) -> list[torch.Tensor]:
    """`zeros` for a list of (shape, dtype), in the list's order."""
    return list(zeros({str(i): spec for i, spec in enumerate(specs)}, device).values())


def zeros_like(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Zeros like each of `tensors`: the contiguous ones side by side in huge pages on the CPU."""
    if active("host_memory"):
        return host_memory.zeros_like(tensors)
    return lean_adam.plain_zeros_like(tensors)


def relocate(modules: Iterable[nn.Module]) -> None:
    """The CPU parameters of `modules` moved into huge pages, values and Parameter objects kept."""
    if active("host_memory"):
        host_memory.relocate(modules)


# --- vector env ---------------------------------------------------------------------------------
def same_step_vector_env(env_fns: list[Callable[[], gym.Env]]) -> SyncVectorEnv:
    """A SyncVectorEnv with SAME_STEP autoreset, whose step skips gymnasium's generic space
    utilities for Box observations where the fast path is on (the same returns)."""
    if active("vector_env"):
        return vector_env.LeanSyncVectorEnv(env_fns)
    return SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
