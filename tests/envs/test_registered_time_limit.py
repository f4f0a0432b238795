"""An env's own registered time limit is kept for every id form: gymnasium's `module:EnvId`, an id a
plugin's import registered, a module not imported yet; an env registered with none gets env=gym's
fallback, said in the log."""

import logging
import sys

import gymnasium as gym
import pytest

from rl_hydra.envs.make import make_env, registered_time_limit, time_limit
from tests.conftest import compose_config

PLUGIN = "tests.plugin_env:PluginCorridor-v0"  # registered with max_episode_steps=20


def env_gym(env_id: str):
    return compose_config("env=gym", f"env.id={env_id}").env


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """A module no test imported before, registering FreshCorridor-v0 (7 steps) and NoLimit-v0 (none)."""
    (tmp_path / "fresh_corridor.py").write_text(
        "import gymnasium as gym\n"
        "from tests.plugin_env import Corridor\n"
        "for name, limit in (('FreshCorridor-v0', 7), ('NoLimit-v0', None)):\n"
        "    if name not in gym.registry:\n"
        "        gym.register(name, entry_point=Corridor, max_episode_steps=limit)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fresh_corridor"
    for name in ("FreshCorridor-v0", "NoLimit-v0"):
        gym.registry.pop(name, None)
    sys.modules.pop("fresh_corridor", None)  # the next test's import registers them again


def test_every_id_form_keeps_the_registered_limit(fresh_module):
    assert registered_time_limit(f"{fresh_module}:FreshCorridor-v0") == 7  # imported here first
    assert time_limit(env_gym(PLUGIN)) == 20
    assert time_limit(env_gym("PluginCorridor-v0")) == 20  # the plugin's id once its import registered it
    assert time_limit(env_gym("CartPole-v1")) == 500


def test_an_episode_of_a_module_colon_id_env_ends_at_its_own_limit(caplog):
    caplog.set_level(logging.INFO, logger="rl_hydra.envs.make")
    env = make_env(env_gym(PLUGIN), seed=0, num_envs=1)
    try:
        assert env.time_limit == 20
        for step in range(1, 21):  # always left: the corridor's end is never reached
            *_, terminated, truncated, _ = env.step([0])
            assert not terminated[0] and truncated[0] == (step == 20)
    finally:
        env.close()
    assert "has no time limit of its own" not in caplog.text


def test_an_env_registered_without_a_limit_still_gets_the_fallback(fresh_module, caplog):
    caplog.set_level(logging.INFO, logger="rl_hydra.envs.make")
    env = make_env(env_gym(f"{fresh_module}:NoLimit-v0"), seed=0, num_envs=1)
    env.close()
    assert env.time_limit == 1000 and "has no time limit of its own: an episode ends after 1000 steps" in caplog.text
