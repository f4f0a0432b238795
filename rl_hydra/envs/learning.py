"""Learning-only transforms: what the replay buffer stores, where it differs from the game.

An env group's `learning:` keys (all off unless set) change only the rewards and terminations
that the loops store; the episode returns in metrics.csv and evaluation keep the game's own
score over full games.

- `clip_rewards`: store the sign of each reward (-1, 0 or 1), as DQN did on Atari.
- `terminal_on_life_loss`: store the step that loses a life as terminal (no bootstrap past it)
  while the game goes on; the env must report `info["lives"]`, as ALE's games do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from omegaconf import DictConfig

from rl_hydra.errors import EnvMismatch

LEARNING_KEYS = ("clip_rewards", "terminal_on_life_loss")


class LearningSignal:
    """Turns a vector step's rewards and terminations into the ones the buffer stores."""

    def __init__(self, num_envs: int, clip_rewards: bool = False, terminal_on_life_loss: bool = False):
        self.clip_rewards, self.terminal_on_life_loss = clip_rewards, terminal_on_life_loss
        self.lives = np.zeros(num_envs, dtype=np.int64)  # each env's lives before the step

    def start(self, info: dict[str, Any]) -> None:
        """Every env starts a new episode; `info` is what the vector env's reset returned."""
        if self.terminal_on_life_loss:
            self.lives[:] = info["lives"]

    def __call__(
        self, rewards: np.ndarray, terminated: np.ndarray, done: np.ndarray, info: dict[str, Any]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(rewards, terminated) to store; `done`: the episodes that ended (and were reset)."""
        if self.clip_rewards:
            rewards = np.sign(rewards)
        if self.terminal_on_life_loss:
            # a finished episode's row already holds the lives of the next one (autoreset): only a
            # game that goes on can have lost a life; one that ended keeps the env's own flags
            lives = info["lives"]
            terminated = terminated | ((lives < self.lives) & ~done)
            self.lives[:] = lives
        return rewards, terminated


def learning_signal(env_cfg: DictConfig, num_envs: int, reset_info: dict[str, Any]) -> LearningSignal | None:
    """The env group's `learning:` transform, or None when it asks for none (the loops then store
    what the env reports, at no cost); `reset_info`: the vector env's reset info, to check lives."""
    # a node of the minatar and atari groups, or of any env given it with +; the schema checks its keys
    learning = (env_cfg.learning if "learning" in env_cfg else None) or {}
    flags = {key: key in learning and bool(learning[key]) for key in LEARNING_KEYS}
    if flags["terminal_on_life_loss"] and "lives" not in reset_info:
        raise EnvMismatch(
            f"env.learning.terminal_on_life_loss=true needs an env that reports info['lives'] "
            f"(ALE's games do); env.id={env_cfg.id} does not"
        )
    if not any(flags.values()):
        return None
    signal = LearningSignal(num_envs, **flags)
    signal.start(reset_info)
    return signal
