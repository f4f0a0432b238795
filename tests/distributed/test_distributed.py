"""distributed=apex's pure parts, without Ray: Ape-X's per-actor epsilon, R2D2's sequence priority,
the replay shards as plain objects, the config's one-line refusals (nothing left behind), and
rl-hydra-verify's refusal. Runs on Ray: tests/distributed/test_distributed_runs.py (slow)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from omegaconf import OmegaConf

from rl_hydra.distributed.replay import SequenceShard, TransitionShard, as_arrays
from rl_hydra.distributed.settings import actor_epsilons, read_settings, requested, sequence_priorities
from rl_hydra.errors import ConfigError
from rl_hydra.protocols import Batch, SequenceBatch
from rl_hydra.schema import validate_config
from tests.conftest import TINY, compose_config


def test_actor_epsilons_follow_ape_x():
    eps = actor_epsilons(8)  # 0.4 ** (1 + 7 i / 7)
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 7 * 3 / 7))
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert actor_epsilons(2, base=0.5, alpha=2.0) == pytest.approx([0.5, 0.5**3])
    assert actor_epsilons(1) == [None]  # one actor: the algorithm's own schedule, as one process


def test_sequence_priority_is_eta_max_plus_rest_mean_over_counted_steps():
    td = torch.tensor([[1.0, -2.0], [3.0, 0.0], [5.0, 7.0]])  # (L=3, B=2)
    counted = torch.tensor([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]])  # the third step is padding
    priorities = sequence_priorities(td, counted, eta=0.9)
    # sequence 0: max 3, mean 2; sequence 1: max 2, mean 1
    assert priorities.tolist() == pytest.approx([0.9 * 3 + 0.1 * 2, 0.9 * 2 + 0.1 * 1])
    assert sequence_priorities(td, torch.zeros(3, 2), 0.9).tolist() == [0.0, 0.0]


def apex(**keys):
    node = OmegaConf.load("conf/distributed/apex.yaml")
    return OmegaConf.merge(node, keys)


def test_settings_read_and_auto_actors():
    settings = read_settings(apex(actors="auto"), cpu_count=16)
    assert settings.actors == 15 and settings.max_replay_ratio is None and settings.address is None
    assert read_settings(apex(actors="auto", cpus_per_actor=2), cpu_count=16).actors == 7
    assert read_settings(apex(actors="auto"), cpu_count=1).actors == 1
    assert read_settings(apex(address="auto")).address == "auto"
    assert read_settings(apex(address="ray://head:10001")).address == "ray://head:10001"


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("actors", 0, "distributed.actors=0 is out of range; expected an integer >= 1 and <= 4096 or auto"),
        ("actors", "many", "distributed.actors='many' is not an integer"),
        (
            "address",
            "nowhere",
            "distributed.address='nowhere' is not allowed; expected ray://host:port or host:port, auto or null",
        ),
        ("address", "ray://head", "distributed.address='ray://head' is not allowed"),
        ("max_replay_ratio", -1, "distributed.max_replay_ratio=-1.0 is out of range"),
        ("min_replay_ratio", 0, "distributed.min_replay_ratio=0 is out of range"),
        ("epsilon_base", 1.5, "distributed.epsilon_base=1.5 is out of range"),
        ("cpus_per_actor", 0, "distributed.cpus_per_actor=0.0 is out of range"),
        ("max_restarts", 1001, "distributed.max_restarts=1001 is out of range"),
        ("prefetch", 65, "distributed.prefetch=65 is out of range"),
        ("priority_beta", 1.5, "distributed.priority_beta=1.5 is out of range"),
    ],
)
def test_bad_keys_are_one_line_errors_from_the_schema(key, value, says):
    with pytest.raises(ConfigError, match=re.escape(says)) as error:
        validate_config(compose_config("distributed=apex", f"distributed.{key}={value}"))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "address", ["auto", "null", "ray://head:10001", "10.0.0.2:6379", "'[::1]:6379'", "'ray://[fe80::1]:10001'"]
)
def test_the_schema_takes_every_form_of_address(address):
    validate_config(compose_config("distributed=apex", f"distributed.address={address}"))


@pytest.mark.parametrize("address", ["ray://head", "head:port", "'[::1]'", "'ray://a/b:1'", "'[zz]:1'"])
def test_the_schema_refuses_a_malformed_address(address):
    with pytest.raises(ConfigError, match="distributed.address=.* is not allowed"):
        validate_config(compose_config("distributed=apex", f"distributed.address={address}"))


@pytest.mark.parametrize(
    "keys, says",
    [
        (
            {"shards": 3},
            "distributed.shards=3 is out of range; expected at most one shard per actor (distributed.actors=2)",
        ),
    ],
)
def test_keys_that_disagree_are_one_line_errors(keys, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        read_settings(apex(actors=2, **keys))


def test_a_floor_above_the_cap_is_refused_by_the_schema_s_rule_at_launch():
    cfg = compose_config("distributed=apex", "distributed.max_replay_ratio=0.5", "distributed.min_replay_ratio=1.0")
    says = (
        "distributed.min_replay_ratio=1.0 is out of range; expected min_replay_ratio <= max_replay_ratio, "
        "here distributed.max_replay_ratio=0.5"
    )
    with pytest.raises(ConfigError, match=re.escape(says)):
        validate_config(cfg)


def test_a_distributed_node_read_back_is_checked_by_its_name():
    """A run directory's config.yaml is untyped data: its distributed node is checked against the
    schema its `name` names, and a name the group lacks is refused with the group's options."""
    recorded = OmegaConf.to_container(compose_config("distributed=apex"), resolve=False)
    recorded["distributed"]["actors"] = 0
    with pytest.raises(ConfigError, match="distributed.actors=0 is out of range"):
        validate_config(OmegaConf.create(recorded))
    recorded["distributed"] = {"name": "apx"}
    with pytest.raises(ConfigError, match="distributed.name='apx' is not allowed; choose one of: none, apex"):
        validate_config(OmegaConf.create(recorded))


