"""A third-party env package in miniature: importing it registers `PluginCorridor-v0`, the way a
plugin's env is reached with gymnasium's `module:EnvId` form (tests/envs/test_env_groups.py)."""

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a 1-d corridor of 5 cells: +1 at the end, -0.01 a step, 20 steps at most."""

    observation_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    metadata = {"render_modes": []}

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return np.array([self.position], np.float32), {}

    def step(self, action):
        self.position = max(0, min(4, self.position + (1 if action == 1 else -1)))
        done = self.position == 4
        return np.array([self.position], np.float32), 1.0 if done else -0.01, done, False, {}


if "PluginCorridor-v0" not in gym.registry:
    gym.register("PluginCorridor-v0", entry_point=Corridor, max_episode_steps=20)
