"""The `distributed` config group read once, checked, into plain settings; and the two formulas that
shape a distributed run's data: each actor's epsilon and each sequence's priority."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from rl_hydra.config import ConfigError, check_choice, check_float, check_int

KINDS = ("none", "apex")
LARGEST_ACTORS = 4096


def requested(cfg: DictConfig) -> bool:
    """Whether the config asks for a distributed run (`distributed=apex`); a config without the
    group (a run recorded before it existed) is a single-process one."""
    node = cfg.get("distributed")
    if node is None:
        return False
    return check_choice("distributed.name", node.get("name", "none"), KINDS) != "none"


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
    min_replay_ratio: float | None
    priority_eta: float
    priority_alpha: float
    max_restarts: int
    prefetch: int


def read_settings(node: DictConfig, cpu_count: int | None = None) -> Settings:
    """`cfg.distributed` checked key by key (one ConfigError line each)."""
    address = node.get("address")
    if address is not None and (
        not isinstance(address, str) or not (address == "auto" or address.startswith("ray://") or ":" in address)
    ):
        raise ConfigError(
            f"distributed.address={address!r} is not allowed; choose null (a local Ray instance), "
            f"auto (the cluster this machine belongs to), ray://host:port, or host:port"
        )
    cpus = check_float("distributed.cpus_per_actor", node.get("cpus_per_actor", 1), 0.0, exclusive_min=True)
    actors = node.get("actors", "auto")
    if actors == "auto":
        actors = auto_actors(cpus, cpu_count)
    actors = check_int("distributed.actors", actors, minimum=1, maximum=LARGEST_ACTORS)
    ratio, floor = node.get("max_replay_ratio"), node.get("min_replay_ratio")
    if ratio is not None:
        ratio = check_float("distributed.max_replay_ratio", ratio, 0.0, exclusive_min=True)
    if floor is not None:  # at most the cap, which the learner checks once it knows the algo's own
        floor = check_float("distributed.min_replay_ratio", floor, 0.0, ratio, exclusive_min=True)
    return Settings(
        address=address,
        actors=actors,
        cpus_per_actor=cpus,
        shards=check_int("distributed.shards", node.get("shards", 1), minimum=1, maximum=actors),
        epsilon_base=check_float("distributed.epsilon_base", node.get("epsilon_base", 0.4), 0.0, 1.0),
        epsilon_alpha=check_float("distributed.epsilon_alpha", node.get("epsilon_alpha", 7.0), 0.0),
        weights_every=check_int("distributed.weights_every", node.get("weights_every", 400), minimum=1),
        publish_every=check_int("distributed.publish_every", node.get("publish_every", 50), minimum=1),
        send_every=check_int("distributed.send_every", node.get("send_every", 50), minimum=1),
        max_replay_ratio=ratio,
        min_replay_ratio=floor,
        priority_eta=check_float("distributed.priority_eta", node.get("priority_eta", 0.9), 0.0, 1.0),
        priority_alpha=check_float("distributed.priority_alpha", node.get("priority_alpha", 0.9), 0.0),
        max_restarts=check_int("distributed.max_restarts", node.get("max_restarts", 3), minimum=0, maximum=1000),
        prefetch=check_int("distributed.prefetch", node.get("prefetch", 2), minimum=1, maximum=64),
    )


def auto_actors(cpus_per_actor: float, cpu_count: int | None = None) -> int:
    """`actors=auto`: as many as this machine's CPUs hold beside the learner's one, at least one."""
    cpu_count = cpu_count or os.cpu_count() or 1
    return max(1, int((cpu_count - 1) // cpus_per_actor))


def require_ray() -> Any:
    """The ray module, or one ConfigError line saying how to install it."""
    if importlib.util.find_spec("ray") is None:
        raise ConfigError(
            'distributed=apex needs Ray, which is not installed; pip install -e ".[ray]" '
            "(or distributed=none: one process)"
        )
    import ray

    return ray


def actor_epsilons(actors: int, base: float = 0.4, alpha: float = 7.0) -> list[float]:
    """Ape-X's exploration: actor i of N acts epsilon-greedily with eps_i = base^(1 + alpha i / (N - 1)),
    from `base` (the most exploring) down to base^(1 + alpha) (nearly greedy). One actor gets `base`."""
    if actors == 1:
        return [base]
    return [base ** (1 + alpha * i / (actors - 1)) for i in range(actors)]


def sequence_priorities(td_errors: torch.Tensor, counted: torch.Tensor, eta: float) -> torch.Tensor:
    """R2D2's priority of each sequence: eta * max_t |delta_t| + (1 - eta) * mean_t |delta_t| over its
    counted steps (real steps past the burn-in); 0 for a sequence with none."""
    # td_errors, counted: (L, B); counted is 1 on the steps the loss learns from
    errors = td_errors.abs() * counted  # (L, B)
    steps = counted.sum(dim=0)  # (B,)
    mean = errors.sum(dim=0) / steps.clamp(min=1)  # (B,)
    return eta * errors.max(dim=0).values + (1 - eta) * mean  # (B,)