def test_which_configs_are_distributed():
    assert not requested(compose_config())
    assert requested(compose_config("distributed=apex"))
    from pathlib import Path

    from rl_hydra.runs.trust import typed_config

    recorded = OmegaConf.to_container(compose_config(), resolve=True)
    del recorded["distributed"]  # a run recorded before the group existed, read back as a record is
    assert not requested(typed_config(recorded, Path("config.yaml")))


@pytest.mark.parametrize(
    "overrides, says",
    [
        (["distributed.actors=0"], "distributed.actors=0 is out of range"),
        (["distributed.address=nowhere"], "distributed.address='nowhere' is not allowed"),
        (["algo=sac", "env=pendulum"], "distributed=apex runs the Q family"),
    ],
)
def test_refused_config_leaves_no_run_directory(tmp_path, overrides, says):
    from rl_hydra.commands.launch import RunFailed, launch

    run_dir = tmp_path / "run"
    with pytest.raises(RunFailed, match=says) as failure:
        launch(compose_config("distributed=apex", *TINY, *overrides), run_dir)
    assert failure.value.code == 2 and "\n" not in str(failure.value)
    assert not run_dir.exists()


def test_apex_without_ray_is_one_line(tmp_path, monkeypatch):
    from rl_hydra.commands.launch import RunFailed, launch

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    with pytest.raises(
        RunFailed, match=r'distributed=apex needs Ray, which is not installed; pip install -e "\.\[ray\]"'
    ):
        launch(compose_config("distributed=apex", *TINY), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_verify_refuses_a_distributed_run(run_dir):
    from rl_hydra.runs.run_dir import RunError
    from rl_hydra.verify import verify_run

    config = run_dir / ".hydra" / "config.yaml"
    recorded = yaml.safe_load(config.read_text())
    from omegaconf import OmegaConf

    from rl_hydra.config import compose_option

    recorded["distributed"] = OmegaConf.to_container(compose_option("distributed", "apex").distributed)
    config.write_text(yaml.safe_dump(recorded))
    with pytest.raises(RunError, match="is a distributed run .* not bit-reproducible") as error:
        verify_run(run_dir)
    assert "\n" not in str(error.value)


# --- the replay shards, as plain objects ---------------------------------------------------------
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def transitions(n: int, start: float = 0.0, obs_dim: int = 3) -> Batch:
    obs = np.arange(start, start + obs_dim * n, dtype=np.float32).reshape(n, obs_dim)
    return Batch(
        obs=obs,
        actions=np.arange(n) % 2,
        rewards=np.full(n, 2.0, np.float32),
        next_obs=obs + 1,
        terminated=np.zeros(n, np.float32),
        truncated=np.zeros(n, np.float32),
        discounts=np.linspace(0.5, 0.9, n).astype(np.float32),
        weights=np.ones(n, np.float32),
        indices=np.arange(n),
    )


@pytest.mark.parametrize("buffer", ["prioritized", "replay"])
def test_transition_shard_keeps_each_rows_discount_and_priority(buffer):
    from rl_hydra.distributed.parts import shard_buffer

    node = shard_buffer(compose_config(f"buffer={buffer}", "buffer.capacity=64"))
    shard = TransitionShard(node, BOX, gym.spaces.Discrete(2), gamma=0.99, seed=0)
    assert shard.sample(8, 1) is None  # too few rows yet
    sent = transitions(16)
    priorities = np.zeros(16)
    priorities[5] = 100.0  # one row far above the rest
    assert shard.add(sent, priorities) == 16
    (batch,) = shard.sample(8, 1)
    rows = batch.indices
    assert np.array_equal(batch.obs, sent.obs[rows]) and np.array_equal(batch.discounts, sent.discounts[rows])
    if buffer == "prioritized":
        assert (rows == 5).sum() >= 6  # drawn by priority
        shard.update_priorities(np.array([5]), np.array([0.0]))
    state = shard.state_dict()
    again = TransitionShard(node, BOX, gym.spaces.Discrete(2), gamma=0.99, seed=0)
    again.load_state_dict(state)
    assert again.added == 16 and np.array_equal(again.discounts, shard.discounts)


def sequences(n: int, length: int = 4) -> SequenceBatch:
    return as_arrays(
        SequenceBatch(
            obs=torch.arange(n, dtype=torch.float32).repeat(length + 1, 1)[..., None].expand(-1, -1, 3).contiguous(),
            actions=torch.zeros(length, n, dtype=torch.int64),
            rewards=torch.ones(length, n),
            terminated=torch.zeros(length, n),
            mask=torch.ones(length, n),
            episode_start=torch.arange(n) % 2 == 0,
            state=(torch.arange(n, dtype=torch.float32)[:, None].repeat(1, 5),),
        )
    )


def test_sequence_shard_draws_by_priority_and_keeps_the_stored_state():
    shard = SequenceShard({"capacity": 10}, seed=0, alpha=1.0)
    priorities = np.full(6, 1e-3)
    priorities[4] = 10.0
    shard.add(sequences(6), priorities)
    assert shard.sample(8, 1) is None  # 6 stored < batch of 8
    shard.add(sequences(6), np.full(6, 1e-3))  # wraps: 12 into 10
    assert len(shard) == 10
    ((batch, rows),) = shard.sample(8, 1)
    assert batch.obs.shape == (5, 8, 3) and batch.state[0].shape == (8, 5)
    assert np.array_equal(batch.state[0][:, 0], batch.obs[0, :, 0])  # each sequence's own stored state
    assert (rows == 4).sum() >= 6
    again = SequenceShard({"capacity": 10}, seed=0, alpha=1.0)
    again.load_state_dict(shard.state_dict())
    ((batch_again, rows_again),) = again.sample(8, 1)
    ((batch, rows),) = shard.sample(8, 1)
    assert np.array_equal(rows, rows_again) and np.array_equal(batch.obs, batch_again.obs)


@pytest.mark.parametrize("beta", [0.0, 0.6, 1.0])
def test_sequence_shard_weights_each_drawn_sequence_by_its_priority(beta):
    shard = SequenceShard({"capacity": 8}, seed=0, alpha=1.0, beta=beta)
    priorities = np.array([1.0, 2.0, 4.0, 8.0, 1.0, 2.0, 4.0, 8.0])
    shard.add(sequences(8), priorities)
    ((batch, rows),) = shard.sample(8, 1)
    p = priorities[rows] + 1e-6  # the tree's p + epsilon, alpha 1
    np.testing.assert_allclose(batch.weights, (p.min() / p) ** beta, rtol=1e-5)
    assert batch.weights.max() == pytest.approx(1.0) and len(set(priorities[rows])) > 1  # the rarest weighs 1
    assert settings_of(beta=beta).priority_beta == beta


def settings_of(**keys):
    node = compose_config("distributed=apex", *(f"distributed.priority_{k}={v}" for k, v in keys.items())).distributed
    return read_settings(node, cpu_count=4)


def test_min_replay_ratio_above_the_cap_is_refused(tmp_path):
    from rl_hydra.commands.launch import RunFailed, launch

    with pytest.raises(
        RunFailed,
        match=r"distributed.min_replay_ratio=0.8 is out of range; expected a number "
        r"<= the cap on updates per env step .*, here distributed.max_replay_ratio=null and "
        r"algo.gradient_steps=128 and algo.train_every=256",
    ) as failure:
        launch(
            compose_config("distributed=apex", "distributed.actors=1", "distributed.min_replay_ratio=0.8", *TINY),
            tmp_path / "run",
        )
    assert failure.value.code == 2 and not (tmp_path / "run").exists()


def test_joining_a_cluster_that_is_not_there_is_one_line(tmp_path, monkeypatch):
    from rl_hydra.commands.launch import RunFailed, launch

    pytest.importorskip("ray")

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RunFailed, match="distributed.address=auto: cannot join a Ray cluster there") as failure:
        launch(
            compose_config("distributed=apex", "distributed.actors=1", "distributed.address=auto", *TINY),
            tmp_path / "run",
        )
    assert failure.value.code == 2 and "\n" not in str(failure.value) and not (tmp_path / "run").exists()


