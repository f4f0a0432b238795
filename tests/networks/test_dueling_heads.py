"""Dueling streams on any head, an empty one included: with no hidden layer, V and A are each one
linear map of the same features, Q = V + A - mean_a A (per quantile, tau or atom). Every
DQN-family preset builds and updates with network.dueling=true, alone and with noisy layers,
3-step returns and prioritized replay; networks without dueling are bit-for-bit what they were."""

from __future__ import annotations

import copy
import functools
import hashlib
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from torch import nn

from rl_hydra.build import build_components
from rl_hydra.config import validate_run_config
from rl_hydra.envs import make_env
from rl_hydra.envs.make import check_extra
from rl_hydra.errors import ConfigError
from rl_hydra.networks.categorical import CategoricalNetwork
from rl_hydra.networks.dueling import DuelingHead
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.noisy import NoisyLinear, has_noisy_layers, noise_disabled, resample_noise
from rl_hydra.networks.quantile import ImplicitQuantileNetwork, QuantileNetwork, cosine_embedding
from rl_hydra.spaces import network_input
from rl_hydra.speed.numpy_mirror import numpy_forward
from tests.conftest import CONF_DIR, batch_of, compose_config, network_keys

DQN_FAMILY = ("dqn", "qr_dqn", "iqn", "c51", "rainbow", "dopamine_iqn")
ENVS = {path.stem for path in (CONF_DIR / "env").glob("*.yaml")}
# every preset conf/algo_env/<algo>_<env>.yaml of the family, found on disk: a new one is tested too
PRESETS = sorted(
    (algo, path.stem[len(algo) + 1 :])
    for algo in DQN_FAMILY
    for path in (CONF_DIR / "algo_env").glob(f"{algo}_*.yaml")
    if path.stem[len(algo) + 1 :] in ENVS
)
ALL_PARTS = ("network.noisy=true", "algo.n_step=3", "buffer=prioritized")


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Updates of these small networks on one thread: on a busy 2-core machine two threads cost several times more."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def composed(*overrides: str):
    return compose_config(*overrides)


def preset_config(algo: str, env: str, *extra: str):
    """A copy of the composed config with dueling streams; skips a preset whose env's install
    extra (box2d, minatar, atari) is missing, with the line a run would print."""
    cfg = copy.deepcopy(composed(f"algo={algo}", f"env={env}", "network.dueling=true", *extra))
    try:
        check_extra(cfg.env)
    except ConfigError as error:
        pytest.skip(str(error))
    return cfg


_spaces: dict[str, tuple[gym.Space, gym.Space]] = {}


def env_spaces(env: str, env_cfg) -> tuple[gym.Space, gym.Space]:
    """The env group's observation and action spaces (one env built per group)."""
    if env not in _spaces:
        vector_env = make_env(env_cfg, seed=0)
        _spaces[env] = vector_env.single_observation_space, vector_env.single_action_space
        vector_env.close()
    return _spaces[env]


def fill(buffer, observation_space: gym.Space, num_actions: int, steps: int, seed: int = 0) -> None:
    """`steps` vector steps of a random trajectory: each step's next observation is the next step's
    observation (as a frame-sharing buffer expects), with episode ends now and then."""
    rng, num_envs = np.random.default_rng(seed), buffer.num_envs
    observation_space.seed(seed)
    sample = lambda: batch_of(observation_space, num_envs, seed=None)  # noqa: E731

    def restart(ended, fresh, going):
        return np.where(ended.reshape(-1, *[1] * (going.ndim - 1)), fresh, going)

    obs = sample()
    for _ in range(steps):
        next_obs = sample()
        terminated = rng.random(num_envs) < 0.1
        truncated = ~terminated & (rng.random(num_envs) < 0.05)
        actions, rewards = rng.integers(0, num_actions, num_envs), rng.normal(size=num_envs).astype(np.float32)
        buffer.add(obs, actions, rewards, next_obs, terminated, truncated)
        fresh = sample()
        obs = (
            {key: restart(terminated | truncated, fresh[key], part) for key, part in next_obs.items()}
            if isinstance(next_obs, dict)
            else restart(terminated | truncated, fresh, next_obs)
        )


# --- every preset, with dueling streams -----------------------------------------------

