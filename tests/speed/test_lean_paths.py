"""The hot-path shortcuts give the numbers of the plain code they replace: LeanAdam against
torch.optim.Adam, a SyncVectorEnv made lean (vector_env.lean) against gymnasium's own (the numpy
acting mirror: tests/algos/test_acting.py)."""

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
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from torch import nn

from rl_hydra import speed
from rl_hydra.speed.lean_adam import LeanAdam
from rl_hydra.speed.vector_env import LeanSyncVectorEnv, lean
from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[2]


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


def test_the_speed_layer_builds_the_configs_torch_adam_as_lean_adam_with_the_same_steps():
    adam = functools.partial(torch.optim.Adam, lr=1e-2, betas=[0.8, 0.99], fused=True)  # a list, as YAML gives it
    ours, theirs = make_net(), make_net()
    lean = speed.adam(ours.parameters(), **adam.keywords)
    assert type(lean) is LeanAdam and lean.param_groups[0]["betas"] == (0.8, 0.99)  # a tuple in checkpoints
    train(ours, lean, 20)
    train(theirs, adam(theirs.parameters()), 20)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        assert torch.equal(p, q)


def test_a_copied_lean_adam_steps_like_the_original():

    net = make_net()
    original = speed.adam(net.parameters(), lr=1e-2, fused=True)
    twin_net, twin = copy.deepcopy((net, original))  # before its first step: the moments are not allocated yet
    train(net, original, 5)
    train(twin_net, twin, 5)  # torch's __getstate__ alone dropped the moment allocator: AttributeError
    for p, q in zip(net.parameters(), twin_net.parameters()):
        assert torch.equal(p, q)


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


def same_step(env_id: str, num_envs: int) -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gym.make(env_id)] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)


@pytest.mark.parametrize("lean_after", [0, 30])  # made lean when built, or after a reset and some steps
@pytest.mark.parametrize("env_id, num_envs", [("CartPole-v1", 3), ("Pendulum-v1", 2)])
def test_a_lean_sync_vector_env_returns_what_gymnasium_sync_vector_env_returns(env_id, num_envs, lean_after):
    ours, theirs = same_step(env_id, num_envs), same_step(env_id, num_envs)
    if not lean_after:
        assert lean(ours) is ours and type(ours) is LeanSyncVectorEnv
    seeds = list(range(num_envs))
    assert np.array_equal(ours.reset(seed=seeds)[0], theirs.reset(seed=seeds)[0])
    theirs.action_space.seed(0)
    earlier, ends = [], 0
    for step in range(450):  # CartPole episodes end by termination, Pendulum's by truncation at 200
        if step == lean_after:
            assert lean(ours) is ours and type(ours) is LeanSyncVectorEnv
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


def test_lean_leaves_other_vector_envs_and_gymnasiums_class_as_they_are():
    next_step = SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)  # NEXT_STEP autoreset: another contract

    class Own(SyncVectorEnv):  # a subclass may step its own way
        pass

    own = Own([lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    workers = AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    for envs, kind in ((next_step, SyncVectorEnv), (own, Own), (workers, AsyncVectorEnv)):
        assert lean(envs) is envs and type(envs) is kind
        envs.close()
    leaned = lean(same_step("CartPole-v1", 2))
    plain = same_step("CartPole-v1", 2)  # another instance, made after: gymnasium's, untouched
    assert type(leaned) is LeanSyncVectorEnv and type(plain) is SyncVectorEnv and "step" not in vars(plain)
    assert SyncVectorEnv.step is not LeanSyncVectorEnv.step and SyncVectorEnv.__dict__["step"].__module__.startswith(
        "gymnasium"
    )


def test_a_training_process_without_compile_never_imports_torch_dynamo(tmp_path):
    """Importing torch._dynamo costs ~2.5 s; torch's optimizers import it on first use, LeanAdam not."""
    code = textwrap.dedent(f"""
        import sys
        from rl_hydra.commands.api import compose_train_config
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
