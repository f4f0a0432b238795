"""Every env group builds an env that gymnasium's own checker accepts and its spec can recreate."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rl_hydra.envs.make import env_factory
from tests.conftest import CONF_DIR, compose_config, env_overrides, skip_without_env_extra

# check_env's advice (infinite Box bounds, an unwrapped env that differs, masked components whose
# bounds are both 0 by design) is about the envs as gymnasium ships them, not a failure
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:gymnasium")

ENV_GROUPS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))


@pytest.mark.parametrize("group", ENV_GROUPS)
def test_gymnasium_check_env_passes_and_the_spec_recreates_the_env(group):
    skip_without_env_extra(*env_overrides(group))
    env = env_factory(compose_config(*env_overrides(group)).env)()
    check_env(env, skip_render_check=True)   # raises on anything gymnasium's API forbids
    twin = gym.make(env.spec)                  # wrappers recorded their constructor arguments
    assert [type(w) for w in _wrappers(twin)] == [type(w) for w in _wrappers(env)]
    assert twin.observation_space == env.observation_space
    first, _ = env.reset(seed=3)
    again, _ = twin.reset(seed=3)
    assert same(first, again)
    for _ in range(5):
        action = env.action_space.sample()
        assert same(env.step(action)[0], twin.step(action)[0])


def same(a, b) -> bool:
    """Equal observations: arrays, or dicts of parts (Dict and Tuple observations)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(np.array_equal(a[key], b[key]) for key in a)
    return np.array_equal(a, b)


def _wrappers(env: gym.Env) -> list[gym.Env]:
    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    return chain
