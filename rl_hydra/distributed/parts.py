"""What the Ray side of a distributed run is built from, read once from the config as plain data: an
actor's parts (its env node, its agent's recipe, its process settings, how it cuts experience) and a
replay shard's (its buffer node). Neither gets the run's config."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from rl_hydra.build import AgentRecipe, ProcessSettings, plain
from rl_hydra.config import run_updates


@dataclass(frozen=True)
class ActorParts:
    env: dict  # cfg.env, resolved
    agent: AgentRecipe
    process: ProcessSettings
    n_step: int  # a feed-forward agent's transitions: n-step returns
    gamma: float
    sequence_length: int | None  # a recurrent agent's sequences (buffer.sequence_length, buffer.stride)
    stride: int | None


@dataclass(frozen=True)
class RunParts:
    seed: int
    gamma: float
    buffer: dict  # cfg.buffer as a shard builds it
    actor: ActorParts

    @classmethod
    def of(cls, cfg: DictConfig) -> RunParts:
        return cls(
            seed=int(cfg.seed),
            gamma=float(cfg.algo.gamma),
            buffer=shard_buffer(cfg),
            actor=ActorParts(
                env=plain(cfg.env),
                agent=AgentRecipe.of(cfg),
                process=ProcessSettings.of(cfg),
                n_step=int(cfg.algo.n_step),
                gamma=float(cfg.algo.gamma),
                # keys of the sequence buffer's schema alone (rl_hydra/schema/buffers.py)
                sequence_length=cfg.buffer.sequence_length if "sequence_length" in cfg.buffer else None,
                stride=cfg.buffer.stride if "stride" in cfg.buffer else None,
            ),
        )


def shard_buffer(cfg: DictConfig) -> dict:
    """The buffer node a shard builds from, resolved; prioritized replay's `beta_steps: auto` is the
    run's updates, as in one process."""
    node = plain(cfg.buffer)
    if node.get("beta_steps") == "auto":
        node["beta_steps"] = run_updates(
            cfg.train.total_steps, cfg.algo.learning_starts, cfg.algo.train_every, cfg.algo.gradient_steps
        )
    return node