# the presets whose head is empty (no hidden layer after IQN's product): dueling was refused on them
EMPTY_HEAD_PRESETS = [("dopamine_iqn", "cartpole"), ("iqn", "cartpole"), ("iqn", "lunar_lander"), ("iqn", "minatar")]


def test_the_presets_with_an_empty_head_are_among_those_tested():
    assert set(EMPTY_HEAD_PRESETS) <= set(PRESETS)
    for algo, env in EMPTY_HEAD_PRESETS:
        assert composed(f"algo={algo}", f"env={env}", "network.dueling=true").network.head_hidden_sizes == []


# every part at once on every preset doubles the file's time: the slow suite runs it (pytest -m slow)
@pytest.mark.parametrize(
    "parts", [(), pytest.param(ALL_PARTS, marks=pytest.mark.slow)], ids=["dueling", "dueling+noisy+n3+prioritized"]
)
@pytest.mark.parametrize("algo, env", PRESETS, ids=[f"{a}_{e}" for a, e in PRESETS])
def test_every_dqn_family_preset_trains_with_dueling_streams(algo, env, parts):
    if parts and preset_config(algo, env).network.get("bias") is False:
        # a bias-free Q-table preset (toy text) refuses noisy layers, whose bias is noisy, in one line
        # naming network.bias; with it back on, every part composes with it too
        parts = (*parts, "network.bias=true")
    cfg = preset_config(algo, env, *parts)
    cfg.buffer.capacity, cfg.algo.batch_size = 64, 8  # a tiny buffer and batch; the preset's network and algorithm
    validate_run_config(cfg)
    agent, vector_env, buffer = build_components(cfg, torch.device("cpu"))
    observation_space, action_space = vector_env.single_observation_space, vector_env.single_action_space
    vector_env.close()
    heads = [m for m in agent.q_net.modules() if isinstance(m, DuelingHead)]
    assert len(heads) == 1
    if (algo, env) in EMPTY_HEAD_PRESETS:  # each stream one linear map of the product features
        one_linear(heads[0].value), one_linear(heads[0].advantage)
    if parts:
        assert agent.noisy and buffer.n_step == 3 and hasattr(buffer, "update_priorities")
    fill(buffer, observation_space, int(action_space.n), steps=32)
    for _ in range(2):
        batch = buffer.sample(agent.batch_size)
        metrics, priorities = agent.update(batch)
        assert math.isfinite(float(metrics["loss"])), (algo, env, parts)
        if hasattr(buffer, "update_priorities"):
            assert torch.isfinite(priorities).all()
            buffer.update_priorities(batch.indices, priorities)
    observation_space.seed(1)
    obs = batch_of(observation_space, 3, seed=None)
    for explore in (True, False):
        actions, _ = agent.act(obs, explore=explore)
        assert actions.shape == (3,) and ((0 <= actions) & (actions < action_space.n)).all()


# --- an empty head, by hand -------------------------------------------------------------


def one_linear(stream: nn.Module) -> nn.Module:
    """The stream's only layer: an empty head gives each stream one Linear (or NoisyLinear) and nothing else."""
    layers = list(stream.children())
    assert len(layers) == 1 and type(layers[0]) in (nn.Linear, NoisyLinear), stream
    return layers[0]


def test_an_empty_head_dueling_network_is_v_plus_a_minus_mean_a_from_one_linear_map_each():
    net = QNetwork(2, 3, **network_keys("dqn", hidden_sizes=[], dueling=True))
    head = net.net[0]
    assert len(net.net) == 1 and isinstance(head, DuelingHead)
    value, advantage = one_linear(head.value), one_linear(head.advantage)
    with torch.no_grad():
        value.weight.copy_(torch.tensor([[4.0, 3.0]]))
        value.bias.fill_(0.5)  # V = 4 + 6 + 0.5 = 10.5
        advantage.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]))
        advantage.bias.copy_(torch.tensor([0.0, 1.0, -1.0]))  # A = [1, 3, 5], mean 3
        q = net(torch.tensor([[1.0, 2.0]]))
    torch.testing.assert_close(q, torch.tensor([[8.5, 10.5, 12.5]]))  # 10.5 + A - 3
    np.testing.assert_allclose(numpy_forward(net, np.array([[1.0, 2.0]], np.float32)), q.numpy())  # the mirror


