"""The actor-critic core (algos/actor_critic.py): what every agent of the family must keep across
refactors of the core. A few fixed-seed updates give the same numbers as the code before the core
existed (recorded from it), each checkpoint's keys stay those saved runs hold, and the constructors
take every key from the config (no second set of defaults)."""

from __future__ import annotations

import functools
import io

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra.utils import get_class, instantiate

from rl_hydra.errors import ConfigError
from tests.algos.continuous import ACTION_SPACE, OBS_SPACE, agent_from, random_batch
from tests.conftest import algo_keys, compose_config

TINY_NETS = ["network.actor.hidden_sizes=[8,8]", "network.critic.hidden_sizes=[8,8]"]
CASES = {
    "sac": ["algo=sac"],
    "redq": ["algo=redq", "algo.ensemble_size=4", "algo.subset_size=2", "algo.policy_delay=2"],
    "droq": ["algo=droq", "algo.policy_delay=2"],
    "td3": ["algo=td3", "algo.action_noise.kind=ornstein_uhlenbeck"],
    "crossq": ["algo=crossq", "algo.policy_delay=2"],
    "tqc": ["algo=tqc", "algo.ensemble_size=2", "algo.num_quantiles=5", "algo.top_quantiles_to_drop_per_critic=1"],
}
# fingerprint(case) as the code before the shared core computed it (CPU; DroQ's recorded again since): the last
# update's metrics (sorted by name), |actor| and |critic| (sums of absolute weights), two exploring steps
# fmt: off
GOLDEN = {
    "sac": [
        -1.1129958629608154, 0.9988014698028564, 4.479603290557861, 1.2729089260101318, 0.17556047439575195,
        27.80501587316394, 50.753162059991155, -0.6919756531715393, 0.11487230658531189, -1.9444361925125122,
        0.3870309293270111, -0.6228116750717163, 0.3650873899459839, -0.14422515034675598, 0.48282527923583984,
    ],
    "redq": [
        -1.1825933456420898, 0.9994005560874939, 8.048355102539062, 1.2922416925430298, -0.11722275614738464,
        27.80434274021536, 103.12782826431794, -1.1510677337646484, 0.028284549713134766, -1.9797731637954712,
        0.4262072443962097, -1.9670628309249878, 0.2293548583984375, 0.07649838924407959, 0.12016338109970093,
    ],
    # recorded again when DroQ's dropout masks came to be drawn from their gaps (networks/layers.py)
    # and its target critics, all of them, to be run in their own order: the same distribution, other draws
    "droq": [
        -1.7613978385925293, 0.99940025806427, 4.2584381103515625, 1.335818886756897, 0.4011452794075012,
        27.80447502876632, 82.78015489266545, -1.2584960460662842, 0.024894878268241882, 0.7596399784088135,
        0.4962270259857178, -1.1530331373214722, 0.02820955216884613, -1.9799302816390991, 0.4259974956512451,
    ],
    "td3": [
        -0.19937412440776825, 1.349426507949829, 0.21595564484596252, 25.213127228897065, 49.80764028057456,
        -0.29467982053756714, 0.25032490491867065, -0.4504966735839844, 0.2574045956134796, -0.2737500071525574,
        0.25325390696525574, -0.4439586400985718, 0.25306436419487,
    ],
    "crossq": [
        -0.5112740397453308, 0.998002290725708, 4.545919895172119, 0.7073876261711121, -0.012990981340408325,
        46.199801257345825, 94.78877051122254, -0.23961284756660461, 0.3509292006492615, -1.5304263830184937,
        0.021870791912078857, 0.6744029521942139, 0.4945865869522095, -1.4333899021148682, 0.024778813123703003,
    ],
    "tqc": [
        -1.2170753479003906, 0.998801589012146, 1.0279195308685303, 1.2909832000732422, -0.07732593268156052,
        27.808907078579068, 64.3387420141371, 0.0035440921783447266, 0.26499032974243164, -0.8581620454788208,
        0.13016171753406525, -1.894490361213684, 0.4002819061279297, -0.7818900942802429, 0.35490840673446655,
    ],
}
# fmt: on


