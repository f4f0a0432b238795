"""What the actor-critic family's tests share: small spaces, a random batch, an agent built from a
composed config as a run builds it (torch seeded, the config's network factories)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from hydra.utils import instantiate

from rl_hydra.buffers.replay import Batch
from rl_hydra.build import agent_node
from tests.conftest import run_training

OBS_SPACE = gym.spaces.Box(-10.0, 10.0, (3,), np.float32)
# asymmetric bounds, so a missed rescaling shows
ACTION_SPACE = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([1.0, 0.5], np.float32))
SMALL_NET = ["network.actor.hidden_sizes=[16,16]", "network.critic.hidden_sizes=[16,16]"]


def agent_from(cfg, observation_space: gym.Space = OBS_SPACE, action_space: gym.Space = ACTION_SPACE):
    """The composed config's agent on these spaces, on the CPU, torch seeded 0 first."""
    torch.manual_seed(0)
    return instantiate(
        agent_node(cfg),
        observation_space=observation_space,
        action_space=action_space,
        network=instantiate(cfg.network),
        device=torch.device("cpu"),
        seed=0,
    )


def random_batch(batch_size: int = 32, seed: int = 0) -> Batch:
    """Transitions of OBS_SPACE and ACTION_SPACE, a fifth of them terminal."""
    g = torch.Generator().manual_seed(seed)
    low, high = torch.as_tensor(ACTION_SPACE.low), torch.as_tensor(ACTION_SPACE.high)
    return Batch(
        obs=torch.randn(batch_size, 3, generator=g),
        actions=low + (high - low) * torch.rand(batch_size, 2, generator=g),
        rewards=torch.randn(batch_size, generator=g),
        next_obs=torch.randn(batch_size, 3, generator=g),
        terminated=(torch.rand(batch_size, generator=g) < 0.2).float(),
        truncated=torch.zeros(batch_size),
        discounts=torch.full((batch_size,), 0.99),
        weights=torch.ones(batch_size),
        indices=torch.arange(batch_size),
    )


def assert_the_pendulum_preset_reaches_minus_200(tmp_path, *overrides: str) -> None:
    """The algo's Pendulum preset as train.py runs it, stopped at its first evaluation at -200 or above
    (evaluations every 2k of its 20k steps): it gets there within its budget."""
    summary = run_training(
        tmp_path,
        *overrides,
        "env=pendulum",
        "train.stop_at_return=-200",
        "train.progress=false",
        "device=cpu",
        "checkpoint.save_buffer=false",
    )
    assert summary["solved_at_step"] is not None and summary["global_step"] <= 20000, summary
    assert summary["eval_return_mean"] >= -200
