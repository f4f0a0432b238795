"""The hot-path shortcuts give the numbers of the plain code they replace: LeanAdam against
torch.optim.Adam, MLP's gathered steps and numpy forward against torch, SameStepVectorEnv
against gymnasium's SyncVectorEnv."""

from __future__ import annotations

import copy
import functools
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from rl_hydra.algos.dqn import DQN
from rl_hydra.algos.qr_dqn import QRDQN
from rl_hydra.envs.make import SameStepVectorEnv
from rl_hydra.networks.mlp import MLP, QNetwork, mlp
from rl_hydra.networks.quantile import QuantileNetwork
from rl_hydra.optim import LeanAdam
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parent.parent


def make_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))


def train(net: nn.Module, optimizer: torch.optim.Optimizer, steps: int, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    for i in range(steps):
        x = torch.randn(16, 4, generator=generator)
        loss = net(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if i == steps // 2:  # a learning-rate schedule changes the group's lr between steps
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        optimizer.step()


@pytest.mark.parametrize("options", [{}, {"weight_decay": 0.01, "betas": (0.8, 0.99), "eps": 1e-6}])
def test_lean_adam_steps_exactly_like_torch_fused_adam(options):
    ours, theirs = make_net(), make_net()
    lean = LeanAdam(ours.parameters(), lr=1e-2, **options)
    torch_adam = torch.optim.Adam(theirs.parameters(), lr=1e-2, fused=True, **options)
    train(ours, lean, 20)
    train(theirs, torch_adam, 20)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(p, q)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(lean.state[p]["exp_avg_sq"], torch_adam.state[q]["exp_avg_sq"])
        assert torch.equal(lean.state[p]["step"], torch_adam.state[q]["step"])
        assert lean.state[p]["step"].dtype == torch_adam.state[q]["step"].dtype


def test_lean_adam_state_dict_loads_into_torch_adam_and_back():
    ours, theirs = make_net(), make_net()
    lean = LeanAdam(ours.parameters(), lr=1e-2)
    train(ours, lean, 5)
    buffer = io.BytesIO()
    torch.save({"net": ours.state_dict(), "optimizer": lean.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    theirs.load_state_dict(saved["net"])
    torch_adam = torch.optim.Adam(theirs.parameters(), lr=1e-2, fused=True)
    torch_adam.load_state_dict(saved["optimizer"])
    resumed = make_net()
    resumed.load_state_dict(saved["net"])
    lean_again = LeanAdam(resumed.parameters(), lr=1e-2)
    lean_again.load_state_dict(copy.deepcopy(torch_adam.state_dict()))  # state_dict() shares tensors
    train(theirs, torch_adam, 5, seed=2)
    train(resumed, lean_again, 5, seed=2)
    for p, q in zip(resumed.parameters(), theirs.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("options", [{"amsgrad": True}, {"maximize": True}, {"fused": False}])
def test_lean_adam_options_outside_the_fast_path_still_match_torch(options):
    ours, theirs = make_net(), make_net()
    train(ours, LeanAdam(ours.parameters(), lr=1e-2, **options), 6)
    train(theirs, torch.optim.Adam(theirs.parameters(), lr=1e-2, **{"fused": True, **options}), 6)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.allclose(p, q)


def test_lean_adam_runs_step_hooks_like_torch():
    net = make_net()
    optimizer = LeanAdam(net.parameters(), lr=1e-2)
    calls = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: calls.append("pre"))
    optimizer.register_step_post_hook(lambda opt, args, kwargs: calls.append("post"))
    train(net, optimizer, 2)
    assert calls == ["pre", "post", "pre", "post"]


def test_lean_adam_skips_a_parameter_without_gradient_like_torch():
    net, frozen = make_net(), nn.Linear(2, 2)
    params = [*net.parameters(), *frozen.parameters()]  # the frozen layer never gets a gradient
    before = [p.detach().clone() for p in frozen.parameters()]
    optimizer = LeanAdam(params, lr=1e-2)
    train(net, optimizer, 3)
    assert all(torch.equal(p, b) for p, b in zip(frozen.parameters(), before))


def sequential_twin(net: MLP) -> nn.Sequential:
    return nn.Sequential(*[copy.deepcopy(layer) for layer in net])


def test_mlp_forward_equals_the_plain_sequential_and_keeps_its_state_dict_keys():
    torch.manual_seed(0)
    net = mlp(4, 3, [32, 16], "elu")
    plain = sequential_twin(net)
    x = torch.randn(8, 4)
    assert torch.equal(net(x), plain(x))
    assert list(net.state_dict()) == list(plain.state_dict())


def test_mlp_steps_follow_deepcopy_load_state_dict_and_dtype_moves():
    torch.manual_seed(0)
    net = mlp(4, 2, [16], "relu")
    twin = copy.deepcopy(net)
    with torch.no_grad():
        twin[0].weight.add_(1.0)  # the copy's steps must point at the copy's own parameters
    x = torch.randn(5, 4)
    assert not torch.equal(net(x), twin(x))
    assert torch.equal(twin(x), sequential_twin(twin)(x))

    other = mlp(4, 2, [16], "relu")
    other.load_state_dict(twin.state_dict(), assign=True)  # assign replaces the Parameter objects
    assert torch.equal(other(x), twin(x))

    as_double = other.double()
    assert as_double(x.double()).dtype == torch.float64


def test_mlp_refuses_a_layer_it_cannot_gather():
    with pytest.raises(ValueError, match=r"MLP layer 1 \(Dropout\) must be a Linear"):
        MLP(nn.Linear(2, 2), nn.Dropout())


@pytest.mark.parametrize("env_id, num_envs", [("CartPole-v1", 3), ("Pendulum-v1", 2)])
def test_same_step_vector_env_returns_what_gymnasium_sync_vector_env_returns(env_id, num_envs):
    ours = SameStepVectorEnv([lambda: gym.make(env_id)] * num_envs)
    theirs = SyncVectorEnv([lambda: gym.make(env_id)] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    seeds = list(range(num_envs))
    assert np.array_equal(ours.reset(seed=seeds)[0], theirs.reset(seed=seeds)[0])
    theirs.action_space.seed(0)
    earlier, ends = [], 0
    for _ in range(450):  # CartPole episodes end by termination, Pendulum's by truncation at 200
        actions = theirs.action_space.sample()
        mine, reference = ours.step(actions.copy()), theirs.step(actions)
        for got, want in zip(mine[:4], reference[:4]):
            assert got.dtype == want.dtype and np.array_equal(got, want)
        assert set(mine[4]) == set(reference[4])
        if "final_obs" in reference[4]:
            ends += 1
            assert np.array_equal(mine[4]["_final_obs"], reference[4]["_final_obs"])
            for i in np.flatnonzero(reference[4]["_final_obs"]):
                assert np.array_equal(mine[4]["final_obs"][i], reference[4]["final_obs"][i])
        earlier.append((mine[0], mine[0].copy()))
    assert ends > 0
    assert all(np.array_equal(obs, kept) for obs, kept in earlier)  # each step returned a fresh array


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_numpy_forward_of_q_and_quantile_networks_matches_torch_and_follows_updates(activation):
    torch.manual_seed(0)
    q_net, quantile_net = QNetwork(4, 3, [32, 32], activation), QuantileNetwork(4, 3, 5, [32], activation)
    obs = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    for net in (q_net, quantile_net):
        optimizer = LeanAdam(net.parameters(), lr=0.1)
        for _ in range(2):  # the numpy views share the weights' memory: optimizer steps show through
            expected = net(torch.from_numpy(obs)).detach().numpy()
            assert np.allclose(net.forward_numpy(obs), expected, atol=1e-5)
            net(torch.from_numpy(obs)).sum().backward()
            optimizer.step()
        twin = copy.deepcopy(net)
        with torch.no_grad():
            next(twin.parameters()).add_(1.0)
        assert np.allclose(net.forward_numpy(obs), net(torch.from_numpy(obs)).detach().numpy(), atol=1e-5)
        assert np.allclose(twin.forward_numpy(obs), twin(torch.from_numpy(obs)).detach().numpy(), atol=1e-5)


def test_numpy_forward_is_none_where_numpy_has_no_such_activation():
    assert QNetwork(4, 2, [8], "gelu").forward_numpy(np.zeros((1, 4), np.float32)) is None


@pytest.mark.parametrize("algo_class, network", [(DQN, QNetwork), (QRDQN, QuantileNetwork)])
def test_greedy_actions_through_numpy_equal_the_torch_argmax(algo_class, network):
    env = gym.make("CartPole-v1")
    agent = algo_class(env.observation_space, env.action_space, functools.partial(network, hidden_sizes=[32]),
                       functools.partial(LeanAdam, lr=1e-3), total_steps=100)
    obs = np.random.default_rng(1).normal(size=(64, 4)).astype(np.float32)
    assert agent.action_values_numpy(obs) is not None
    actions, _ = agent.act(obs, explore=False)
    with torch.no_grad():
        expected = agent.action_values(torch.from_numpy(obs)).argmax(dim=1).numpy()
    assert np.array_equal(actions, expected)


def test_a_training_process_without_compile_never_imports_torch_dynamo(tmp_path):
    """Importing torch._dynamo costs ~2.5 s; torch's optimizers import it on first use, LeanAdam not."""
    code = textwrap.dedent(f"""
        import sys
        from rl_hydra.api import compose_train_config
        from rl_hydra.training import run
        cfg = compose_train_config("algo=dqn", "env=cartpole", "network.hidden_sizes=[16]", *{TINY!r},
                                   "algo.learning_starts=100", "algo.train_every=10")
        summary = run(cfg, {str(tmp_path / "run")!r})
        print(summary["updates"], "torch._dynamo" in sys.modules)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    updates, imported = result.stdout.split()[-2:]
    assert int(updates) > 0 and imported == "False"  # checkpoints (optimizer state_dict) included
