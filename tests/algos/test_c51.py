"""C51: the projection onto the atoms against a slow reference, acting, updates and runs."""

from __future__ import annotations

import functools
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import TINY, run_training

from rl_hydra.algos.c51 import C51, categorical_projection
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from rl_hydra.networks.categorical import CategoricalNetwork
from tests.conftest import algo_keys, buffer_keys, compose_config, from_the_run, network_keys

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
ACTION_SPACE = gym.spaces.Discrete(3)
ADAM = functools.partial(torch.optim.Adam, lr=1e-3)


def reference_projection(next_probs, rewards, discounts, terminated, support):
    """The paper's Algorithm 1, one atom at a time."""
    n = len(support)
    v_min, v_max = float(support[0]), float(support[-1])
    spacing = (v_max - v_min) / (n - 1)
    projected = np.zeros_like(next_probs, dtype=np.float64)
    for b in range(len(rewards)):
        for j in range(n):
            shifted = rewards[b] + discounts[b] * (1.0 - terminated[b]) * float(support[j])
            shifted = min(max(shifted, v_min), v_max)
            position = (shifted - v_min) / spacing
            lower, upper = math.floor(position), math.ceil(position)
            if lower == upper:
                projected[b, lower] += next_probs[b, j]
            else:
                projected[b, lower] += next_probs[b, j] * (upper - position)
                projected[b, upper] += next_probs[b, j] * (position - lower)
    return projected


def test_projection_matches_the_reference_loop():
    rng = np.random.default_rng(0)
    support = torch.linspace(-10.0, 10.0, 11)
    batch = 64
    next_probs = torch.from_numpy(rng.dirichlet(np.ones(11), size=batch).astype(np.float32))
    rewards = torch.from_numpy(rng.normal(0, 4, size=batch).astype(np.float32))
    rewards[:4] = torch.tensor([0.0, 2.0, -30.0, 30.0])  # on the atoms, and clipped at both ends
    discounts = torch.from_numpy(rng.choice([0.9, 0.81, 0.729], size=batch).astype(np.float32))
    terminated = torch.from_numpy((rng.random(batch) < 0.3).astype(np.float32))
    got = categorical_projection(next_probs, rewards, discounts, terminated, support)
    want = reference_projection(next_probs.numpy(), rewards.numpy(), discounts.numpy(), terminated.numpy(), support)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)
    torch.testing.assert_close(got.sum(dim=1), torch.ones(batch))


def test_projection_by_hand():
    support = torch.tensor([0.0, 1.0, 2.0])
    # a terminal transition with reward 0.5: all the mass at 0.5, split evenly between atoms 0 and 1
    got = categorical_projection(
        torch.tensor([[0.2, 0.3, 0.5]]), torch.tensor([0.5]), torch.tensor([0.9]), torch.tensor([1.0]), support
    )
    torch.testing.assert_close(got, torch.tensor([[0.5, 0.5, 0.0]]))
    # reward 1, discount 0.5: atoms 0, 1, 2 move to 1, 1.5, 2
    got = categorical_projection(
        torch.tensor([[0.2, 0.3, 0.5]]), torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.0]), support
    )
    torch.testing.assert_close(got, torch.tensor([[0.0, 0.2 + 0.15, 0.15 + 0.5]]))


def make_c51(**kwargs) -> C51:
    network = functools.partial(CategoricalNetwork, **network_keys("c51", hidden_sizes=[32]))
    return C51(
        OBS_SPACE,
        ACTION_SPACE,
        network,
        ADAM,
        total_steps=1000,
        **algo_keys("c51", num_atoms=11, v_min=-5, v_max=5, **kwargs),
    )


def filled_buffer(n: int = 200, **kwargs) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(1000, OBS_SPACE, ACTION_SPACE, **from_the_run(), **buffer_keys("replay", **kwargs))
    for _ in range(n):
        buffer.add(
            rng.normal(size=(1, 4)),
            rng.integers(3, size=1),
            rng.normal(size=1),
            rng.normal(size=(1, 4)),
            rng.random(1) < 0.1,
            np.zeros(1, dtype=bool),
        )
    return buffer


def test_action_values_are_the_means_of_the_distributions():
    agent = make_c51()
    obs = torch.randn(5, 4)
    probs = agent.q_net(obs).softmax(dim=2)  # (5, 3, 11)
    torch.testing.assert_close(agent.action_values(obs), (probs * torch.linspace(-5, 5, 11)).sum(dim=2))
    actions, _ = agent.act(obs.numpy(), explore=False)
    assert actions.tolist() == agent.action_values(obs).argmax(dim=1).tolist()


def test_update_lowers_the_cross_entropy_and_returns_it_as_priorities():
    torch.manual_seed(0)
    agent = make_c51(batch_size=32, target_update_every=10_000)
    batch = filled_buffer().sample(32)
    first, priorities = agent.update(batch)
    assert tuple(first) == agent.metric_names and priorities.shape == (32,) and bool((priorities > 0).all())
    # the loss is the importance-weighted mean of the per-sample cross-entropies
    torch.testing.assert_close(first["loss"], priorities.mean())
    for _ in range(50):
        last = agent.update(batch).metrics
    assert float(last["loss"]) < float(first["loss"])


def test_importance_weights_scale_each_samples_share_of_the_loss():
    agent = make_c51()
    batch = filled_buffer().sample(8)
    _, per_sample, _ = agent.loss(batch)
    weights = torch.linspace(0.1, 1.0, 8)
    loss, _, _ = agent.loss(batch._replace(weights=weights))
    torch.testing.assert_close(loss, (weights * per_sample).mean())


def test_bad_support_is_refused():
    with pytest.raises(ConfigError, match=r"algo.v_max=-20.0 is out of range; expected v_max > v_min .*algo.v_min=0.0"):
        validate_run_config(compose_config("algo=c51", "algo.v_max=-20"))  # a rule across keys: the schema's
    with pytest.raises(ConfigError, match="algo.num_atoms=1 is out of range; expected an integer >= 2"):  # the schema's
        validate_run_config(compose_config("algo=c51", "algo.num_atoms=1"))


# the reward every step until the episode ends: the discounted returns lie between 0 and reward / (1 - gamma)
STEP_REWARD = {"cartpole": 1.0, "acrobot": -1.0, "mountain_car": -1.0}


@pytest.mark.parametrize("algo", ["c51", "rainbow"])
@pytest.mark.parametrize("env", sorted(STEP_REWARD))
def test_presets_span_their_envs_discounted_returns(algo, env):
    # atoms outside the returns are wasted, and a support reaching below them starts the network
    # at a pessimistic value where DQN's starts optimistic (MountainCar at gamma 0.98 once had -100)
    cfg = compose_config(f"algo={algo}", f"env={env}")
    bound = STEP_REWARD[env] / (1.0 - cfg.algo.gamma)
    assert (cfg.algo.v_min, cfg.algo.v_max) == pytest.approx(sorted([0.0, bound]))


def test_c51_trains_from_the_command_line(tmp_path):
    summary = run_training(
        tmp_path,
        "algo=c51",
        "env=cartpole",
        *TINY,
        "algo.learning_starts=100",
        "algo.train_every=50",
        "algo.gradient_steps=2",
    )
    assert summary["status"] == "completed" and summary["updates"] > 0 and summary["algo"] == "c51"
