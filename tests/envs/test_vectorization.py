"""`env.vectorization=sync|async|envpool`: the same SAME_STEP autoreset contract from each, async
the same transitions as sync for the same seeds, EnvPool's Atari frames like the gymnasium ALE
stack's (docs/pixels.md lists what differs), and every loop trains with each."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from omegaconf import open_dict

from rl_hydra.envs.make import env_factory
from rl_hydra.envs.vector import EnvPoolAtari, envpool_atari_options, vector_env
from rl_hydra.errors import ConfigError
from rl_hydra.schema import validate_config
from tests.conftest import TINY, compose_config, run_training, skip_without_env_extra

needs_envpool = pytest.mark.skipif(
    importlib.util.find_spec("envpool") is None, reason='needs the envpool extra: pip install -e ".[envpool]"'
)


def make(env_cfg, how: str, num_envs: int, seed: int = 0):
    env_cfg = env_cfg.copy()
    with open_dict(env_cfg):
        env_cfg.vectorization = how
    env = vector_env(env_cfg, [env_factory(env_cfg)] * num_envs, seed)
    return env, env.reset(seed=[seed + i for i in range(num_envs)])


def transitions(env, first, steps: int, actions_seed: int = 0) -> list:
    rng, out = np.random.default_rng(actions_seed), [first[0]]
    for _ in range(steps):
        obs, rewards, terminated, truncated, info = env.step(rng.integers(env.single_action_space.n, size=env.num_envs))
        final = [None if f is None else np.asarray(f) for f in info.get("final_obs", [None] * env.num_envs)]
        out.append((obs, rewards, terminated, truncated, final))
    env.close()
    return out


def same(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def test_sync_is_gymnasiums_own_sync_vector_env_with_same_step_autoreset():
    env, _ = make(compose_config("env=cartpole").env, "sync", 2)  # the speed layer leans it in a run's build
    assert type(env) is SyncVectorEnv and env.autoreset_mode == AutoresetMode.SAME_STEP
    env.close()


@pytest.mark.parametrize("env_option, steps", [("cartpole", 400), ("minatar", 300)])
def test_async_gives_the_transitions_of_sync(env_option, steps):
    skip_without_env_extra(f"env={env_option}")
    cfg = compose_config("algo=dqn", f"env={env_option}").env
    sync, asynchronous = transitions(*make(cfg, "sync", 3), steps), transitions(*make(cfg, "async", 3), steps)
    assert any(f is not None for step in sync[1:] for f in step[4])  # episodes ended on the way
    assert same(sync, asynchronous)


def test_an_unknown_vectorization_is_refused_in_one_line():
    with pytest.raises(
        ConfigError, match=r"env.vectorization='threads' is not allowed; choose one of: sync, async, envpool"
    ):
        validate_config(compose_config("env=cartpole", "env.vectorization=threads"))  # the schema's one list


def test_envpool_takes_atari_ids_only():
    for overrides in (["env=cartpole"], ["env=gym", "env.id=ALE/Pong-v5"]):  # the atari group's preprocessing too
        with pytest.raises(ConfigError, match="env.vectorization=envpool runs env=atari ids"):
            validate_config(compose_config(*overrides, "env.vectorization=envpool"))


def test_envpool_is_configured_as_the_atari_group():
    options = envpool_atari_options(compose_config("env=atari", "env.id=ALE/Breakout-v5").env)
    assert options == {
        "task_id": "Breakout-v5",
        "repeat_action_probability": 0.25,
        "full_action_space": False,
        "noop_max": 30,
        "frame_skip": 4,
        "img_height": 84,
        "img_width": 84,
        "stack_num": 4,
        "gray_scale": True,
        "use_fire_reset": False,
        "episodic_life": False,
        "reward_clip": False,
        "max_episode_steps": 27_000,
    }


@needs_envpool
def test_envpool_frames_match_the_gymnasium_ale_stack_in_kind():
    """Not the same frames (EnvPool's emulator seeds and no-op draws are its own), the same kind:
    shape, dtype, value range, and episode lengths of random play within a factor of two."""
    skip_without_env_extra("env=atari")
    cfg = compose_config("env=atari", "env.id=ALE/Breakout-v5").env
    lengths = {}
    for how in ("sync", "envpool"):
        env, (obs, _) = make(cfg, how, 2)
        assert obs.shape == (2, 4, 84, 84) and obs.dtype == np.uint8
        rng, ended, length, seen = np.random.default_rng(0), [], np.zeros(2, int), []
        while len(ended) < 6:
            obs, _, terminated, truncated, info = env.step(rng.integers(4, size=2))
            length += 1
            seen.append(obs.max())
            for i in np.flatnonzero(terminated | truncated):
                assert info["final_obs"][i].shape == (4, 84, 84) and "lives" in info
                ended.append(length[i])
                length[i] = 0
        assert 100 < max(seen) <= 255
        lengths[how] = np.median(ended)
        env.close()
    assert 0.5 < lengths["envpool"] / lengths["sync"] < 2.0


@needs_envpool
def test_envpool_resets_an_ended_env_in_the_same_step():
    skip_without_env_extra("env=atari")
    env = EnvPoolAtari(compose_config("env=atari", "env.id=ALE/Breakout-v5").env, 2, seed=0)
    env.reset(seed=[0, 1])
    rng = np.random.default_rng(1)
    while True:
        obs, _, terminated, truncated, info = env.step(rng.integers(4, size=2))
        done = terminated | truncated
        if done.any():
            break
    i = int(np.flatnonzero(done)[0])
    assert info["_final_obs"][i] and not np.array_equal(info["final_obs"][i], obs[i])
    assert info["elapsed_step"][i] == 0 and info["lives"][i] == 5  # the new episode's first step
    env.close()


@pytest.mark.parametrize("algo, env_option", [("dqn", "cartpole"), ("drqn", "cartpole"), ("sac", "pendulum")])
def test_every_loop_trains_with_async_envs(algo, env_option, tmp_path):
    summary = run_training(
        tmp_path / "run",
        f"algo={algo}",
        f"env={env_option}",
        "env.num_envs=2",
        "env.vectorization=async",
        "algo.learning_starts=100",
        *TINY,
    )
    assert summary["global_step"] >= 300 and summary["updates"] > 0


@pytest.mark.parametrize("num_envs", [1, 3, 8])
def test_the_replay_ratio_does_not_depend_on_the_number_of_envs(num_envs):
    """One phase per multiple of train_every crossed from learning_starts on: 8 envs with
    train_every=4 run two phases a vector step, as 8 single steps would."""
    from types import SimpleNamespace

    from rl_hydra.loops.schedule import Schedule

    agent = SimpleNamespace(learning_starts=10, train_every=4)
    schedule, phases = Schedule(total_steps=10_000, eval_every=10_000, log_every=10_000, checkpoint_every=10_000), 0
    while schedule.step < 1000:
        phases += schedule.phases_due(agent, num_envs)
        schedule.advance(num_envs)
    one_env = sum(1 for step in range(1, schedule.step + 1) if step >= 10 and step % 4 == 0)
    assert phases == one_env


def test_a_run_of_eight_envs_makes_the_updates_of_one(tmp_path):
    common = (
        "algo=dqn",
        "env=cartpole",
        *TINY,
        "algo.learning_starts=100",
        "algo.train_every=4",
        "algo.gradient_steps=1",
        "train.total_steps=304",
    )  # 38 vector steps of 8
    one = run_training(tmp_path / "one", *common)
    eight = run_training(tmp_path / "eight", *common, "env.num_envs=8")
    assert one["global_step"] == eight["global_step"] and one["updates"] == eight["updates"] > 0
