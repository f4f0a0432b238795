"""A SyncVectorEnv whose step, for Box observations, skips gymnasium's generic space utilities.

gymnasium's SyncVectorEnv.step iterates, concatenates and deep-copies through its space
utilities, which cost more than a CartPole step itself. For Box observations this step writes
each env's results straight into the vector env's own buffers and returns what
SyncVectorEnv.step returns (SAME_STEP autoreset): tests/speed/test_lean_paths.py checks every field.
It rests on SyncVectorEnv's private step buffers, which `probe` checks at start-up. `lean` gives
this step to a SyncVectorEnv a run has built (envs/vector.py builds gymnasium's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

PRIVATE_BUFFERS = ("_env_obs", "_rewards", "_terminations", "_truncations", "_autoreset_envs")


def lean(envs: VectorEnv) -> VectorEnv:
    """`envs` with the lean step where it is gymnasium's own SyncVectorEnv with SAME_STEP autoreset
    (this instance's class becomes LeanSyncVectorEnv, which adds nothing but its step and the two
    flags it reads); any other vector env unchanged. Before or after a reset alike."""
    if type(envs) is SyncVectorEnv and envs.autoreset_mode == AutoresetMode.SAME_STEP:
        envs.__class__ = LeanSyncVectorEnv
        cast(LeanSyncVectorEnv, envs).prepare_lean_step()
    return envs


class LeanSyncVectorEnv(SyncVectorEnv):
    """SyncVectorEnv with SAME_STEP autoreset and a lean step for Box observations."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]]):
        super().__init__(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
        self.prepare_lean_step()

    def prepare_lean_step(self) -> None:
        self._lean = isinstance(self.single_observation_space, gym.spaces.Box)
        # a Python int passes Discrete.contains (which CartPole asserts) faster than a numpy one
        self._int_actions = isinstance(self.single_action_space, gym.spaces.Discrete)

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._lean:
            return super().step(actions)
        infos: dict[str, Any] = {}
        if self._int_actions:
            actions = np.asarray(actions).tolist()
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(actions[i])
            self._rewards[i], self._terminations[i], self._truncations[i] = reward, terminated, truncated
            if terminated or truncated:
                infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                obs, info = env.reset()
            self._env_obs[i] = obs
            if info:
                infos = self._add_info(infos, info, i)
        self._autoreset_envs = self._terminations | self._truncations
        # a fresh array each step (reset writes into self._observations, so it is not handed out)
        observations = np.array(self._env_obs, dtype=self.single_observation_space.dtype)
        return observations, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos


def probe() -> None:
    """Raises unless the lean step returns what SyncVectorEnv.step returns on two CartPoles, past
    an episode's end (the private buffers it writes are still the ones gymnasium reads)."""
    make = [lambda: gym.make("CartPole-v1")] * 2
    lean_env = lean(SyncVectorEnv(make, autoreset_mode=AutoresetMode.SAME_STEP))
    plain = SyncVectorEnv(make, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        if type(lean_env) is not LeanSyncVectorEnv:
            raise TypeError("lean left gymnasium's SyncVectorEnv as it was")
        for name in PRIVATE_BUFFERS:
            getattr(lean_env, name)
        lean_env.reset(seed=[0, 1]), plain.reset(seed=[0, 1])
        ended = False
        for _ in range(60):  # constant pushes end CartPole's episodes within ~10 steps
            ours, theirs = lean_env.step(np.ones(2, np.int64)), plain.step(np.ones(2, np.int64))
            same = all(np.array_equal(a, b) for a, b in zip(ours[:4], theirs[:4])) and set(ours[4]) == set(theirs[4])
            final = zip(ours[4].get("final_obs", ()), theirs[4].get("final_obs", ()))
            if not same or not all(np.array_equal(a, b) for a, b in final if b is not None):
                raise ValueError("its step returns something else than SyncVectorEnv.step")
            ended = ended or "final_obs" in theirs[4]
        if not ended:
            raise ValueError("no episode ended while it was compared")
    finally:
        lean_env.close()
        plain.close()
