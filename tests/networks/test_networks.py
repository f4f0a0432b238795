"""Value networks with the Rainbow options: dueling heads (Wang et al. 2016) and factorised
noisy layers (Fortunato et al. 2018); shapes, the combinations by hand, the noise API, the
numpy mirror, today's structure under the defaults, and the config checks."""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torch import nn

from rl_hydra.algos.dqn import DQN
from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from rl_hydra.networks.categorical import CategoricalNetwork
from rl_hydra.networks.dueling import DuelingHead
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.noisy import NoisyLinear, has_noisy_layers, noise_disabled, resample_noise
from rl_hydra.networks.quantile import ImplicitQuantileNetwork, QuantileNetwork
from rl_hydra.speed.lean_adam import LeanAdam
from rl_hydra.speed.numpy_mirror import call_mirror, numpy_forward
from tests.conftest import algo_keys, compose_config, network_keys

B, OBS_DIM, A, N, T = 5, 4, 3, 7, 6
OBS = torch.randn(B, OBS_DIM, generator=torch.Generator().manual_seed(1))
TAUS = torch.rand(B, T, generator=torch.Generator().manual_seed(2))

# name -> (factory taking the options, output shape, call)
NETWORKS = {
    "dqn": (
        lambda **kw: QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[16, 16], **kw)),
        (B, A),
        lambda net: net(OBS),
    ),
    "qr_dqn": (
        lambda **kw: QuantileNetwork(OBS_DIM, A, N, **network_keys("qr_dqn", hidden_sizes=[16, 16], **kw)),
        (B, A, N),
        lambda net: net(OBS),
    ),
    "iqn": (
        lambda **kw: ImplicitQuantileNetwork(
            OBS_DIM, A, **network_keys("iqn", embedding_dim=8, hidden_sizes=[16], head_hidden_sizes=[16], **kw)
        ),
        (B, A, T),
        lambda net: net(OBS, TAUS),
    ),
    "c51": (
        lambda **kw: CategoricalNetwork(OBS_DIM, A, N, **network_keys("c51", hidden_sizes=[16, 16], **kw)),
        (B, A, N),
        lambda net: net(OBS),
    ),
}
OPTIONS = [dict(dueling=d, noisy=n) for d in (False, True) for n in (False, True)]


def f(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, x.abs().sqrt(), -x.abs().sqrt())


# --- shapes and structure ---------------------------------------------------------------


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: f"dueling={o['dueling']},noisy={o['noisy']}")
@pytest.mark.parametrize("name", NETWORKS)
def test_output_shapes_and_layer_kinds(name, options):
    make, shape, call = NETWORKS[name]
    net = make(**options)
    assert call(net).shape == shape
    assert has_noisy_layers(net) == options["noisy"]
    assert any(isinstance(m, DuelingHead) for m in net.modules()) == options["dueling"]
    plain = [path for path, m in net.named_modules() if type(m) is nn.Linear]
    if options["noisy"]:  # every Linear of the value function is noisy; only IQN's tau embedding phi stays plain
        assert plain == (["phi.0"] if name == "iqn" else [])
    else:
        assert len(plain) > 0


DEFAULT_KEYS = {  # the state_dict keys before the Rainbow options existed: old checkpoints load
    "dqn": ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight", "net.4.bias"],
    "qr_dqn": ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight", "net.4.bias"],
    "iqn": [
        "psi.0.weight",
        "psi.0.bias",
        "phi.0.weight",
        "phi.0.bias",
        "head.0.weight",
        "head.0.bias",
        "head.2.weight",
        "head.2.bias",
    ],
    "c51": ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias", "net.4.weight", "net.4.bias"],
}


@pytest.mark.parametrize("name", NETWORKS)
def test_the_defaults_keep_the_plain_structure(name):
    make = NETWORKS[name][0]
    assert list(make().state_dict()) == DEFAULT_KEYS[name]
    torch.manual_seed(0)
    default = make()
    torch.manual_seed(0)
    explicit = make(dueling=False, noisy=False, noisy_sigma0=0.5)
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), explicit.state_dict().values()))


# --- dueling ----------------------------------------------------------------------------


