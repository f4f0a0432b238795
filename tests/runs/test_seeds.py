"""A run's random streams: spawned from its one seed, independent of each other, the same each time."""

from __future__ import annotations

import dataclasses

import gymnasium
import numpy as np
import torch
from conftest import compose_config

from rl_hydra.envs import make_env
from rl_hydra.loops.rollout import Rollout
from rl_hydra.runs.rng import RunSeeds, spawn_seeds


def test_the_same_seed_spawns_the_same_streams_and_another_seed_others():
    assert spawn_seeds(0) == spawn_seeds(0)
    assert set(dataclasses.astuple(spawn_seeds(0))).isdisjoint(dataclasses.astuple(spawn_seeds(1)))


def test_no_two_streams_of_a_run_start_from_the_same_seed_and_each_leaves_room_for_an_index():
    for seed in range(20):
        seeds = dataclasses.astuple(spawn_seeds(seed))
        assert len(set(seeds)) == len(dataclasses.fields(RunSeeds))
        assert all(0 <= s < 2**30 for s in seeds)


def test_the_streams_first_draws_differ_where_one_seed_for_all_made_them_equal():
    seeds = spawn_seeds(0)
    agent, buffer = torch.Generator().manual_seed(seeds.agent), torch.Generator().manual_seed(seeds.buffer)
    assert not torch.equal(torch.rand(8, generator=agent), torch.rand(8, generator=buffer))
    same = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(torch.rand(8, generator=same[0]), torch.rand(8, generator=same[1]))  # what it was
    assert np.random.default_rng(seeds.env).integers(1 << 30) != np.random.default_rng(seeds.agent).integers(1 << 30)


def test_the_agent_the_buffer_and_the_envs_draw_from_the_run_s_own_streams():
    from rl_hydra.build import build_components

    cfg = compose_config("algo=dqn", "env=cartpole", "seed=3")
    seeds = spawn_seeds(3)
    agent, env, buffer = build_components(cfg, torch.device("cpu"))
    assert agent.rng.bit_generator.state == np.random.default_rng(seeds.agent).bit_generator.state
    assert buffer.generator.initial_seed() == seeds.buffer
    fresh = gymnasium.make("CartPole-v1")
    assert np.array_equal(env.seeded_reset[0][0], fresh.reset(seed=seeds.env)[0])
    env.close()


def test_a_run_starts_from_make_env_s_seeded_reset_and_resets_no_second_time(monkeypatch):
    env = make_env(compose_config("env=cartpole").env, seed=5)
    first = env.seeded_reset[0].copy()
    resets = []
    reset = env.reset
    monkeypatch.setattr(env, "reset", lambda **kwargs: resets.append(kwargs) or reset(**kwargs))
    rollout = Rollout(env)
    assert np.array_equal(rollout.start(), first) and resets == []
    rollout.start()  # a later start (a new session's) resets as before
    assert len(resets) == 1
    env.close()
