"""Encoders chosen by config and checked against the observation; every Q head and DRQN's LSTM on them."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra.algos.c51 import C51
from rl_hydra.algos.dqn import DQN
from rl_hydra.algos.drqn import DRQN
from rl_hydra.algos.iqn import IQN
from rl_hydra.algos.qr_dqn import QRDQN
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from rl_hydra.errors import ConfigError
from rl_hydra.networks.categorical import CategoricalNetwork
from rl_hydra.networks.encoders import make_encoder
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.quantile import ImplicitQuantileNetwork, QuantileNetwork
from rl_hydra.networks.recurrent import RecurrentQNetwork
from tests.conftest import algo_keys, from_the_run, network_keys

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
GRIDS = gym.spaces.Box(0, 1, (6, 10, 10), dtype=np.bool_)
VECTORS = gym.spaces.Box(-1, 1, (5,), dtype=np.float32)
ACTIONS = gym.spaces.Discrete(3)
ADAM = functools.partial(torch.optim.Adam, lr=1e-3)


@pytest.mark.parametrize(
    "space, kind, size",
    [(FRAMES, "nature_cnn", 3136), (GRIDS, "minatar_cnn", 1024), (FRAMES, "flat", 4 * 84 * 84), (VECTORS, "flat", 5)],
)
def test_each_encoders_output_size(space, kind, size):
    encoder, features = make_encoder(space, kind)
    assert features == size
    if encoder is None:  # a vector network reads the vector itself
        assert kind == "flat"
        return
    out = encoder(torch.from_numpy(np.stack([space.sample() for _ in range(2)])))
    assert out.shape == (2, size) and out.dtype == torch.float32


def test_auto_picks_the_encoder_that_fits():
    assert isinstance(make_encoder(FRAMES, "auto")[0][1][0], torch.nn.Conv2d)
    assert make_encoder(GRIDS, "auto")[1] == 1024
    assert make_encoder(VECTORS, "auto") == (None, 5) and make_encoder(7, "auto") == (None, 7)


@pytest.mark.parametrize(
    "space, kind, message",
    [
        (VECTORS, "nature_cnn", "network.encoder=nature_cnn needs (C, 84, 84) inputs"),
        (FRAMES, "minatar_cnn", "network.encoder=minatar_cnn needs (C, 10, 10) inputs"),
        (gym.spaces.Box(0, 255, (3, 64, 64), np.uint8), "auto", "network.encoder=auto has no encoder"),
    ],
)
def test_a_mismatched_encoder_is_one_clear_error(space, kind, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_encoder(space, kind)


def test_pixels_are_scaled_inside_the_network():
    encoder, _ = make_encoder(FRAMES, "nature_cnn")
    frames = torch.from_numpy(np.stack([FRAMES.sample() for _ in range(2)]))
    torch.testing.assert_close(encoder(frames), encoder[1](frames.float() / 255.0))


@pytest.mark.parametrize(
    "network",
    [
        functools.partial(QNetwork, num_actions=3, **network_keys("dqn", hidden_sizes=[16])),
        functools.partial(QNetwork, num_actions=3, **network_keys("dqn", hidden_sizes=[16], dueling=True, noisy=True)),
        functools.partial(QuantileNetwork, num_actions=3, num_quantiles=5, **network_keys("qr_dqn", hidden_sizes=[16])),
        functools.partial(
            ImplicitQuantileNetwork,
            num_actions=3,
            **network_keys("iqn", embedding_dim=8, hidden_sizes=[16], head_hidden_sizes=[]),
        ),
        functools.partial(
            CategoricalNetwork, num_actions=3, num_atoms=7, **network_keys("c51", hidden_sizes=[16], dueling=True)
        ),
    ],
)
@pytest.mark.parametrize("space", [FRAMES, GRIDS])
def test_every_q_head_sits_on_every_cnn(network, space):
    net = network(space)
    obs = torch.from_numpy(np.stack([space.sample() for _ in range(2)]))
    out = net(obs, torch.rand(2, 4)) if isinstance(net, ImplicitQuantileNetwork) else net(obs)
    assert out.shape[:2] == (2, 3)


def test_drqns_lstm_sits_on_a_cnn():
    net = RecurrentQNetwork(GRIDS, 3, **network_keys("drqn", encoder_sizes=[32], lstm_size=16))
    obs = torch.from_numpy(np.stack([[GRIDS.sample() for _ in range(2)] for _ in range(5)]))  # (T, B, C, H, W)
    values, state = net(obs, net.initial_state(2))
    assert values.shape == (5, 2, 3) and state[0].shape == (2, 16)
    step_values, _ = net.act(obs[0], net.initial_state(2))
    torch.testing.assert_close(step_values, values[0])


AGENTS = {
    "dqn": lambda: DQN(
        GRIDS,
        ACTIONS,
        functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[32])),
        ADAM,
        total_steps=100,
        **algo_keys("dqn"),
    ),
    "qr_dqn": lambda: QRDQN(
        GRIDS,
        ACTIONS,
        functools.partial(QuantileNetwork, **network_keys("qr_dqn", hidden_sizes=[32])),
        ADAM,
        total_steps=100,
        **algo_keys("qr_dqn", num_quantiles=5),
    ),
    "iqn": lambda: IQN(
        GRIDS,
        ACTIONS,
        functools.partial(
            ImplicitQuantileNetwork, **network_keys("iqn", embedding_dim=8, hidden_sizes=[32], head_hidden_sizes=[])
        ),
        ADAM,
        total_steps=100,
        **algo_keys("iqn", num_tau_samples=4, num_tau_prime_samples=4, num_quantile_samples=4),
    ),
    "c51": lambda: C51(
        GRIDS,
        ACTIONS,
        functools.partial(CategoricalNetwork, **network_keys("c51", hidden_sizes=[32])),
        ADAM,
        total_steps=100,
        **algo_keys("c51", num_atoms=11),
    ),
}


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_agents_act_and_learn_on_raw_grids_kept_as_bool_in_the_buffer(algo):
    agent = AGENTS[algo]()
    buffer = ReplayBuffer(100, GRIDS, ACTIONS, **from_the_run(seed=0, gamma=0.99), share_frames="auto")
    rng = np.random.default_rng(0)
    for _ in range(40):
        obs = rng.random((1, 6, 10, 10)) < 0.2
        actions, _ = agent.act(obs, explore=True)
        buffer.add(
            obs, actions, rng.normal(size=1), rng.random((1, 6, 10, 10)) < 0.2, np.zeros(1, bool), np.zeros(1, bool)
        )
    assert buffer.storage["obs"].dtype == torch.bool  # 1 byte per cell, not 4
    batch = buffer.sample(8)
    metrics = agent.update(batch).metrics
    assert np.isfinite(float(metrics["loss"]))
    greedy, _ = agent.act(rng.random((3, 6, 10, 10)) < 0.2, explore=False)
    assert greedy.shape == (3,)


def test_drqn_learns_on_frames_from_its_sequence_buffer():
    agent = DRQN(
        GRIDS,
        ACTIONS,
        functools.partial(RecurrentQNetwork, **network_keys("drqn", encoder_sizes=[16], lstm_size=8)),
        ADAM,
        total_steps=100,
        **algo_keys("drqn", batch_size=2),
    )
    buffer = SequenceBuffer(20, 4, 2, GRIDS, ACTIONS, **from_the_run(returns=False), share_frames="auto")
    rng = np.random.default_rng(0)
    state = None
    for t in range(12):
        obs = rng.random((1, 6, 10, 10)) < 0.2
        before = agent.initial_state(1) if state is None else state
        actions, state = agent.act(obs, state, explore=True)
        buffer.add(
            obs,
            actions,
            rng.normal(size=1),
            rng.random((1, 6, 10, 10)) < 0.2,
            np.array([t == 11]),
            np.zeros(1, bool),
            before,
        )
    assert buffer.steps["obs"].dtype == torch.bool
    metrics = agent.update(buffer.sample(2)).metrics
    assert np.isfinite(float(metrics["loss"]))
