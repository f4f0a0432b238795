import functools
import io
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra.algos.common import LinearSchedule, clip_grad_norm
from rl_hydra.algos.dqn import DQN
from rl_hydra.buffers.replay import Batch
from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.speed import foreach
from tests.conftest import algo_keys, compose_config, network_keys

OBS = gym.spaces.Box(-1, 1, (3,), dtype=np.float32)
ACTIONS = gym.spaces.Discrete(2)


def make_dqn(**overrides) -> DQN:
    kwargs = dict(
        network=functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[16])),
        optimizer=functools.partial(torch.optim.Adam, lr=1e-2),
        total_steps=1000,
        learning_starts=0,
        target_update_every=3,
        seed=0,
    )
    kwargs.update(overrides)
    return DQN(OBS, ACTIONS, **algo_keys("dqn", **kwargs))


def random_batch(n=8) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(
        obs=torch.randn(n, 3, generator=g),
        actions=torch.randint(2, (n,), generator=g),
        rewards=torch.ones(n),
        next_obs=torch.randn(n, 3, generator=g),
        terminated=torch.zeros(n),
        truncated=torch.zeros(n),
        discounts=torch.full((n,), 0.99),
        weights=torch.ones(n),
        indices=torch.arange(n),
    )


def test_update_returns_named_metrics_and_moves_online_params_only():
    agent = make_dqn()
    before = [p.clone() for p in agent.q_net.parameters()]
    target_before = [p.clone() for p in agent.target_net.parameters()]
    metrics, priorities = agent.update(random_batch())  # per-sample |TD error|, for a prioritized buffer
    assert set(metrics) == set(DQN.metric_names) and priorities.shape == (8,) and bool((priorities >= 0).all())
    assert all(math.isfinite(float(v)) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.q_net.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target_before, agent.target_net.parameters()))


def test_hard_target_sync_every_n_updates():
    agent = make_dqn(target_update_every=3)
    for _ in range(2):
        agent.update(random_batch())
    assert not torch.equal(agent.q_net.net[0].weight, agent.target_net.net[0].weight)
    agent.update(random_batch())  # third update syncs
    for online, target in zip(agent.q_net.parameters(), agent.target_net.parameters()):
        assert torch.equal(online, target)


def test_soft_target_update_is_polyak_average():
    agent = make_dqn(target_update_every=1, tau=0.25)
    old_target = [p.clone() for p in agent.target_net.parameters()]
    agent.update(random_batch())
    for old, online, target in zip(old_target, agent.q_net.parameters(), agent.target_net.parameters()):
        torch.testing.assert_close(target, 0.75 * old + 0.25 * online)


def test_epsilon_schedule_counts_from_the_end_of_warm_up():
    agent = make_dqn(learning_starts=100, exploration={"start": 1.0, "end": 0.1, "fraction": 0.5})
    # decays over 0.5 * 1000 = 500 env steps; the first 100 are the loop's random warm-up
    assert agent.epsilon == pytest.approx(1.0 - 0.9 * 100 / 500)
    agent.act(np.zeros((4, 3), np.float32), explore=True)
    assert agent.epsilon == pytest.approx(1.0 - 0.9 * 104 / 500)
    agent.explore_steps = 10_000
    assert agent.epsilon == pytest.approx(0.1)
    assert LinearSchedule(0.0, 1.0, 10)(5) == pytest.approx(0.5)


def test_greedy_act_picks_argmax_and_explore_act_is_random_at_epsilon_one():
    agent = make_dqn()
    with torch.no_grad():
        for p in agent.q_net.parameters():
            p.zero_()
        agent.q_net.net[-1].bias.copy_(torch.tensor([0.0, 1.0]))
    actions, state = agent.act(np.zeros((5, 3), np.float32), explore=False)
    assert actions.tolist() == [1] * 5 and state is None
    agent.epsilon_schedule = LinearSchedule(1.0, 1.0, 1)
    explored, _ = agent.act(np.zeros((200, 3), np.float32), explore=True)
    assert 50 < (explored == 0).sum() < 150


@pytest.mark.parametrize("clip", [clip_grad_norm, foreach.clip_grad_norm], ids=["plain", "foreach"])
def test_clip_grad_norm_matches_torch_bit_for_bit(clip):
    torch.manual_seed(0)
    a, b = torch.nn.Linear(3, 4), torch.nn.Linear(3, 4)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 3)
    for net in (a, b):
        net(x).pow(2).sum().mul(100).backward()
    expected = torch.nn.utils.clip_grad_norm_(a.parameters(), 0.5)
    total = clip(list(b.parameters()), 0.5)
    assert torch.equal(total, expected)
    assert all(torch.equal(pa.grad, pb.grad) for pa, pb in zip(a.parameters(), b.parameters()))


def through_disk(state: dict) -> dict:
    """What a checkpoint gives back: saved, then loaded with weights_only=True."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_state_dict_round_trip_restores_everything():
    agent = make_dqn()
    for _ in range(4):
        agent.update(random_batch())
    agent.act(np.zeros((3, 3), np.float32), explore=True)
    restored = make_dqn(seed=7)
    restored.load_state_dict(through_disk(agent.state_dict()))
    for key in ("q_net", "target_net"):
        for (k, v), (_, w) in zip(
            getattr(agent, key).state_dict().items(), getattr(restored, key).state_dict().items()
        ):
            assert torch.equal(v, w), k
    assert (restored.updates, restored.explore_steps) == (agent.updates, agent.explore_steps)
    assert restored.rng.random() == agent.rng.random()
    # the optimizer state continues identically
    agent.update(random_batch())
    restored.update(random_batch())
    for v, w in zip(agent.q_net.parameters(), restored.q_net.parameters()):
        assert torch.equal(v, w)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("batch_size", 0, "algo.batch_size=0"),
        ("tau", 0.0, "algo.tau=0.0"),
        ("loss", "l1", "algo.loss='l1'"),
        ("learning_starts", -1, "algo.learning_starts=-1"),
        ("train_every", 0, "algo.train_every=0"),
    ],
)
def test_bad_hyperparameters_raise_one_line_config_errors(key, value, message):
    cfg = compose_config(f"algo.{key}={value}")  # the schema's ranges (rl_hydra/schema/algos.py)
    with pytest.raises(ConfigError) as error:
        validate_run_config(cfg)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_dqn_refuses_continuous_actions():
    with pytest.raises(ConfigError, match="algo=dqn needs a discrete action space"):
        DQN(
            OBS,
            gym.spaces.Box(-1, 1, (1,)),
            network=functools.partial(QNetwork),
            optimizer=functools.partial(torch.optim.Adam, lr=1e-3),
            total_steps=10,
            **algo_keys("dqn"),
        )