def test_dueling_head_by_hand():
    value, advantage = nn.Linear(2, 1, bias=False), nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        value.weight.copy_(torch.tensor([[4.0, 3.0]]))  # V = 4 + 6 = 10
        advantage.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]))  # A = [1, 2, 6], mean 3
    q = DuelingHead(value, advantage, num_actions=3)(torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(q, torch.tensor([[8.0, 9.0, 13.0]]))  # 10 + A - 3


def test_dueling_head_combines_each_of_the_k_outputs_separately():
    K = 2
    value, advantage = nn.Linear(4, K), nn.Linear(4, A * K)
    features = torch.randn(B, 4)
    q = DuelingHead(value, advantage, A, K)(features).view(B, A, K)
    v, adv = value(features), advantage(features).view(B, A, K)  # action-major, as a plain output layer
    for a in range(A):
        for k in range(K):
            expected = v[:, k] + adv[:, a, k] - sum(adv[:, b, k] for b in range(A)) / A
            torch.testing.assert_close(q[:, a, k], expected)


def state_values(name: str, net: nn.Module) -> torch.Tensor:
    """V from the value stream of a dueling network: (B, K) for K outputs per action."""
    if name == "iqn":
        mixed = net.psi(OBS)[:, None, :] * net.phi(torch.cos(torch.pi * torch.arange(8) * TAUS[..., None]))
        return net.head[-1].value(net.head[:-1](mixed))[..., 0]  # (B, T)
    head = net.net[-1]
    return head.value(net.net[:-1](OBS))  # (B, K)


@pytest.mark.parametrize("name", NETWORKS)
def test_dueling_outputs_average_to_the_state_value_over_actions(name):
    make, _, call = NETWORKS[name]
    net = make(dueling=True)
    with torch.no_grad():
        out = call(net)  # (B, A) or (B, A, K)
        mean_over_actions = out.mean(dim=1)  # (B,) or (B, K)
        v = state_values(name, net)
    torch.testing.assert_close(mean_over_actions, v.view_as(mean_over_actions), atol=1e-5, rtol=0)


def test_dueling_streams_each_have_their_own_copy_of_the_last_hidden_layer():
    net = QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[16, 8], dueling=True))
    *trunk, head = net.net
    assert [type(m) for m in trunk] == [nn.Linear, nn.ReLU] and trunk[0].out_features == 16
    assert [(m.in_features, m.out_features) for m in head.value if type(m) is nn.Linear] == [(16, 8), (8, 1)]
    assert [(m.in_features, m.out_features) for m in head.advantage if type(m) is nn.Linear] == [(16, 8), (8, A)]
    # one hidden layer: no trunk, the streams see the input
    single = QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[8], dueling=True))
    assert isinstance(single.net[0], DuelingHead) and single.net[0].value[0].in_features == OBS_DIM


# --- noisy layers -----------------------------------------------------------------------


def test_noisy_linear_initialisation():
    layer = NoisyLinear(16, 5, sigma0=0.4)
    bound = 1 / 16**0.5
    assert layer.weight_mu.abs().max() <= bound and layer.bias_mu.abs().max() <= bound
    assert layer.weight_mu.std() > bound / 4  # drawn, not constant
    assert torch.equal(layer.weight_sigma, torch.full((5, 16), 0.4 * bound))
    assert torch.equal(layer.bias_sigma, torch.full((5,), 0.4 * bound))


def test_noise_is_factorised_and_the_forward_is_the_papers():
    layer = NoisyLinear(6, 4, sigma0=0.5)
    eps_w, eps_b = layer.factorised_noise()
    assert eps_w.shape == (4, 6) and eps_b.shape == (4,)
    torch.testing.assert_close(eps_w, f(layer.epsilon_out)[:, None] * f(layer.epsilon_in)[None, :])
    torch.testing.assert_close(eps_b, f(layer.epsilon_out))
    x = torch.randn(B, 6)
    expected = x @ (layer.weight_mu + layer.weight_sigma * eps_w).T + layer.bias_mu + layer.bias_sigma * eps_b
    torch.testing.assert_close(layer(x), expected)
    assert not torch.allclose(layer(x), F.linear(x, layer.weight_mu, layer.bias_mu))


@pytest.mark.parametrize("name", NETWORKS)
def test_noise_changes_only_when_resampled_and_is_off_under_noise_disabled(name):
    make, _, call = NETWORKS[name]
    net = make(noisy=True)
    with torch.no_grad():
        first = call(net)
        assert torch.equal(call(net), first)  # forward does not redraw the noise
        resample_noise(net)
        assert not torch.allclose(call(net), first)
        with noise_disabled(net):
            mean = call(net)
            resample_noise(net)
            assert torch.equal(call(net), mean)  # deterministic across resamples
        for layer in net.modules():  # the same as zero noise scales
            if isinstance(layer, NoisyLinear):
                layer.weight_sigma.zero_()
                layer.bias_sigma.zero_()
        torch.testing.assert_close(call(net), mean)


