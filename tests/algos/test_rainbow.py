"""The Rainbow parts composed: presets, noisy exploration, n-step returns through a run, refusals."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import TINY, compose_config, run_cli, run_training

from rl_hydra.algos.c51 import C51
from rl_hydra.algos.dqn import DQN
from rl_hydra.algos.iqn import IQN
from rl_hydra.build import build_components
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.noisy import NoisyLinear, noise_disabled
from tests.conftest import algo_keys, network_keys

OBS_SPACE = gym.spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
ACTION_SPACE = gym.spaces.Discrete(3)
ADAM = functools.partial(torch.optim.Adam, lr=1e-3)
LEARN_EARLY = ["algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2"]


@pytest.mark.parametrize(
    "algo, agent_class, buffer, n_step, network_keys",
    [
        ("rainbow", C51, "PrioritizedReplayBuffer", 3, {"dueling": True, "noisy": True}),
        ("dopamine_iqn", IQN, "PrioritizedReplayBuffer", 3, {}),
    ],
)
def test_presets_compose_their_parts(algo, agent_class, buffer, n_step, network_keys):
    cfg = compose_config(f"algo={algo}", "env=cartpole")
    agent, env, built_buffer = build_components(cfg, torch.device("cpu"))
    try:
        assert type(agent) is agent_class and built_buffer.n_step == n_step  # the buffer builds the returns
        assert type(built_buffer).__name__ == buffer and built_buffer.gamma == cfg.algo.gamma
        assert all(cfg.network[key] == value for key, value in network_keys.items())
        assert agent.noisy == bool(network_keys.get("noisy"))
        if algo == "rainbow":
            assert agent.double_q and agent.epsilon == 0.0  # the noise explores, not epsilon
        # beta reaches 1 at the run's last update
        phases = (cfg.train.total_steps - agent.learning_starts) // agent.train_every
        assert built_buffer.beta_steps == phases * agent.gradient_steps
    finally:
        env.close()


def noisy_dqn(**kwargs) -> DQN:
    network = functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[16], noisy=True, dueling=True))
    return DQN(
        OBS_SPACE, ACTION_SPACE, network, ADAM, total_steps=1000, **algo_keys("dqn", learning_starts=0, **kwargs)
    )


def test_noisy_agents_explore_with_noise_and_evaluate_deterministically():
    torch.manual_seed(0)
    agent = noisy_dqn()
    assert agent.noisy and any(isinstance(m, NoisyLinear) for m in agent.q_net.modules()) and agent.epsilon == 0.0
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = [agent.act(obs, explore=False)[0] for _ in range(3)]
    assert all(np.array_equal(greedy[0], g) for g in greedy[1:])  # no noise in evaluation
    exploring = [agent.act(obs, explore=True)[0] for _ in range(5)]
    assert any(not np.array_equal(exploring[0], e) for e in exploring[1:])  # fresh noise at each acting step
    with torch.no_grad(), noise_disabled(agent.q_net):  # evaluation acts on the mean weights
        mean_actions = agent.q_net(torch.from_numpy(obs)).argmax(dim=1).numpy()
    assert np.array_equal(mean_actions, greedy[0])
    assert np.array_equal(agent.act(obs, explore=False)[0], greedy[0])


def test_noisy_updates_draw_fresh_noise_for_the_online_and_target_networks():
    agent = noisy_dqn()
    online = [m for m in agent.q_net.modules() if isinstance(m, NoisyLinear)][0]
    target = [m for m in agent.target_net.modules() if isinstance(m, NoisyLinear)][0]
    noise = [b.clone() for b in (*online.buffers(), *target.buffers())]
    batch_size = 8
    from rl_hydra.buffers.replay import Batch

    batch = Batch(
        obs=torch.randn(batch_size, 4),
        actions=torch.randint(3, (batch_size,)),
        rewards=torch.ones(batch_size),
        next_obs=torch.randn(batch_size, 4),
        terminated=torch.zeros(batch_size),
        truncated=torch.zeros(batch_size),
        discounts=torch.full((batch_size,), 0.99),
        weights=torch.ones(batch_size),
        indices=torch.arange(batch_size),
    )
    agent.update(batch)
    after = [b for b in (*online.buffers(), *target.buffers())]
    assert all(not torch.equal(a, b) for a, b in zip(noise, after))
    assert not torch.equal(list(online.buffers())[0], list(target.buffers())[0])  # drawn apart


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn", "iqn", "c51"])
def test_every_q_learning_algo_trains_with_n_step_returns_and_several_envs(tmp_path, algo):
    summary = run_training(
        tmp_path, f"algo={algo}", "env=cartpole", *TINY, *LEARN_EARLY, "algo.n_step=3", "env.num_envs=2"
    )
    assert summary["status"] == "completed" and summary["updates"] > 0


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn", "iqn", "c51"])
def test_every_q_learning_algo_trains_from_prioritized_replay(tmp_path, algo):
    head = ["network.head_hidden_sizes=[16]"] if algo == "iqn" else []  # IQN's streams sit in its head
    summary = run_training(
        tmp_path,
        f"algo={algo}",
        "env=cartpole",
        "buffer=prioritized",
        *TINY,
        *LEARN_EARLY,
        "network.dueling=true",
        "network.noisy=true",
        *head,
    )
    assert summary["status"] == "completed" and summary["updates"] > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["algo=sac", "env=pendulum", "algo.n_step=3"], "algo.n_step=3 is not supported by algo=sac"),
        (["algo=sac", "env=pendulum", "buffer=prioritized"], "buffer=prioritized needs an algo whose update returns"),
        (["algo=drqn", "env=cartpole", "buffer=prioritized"], "algo=drqn needs a sequence buffer"),
    ],
)
def test_parts_an_algo_cannot_use_are_refused_in_one_line(tmp_path, args, message):
    result = run_cli(*args, "train.total_steps=100", f"hydra.run.dir={tmp_path}/run", "train.progress=false")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert message in lines[-1], result.stderr