class InProcessRay:
    """What the Cluster's replay side asks of Ray, in this process: a `remote` class builds its object
    here, and each of its methods' `.remote(...)` runs at once, its result standing in for the ref."""

    class exceptions:
        RayActorError = type("RayActorError", (Exception,), {})

    @staticmethod
    def remote(**_):
        return lambda cls: SimpleNamespace(remote=lambda *args, **kwargs: InProcessHandle(cls(*args, **kwargs)))

    @staticmethod
    def get(refs):
        return refs


class InProcessHandle:
    def __init__(self, target):
        self.target, self.calls = target, []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, args))
            return getattr(self.target, name)(*args)

        return SimpleNamespace(remote=call)


def learner_with_a_shard(tmp_path, monkeypatch, steps_reuse_outputs: bool):
    """A Learner, built as a run builds it but on the in-process stand-in for Ray (DQN on CartPole,
    prioritized replay), over one shard holding 64 transitions; whether the agent's gradient step
    hands back the same priorities tensor each time, refilled, as a CUDA-graphed step does; the
    priorities each step computed."""
    from rl_hydra.distributed import learner as learner_module
    from rl_hydra.runs.run_dir import RunDirectory

    monkeypatch.setattr(learner_module, "require_ray", lambda: InProcessRay)
    cfg = compose_config(
        "algo=dqn",
        "env=cartpole",
        "buffer=prioritized",
        "buffer.capacity=64",
        "distributed=apex",
        "distributed.actors=1",
        "algo.batch_size=8",
    )
    learner = learner_module.Learner(
        cfg, RunDirectory(tmp_path / "run"), torch.device("cpu"), read_settings(cfg.distributed)
    )
    learner.cluster.start_replay(learner.spaces, None)
    learner.cluster.shards[0].target.add(transitions(64, obs_dim=4), np.ones(64))
    computed, plain, reused = [], learner.agent.gradient_step, torch.zeros(8)

    def step(batch):
        loss, priorities, metrics = plain(batch)
        computed.append(priorities.detach().clone())
        if steps_reuse_outputs:
            priorities = reused.copy_(priorities)
        return loss, priorities, metrics

    learner.agent.gradient_step = step
    return learner, computed