B, OBS_DIM, A, K, T, E = 5, 4, 3, 7, 6, 8
OBS = torch.randn(B, OBS_DIM, generator=torch.Generator().manual_seed(1))
TAUS = torch.rand(B, T, generator=torch.Generator().manual_seed(2))


def linear_map(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`layer`'s map written out: mu + sigma * f(eps_out) f(eps_in)^T for a noisy one with its noise on."""
    if isinstance(layer, NoisyLinear):
        f_in, f_out = (e.sign() * e.abs().sqrt() for e in (layer.epsilon_in, layer.epsilon_out))
        if not layer.noise_enabled:
            return F.linear(x, layer.weight_mu, layer.bias_mu)
        return F.linear(
            x, layer.weight_mu + layer.weight_sigma * torch.outer(f_out, f_in), layer.bias_mu + layer.bias_sigma * f_out
        )
    return F.linear(x, layer.weight, layer.bias)


EMPTY_HEADS = {  # name -> (factory, values per action K)
    "dqn": (lambda **kw: QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=[], **kw)), 1),
    "qr_dqn": (lambda **kw: QuantileNetwork(OBS_DIM, A, K, **network_keys("qr_dqn", hidden_sizes=[], **kw)), K),
    "c51": (lambda **kw: CategoricalNetwork(OBS_DIM, A, K, **network_keys("c51", hidden_sizes=[], **kw)), K),
    "iqn": (
        lambda **kw: ImplicitQuantileNetwork(
            OBS_DIM, A, **network_keys("iqn", embedding_dim=E, hidden_sizes=[16], head_hidden_sizes=[], **kw)
        ),
        1,
    ),
}


def streams_by_hand(name: str, net: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """V (..., 1, K) and A (..., A, K), each from its stream's one linear map of the head's features."""
    if name == "iqn":
        head, features = net.head[0], net.psi(OBS)[:, None, :] * net.phi(cosine_embedding(TAUS, E))  # (B, T, D)
    else:
        head, features = net.net[0], OBS  # (B, F)
    assert isinstance(head, DuelingHead)
    k = EMPTY_HEADS[name][1]
    v = linear_map(one_linear(head.value), features).unflatten(-1, (1, k))  # (..., 1, K)
    adv = linear_map(one_linear(head.advantage), features).unflatten(-1, (A, k))  # (..., A, K)
    return v, adv


def as_output(name: str, q: torch.Tensor) -> torch.Tensor:
    """(..., A', K) -> the network's layout: (B, A') for DQN, (B, A', K) for QR-DQN and C51, (B, A', T) for IQN."""
    if name == "iqn":
        return q[..., 0].transpose(1, 2)  # (B, T, A', 1) -> (B, A', T)
    return q[..., 0] if name == "dqn" else q


@pytest.mark.parametrize("noisy", [False, True], ids=["plain", "noisy"])
@pytest.mark.parametrize("name", EMPTY_HEADS)
def test_every_network_combines_one_linear_map_per_stream_on_an_empty_head(name, noisy):
    make = EMPTY_HEADS[name][0]
    torch.manual_seed(0)
    net = make(dueling=True, noisy=noisy)
    call = (lambda: net(OBS, TAUS)) if name == "iqn" else (lambda: net(OBS))
    assert sum(isinstance(m, DuelingHead) for m in net.modules()) == 1 and has_noisy_layers(net) == noisy

    def check() -> torch.Tensor:
        out = call()
        v, adv = streams_by_hand(name, net)
        torch.testing.assert_close(out, as_output(name, v + adv - adv.mean(dim=-2, keepdim=True)))
        torch.testing.assert_close(out.mean(dim=1), as_output(name, v).squeeze(1))  # the mean over actions is V
        return out

    with torch.no_grad():
        for _ in range(2 if noisy else 1):
            resample_noise(net)
            out = check()
        if noisy:
            with noise_disabled(net):
                check()
        if name != "iqn":  # the numpy mirror (vectors) answers as torch does
            np.testing.assert_allclose(numpy_forward(net, OBS.numpy()), out.numpy(), atol=1e-5)


# --- without dueling: bit for bit as before ----------------------------------------------


def plain_by_hand(sizes: list[int]) -> nn.Sequential:
    """The MLP that dueling=false has always built: Linear -> ReLU per hidden size, then a Linear."""
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]))


