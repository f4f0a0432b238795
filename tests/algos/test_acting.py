"""One acting path: `act` picks what the agent's own `action_values` says, whether or not the
numpy mirror (rl_hydra/networks/numpy_mirror.py) runs, for subclasses and after any weight change."""

from __future__ import annotations

import contextlib
import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, parametrize, vector_to_parameters
from torch.nn.utils.parametrizations import spectral_norm

from rl_hydra.algos.c51 import C51
from rl_hydra.algos.dqn import DQN
from rl_hydra.algos.qr_dqn import QRDQN
from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from rl_hydra.networks.categorical import CategoricalNetwork
from rl_hydra.networks.mlp import QNetwork, mlp
from rl_hydra.networks.noisy import noise_disabled, resample_noise
from rl_hydra.networks.quantile import QuantileNetwork
from rl_hydra.speed.lean_adam import LeanAdam
from rl_hydra.speed.numpy_mirror import call_mirror, numpy_forward
from tests.conftest import algo_keys, compose_config, network_keys

OBS = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)


def make_agent(algo_class=DQN, network=QNetwork, **network_kwargs):
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    return algo_class(
        env.observation_space,
        env.action_space,
        functools.partial(network, **network_keys(algo_class.name, hidden_sizes=[32, 32], **network_kwargs)),
        functools.partial(LeanAdam, lr=1e-3),
        total_steps=100,
        **algo_keys(algo_class.name),  # its own keys (QR-DQN's quantiles, C51's atoms)
    )


def torch_greedy(agent, obs=OBS, noise: bool = True) -> np.ndarray:
    with torch.no_grad(), contextlib.nullcontext() if noise else noise_disabled(agent.q_net):
        return agent.action_values(torch.from_numpy(obs)).argmax(dim=1).numpy()


def assert_acts_like_its_action_values(agent, obs=OBS):
    actions, _ = agent.act(obs, explore=False)  # evaluation: without noise (noisy networks)
    assert np.array_equal(actions, torch_greedy(agent, obs, noise=False))


SHIPPED = [
    (DQN, QNetwork, {}),
    (QRDQN, QuantileNetwork, {}),
    (C51, CategoricalNetwork, {}),
    (C51, CategoricalNetwork, {"noisy": True, "dueling": True}),
]  # the last: Rainbow's network


@pytest.mark.parametrize("algo_class, network, options", SHIPPED)
def test_plain_networks_act_through_the_mirror_and_it_equals_torch(algo_class, network, options):
    agent = make_agent(algo_class, network, **options)
    mirrored = call_mirror(agent, "action_values", OBS)
    assert mirrored is not None  # the fast path is in effect for the shipped networks
    with torch.no_grad():
        np.testing.assert_allclose(mirrored, agent.action_values(torch.from_numpy(OBS)).numpy(), atol=1e-5)
    assert_acts_like_its_action_values(agent)
    if options.get("noisy"):  # exploring acts on the noise drawn for that step, through the mirror
        torch.manual_seed(3)
        explored = [agent.act(OBS, explore=True)[0] for _ in range(3)]
        torch.manual_seed(3)
        for actions in explored:
            resample_noise(agent.q_net)
            assert np.array_equal(actions, torch_greedy(agent))


class NegatedDQN(DQN):
    def action_values(self, obs: torch.Tensor) -> torch.Tensor:
        return -self.q_net(obs)


def test_a_subclass_overriding_action_values_is_obeyed():
    agent = make_agent(NegatedDQN)
    mirrored = call_mirror(agent, "action_values", OBS)  # its own method, on the network's numpy forward
    with torch.no_grad():
        np.testing.assert_allclose(mirrored, agent.action_values(torch.from_numpy(OBS)).numpy(), atol=1e-5)
    assert_acts_like_its_action_values(agent)
    plain = make_agent(DQN)  # same seed: same weights, so every greedy action flips
    assert (agent.act(OBS, explore=False)[0] != plain.act(OBS, explore=False)[0]).mean() > 0.9


def test_action_values_replaced_on_the_instance_is_obeyed():
    agent = make_agent()
    agent.action_values = lambda obs: -agent.q_net(obs)
    assert_acts_like_its_action_values(agent)