@pytest.mark.parametrize("steps_reuse_outputs", [False, True])
def test_each_updates_priorities_reach_the_shard_with_its_next_sample_request(
    tmp_path, monkeypatch, steps_reuse_outputs
):
    from rl_hydra.distributed.cluster import SAMPLE_BATCHES

    learner, computed = learner_with_a_shard(tmp_path, monkeypatch, steps_reuse_outputs)
    shard = learner.cluster.shards[0]
    for _ in range(SAMPLE_BATCHES):  # one request's batches: no priorities sent yet
        assert learner.update()
    assert not [name for name, _ in shard.calls if name == "update_priorities"]
    assert learner.update()  # the next request carries all four, in one call
    sent = [args for name, args in shard.calls if name == "update_priorities"]
    assert len(sent) == 1
    rows, priorities = sent[0]
    assert isinstance(priorities, np.ndarray) and rows.shape == priorities.shape == (SAMPLE_BATCHES * 8,)
    assert np.array_equal(priorities, torch.cat(computed[:SAMPLE_BATCHES]).numpy())
    alpha, epsilon = learner.cluster.parts.buffer["alpha"], shard.target.buffer.epsilon
    last_of_each_row = {row: p for row, p in zip(rows.tolist(), priorities.tolist())}
    leaves = shard.target.buffer.tree.state_dict()["leaves"]
    for row, p in last_of_each_row.items():  # the shard's tree holds (|delta| + eps)^alpha
        assert leaves[row] == pytest.approx((abs(p) + epsilon) ** alpha, rel=1e-5)


