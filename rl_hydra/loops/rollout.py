"""The training env as the loops see it: its current observations, the actor's recurrent
state at them, and the episodes under way. A checkpoint captures all three."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import torch

from rl_hydra import spaces
from rl_hydra.envs.make import final_observations
from rl_hydra.envs.state import capture_env_state, restore_env_state
from rl_hydra.loops.monitor import EpisodeStats

log = logging.getLogger(__name__)


class Step(NamedTuple):
    """One vector step, as the buffer stores it: `next_obs` holds the real last observation of an
    episode that ended (truncated ones bootstrap from it), not the first of the next one.

    `rewards` and `terminated` are what the agent learns from: the env's own, unless the env group
    sets learning-only transforms (`env.learning`: clipped rewards, a lost life as terminal).
    `raw_rewards` are the game's, which the episode returns sum; `done`: the episodes that really
    ended (the env reset them), which is what resets an actor's recurrent state."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    done: np.ndarray
    raw_rewards: np.ndarray


class Rollout:
    """The loop acts on `obs` (and, for a recurrent actor, `actor_state`, which the loop keeps
    current); `step` moves the env and the episode statistics on."""

    def __init__(self, env) -> None:
        self.env = env
        self.learning = getattr(env, "learning", None)  # see envs/learning.py
        self.episodes = EpisodeStats(env.num_envs)
        self.obs: np.ndarray | None = None
        self.actor_state: tuple[torch.Tensor, ...] | None = None  # None: fresh episodes, the actor starts anew
        self._restored = False

    def start(self) -> np.ndarray:
        """The first observations: the restored ones after an exact resume, else a reset."""
        seeded, self.env.seeded_reset = getattr(self.env, "seeded_reset", None), None  # make_env's reset, once
        if not self._restored:
            self.obs, info = seeded if seeded is not None else self.env.reset()
            self.actor_state = None
            self.episodes.restart()
            if self.learning is not None:
                self.learning.start(info)
        self._restored = False
        assert self.obs is not None  # reset, or restored
        return self.obs

    def step(self, actions: np.ndarray) -> Step:
        obs = self.obs
        assert obs is not None, "start() first"
        next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        done = terminated | truncated
        self.episodes.record(rewards, done)
        self.obs = next_obs
        raw_rewards = rewards
        if self.learning is not None:
            rewards, terminated = self.learning(rewards, terminated, done, info)
        return Step(
            obs, actions, rewards, final_observations(next_obs, done, info), terminated, truncated, done, raw_rewards
        )

    def state_dict(self) -> dict[str, Any]:
        """The env's state, observations, episode counters and actor state, where the env can be
        captured exactly (classic control, toy text); otherwise only `exact: False`, and a resume starts
        fresh episodes (and says so)."""
        env_state = capture_env_state(self.env) if self.obs is not None else None
        if env_state is None:
            return {"exact": False}
        state = {
            "exact": True,
            "state": env_state,
            "obs": spaces.apply(self.obs, lambda part: torch.from_numpy(np.array(part))),
            "episode_return": torch.from_numpy(self.episodes.episode_return.copy()),
            "episode_length": torch.from_numpy(self.episodes.episode_length.copy()),
        }
        if self.actor_state is not None:
            state["actor_state"] = [s.clone() for s in self.actor_state]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state.get("exact", True):
            envs = getattr(self.env, "envs", None)  # in this process (env.vectorization=sync)
            log.info(
                "%s cannot be captured for an exact resume (classic-control and toy-text envs stepped with "
                "env.vectorization=sync can): the resumed run starts fresh episodes",
                f"env.id={envs[0].spec.id}" if envs else "this env",
            )
            return
        restore_env_state(self.env, state["state"])
        check_episode_state(state, self.env.num_envs)
        obs = spaces.apply(state["obs"], lambda part: part.numpy().copy())
        if not self.env.observation_space.contains(obs):
            raise ValueError("the checkpoint's observations do not lie in the env's observation space")
        self.obs = obs
        self.episodes.episode_return[:] = state["episode_return"].numpy()
        self.episodes.episode_length[:] = state["episode_length"].numpy()
        self.actor_state = tuple(state["actor_state"]) if "actor_state" in state else None
        self._restored = True


def check_episode_state(state: dict[str, Any], num_envs: int) -> None:
    """ValueError unless the episodes under way are one finite return and one whole length >= 0 per
    env (a checkpoint's values, checked before the run takes its directory)."""
    for key in ("episode_return", "episode_length"):
        value = state.get(key)
        if not torch.is_tensor(value) or tuple(value.shape) != (num_envs,):
            shown = f"of shape {tuple(value.shape)}" if torch.is_tensor(value) else f"a {type(value).__name__}"
            raise ValueError(f"the checkpoint's {key} is {shown}, not one value for each of the {num_envs} envs")
        if not bool(torch.isfinite(value.double()).all()) or (key == "episode_length" and bool((value < 0).any())):
            raise ValueError(f"the checkpoint's {key} holds a value out of range")