@pytest.mark.parametrize("hidden", [[], [16, 16]], ids=["empty", "2x16"])
@pytest.mark.parametrize("name", ["dqn", "qr_dqn", "c51", "iqn"])
def test_without_dueling_the_networks_are_the_plain_mlp_bit_for_bit(name, hidden):
    """Same parameters drawn in the same order and the same outputs as an MLP built by hand."""
    torch.manual_seed(3)
    if name == "iqn":
        net = ImplicitQuantileNetwork(
            OBS_DIM,
            A,
            **network_keys("iqn", embedding_dim=E, hidden_sizes=[16], head_hidden_sizes=hidden, dueling=False),
        )
        torch.manual_seed(3)
        psi = nn.Sequential(nn.Linear(OBS_DIM, 16), nn.ReLU())
        phi = nn.Sequential(nn.Linear(E, 16), nn.ReLU())
        head = plain_by_hand([16, *hidden, A])
        reference = {
            **{f"psi.{k}": v for k, v in psi.state_dict().items()},
            **{f"phi.{k}": v for k, v in phi.state_dict().items()},
            **{f"head.{k}": v for k, v in head.state_dict().items()},
        }
        with torch.no_grad():
            out = net(OBS, TAUS)
            expected = head(psi(OBS)[:, None, :] * phi(cosine_embedding(TAUS, E))).transpose(1, 2)
    else:
        per_action = {"dqn": 1, "qr_dqn": K, "c51": K}[name]
        make = {
            "dqn": lambda: QNetwork(OBS_DIM, A, **network_keys("dqn", hidden_sizes=hidden, dueling=False)),
            "qr_dqn": lambda: QuantileNetwork(
                OBS_DIM, A, K, **network_keys("qr_dqn", hidden_sizes=hidden, dueling=False)
            ),
            "c51": lambda: CategoricalNetwork(OBS_DIM, A, K, **network_keys("c51", hidden_sizes=hidden, dueling=False)),
        }[name]
        net = make()
        torch.manual_seed(3)
        mlp = plain_by_hand([OBS_DIM, *hidden, A * per_action])
        reference = {f"net.{k}": v for k, v in mlp.state_dict().items()}
        with torch.no_grad():
            out, expected = net(OBS), mlp(OBS).view(net(OBS).shape)
    state = net.state_dict()
    assert list(state) == list(reference)
    assert all(torch.equal(state[k], reference[k]) for k in reference)
    assert torch.equal(out, expected)
    assert not any(isinstance(m, DuelingHead) for m in net.modules())


