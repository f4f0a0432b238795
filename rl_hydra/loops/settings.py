"""What a training loop is told of its run, built once from the validated config.

The config stops at build (rl_hydra/training.py): the loop, the evaluator, the reporter and the
loggers get a `RunSettings`, never the DictConfig, so none of them can reach for a key that is
not theirs. `RunSettings.from_config` is the one place that reads the config for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig

from rl_hydra.config import plain_dict


@dataclass(frozen=True)
class RunSettings:
    seed: int
    total_steps: int  # train.*
    eval_every: int
    eval_episodes: int
    checkpoint_every: int
    log_every: int
    progress: bool
    stop_at_return: float | None
    save_buffer: bool  # checkpoint.save_buffer
    eval_epsilon: float  # env.eval_epsilon: evaluation acts at random this often (0: greedy)
    make_eval_env: Callable[..., Any]  # (seed=, num_envs=) -> the evaluation's vector env
    loggers: Mapping[str, Mapping[str, Any]] | None  # the logger group's choice ({name: {_target_: ...}})
    divergence_hint: str  # what to try when a loss goes non-finite, true for this config
    env_id: str  # what the run is, for summary.json (with the group choices of .hydra/)
    algo_name: str
    config: Mapping[str, Any]  # the whole config, resolved, as plain data: what trackers record

    @classmethod
    def from_config(cls, cfg: DictConfig, *, make_eval_env: Callable[..., Any], algo_name: str) -> RunSettings:
        train = cfg.train
        logger = cfg.logger  # {}: metrics.csv alone
        return cls(
            seed=int(cfg.seed),
            total_steps=int(train.total_steps),
            eval_every=int(train.eval_every),
            eval_episodes=int(train.eval_episodes),
            checkpoint_every=int(train.checkpoint_every),
            log_every=int(train.log_every),
            progress=bool(train.progress),
            stop_at_return=None if train.stop_at_return is None else float(train.stop_at_return),
            save_buffer=bool(cfg.checkpoint.save_buffer),
            eval_epsilon=eval_epsilon(cfg.env),
            make_eval_env=make_eval_env,
            loggers=None if logger is None else plain_dict(logger),
            divergence_hint=divergence_hint(cfg),
            env_id=str(cfg.env.id),
            algo_name=algo_name,
            config=plain_dict(cfg),
        )

    def replace(self, **changes: Any) -> RunSettings:
        return dataclasses.replace(self, **changes)


def divergence_hint(cfg: DictConfig) -> str:
    """What to try when a loss goes non-finite, true for this config."""
    lr_keys = [f"algo.{key}.lr" for key, value in cfg.algo.items() if isinstance(value, DictConfig) and "lr" in value]
    if "max_grad_norm" not in cfg.algo:  # an algorithm of a user's own, without the schedule's key
        clip_hint = None
    elif cfg.algo.max_grad_norm is None:
        clip_hint = "enable algo.max_grad_norm (e.g. 10)"
    else:
        clip_hint = f"lower algo.max_grad_norm (now {cfg.algo.max_grad_norm})"
    lr_hint = f"try a lower {' / '.join(lr_keys)}" if lr_keys else "try a lower learning rate"
    return lr_hint + (f" or {clip_hint}" if clip_hint else "")


def eval_epsilon(env: DictConfig) -> float:
    """How often evaluation acts at random: `env.eval_epsilon`, a key of the env groups that set one
    (atari, minigrid: rl_hydra/schema/envs.py) or of any env given it with +; 0 (greedy) elsewhere."""
    return float(env.eval_epsilon) if "eval_epsilon" in env else 0.0
