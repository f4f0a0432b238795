"""The `distributed` config group read once, checked, into plain settings; and the two formulas that
shape a distributed run's data: each actor's epsilon and each sequence's priority."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from rl_hydra.errors import MachineLimit, NotInstalled
from rl_hydra.schema.keys import shown


def requested(cfg: DictConfig) -> bool:
    """Whether a (validated) config asks for a distributed run (`distributed=apex`); a run recorded
    before the group existed reads back with `distributed: null` (the schema's default, RunKeys), a
    single-process one."""
    return cfg.distributed is not None and cfg.distributed.name != "none"


@dataclass(frozen=True)
class Settings:
    address: str | None
    actors: int
    cpus_per_actor: float
    shards: int
    epsilon_base: float
    epsilon_alpha: float
    weights_every: int
    publish_every: int
    send_every: int
    max_replay_ratio: float | None
    min_replay_ratio: float | str | None  # "auto": the cap, max_replay_ratio or the algo's own (Learner)
    priority_eta: float
    priority_alpha: float
    priority_beta: float
    max_restarts: int
    prefetch: int


def read_settings(node: DictConfig, cpu_count: int | None = None) -> Settings:
    """`cfg.distributed`, its keys already in their schema's ranges (rl_hydra/schema/distributed.py),
    with `actors=auto` counted for this machine and the check that needs that count made (one ConfigError line)."""
    actors = auto_actors(node.cpus_per_actor, cpu_count) if node.actors == "auto" else node.actors
    if node.shards > actors:
        raise MachineLimit(
            f"distributed.shards={shown(node.shards)} is out of range; expected at most one shard per actor "
            f"(distributed.actors={actors})"
        )
    ratio, floor = node.max_replay_ratio, node.min_replay_ratio  # floor <= ratio: the schema's rule
    return Settings(
        address=node.address,
        actors=actors,
        cpus_per_actor=node.cpus_per_actor,
        shards=node.shards,
        epsilon_base=node.epsilon_base,
        epsilon_alpha=node.epsilon_alpha,
        weights_every=node.weights_every,
        publish_every=node.publish_every,
        send_every=node.send_every,
        max_replay_ratio=ratio,
        min_replay_ratio=floor,
        priority_eta=node.priority_eta,
        priority_alpha=node.priority_alpha,
        priority_beta=node.priority_beta,
        max_restarts=node.max_restarts,
        prefetch=node.prefetch,
    )


def replay_ratios(settings: Settings, train_every: int, gradient_steps: int) -> tuple[float, float | None]:
    """(the cap, the floor) on the learner's updates per env step: the cap is `max_replay_ratio`, else the
    algo's own gradient_steps / train_every; the floor `min_replay_ratio`, `auto` being the cap itself, so
    that actors outrunning the learner wait for it and a run learns from each step as one process does."""
    cap = settings.max_replay_ratio or gradient_steps / train_every
    floor = cap if settings.min_replay_ratio == "auto" else settings.min_replay_ratio
    return cap, None if floor is None else float(floor)


def auto_actors(cpus_per_actor: float, cpu_count: int | None = None) -> int:
    """`actors=auto`: as many as this machine's CPUs hold beside the learner's one, at least one."""
    cpu_count = cpu_count or os.cpu_count() or 1
    return max(1, int((cpu_count - 1) // cpus_per_actor))


def require_ray() -> Any:
    """The ray module, or one ConfigError line saying how to install it."""
    if importlib.util.find_spec("ray") is None:
        raise NotInstalled(
            'distributed=apex needs Ray, which is not installed; pip install -e ".[ray]" '
            "(or distributed=none: one process)"
        )
    import ray

    return ray


def actor_epsilons(actors: int, base: float = 0.4, alpha: float = 7.0) -> list[float | None]:
    """Ape-X's exploration: actor i of N acts epsilon-greedily with eps_i = base^(1 + alpha i / (N - 1)),
    from `base` (the most exploring) down to base^(1 + alpha) (nearly greedy). One actor gets None: the
    algorithm's own epsilon schedule over the run's env steps, as one process explores (a lone actor at
    `base` would fill the replay with the failures of a policy acting 40% at random)."""
    if actors == 1:
        return [None]
    return [base ** (1 + alpha * i / (actors - 1)) for i in range(actors)]


def epsilons_said(epsilons: list[float | None]) -> str:
    """The actors' epsilons as the start line says them."""
    return ", ".join("the algo's own schedule" if e is None else f"{e:.3g}" for e in epsilons)


def sequence_priorities(td_errors: torch.Tensor, counted: torch.Tensor, eta: float) -> torch.Tensor:
    """R2D2's priority of each sequence: eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t| over its
    counted steps (real steps past the burn-in); 0 for a sequence with none."""
    # td_errors, counted: (L, B); counted is 1 on the steps the loss learns from
    errors = td_errors.abs() * counted  # (L, B)
    steps = counted.sum(dim=0)  # (B,)
    mean = errors.sum(dim=0) / steps.clamp(min=1)  # (B,)
    return eta * errors.max(dim=0).values + (1 - eta) * mean  # (B,)