def build(case: str):
    cfg = compose_config(*CASES[case], "env=pendulum", "~algo_env", *TINY_NETS)
    return agent_from(cfg)


@torch.no_grad()
def weight_sum(module: torch.nn.Module) -> float:
    return sum(float(p.double().abs().sum()) for p in module.parameters())


def fingerprint(agent) -> list[float]:
    metrics: dict[str, torch.Tensor] = {}
    for step in range(4):
        metrics = agent.update(random_batch(16, seed=step)).metrics
    obs = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    actions, state = agent.act(obs, None, explore=True)
    actions_again, _ = agent.act(obs, state, explore=True)  # TD3's Ornstein-Uhlenbeck state carried
    return [
        *(float(metrics[name]) for name in sorted(metrics)),
        weight_sum(agent.actor),
        weight_sum(agent.critic),
        *actions.ravel().tolist(),
        *actions_again.ravel().tolist(),
    ]


@pytest.mark.parametrize("case", CASES)
def test_a_few_updates_give_the_numbers_the_code_before_the_core_gave(case):
    # the same draws in the same order: a reordered draw or a changed formula moves these by far more
    torch.testing.assert_close(fingerprint(build(case)), GOLDEN[case], rtol=1e-5, atol=1e-6)


STATE_KEYS = {
    "redq": {
        "actor",
        "critic",
        "critic_target",
        "log_alpha",
        "actor_optimizer",
        "critic_optimizer",
        "alpha_optimizer",
        "updates",
        "generator",
        "last_actor_metrics",
        "exploration_noise",
        "explore_steps",
    },
    "td3": {
        "actor",
        "actor_target",
        "critic",
        "critic_target",
        "actor_optimizer",
        "critic_optimizer",
        "updates",
        "generator",
        "last_actor_metrics",
    },
}
STATE_KEYS |= {
    "sac": STATE_KEYS["redq"],
    "droq": STATE_KEYS["redq"],
    "tqc": STATE_KEYS["redq"],
    "crossq": STATE_KEYS["redq"] - {"critic_target"},  # no target networks
}


@pytest.mark.parametrize("case", CASES)
def test_checkpoints_keep_the_keys_saved_runs_hold_and_load_back_exactly(case):
    agent = build(case)
    agent.update(random_batch(16, seed=0))
    assert set(agent.state_dict()) == STATE_KEYS[case]
    saved = io.BytesIO()
    torch.save(agent.state_dict(), saved)  # as a checkpoint does: a state of its own, not the live tensors
    saved.seek(0)
    twin = build(case)
    twin.load_state_dict(torch.load(saved, weights_only=True))
    torch.manual_seed(1)  # DroQ's dropout draws from torch's generator (the run's checkpoint holds it apart)
    expected = fingerprint(agent)
    torch.manual_seed(1)
    assert fingerprint(twin) == expected


@functools.cache
def class_network_and_settings(option: str) -> tuple[type, dict, dict]:
    """conf/algo/<option>.yaml's class, network factories and keys (its optimizers built), composed once."""
    cfg = compose_config(f"algo={option}", *TINY_NETS)
    keys = algo_keys(option)
    settings = {name: instantiate(value) if name.endswith("_optimizer") else value for name, value in keys.items()}
    return get_class(cfg.algo._target_), instantiate(cfg.network), settings


def construct(option: str, action_space: gym.Space = ACTION_SPACE, without: str | None = None):
    """The agent built directly from the keys conf/algo/<option>.yaml gives, less the key `without`."""
    cls, network, settings = class_network_and_settings(option)
    kept = {name: value for name, value in settings.items() if name != without}
    return cls(OBS_SPACE, action_space, network, **kept)


@pytest.mark.parametrize("option", CASES)
def test_constructors_take_every_key_from_the_config(option):
    construct(option)  # all of them: it builds
    for name in algo_keys(option):
        with pytest.raises(TypeError, match=name):
            construct(option, without=name)


@pytest.mark.parametrize("option", ["sac", "td3", "crossq", "tqc"])
def test_a_capability_only_the_constructor_can_check_stays_there(option):
    unbounded = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    with pytest.raises(ConfigError, match=f"algo={option} needs finite action bounds"):
        construct(option, action_space=unbounded)
