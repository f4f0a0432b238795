"""The speed layer: every shortcut past the plain torch and gymnasium path, behind this one seam.

| fast path | module | plain path | rests on |
|---|---|---|---|
| `adam` | lean_adam.py | `torch.optim.Adam(fused=True)` | `torch._fused_adam_`, the hook registries |
| `mirror` | numpy_mirror.py, twins.py | the torch forward pass | `nn.Module`'s hook and child dicts |
| `host_memory` | host_memory.py | `torch.zeros` | `mmap.MADV_HUGEPAGE`, `torch.frombuffer`, `nn.Module._apply` |
| `vector_env` | vector_env.py | gymnasium's `SyncVectorEnv.step` | `SyncVectorEnv`'s private step buffers |
| `cuda_graph` | cuda_graph.py | the agent's `gradient_step`, eager | `torch.cuda.CUDAGraph`, generator registration |
| `foreach` | foreach.py | a loop over the tensors | `torch._foreach_norm`, `_mul_`, `_copy_`, `_lerp_` |
| `quantile_huber` | quantile_huber.py | losses.py's formula, through autograd | a hand-derived gradient; numba (CPU) |

Nothing outside this folder and build.py imports it: algorithms, networks, buffers, losses and
envs are written on the plain path, and `attach` finds what a fast path stands in for in a run
that is being built (its Adam optimizers, the network classes with a numpy twin that its agent acts
through, its agent's update, its replay storage, its vector env, its CUDA gradient step) and puts
the fast path in place, on those objects only: nothing is patched for the process, but the twin
of the quantile Huber loss and the mirrored forwards, installed for the length of one update or
one act and put back after it. Each fast path is probed once per process (`failures`): the private
names it uses must be there and a small self-check must give the plain path's numbers. One that
fails falls back to its plain path, said in one log line when a run starts (`log_fallbacks`);
`attach` says in one line what it put in place. `enabled(False)` runs the plain path everywhere
for a block (`fast_paths=false` on the command line; the tests compare the two).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from rl_hydra import losses
from rl_hydra.algos import common
from rl_hydra.speed import (
    cuda_graph,
    foreach,
    host_memory,
    lean_adam,
    numpy_mirror,
    quantile_huber,
    twins,  # noqa: F401 - it names the networks' numpy twins (numpy_mirror.TWINS)
    vector_env,
)

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
def lean_adam_nodes(algo: DictConfig) -> None:
    """In the algo node a run's agent is built from (the build's own copy), each torch.optim.Adam with
    fused=True made `adam` below, which builds the lean Adam where it is on: the same steps and
    state_dict (lean_adam.py), and no torch._dynamo import (seconds) that torch's constructor makes.
    One log line names each: the config says the math, the line what runs it."""
    for key in [str(key) for key in algo.keys()]:
        node = algo[key]
        if isinstance(node, DictConfig) and node.get("_target_") == "torch.optim.Adam" and node.get("fused"):
            if active("adam"):
                node._target_ = "rl_hydra.speed.adam"
                log.info("speed: algo.%s, torch.optim.Adam(fused=True), runs the lean Adam step", key)


def adam(
    params: Iterable[torch.Tensor] | Iterable[dict], lr: float = 1e-3, fused: bool | None = True, **options: Any
) -> torch.optim.Adam:
    """torch.optim.Adam, with the lean step (lean_adam.LeanAdam) where it is on and fused; both keep the
    same state_dict, so a checkpoint of either loads into the other. The optimizer `_target_` that
    runs recorded before conf/optimizer/adam.yaml named torch.optim.Adam hold."""
    if "betas" in options:
        options["betas"] = tuple(options["betas"])  # a list from the config would land in the state_dict
    if active("adam") and fused:
        return lean_adam.LeanAdam(params, lr=lr, fused=True, **options, allocate_moments=zeros_like)
    return torch.optim.Adam(params, lr=lr, fused=fused, **options)


# --- mirror ----------------------------------------------------------------------------------
def mirrored_acting(agent: Any) -> bool:
    """The agent's `act` run inside `numpy_mirror.mirroring` for the network classes with a numpy twin
    (twins.py) that it holds, where the mirror is on; whether there are any."""
    modules = [value for value in vars(agent).values() if isinstance(value, nn.Module)]
    classes = numpy_mirror.twinned_classes(modules)
    if not classes or not callable(getattr(agent, "act", None)):
        return False
    act = agent.act

    @functools.wraps(act)
    def act_through_twins(*args: Any, **kwargs: Any) -> Any:
        if not active("mirror"):  # fast_paths=false: the networks' own forwards, untouched
            return act(*args, **kwargs)
        with numpy_mirror.mirroring(classes):
            return act(*args, **kwargs)

    agent.act = act_through_twins
    return True


# --- attach ---------------------------------------------------------------------------------------
def attach(agent: Any) -> None:
    """The fast paths put in place on a built agent (build.py calls it once, before any step): its
    networks' CPU weights in huge pages, its acting through the numpy twins, its update through the
    closed-form quantile Huber loss and one call per list of tensors (STAND_INS), and on CUDA, where
    its class has a `gradient_step(batch)` (what its `update` calls), that step replayed from a CUDA
    graph where what it runs and reads allows it (cuda_graph.py). One log line says what was put in
    place; `fast_paths=false` keeps each on its plain path."""
    attached = []
    if active("host_memory"):  # where the update finds them after a step's sampling
        host_memory.relocate(value for value in vars(agent).values() if isinstance(value, nn.Module))
    if mirrored_acting(agent) and active("mirror"):
        attached.append("acting: numpy twins")
    if callable(getattr(agent, "update", None)):
        agent.update = with_stand_ins(agent.update)
    if cuda_graph.on_cuda(agent) and callable(getattr(type(agent), "gradient_step", None)):
        agent.gradient_step = cuda_graph.Step(agent, lambda: active("cuda_graph"))
        attached.append("gradient_step: CUDA graph")
    if attached:
        log.info("speed: %s", "; ".join(attached))


# --- stand-ins during an update ---------------------------------------------------------------------
# (fast path, the module holding the plain function, its name, the fast function): each takes the plain
# function's arguments and gives its numbers (the quantile Huber loss's up to float rounding)
STAND_INS: tuple[tuple[str, Any, str, Callable[..., Any]], ...] = (
    ("quantile_huber", losses, "quantile_huber_per_sample", quantile_huber.per_sample),
    ("foreach", common, "clip_grad_norm", foreach.clip_grad_norm),
    ("foreach", common, "move_toward", foreach.move_toward),
)


def plain_or_fast(index: int) -> Callable:
    """STAND_INS[index]'s plain function, or its fast one where that fast path is on (decided at each
    call: `enabled` may change)."""
    name, _, _, _ = STAND_INS[index]
    plain = PLAIN[index]

    @functools.wraps(plain)
    def call(*args: Any, **kwargs: Any) -> Any:
        return (STAND_INS[index][3] if active(name) else plain)(*args, **kwargs)

    return call


# the plain functions, as their modules define them, and what stands in for each during an update
PLAIN = tuple(getattr(module, attribute) for _, module, attribute, _ in STAND_INS)
CHOSEN = tuple(plain_or_fast(index) for index in range(len(STAND_INS)))


def with_stand_ins(update: Callable) -> Callable:
    """`update`, with each function of STAND_INS standing in for by its fast one where that is on, for
    the length of the call only (its module holds the plain function again after it)."""
    return WithStandIns(update)


class WithStandIns:
    """What `with_stand_ins` gives: a callable object, not a closure, so that a deep copy of the agent
    gets one around its own copy's update (deepcopy copies a bound method with its object; a closure
    it shares, and the copy's update would step the original's weights)."""

    def __init__(self, update: Callable) -> None:
        self.update = update
        functools.update_wrapper(self, update)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        update = self.update
        # fast_paths=false: the plain functions, untouched; or they stand in already (a pack's round of
        # updates around its members' own): the outermost call puts the plain ones back
        (_, first_module, first_attribute, _) = STAND_INS[0]
        if not _switch["on"] or getattr(first_module, first_attribute) is CHOSEN[0]:
            return update(*args, **kwargs)
        for (_, module, attribute, _), chosen in zip(STAND_INS, CHOSEN):
            setattr(module, attribute, chosen)
        try:
            return update(*args, **kwargs)
        finally:
            for (_, module, attribute, _), plain in zip(STAND_INS, PLAIN):
                setattr(module, attribute, plain)


# --- host memory -------------------------------------------------------------------------------
def zeros_like(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Zeros like each of `tensors`: the contiguous ones side by side in huge pages on the CPU."""
    if active("host_memory"):
        return host_memory.zeros_like(tensors)
    return lean_adam.plain_zeros_like(tensors)


def attach_buffer(buffer: Any) -> None:
    """A built, still empty replay buffer's CPU storage moved into huge pages (host_memory.py), no copy."""
    if active("host_memory"):
        host_memory.relocate_storage(buffer)


# --- vector env ---------------------------------------------------------------------------------
def lean_envs(envs: Any) -> Any:
    """A built SAME_STEP SyncVectorEnv with the lean step for Box observations (vector_env.py; this
    instance only, the same returns); any other vector env as it is."""
    return vector_env.lean(envs) if active("vector_env") else envs