@pytest.mark.parametrize("algo_class, network, options", SHIPPED)
def test_weight_swaps_and_updates_show_in_the_actions(algo_class, network, options):
    agent = make_agent(algo_class, network, **options)
    first = agent.q_net.net[0]
    name = "weight_mu" if options.get("noisy") else "weight"
    assert_acts_like_its_action_values(agent)
    with torch.no_grad():
        getattr(first, name).data = torch.randn_like(getattr(first, name)) * 3  # a new storage, same Parameter
    assert_acts_like_its_action_values(agent)
    vector = parameters_to_vector(agent.q_net.parameters())
    vector_to_parameters(torch.randn_like(vector), agent.q_net.parameters())
    assert_acts_like_its_action_values(agent)
    setattr(first, name, nn.Parameter(torch.randn_like(getattr(first, name))))  # a new Parameter object
    assert_acts_like_its_action_values(agent)
    with torch.no_grad():
        for param in agent.q_net.parameters():  # in place, as optimizer steps and load_state_dict write
            param.mul_(-1.5)
    assert_acts_like_its_action_values(agent)


class Scaled(nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return 2.0 * weight


def test_parametrized_hooked_and_normalized_layers_are_obeyed():
    agent = make_agent()
    parametrize.register_parametrization(agent.q_net.net[0], "weight", Scaled())
    assert call_mirror(agent, "action_values", OBS) is None
    assert_acts_like_its_action_values(agent)

    agent = make_agent()
    spectral_norm(agent.q_net.net[2])
    assert_acts_like_its_action_values(agent)

    agent = make_agent()
    handle = agent.q_net.net[4].register_forward_hook(lambda module, args, out: -out)
    assert call_mirror(agent, "action_values", OBS) is None
    assert_acts_like_its_action_values(agent)
    handle.remove()
    assert call_mirror(agent, "action_values", OBS) is not None

    handle = nn.modules.module.register_module_forward_hook(lambda module, args, out: out)
    try:
        assert numpy_forward(agent.q_net, OBS) is None
    finally:
        handle.remove()


class ShiftedQNetwork(QNetwork):
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs) + torch.arange(2.0) * 100


def test_a_network_subclass_overriding_forward_is_obeyed():
    agent = make_agent(network=ShiftedQNetwork)
    assert numpy_forward(agent.q_net, OBS) is None
    actions, _ = agent.act(OBS, explore=False)
    assert (actions == 1).all()


@pytest.mark.parametrize("options", [{"layer_norm": True}, {"dropout": 0.1}, {"activation": "gelu"}])
def test_layer_norm_dropout_and_other_activations_act_through_torch(options):
    agent = make_agent(**options)
    assert call_mirror(agent, "action_values", OBS) is None
    agent.q_net.eval()
    assert_acts_like_its_action_values(agent)


def test_mlp_layer_norm_and_dropout_are_placed_as_droq_places_them():
    net = mlp(4, 2, [8, 8], "relu", layer_norm=True, dropout=0.1)
    kinds = [type(layer).__name__ for layer in net]
    assert kinds == ["Linear", "Dropout", "LayerNorm", "ReLU"] * 2 + ["Linear"]
    # their ranges are the schema's (rl_hydra/schema/networks.py): checked before anything is built
    with pytest.raises(ConfigError, match=r"network.dropout=1.0 is out of range; expected a number >= 0.0 and < 1.0"):
        validate_run_config(compose_config("network.dropout=1.0"))
    with pytest.raises(ConfigError, match=r"network.layer_norm='maybe' is not allowed; choose one of: true, false"):
        compose_config("network.layer_norm=maybe")


def test_an_empty_hidden_sizes_is_a_linear_network_and_the_log_says_so(caplog):
    env = gym.make("CartPole-v1")
    with caplog.at_level("INFO", logger="rl_hydra"):
        agent = DQN(
            env.observation_space,
            env.action_space,
            functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[])),
            functools.partial(LeanAdam, lr=1e-3),
            total_steps=100,
            **algo_keys("dqn"),
        )
    assert [type(layer) for layer in agent.q_net.net] == [nn.Linear]
    assert "network.hidden_sizes=[]: a linear network (no hidden layer)" in caplog.text
    assert_acts_like_its_action_values(agent)
