"""How a run's envs are stepped: `env.vectorization=sync|async|envpool`.

- `sync`: every env in this process, one after the other (gymnasium's SyncVectorEnv).
- `async`: each env in a worker process of its own (gymnasium's AsyncVectorEnv, observations in
  shared memory); the same transitions as `sync` for the same seeds.
- `envpool`: EnvPool's C++ thread pool (the `envpool` extra), for `env=atari` ids, configured to
  the group's preprocessing (envpool_atari_options) and adapted to same-step autoreset.

All three return what the loops expect of SAME_STEP autoreset: when an episode ends, `step`
already returns the first observation of the next one, and the real last observation is in
`info["final_obs"]` (rows flagged in `info["_final_obs"]`), so that it reaches the buffer.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from omegaconf import DictConfig

from rl_hydra.errors import NotInstalled


def vector_env(
    env_cfg: DictConfig,
    env_fns: list[Callable[[], gym.Env]],
    seed: int,
    render_mode: str | None = None,
    vectorization: str | None = None,
) -> VectorEnv:
    """The envs of `env_fns` stepped as `vectorization` (default `env.vectorization`) says;
    rendering always steps them `sync`, in this process."""
    how = vectorization or env_cfg.get("vectorization") or "sync"  # a run recorded before the key: sync
    if how == "sync" or render_mode is not None:
        return SyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    if how == "async":
        return AsyncVectorEnv(env_fns, shared_memory=True, autoreset_mode=AutoresetMode.SAME_STEP)
    return EnvPoolAtari(env_cfg, len(env_fns), seed)


def envpool_atari_options(env_cfg: DictConfig) -> dict[str, Any]:
    """EnvPool's Atari options for an `env=atari` config: its sticky actions, no-op starts, frame
    skip (with max-pooling of the last two frames, as EnvPool always does), grayscale resize,
    frame stack and episode limit; no FIRE on reset; the game's end (not a lost life) ends an
    episode; raw rewards (the learning signal clips them, envs/learning.py)."""
    env_id = str(env_cfg.id)  # an atari id, with the atari group's preprocessing: the schema's check
    pre, kwargs = env_cfg.preprocessing, env_cfg.get("kwargs") or {}
    frames = kwargs.get("max_num_frames_per_episode")
    return {
        "task_id": env_id.removeprefix("ALE/"),
        "repeat_action_probability": kwargs.get("repeat_action_probability", 0.25),
        "full_action_space": kwargs.get("full_action_space", False),
        "noop_max": pre.noop_max,
        "frame_skip": pre.frame_skip,
        "img_height": pre.screen_size,
        "img_width": pre.screen_size,
        "stack_num": pre.frame_stack,
        "gray_scale": True,
        "use_fire_reset": False,
        "episodic_life": False,
        "reward_clip": False,
        "max_episode_steps": frames // pre.frame_skip if frames else 27_000,
    }


class EnvPoolAtari(VectorEnv):
    """EnvPool's Atari engine with SAME_STEP autoreset.

    EnvPool resets an ended env on the *next* step, ignoring that step's action. Here the ended
    envs are stepped once more at once (EnvPool steps a subset by `env_id`), which resets them,
    and their first observation is returned in place of the last one, as gymnasium's SAME_STEP
    autoreset does."""

    def __init__(self, env_cfg: DictConfig, num_envs: int, seed: int):
        if importlib.util.find_spec("envpool") is None:
            raise NotInstalled('env.vectorization=envpool needs the envpool extra: pip install -e ".[envpool]"')
        import envpool

        options = envpool_atari_options(env_cfg)
        self.seed_given = seed
        self.pool = envpool.make_gymnasium(options.pop("task_id"), num_envs=num_envs, seed=seed, **options)
        self.num_envs = num_envs
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}
        self.all_envs = np.arange(num_envs, dtype=np.int32)

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):  # noqa: ARG002
        expected = [self.seed_given + i for i in range(self.num_envs)]
        if seed is not None and list(np.atleast_1d(seed)) not in (expected, [self.seed_given]):
            raise ValueError(f"EnvPool takes its seeds when it is made ({expected}), not {seed}")
        obs, info = self.pool.reset()
        return obs, self.keep(info)

    def step(self, actions):
        actions = np.asarray(actions)
        obs, rewards, terminated, truncated, info = self.pool.step(actions, self.all_envs)
        info, done = self.keep(info), np.logical_or(terminated, truncated)
        if done.any():
            ended = np.flatnonzero(done)
            final_obs = np.empty(self.num_envs, dtype=object)
            final_obs[ended] = list(obs[ended])
            no_ops = np.zeros(len(ended), dtype=actions.dtype)
            first_obs, *_, first_info = self.pool.step(no_ops, ended.astype(np.int32))
            obs = obs.copy()
            obs[ended] = first_obs
            for key, value in self.keep(first_info).items():  # as the ended envs' reset reports it
                info[key] = info[key].copy()
                info[key][ended] = value
            info["final_obs"], info["_final_obs"] = final_obs, done
        return obs, rewards, terminated, truncated, info

    @staticmethod
    def keep(info: dict) -> dict:
        """EnvPool's info without the per-step RAM dump and its bookkeeping keys."""
        return {key: value for key, value in info.items() if key in ("lives", "elapsed_step")}

    def close_extras(self, **kwargs) -> None:  # noqa: ARG002
        self.pool.close()