def test_a_round_that_passes_the_budget_ends_the_run_at_train_total_steps(tmp_path, monkeypatch):
    """An actor's round cannot stop mid-way: the learner counts its steps up to train.total_steps, so
    a run stopped at its last evaluation checkpoints a step its own resume accepts."""
    from rl_hydra.distributed import learner as learner_module
    from rl_hydra.runs.run_dir import RunDirectory

    monkeypatch.setattr(learner_module, "require_ray", lambda: InProcessRay)
    cfg = compose_config(
        "algo=dqn", "env=cartpole", "distributed=apex", "distributed.actors=1", *TINY, "algo.learning_starts=100"
    )
    learner = learner_module.Learner(
        cfg, RunDirectory(tmp_path / "run"), torch.device("cpu"), read_settings(cfg.distributed)
    )
    dues, runner = [], learner.runner
    monkeypatch.setattr(runner, "_on_due", dues.append)
    for _ in range(2):  # 400 steps in two rounds; the budget is 300
        learner.account({"version": 0, "returns": [9.0], "lengths": [9], "steps": 200})
    assert runner.global_step == cfg.train.total_steps == 300 and runner.done
    assert dues[-1].evaluate and runner.experience.episodes.episodes == 2 and learner.agent.explore_steps == 300 - 100