def test_noise_disabled_is_the_plain_linear_with_the_mean_weights():
    layer = NoisyLinear(6, 4, sigma0=0.5)
    x = torch.randn(B, 6)
    with noise_disabled(layer):
        torch.testing.assert_close(layer(x), x @ layer.weight_mu.T + layer.bias_mu)


def test_noise_disabled_restores_the_previous_setting_also_on_an_error():
    net = QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[8], noisy=True))
    first, last = net.net[0], net.net[2]
    last.noise_enabled = False  # set before: must stay so
    with pytest.raises(RuntimeError, match="boom"):
        with noise_disabled(net):
            assert not first.noise_enabled and not last.noise_enabled
            raise RuntimeError("boom")
    assert first.noise_enabled and not last.noise_enabled
    with noise_disabled(net):
        with noise_disabled(net):
            pass
        assert not first.noise_enabled  # nested: the outer block still holds
    assert first.noise_enabled


def test_noise_comes_from_torchs_global_rng_and_lives_in_the_state_dict():
    net = QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[8], noisy=True))
    rng_state = torch.get_rng_state()
    resample_noise(net)
    drawn = {k: v.clone() for k, v in net.state_dict().items() if "epsilon" in k}
    assert sorted(drawn) == ["net.0.epsilon_in", "net.0.epsilon_out", "net.2.epsilon_in", "net.2.epsilon_out"]
    torch.set_rng_state(rng_state)
    resample_noise(net)
    assert all(torch.equal(net.state_dict()[k], v) for k, v in drawn.items())

    copy = QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[8], noisy=True))
    assert not torch.equal(copy(OBS), net(OBS))
    copy.load_state_dict(net.state_dict())  # weights and the current noise
    assert torch.equal(copy(OBS), net(OBS))
    assert net.net[0].epsilon_in.dtype == torch.float32
    assert net.double().net[0].epsilon_in.dtype == torch.float64  # buffers move with .to()


def test_has_noisy_layers():
    assert not has_noisy_layers(QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[8])))
    assert has_noisy_layers(QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[8], noisy=True)))
    assert has_noisy_layers(nn.Sequential(nn.Linear(2, 3), NoisyLinear(3, 1, sigma0=0.5)))
    assert not has_noisy_layers(
        ImplicitQuantileNetwork(
            OBS_DIM, A, **network_keys("iqn", embedding_dim=8, hidden_sizes=[8], head_hidden_sizes=[8])
        )
    )


# --- the numpy mirror -------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[16, 16], **kw)),
        lambda **kw: QuantileNetwork(OBS_DIM, A, N, **network_keys("qr_dqn", hidden_sizes=[16, 16], **kw)),
        lambda **kw: CategoricalNetwork(OBS_DIM, A, N, **network_keys("c51", hidden_sizes=[16], **kw)),
    ],
)
def test_the_mirror_equals_torch_for_dueling_and_noisy_networks(make):
    obs = OBS.numpy()
    net = make(dueling=True)
    mirrored = numpy_forward(net, obs)
    assert mirrored is not None
    with torch.no_grad():
        np.testing.assert_allclose(mirrored, net(OBS).numpy(), atol=1e-5)
    handle = net.net[-1].advantage.register_forward_hook(lambda module, args, out: -out)
    assert numpy_forward(net, obs) is None  # a hook inside a stream: torch runs
    handle.remove()
    for options in (dict(noisy=True), dict(noisy=True, dueling=True)):
        noisy = make(**options)
        for rows in (obs[:1], obs[:3], obs):  # the few-rows path and the noisy-weight path
            for _draw in range(2):  # the noise the layers hold, drawn again
                resample_noise(noisy)
                with torch.no_grad():
                    np.testing.assert_allclose(
                        numpy_forward(noisy, rows), noisy(torch.from_numpy(rows)).numpy(), atol=1e-5
                    )
            with noise_disabled(noisy), torch.no_grad():
                np.testing.assert_allclose(numpy_forward(noisy, rows), noisy(torch.from_numpy(rows)).numpy(), atol=1e-5)
        with torch.no_grad():
            for param in noisy.parameters():  # an optimizer step writes in place
                param.mul_(-1.5)
            np.testing.assert_allclose(numpy_forward(noisy, obs), noisy(OBS).numpy(), atol=1e-4)


