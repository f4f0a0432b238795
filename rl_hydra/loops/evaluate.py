"""Greedy evaluation rollouts, shared by both training loops and the run tools."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.vector import VectorEnv


@torch.no_grad()
def evaluate(agent, env: VectorEnv, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Run one greedy episode in each of the env's copies; returns (returns, lengths).

    One episode per copy (rather than the first N to finish) keeps short episodes
    from being over-represented. Recurrent agents get `state=None` at the start.
    """
    n = env.num_envs
    obs, _ = env.reset(seed=[seed + i for i in range(n)])
    state = None
    returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
    running = np.ones(n, dtype=bool)
    while running.any():
        actions, state = agent.act(obs, state, explore=False)
        obs, rewards, terminated, truncated, _ = env.step(actions)
        returns += rewards * running
        lengths += running
        running &= ~(terminated | truncated)
    return returns, lengths