@pytest.mark.parametrize(
    "address, where",
    [(None, "a local Ray instance with 2 CPUs"), ("ray://head:10001", "the Ray cluster at ray://head:10001")],
)
def test_starting_ray_is_said_at_once_before_it_starts(monkeypatch, capsys, address, where):
    from rl_hydra.distributed.cluster import Cluster
    from rl_hydra.distributed.parts import RunParts

    said_before = []  # stderr when Ray was asked to start

    class StartingRay(InProcessRay):
        @staticmethod
        def is_initialized():
            return False

        @staticmethod
        def init(**kwargs):
            said_before.append(capsys.readouterr().err)

        @staticmethod
        def cluster_resources():
            return {"CPU": 2}

    cfg = compose_config("distributed=apex", "distributed.actors=2")
    settings = dataclasses.replace(read_settings(cfg.distributed), address=address)
    Cluster(StartingRay, settings, RunParts.of(cfg), recurrent=False, prioritized=False).connect()
    assert said_before == [f"distributed=apex: starting {where} (minutes, the first time on a small machine)\n"]


def test_by_default_actors_wait_for_a_learner_below_the_algos_own_ratio(tmp_path, monkeypatch):
    """A small machine's actors outrun its learner: by default they wait for it (min_replay_ratio=auto,
    the cap: DQN's preset 128 / 256), so the run learns from each env step as one process does."""
    from rl_hydra.distributed import learner as learner_module
    from rl_hydra.runs.run_dir import RunDirectory

    monkeypatch.setattr(learner_module, "require_ray", lambda: InProcessRay)
    cfg = compose_config("algo=dqn", "env=cartpole", "distributed=apex", "distributed.actors=1", *TINY)
    learner = learner_module.Learner(
        cfg, RunDirectory(tmp_path / "run"), torch.device("cpu"), read_settings(cfg.distributed)
    )
    assert learner.replay_ratio == learner.min_replay_ratio == 0.5
    learner.runner.schedule.step = learner.agent.learning_starts + 100
    assert learner.behind()  # no update yet for 100 steps past warm-up: its actors wait
    assert learner_module.waiting(0.5, "auto") == (
        "actors wait while the learner is below 0.5 (distributed.min_replay_ratio=auto)"
    )
    unbound = compose_config("distributed=apex", "distributed.min_replay_ratio=null").distributed
    assert read_settings(unbound, cpu_count=2).min_replay_ratio is None


def test_an_actor_is_built_from_its_parts_not_the_runs_config():
    from omegaconf import DictConfig

    from rl_hydra.distributed.actor import Actor
    from rl_hydra.distributed.parts import RunParts

    cfg = compose_config("algo=dqn", "env=cartpole", "buffer=prioritized", "distributed=apex", "algo.n_step=3")
    parts = RunParts.of(cfg).actor
    assert {field.name for field in dataclasses.fields(parts)} == {
        "env",
        "agent",
        "process",
        "n_step",
        "gamma",
        "sequence_length",
        "stride",
    }
    assert not [value for value in vars(parts).values() if isinstance(value, DictConfig)]
    assert parts.env["id"] == "CartPole-v1" and "logger" not in parts.agent.algo
    actor = Actor(parts, 0, 0.4, seed=7, send_every=50, eta=0.9, prioritized=True)
    try:
        assert actor.local.n_step == 3 and actor.agent.epsilon_schedule.start == 0.4
    finally:
        actor.close()


def test_a_lone_actor_explores_on_the_algos_own_schedule_from_where_the_run_is():
    from rl_hydra.distributed.actor import Actor
    from rl_hydra.distributed.parts import RunParts

    cfg = compose_config("algo=dqn", "env=cartpole", "distributed=apex", "distributed.actors=1")
    (epsilon,) = actor_epsilons(1)
    actor = Actor(RunParts.of(cfg).actor, 0, epsilon, seed=7, send_every=50, eta=0.9, prioritized=False)
    try:
        schedule = actor.agent.epsilon_schedule  # the preset's: 1.0 to 0.04 over 16% of 50,000 steps
        assert (schedule.start, schedule.end) == (1.0, 0.04)
        actor.start_round(None, 0, run_step=20_000)
        assert actor.agent.explore_steps == 20_000 - 1000 and actor.agent.epsilon == pytest.approx(0.04)
    finally:
        actor.close()