# sha256 (first 16 hex digits) of each preset's network state_dict (names, shapes, dtypes, bytes) built with
# torch.manual_seed(cfg.seed), recorded with torch 2.13.0 (CPU) from the code before dueling took empty heads:
# network.dueling=false for every preset, and =true where the head had a hidden layer (it was refused otherwise)
RECORDED = {
    ("c51", "acrobot", False): "b581011732d2d8e3",
    ("c51", "acrobot", True): "c08fd1183936d2d6",
    ("c51", "cartpole", False): "2b497775983f97f8",
    ("c51", "cartpole", True): "51783747d9464497",
    ("c51", "lunar_lander", False): "0382fa2e26a2673e",
    ("c51", "lunar_lander", True): "995c087192f064cf",
    ("c51", "mountain_car", False): "d522d1297088c1b0",
    ("c51", "mountain_car", True): "0d3ef54d7a1a6f82",
    ("dopamine_iqn", "cartpole", False): "9b8ad2bb68c5ce78",
    ("dqn", "acrobot", False): "a9ec194fa5ed26b6",
    ("dqn", "acrobot", True): "5d23709d477c4dc6",
    ("dqn", "cartpole", False): "39af1afafba517b5",
    ("dqn", "cartpole", True): "b0e78571fdcbd2cc",
    ("dqn", "cartpole_no_velocity", False): "39af1afafba517b5",
    ("dqn", "cartpole_no_velocity", True): "b0e78571fdcbd2cc",
    ("dqn", "cartpole_novel", False): "39af1afafba517b5",
    ("dqn", "cartpole_novel", True): "b0e78571fdcbd2cc",
    ("dqn", "lunar_lander", False): "35ceaa75bc663906",
    ("dqn", "lunar_lander", True): "7f69739911c84b30",
    ("dqn", "minatar", False): "5345bd2a3e3e4983",
    ("dqn", "minatar", True): "8647542d5d69b890",
    ("dqn", "mountain_car", False): "834ff656c11a5c6e",
    ("dqn", "mountain_car", True): "4450875e6672609f",
    ("iqn", "acrobot", False): "06ab81f482d534d3",
    ("iqn", "acrobot", True): "0f281b0812b5102e",
    ("iqn", "cartpole", False): "9b8ad2bb68c5ce78",
    ("iqn", "cartpole_no_velocity", False): "817e829943452eb2",
    ("iqn", "cartpole_no_velocity", True): "16f7de70b9357a15",
    ("iqn", "cartpole_novel", False): "817e829943452eb2",
    ("iqn", "cartpole_novel", True): "16f7de70b9357a15",
    ("iqn", "lunar_lander", False): "42a5259ad66d65f0",
    ("iqn", "minatar", False): "0fcb0554df17df13",
    ("iqn", "mountain_car", False): "6fb997b1ed266a56",
    ("iqn", "mountain_car", True): "bb69abb7f2df974e",
    ("qr_dqn", "acrobot", False): "b6c81f2d327182e3",
    ("qr_dqn", "acrobot", True): "52229fd1bbfd3e05",
    ("qr_dqn", "cartpole", False): "f92617259c22d4ed",
    ("qr_dqn", "cartpole", True): "d65e6ef713d62228",
    ("qr_dqn", "cartpole_no_velocity", False): "bafa1ed1eae849b3",
    ("qr_dqn", "cartpole_no_velocity", True): "6f51e122bcaff426",
    ("qr_dqn", "cartpole_novel", False): "bafa1ed1eae849b3",
    ("qr_dqn", "cartpole_novel", True): "6f51e122bcaff426",
    ("qr_dqn", "lunar_lander", False): "369cab6f87203785",
    ("qr_dqn", "lunar_lander", True): "bc804fe90084c8d1",
    ("qr_dqn", "minatar", False): "32e341d6b6cb90b6",
    ("qr_dqn", "minatar", True): "774ebe092816bb2b",
    ("qr_dqn", "mountain_car", False): "b449aaab0e5e2551",
    ("qr_dqn", "mountain_car", True): "3c1d50de873a11b4",
    ("rainbow", "acrobot", False): "f626d3677fda80c9",
    ("rainbow", "acrobot", True): "df5795b106c22897",
    ("rainbow", "cartpole", False): "7fc27e5866ac4726",
    ("rainbow", "cartpole", True): "5d72c44bb8ecbb53",
    ("rainbow", "lunar_lander", False): "ec3b9ad2bfa9f5f5",
    ("rainbow", "lunar_lander", True): "9f553cb6db135ce3",
    ("rainbow", "minatar", False): "d0602dbe2c532d02",
    ("rainbow", "minatar", True): "467fbe71a8245bae",
    ("rainbow", "mountain_car", False): "97992e3df4414be6",
    ("rainbow", "mountain_car", True): "2e9bb2e7094dbda4",
}
EXTRA_ARGS = {"qr_dqn": ("num_quantiles",), "c51": ("num_atoms",), "rainbow": ("num_atoms",)}  # algos' make_network


def state_digest(net: nn.Module) -> str:
    digest = hashlib.sha256()
    for key, value in net.state_dict().items():
        digest.update(f"{key}{tuple(value.shape)}{value.dtype}".encode())
        digest.update(value.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


@pytest.mark.parametrize("algo, env, dueling", list(RECORDED), ids=[f"{a}_{e}-dueling={d}" for a, e, d in RECORDED])
def test_the_presets_networks_keep_their_recorded_parameters(algo, env, dueling):
    cfg = preset_config(algo, env)
    cfg.network.dueling = dueling  # as `network.dueling=...` on the command line: no key reads it
    observation_space, action_space = env_spaces(env, cfg.env)
    factory = instantiate(cfg.network)
    torch.manual_seed(cfg.seed)
    extra = [cfg.algo[key] for key in EXTRA_ARGS.get(algo, ())]
    net = factory(network_input(observation_space), int(action_space.n), *extra)
    assert state_digest(net) == RECORDED[(algo, env, dueling)]
