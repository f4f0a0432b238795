"""Every env group builds an env that gymnasium's own checker accepts and its spec can recreate."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rl_hydra.envs.make import env_factory, make_env, time_limit
from rl_hydra.errors import ConfigError
from rl_hydra.loops import evaluate as evaluation
from rl_hydra.loops.evaluate import evaluate
from tests.conftest import CONF_DIR, TINY, compose_config, env_overrides, skip_without_env_extra

# check_env's advice (infinite Box bounds, an unwrapped env that differs, masked components whose
# bounds are both 0 by design) is about the envs as gymnasium ships them, not a failure
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:gymnasium")

ENV_GROUPS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))


@pytest.mark.parametrize("group", ENV_GROUPS)
def test_gymnasium_check_env_passes_and_the_spec_recreates_the_env(group):
    skip_without_env_extra(*env_overrides(group))
    env = env_factory(compose_config(*env_overrides(group)).env)()
    check_env(env, skip_render_check=True)  # raises on anything gymnasium's API forbids
    twin = gym.make(env.spec)  # wrappers recorded their constructor arguments
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


# --- time limits: no episode lasts for ever (issue #53) --------------------------------------------


class WalkUp:
    """A greedy policy that walks into CliffWalking's top wall for ever (action 0: up)."""

    def act(self, obs, state=None, *, explore: bool):
        return np.zeros(len(obs), dtype=np.int64), state


def without_fallback(*overrides: str):
    """The env config of `overrides` as a run recorded before env.fallback_max_episode_steps existed."""
    from omegaconf import open_dict

    env_cfg = compose_config(*overrides).env
    with open_dict(env_cfg):
        del env_cfg["fallback_max_episode_steps"]
    return env_cfg


def test_an_env_with_no_time_limit_of_its_own_gets_env_gyms_fallback_said_in_the_log(tmp_path, caplog):
    import yaml

    from rl_hydra.commands.launch import launch

    cfg = compose_config("algo=qr_dqn", "env=gym", "env.id=CliffWalking-v1", *TINY)
    with caplog.at_level(logging.INFO, logger="rl_hydra"):
        summary = launch(cfg, tmp_path / "run")  # issue #53's command, shortened: it ends
    said = (
        "env.id=CliffWalking-v1 has no time limit of its own: an episode ends after 1000 steps "
        "(env.fallback_max_episode_steps; env.max_episode_steps=N sets another)"
    )
    assert summary["status"] == "completed" and caplog.text.count(said) == 1  # once: not again for the eval env
    assert said in (tmp_path / "run" / "train.log").read_text()
    assert (
        yaml.safe_load((tmp_path / "run" / ".hydra" / "config.yaml").read_text())["env"]["fallback_max_episode_steps"]
        == 1000
    )  # recorded in the config
    assert summary["eval_return_mean"] >= -1000  # a greedy episode cut at 1,000 steps scores -1 a step at worst

    env = make_env(cfg.env, seed=0)
    assert env.time_limit == 1000
    for step in range(1, 1001):
        _, _, terminated, truncated, _ = env.step(np.zeros(1, dtype=np.int64))
        assert not terminated[0] and truncated[0] == (step == 1000)


@pytest.mark.parametrize(
    "overrides, limit",
    [
        (["env=cliff_walking"], 100),  # the group's own max_episode_steps
        (["env=cartpole"], 500),  # gymnasium's registered limit
        (["env=gym", "env.id=CliffWalking-v1", "env.max_episode_steps=30"], 30),
        (["env=gym", "env.id=Taxi-v4"], 200),  # registered: the fallback is not needed
    ],
)
def test_the_time_limit_make_env_reports_is_the_one_episodes_end_at(overrides, limit):
    assert time_limit(compose_config(*overrides).env) == limit


def test_a_fallback_of_null_on_an_env_without_a_time_limit_is_refused_naming_max_episode_steps():
    env_cfg = compose_config("env=gym", "env.id=CliffWalking-v1", "env.fallback_max_episode_steps=null").env
    with pytest.raises(
        ConfigError,
        match=r"^env.id=CliffWalking-v1 has no time limit of its own, .*: give "
        r"env.max_episode_steps=N$",
    ):
        env_factory(env_cfg)
    assert time_limit(without_fallback("env=gym", "env.id=CliffWalking-v1")) is None  # a run recorded before


def test_evaluation_cuts_an_episode_that_never_ends_with_a_warning(monkeypatch, caplog):
    env = make_env(without_fallback("env=gym", "env.id=CliffWalking-v1"), seed=0, num_envs=2)
    assert env.time_limit is None
    with caplog.at_level(logging.WARNING, logger="rl_hydra"):
        returns, lengths = evaluate(WalkUp(), env, seed=0, max_steps=50)
    assert lengths.tolist() == [50, 50] and returns.tolist() == [-50.0, -50.0]
    assert "evaluation: 2 of 2 episodes had not ended after 50 steps (the env sets no time limit)" in caplog.text
    monkeypatch.setattr(evaluation, "EVAL_STEP_CAP", 20)  # the default cap, where the env has no limit
    assert evaluate(WalkUp(), env, seed=0)[1].tolist() == [20, 20]
    capped = make_env(compose_config("env=gym", "env.id=CliffWalking-v1", "env.max_episode_steps=30").env, seed=0)
    assert evaluate(WalkUp(), capped, seed=0)[1].tolist() == [30]  # an env's own longer limit is kept
