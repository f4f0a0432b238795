"""Test-only env wrappers that a sweep can name on the command line, e.g.
`env.wrappers=[{_target_:tests.helpers.RaiseAfter,_partial_:true,steps:120}]`.

`tests` is importable as a namespace package from the repository root, which is where
train.py runs, so every launcher's workers can build these.
"""

from __future__ import annotations

import time
from pathlib import Path

import gymnasium as gym
import torch


class RaiseAfter(gym.Wrapper):
    """An env that crashes: `step` raises RuntimeError once it has been called `steps` times."""

    def __init__(self, env: gym.Env, steps: int):
        super().__init__(env)
        self.steps, self.calls = steps, 0

    def step(self, action):
        self.calls += 1
        if self.calls > self.steps:
            raise RuntimeError(f"env crashed on purpose after {self.steps} steps")
        return self.env.step(action)


class SlowDown(gym.Wrapper):
    """An env whose every step takes at least `seconds` (so that a test can act while a run trains)."""

    def __init__(self, env: gym.Env, seconds: float):
        super().__init__(env)
        self.seconds = seconds

    def step(self, action):
        time.sleep(self.seconds)
        return self.env.step(action)


class RecordTorchThreads(gym.Wrapper):
    """Writes the building process's torch thread count to `path` (what a sweep worker trains with)."""

    def __init__(self, env: gym.Env, path: str):
        super().__init__(env)
        Path(path).write_text(str(torch.get_num_threads()))