def test_a_dueling_dqn_acts_through_the_mirror_as_torch_does():
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    agent = DQN(
        env.observation_space,
        env.action_space,
        functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[32, 32], dueling=True)),
        functools.partial(LeanAdam, lr=1e-3),
        total_steps=100,
        **algo_keys("dqn"),
    )
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    assert call_mirror(agent, "action_values", obs) is not None
    with torch.no_grad():
        expected = agent.action_values(torch.from_numpy(obs)).argmax(dim=1).numpy()
    assert np.array_equal(agent.act(obs, explore=False)[0], expected)


# --- configs ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NETWORKS)
def test_bad_values_are_one_line_config_errors(name):
    # the network's schema (rl_hydra/schema/networks.py) refuses them before anything is built
    with pytest.raises(ConfigError, match=r"^network\.noisy_sigma0=-0\.1 is out of range; expected a number >= 0"):
        validate_run_config(compose_config(f"algo={name}", "network.noisy=true", "network.noisy_sigma0=-0.1"))
    with pytest.raises(ConfigError, match=r"^network\.dueling='maybe' is not allowed"):
        compose_config(f"algo={name}", "network.dueling=maybe")
    with pytest.raises(ConfigError, match=r"^network\.noisy='maybe' is not allowed"):
        compose_config(f"algo={name}", "network.noisy=maybe")


def test_linear_networks_build_and_the_atoms_are_checked():
    # dueling without a hidden layer (one linear map per stream): tests/networks/test_dueling_heads.py
    QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[], noisy=True))  # a linear noisy network is fine
    # (algo.num_atoms >= 2 is the schema's: tests/algos/test_c51.py)
    CategoricalNetwork(OBS_DIM, A, 2, **network_keys("c51", hidden_sizes=[]))


@pytest.mark.parametrize("name, sizes", [("dqn", (A,)), ("qr_dqn", (A, N)), ("iqn", (A,)), ("c51", (A, N))])
def test_the_config_files_build_their_network_with_every_option(name, sizes):
    node = compose_config(f"network={name}").network
    assert (node.dueling, node.noisy, node.noisy_sigma0) == (False, False, 0.5)
    node.hidden_sizes, node.dueling, node.noisy = [8], True, True
    if name == "iqn":
        node.head_hidden_sizes = [8]
    net = instantiate(node)(OBS_DIM, *sizes)
    assert has_noisy_layers(net) and any(isinstance(m, DuelingHead) for m in net.modules())


@pytest.mark.parametrize("name, sizes", [("dqn", (A,)), ("qr_dqn", (A, N)), ("iqn", (A,)), ("rainbow", (A, N))])
def test_a_network_built_by_hand_from_network_keys_is_the_one_the_config_builds(name, sizes):
    """The constructors keep no defaults: a test's hand-built network takes the composed values."""
    node = compose_config(f"network={name}", "~algo_env").network
    torch.manual_seed(0)
    from_config = instantiate(node)(OBS_DIM, *sizes)
    torch.manual_seed(0)
    by_hand = type(from_config)(OBS_DIM, *sizes, **network_keys(name))
    assert all(torch.equal(a, b) for a, b in zip(from_config.state_dict().values(), by_hand.state_dict().values()))
    assert list(from_config.state_dict()) == list(by_hand.state_dict())


def test_noisy_layers_give_the_same_outputs_for_a_few_rows_and_for_a_batch():
    """A few rows (acting) take the factorised product, a batch builds the noisy weight: same values."""
    layer = NoisyLinear(32, 8, sigma0=0.5)
    rows = torch.randn(100, 32)
    eps_w, eps_b = layer.factorised_noise()
    expected = rows @ (layer.weight_mu + layer.weight_sigma * eps_w).T + layer.bias_mu + layer.bias_sigma * eps_b
    torch.testing.assert_close(layer(rows), expected)
    torch.testing.assert_close(layer(rows[:3]), expected[:3])
    resample_noise(layer)  # the cached f(eps) follows a new draw
    assert not torch.allclose(layer(rows[:3]), expected[:3])
    torch.testing.assert_close(layer(rows[:3]), layer(rows)[:3])
