"""The speed layer: every shortcut past the plain torch and gymnasium path, behind this one seam.

| fast path | module | plain path | rests on |
|---|---|---|---|
| `adam` | lean_adam.py | `torch.optim.Adam(fused=True)` | `torch._fused_adam_`, the hook registries |
| `mirror` | numpy_mirror.py | the torch forward pass | `nn.Module`'s hook and child dicts |
| `host_memory` | host_memory.py | `torch.zeros` | `mmap.MADV_HUGEPAGE`, `torch.frombuffer`, `nn.Module._apply` |
| `vector_env` | vector_env.py | gymnasium's `SyncVectorEnv.step` | `SyncVectorEnv`'s private step buffers |
| `cuda_graph` | cuda_graph.py | the agent's `gradient_step`, eager | `torch.cuda.CUDAGraph`, generator registration |
| `foreach` | foreach.py | a loop over the tensors | `torch._foreach_norm`, `_mul_`, `_copy_`, `_lerp_` |
| `quantile_huber` | quantile_huber.py | losses.py's formula, through autograd | a hand-derived gradient; numba (CPU) |

The rest of the package calls the functions below and never a fast path itself, so an algorithm
reads like its paper and its author need not know the layer exists: what a fast path stands in
for says so where it is defined (a network's forward decorated with its numpy twin, a loss with
its closed-form twin), or the layer finds it by structure (the methods an agent's gradient step
runs and what they read, from its class's code: cuda_graph.py). Nothing here names an algorithm. Each
fast path is probed once per process (`failures`): the private names it uses must be there and a
small self-check must give the plain path's numbers. One that fails falls back to its plain path,
said in one log line when a run starts (`log_fallbacks`). `enabled(False)` runs the plain path
everywhere for a block (`fast_paths=false` on the command line; the tests compare the two).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from rl_hydra.speed import cuda_graph, foreach, host_memory, lean_adam, numpy_mirror, quantile_huber, vector_env

log = logging.getLogger(__name__)

PLAIN_PATHS = {
    "adam": "torch.optim.Adam's own step",
    "mirror": "torch forward passes when acting",
    "host_memory": "ordinary pages",
    "vector_env": "gymnasium's SyncVectorEnv.step",
    "cuda_graph": "eager gradient steps on CUDA",
    "foreach": "a loop over the tensors",
    "quantile_huber": "the quantile Huber loss's formula through autograd",
}
PROBES: dict[str, Callable[[], None]] = {
    "adam": lean_adam.probe,
    "mirror": numpy_mirror.probe,
    "host_memory": host_memory.probe,
    "vector_env": vector_env.probe,
    "cuda_graph": cuda_graph.probe,
    "foreach": foreach.probe,
    "quantile_huber": quantile_huber.probe,
}
_switch = {"on": True}  # set only through `enabled`, which restores it
# {"failed": failures()} once the probes ran: a plain dict, which torch.compile reads (and guards on)
# where it traces a loss with a fast twin, instead of running the probes again inside its trace
_probed: dict[str, dict[str, str]] = {}


def failures() -> dict[str, str]:
    """{fast path: why it cannot be used here} for each whose probe failed, probed once per process."""
    if not _probed:
        _probed["failed"] = run_probes()
    return _probed["failed"]


def forget_probes() -> None:
    """The next `failures()` probes again (tests that break a private API on purpose)."""
    _probed.clear()


def run_probes() -> dict[str, str]:
    failed = {}
    with torch.random.fork_rng(devices=[]):  # the probes' layers draw their weights from torch's generator
        for name, probe in PROBES.items():
            try:
                probe()
            except Exception as error:  # any surprise in private API means: take the plain path
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
def optimizer(factory: Callable[..., torch.optim.Optimizer], params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    """`factory(params)`; a `torch.optim.Adam` partial with fused=True (conf/optimizer/adam.yaml) is built
    as the lean Adam where it is on: the same steps, the same state_dict (lean_adam.py)."""
    if isinstance(factory, functools.partial) and factory.func is torch.optim.Adam and not factory.args:
        return adam(params, **{"fused": None, **factory.keywords})  # torch's default, not adam's
    return factory(params)


def adam(
    params: Iterable[torch.Tensor] | Iterable[dict], lr: float = 1e-3, fused: bool | None = True, **options: Any
) -> torch.optim.Adam:
    """torch.optim.Adam, with the lean step (lean_adam.LeanAdam) where it is on and fused; both keep the
    same state_dict, so a checkpoint of either loads into the other. (Also the optimizer `_target_`
    that runs recorded before conf/optimizer/adam.yaml named torch.optim.Adam hold.)"""
    if "betas" in options:
        options["betas"] = tuple(options["betas"])  # a list from the config would land in the state_dict
    if active("adam") and fused:
        return lean_adam.LeanAdam(params, lr=lr, fused=True, **options, allocate_moments=zeros_like)
    return torch.optim.Adam(params, lr=lr, fused=fused, **options)


# --- mirror ----------------------------------------------------------------------------------
def numpy_twin(twin: numpy_mirror.Twin) -> Callable[[Callable], Callable]:
    """Decorates a module class's `forward` with `twin(module, x)`, the same forward in numpy on a
    float32 (B, ...) array, None where it cannot answer: while acting (`acting`), the forward runs
    as its twin where the mirror is on."""
    return numpy_mirror.twin(twin)


def acting() -> numpy_mirror.Acting:
    """A block without autograd in which an agent chooses actions: the forward passes with a numpy
    twin run in numpy where the mirror is on (the rest of the agent's code runs in torch on their results)."""
    return numpy_mirror.Acting(active("mirror"))


def numpy_forward(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
    """module(x) in numpy, for a twin that mirrors its submodules; None where they cannot be mirrored."""
    return numpy_mirror.numpy_forward(module, x)


def numpy_view(param: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a float32 CPU parameter (a weight matrix transposed), for a twin; None elsewhere."""
    return numpy_mirror.view(param)


# --- cuda graph --------------------------------------------------------------------------------
def attach(agent: Any) -> None:
    """On a CUDA agent whose class has a `gradient_step(batch)` (what its `update` calls): that step,
    replayed from a CUDA graph where what it runs and reads allows it and nothing it reads has moved
    since it was recorded, else run as it is (cuda_graph.py). Elsewhere nothing changes."""
    if cuda_graph.on_cuda(agent) and callable(getattr(type(agent), "gradient_step", None)):
        agent.gradient_step = cuda_graph.Step(agent, lambda: active("cuda_graph"))


# --- foreach ------------------------------------------------------------------------------------
def norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of each tensor (0-d tensors)."""
    return foreach.norms(tensors) if active("foreach") else [torch.linalg.vector_norm(t) for t in tensors]


def mul_(tensors: list[torch.Tensor], factor: torch.Tensor) -> None:
    """Each tensor multiplied in place by `factor` (a 0-d tensor)."""
    if active("foreach"):
        foreach.mul_(tensors, factor)
    else:
        for tensor in tensors:
            tensor.mul_(factor)


def copy_(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """Each target overwritten in place with its source."""
    if active("foreach"):
        foreach.copy_(targets, sources)
    else:
        for target, source in zip(targets, sources):
            target.copy_(source)


def lerp_(targets: list[torch.Tensor], ends: list[torch.Tensor], weight: float) -> None:
    """Each target moved in place a fraction `weight` of the way to its end."""
    if active("foreach"):
        foreach.lerp_(targets, ends, weight)
    else:
        for target, end in zip(targets, ends):
            target.lerp_(end, weight)


# --- quantile huber -------------------------------------------------------------------------------
FAST_TWINS: dict[str, Callable[..., Any]] = {"quantile_huber": quantile_huber.per_sample}


def fast_twin(name: str) -> Callable[[Callable], Callable]:
    """Decorates a plain function whose fast twin is fast path `name` (FAST_TWINS: the same arguments
    and numbers, up to float rounding): calls go to the twin where `name` is on."""
    if name not in FAST_TWINS:
        raise KeyError(f"no fast twin {name!r}; the speed layer has: {', '.join(FAST_TWINS)}")

    def decorate(plain: Callable) -> Callable:
        @functools.wraps(plain)
        def plain_or_twin(*args: Any, **kwargs: Any) -> Any:
            return (FAST_TWINS[name] if active(name) else plain)(*args, **kwargs)

        return plain_or_twin

    return decorate


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
