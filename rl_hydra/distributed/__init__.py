"""Distributed runs (`distributed=apex`): Ape-X actors and replay shards on Ray, one learner here;
with algo=drqn, R2D2. docs/distributed.md. Ray is imported only when a run asks for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rl_hydra.distributed.settings import requested

if TYPE_CHECKING:
    import torch
    from omegaconf import DictConfig

    from rl_hydra.runs.run_dir import RunDirectory

__all__ = ["requested", "run"]


def run(
    cfg: DictConfig,
    run_dir: RunDirectory,
    device: torch.device,
    resume: bool,
    on_ready: Callable[[int, torch.device], None] | None,
    stop_after: int | None,
) -> dict[str, Any]:
    """Train a distributed run (rl_hydra/distributed/learner.py); rl_hydra.training.run's promises."""
    from rl_hydra.distributed.learner import run as learn

    return learn(cfg, run_dir, device, resume, on_ready, stop_after)
