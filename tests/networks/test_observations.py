"""Observation spaces beyond Box: Discrete, MultiDiscrete, MultiBinary, Dict and Tuple, stored part by
part in compact dtypes, encoded part by part, for every algorithm (rl_hydra/spaces.py, networks/encoders.py)."""

from __future__ import annotations

import functools
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rl_hydra import spaces
from rl_hydra.algos.c51 import C51
from rl_hydra.algos.dqn import DQN
from rl_hydra.algos.drqn import DRQN
from rl_hydra.algos.iqn import IQN
from rl_hydra.algos.qr_dqn import QRDQN
from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from rl_hydra.build import build_agent
from rl_hydra.config import validate_run_config
from rl_hydra.envs import wrappers
from rl_hydra.envs.wrappers import ObservationParts
from rl_hydra.errors import ConfigError
from rl_hydra.networks.categorical import CategoricalNetwork
from rl_hydra.networks.encoders import Embedding, GridIndices, OneHot, make_encoder
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.quantile import ImplicitQuantileNetwork, QuantileNetwork
from rl_hydra.networks.recurrent import RecurrentQNetwork
from rl_hydra.spaces import network_input
from tests.algos.continuous import agent_from
from tests.conftest import (
    TINY,
    algo_keys,
    batch_of,
    buffer_keys,
    compose_config,
    from_the_run,
    network_keys,
    run_training,
    skip_without_env_extra,
)

DISCRETE = gym.spaces.Discrete(500)  # Taxi's states
MULTI_DISCRETE = gym.spaces.MultiDiscrete([3, 4, 5])
MULTI_BINARY = gym.spaces.MultiBinary(6)
DICT = gym.spaces.Dict(
    {
        "image": gym.spaces.Box(0, 10, (3, 7, 7), np.uint8),
        "direction": gym.spaces.Discrete(4),
        "bits": gym.spaces.MultiBinary(2),
        "position": gym.spaces.Box(-1, 1, (2,), np.float32),
    }
)
INDEX_GRID = gym.spaces.MultiDiscrete(np.broadcast_to(np.array([11, 6, 3])[:, None, None], (3, 7, 7)), dtype=np.uint8)
SPACES = {
    "discrete": DISCRETE,
    "multi_discrete": MULTI_DISCRETE,
    "multi_binary": MULTI_BINARY,
    "dict": DICT,
    "index_grid": INDEX_GRID,
}  # INDEX_GRID: MiniGrid's view, as envs/minigrid.py declares it
ACTIONS = gym.spaces.Discrete(3)
ADAM = functools.partial(torch.optim.Adam, lr=1e-3)


# --- storage ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "space, dtype",
    [
        (gym.spaces.Discrete(16), np.uint8),
        (DISCRETE, np.int16),
        (gym.spaces.Discrete(3, start=-1), np.int16),
        (gym.spaces.Discrete(70_000), np.int32),
        (MULTI_DISCRETE, np.uint8),
        (MULTI_BINARY, np.bool_),
        (gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), np.uint8),
        (gym.spaces.Box(-1, 1, (3,), np.float64), np.float32),
    ],
)
def test_each_part_is_stored_in_the_smallest_dtype_that_holds_it(space, dtype):
    assert spaces.storage_dtype(space) == np.dtype(dtype)


@pytest.mark.parametrize(
    "space, obs_bytes", [(DISCRETE, 2), (MULTI_DISCRETE, 3), (MULTI_BINARY, 6), (DICT, 147 + 1 + 2 + 8)]
)
def test_replay_keeps_each_part_in_its_column_and_gives_back_what_went_in(space, obs_bytes):
    buffer = ReplayBuffer(50, space, ACTIONS, **from_the_run(num_envs=2, seed=0), share_frames="auto")
    # per transition: the observation twice, an int64 action and three float32 columns
    assert buffer.bytes_per_row == 2 * obs_bytes + 8 + 3 * 4
    obs, next_obs = batch_of(space, 2, seed=1), batch_of(space, 2, seed=2)
    buffer.add(obs, np.array([0, 2]), np.array([1.0, -1.0]), next_obs, np.zeros(2, bool), np.zeros(2, bool))
    batch = buffer.batch_at(torch.tensor([1, 0]))
    for got, wanted in ((batch.obs, obs), (batch.next_obs, next_obs)):
        for got_part, wanted_part in zip(spaces.split(got), spaces.split(wanted)):
            assert np.array_equal(got_part.numpy(), np.asarray(wanted_part)[[1, 0]])
    for column, (shape, dtype) in zip(spaces.split(batch.obs), spaces.layout(space).values()):
        assert column.dtype == dtype and tuple(column.shape[1:]) == shape


def test_the_buffer_logs_bytes_per_transition_and_the_observation_layout(caplog):
    with caplog.at_level(logging.INFO, logger="rl_hydra.buffers.replay"):
        ReplayBuffer(1000, DISCRETE, ACTIONS, **from_the_run(), share_frames="auto")
        ReplayBuffer(1000, DICT, ACTIONS, **from_the_run(), share_frames="auto")
    assert "1000 transitions x 24 B = 24.0 KB (an observation: 2 B: int16, stored twice)" in caplog.text
    # gymnasium's Dict sorts its keys
    assert "(an observation: 158 B: bits (2,) bool, direction uint8, image (3, 7, 7) uint8, position (2,) float32" in (
        caplog.text
    )


@pytest.mark.parametrize("buffer_class", [ReplayBuffer, PrioritizedReplayBuffer])
def test_n_step_and_gathered_batches_of_dict_observations(buffer_class):
    options = buffer_keys("prioritized" if buffer_class is PrioritizedReplayBuffer else "replay", beta_steps=10)
    if buffer_class is ReplayBuffer:
        options.pop("beta_steps")
    buffer = buffer_class(40, DICT, ACTIONS, **from_the_run(num_envs=2, n_step=3, gamma=0.9), **options)
    for t in range(12):
        buffer.add(
            batch_of(DICT, 2, seed=t),
            np.array([0, 1]),
            np.ones(2),
            batch_of(DICT, 2, seed=t + 1),
            np.array([t == 5, False]),
            np.zeros(2, bool),
        )
    batches = list(buffer.sample_batches(4, 3))
    assert len(batches) == 3 and all(
        set(b.obs) == set(DICT.spaces) and b.obs["image"].shape == (4, 3, 7, 7) for b in batches
    )
    restored = buffer_class(40, DICT, ACTIONS, **from_the_run(num_envs=2, n_step=3, gamma=0.9), **options)
    restored.load_state_dict(buffer.state_dict())
    for got, wanted in zip(restored.sample(5), buffer.sample(5)):
        for got_part, wanted_part in zip(spaces.split(got), spaces.split(wanted)):
            assert torch.equal(got_part, wanted_part)


def test_a_sequence_buffer_stores_dict_parts_and_gives_time_major_dicts():
    buffer = SequenceBuffer(
        10,
        **from_the_run(num_envs=2, returns=False),
        sequence_length=3,
        stride=3,
        observation_space=DICT,
        action_space=ACTIONS,
        share_frames="auto",
    )
    state = (torch.zeros(2, 4),)
    for t in range(3):
        buffer.add(
            batch_of(DICT, 2, seed=t),
            np.array([0, 1]),
            np.ones(2),
            batch_of(DICT, 2, seed=t + 1),
            np.zeros(2, bool),
            np.zeros(2, bool),
            state,
        )
    assert buffer.steps["obs/direction"].dtype == torch.uint8
    batch = buffer.batch_at(torch.tensor([0, 1]))
    assert batch.obs["image"].shape == (4, 2, 3, 7, 7) and batch.obs["direction"].shape == (4, 2)
    # step t + 1's observation of env 0 is the next observation of its step t
    assert np.array_equal(
        batch.obs["direction"][1:, 0].numpy(), [batch_of(DICT, 2, seed=t + 1)["direction"][0] for t in range(3)]
    )


# --- encoders -----------------------------------------------------------------------------
def test_indices_are_one_hot_or_embedded_inside_the_network():
    obs = torch.tensor([0, 499, 7], dtype=torch.int16)
    encoder, size = make_encoder(DISCRETE)
    assert size == 500 and torch.equal(encoder(obs), F.one_hot(obs.long(), 500).float())
    embedded, size = make_encoder(DISCRETE, discrete_embedding=8)
    assert isinstance(embedded, Embedding) and size == 8 and embedded(obs).shape == (3, 8)
    with pytest.raises(ConfigError, match="network.discrete_embedding=0 is out of range"):  # the schema's range
        validate_run_config(compose_config("network.discrete_embedding=0"))


def test_multi_discrete_is_one_one_hot_per_dimension_side_by_side_and_starts_count():
    encoder = OneHot(np.array([3, 4]), np.array([0, -1]))
    out = encoder(torch.tensor([[2, -1], [0, 2]]))
    assert torch.equal(out, torch.tensor([[0, 0, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0, 1]], dtype=torch.float32))


def test_an_index_grid_is_one_hot_per_channel_in_place_then_read_by_the_grid_cnn():
    grid = torch.as_tensor(batch_of(INDEX_GRID, 5))  # (5, 3, 7, 7) uint8
    encoder, size = make_encoder(INDEX_GRID)
    indices = encoder.encoder[0]
    assert isinstance(indices, GridIndices) and size == 64
    expected = torch.cat([F.one_hot(grid[:, c].long(), n).permute(0, 3, 1, 2) for c, n in enumerate((11, 6, 3))], 1)
    assert torch.equal(indices(grid), expected.float())  # (5, 20, 7, 7)
    timed = encoder(grid.reshape(5, 1, 3, 7, 7))  # DRQN's (T, B, ...) axes
    torch.testing.assert_close(timed.reshape(5, -1), encoder(grid))
    embedded, _ = make_encoder(INDEX_GRID, discrete_embedding=4)
    table = embedded.encoder[0].table.weight  # (20, 4)
    features = embedded.encoder[0](grid)  # (5, 3 * 4, 7, 7)
    assert features.shape == (5, 12, 7, 7)
    assert torch.equal(features[2, 4:8, 1, 3], table[11 + int(grid[2, 1, 1, 3])])  # colour: rows 11..16
    flat, size = make_encoder(INDEX_GRID, "flat")  # or one multi-hot vector
    assert isinstance(flat, OneHot) and size == 49 * 20
    uneven = gym.spaces.MultiDiscrete(np.arange(2, 2 + 3 * 49).reshape(3, 7, 7))  # bounds vary inside a channel
    assert isinstance(make_encoder(uneven)[0], OneHot)


def test_part_encoders_take_any_leading_axes_and_concatenate_in_part_order():
    encoder, size = make_encoder(DICT)
    assert size == 2 + 4 + 64 + 2  # bits, one-hot direction, grid_cnn on the 7x7 image, the vector (sorted keys)
    obs = {key: torch.as_tensor(value) for key, value in batch_of(DICT, 6).items()}
    flat = encoder(obs)  # (6, F)
    timed = encoder({key: value.reshape(2, 3, *value.shape[1:]) for key, value in obs.items()})  # (2, 3, F)
    torch.testing.assert_close(timed.reshape(6, -1), flat)
    assert torch.equal(flat[:, 2:6], F.one_hot(obs["direction"].long(), 4).float())


@pytest.mark.parametrize(
    "space, message",
    [
        (
            gym.spaces.Text(5),
            r"observations of Text\(1, 5, charset=.*\) have no encoder; supported: Box, Discrete, "
            r"MultiDiscrete, MultiBinary, or a Dict or Tuple of them; add a wrapper to env.wrappers",
        ),
        (gym.spaces.Graph(gym.spaces.Box(0, 1, (2,)), None), "observations of Graph.* have no encoder"),
        (
            gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Sequence(gym.spaces.Discrete(2))}),
            "observation part 'b' of Sequence.* have no encoder",
        ),
        (gym.spaces.Box(0, 1, (2, 3)), r"network.encoder=auto has no encoder for observations Box\(0.0, 1.0, \(2, 3\)"),
    ],
)
def test_a_space_without_an_encoder_is_one_line_naming_it_and_what_to_do(space, message):
    with pytest.raises(ConfigError, match=message) as error:
        DQN(
            space,
            ACTIONS,
            functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[8])),
            ADAM,
            total_steps=100,
            **algo_keys("dqn"),
        )
    assert "\n" not in str(error.value)


# --- every algorithm on every space ---------------------------------------------------------
NETWORKS = {
    "dqn": (DQN, functools.partial(QNetwork, **network_keys("dqn", hidden_sizes=[16])), {}),
    "qr_dqn": (
        QRDQN,
        functools.partial(QuantileNetwork, **network_keys("qr_dqn", hidden_sizes=[16])),
        {"num_quantiles": 5},
    ),
    "iqn": (
        IQN,
        functools.partial(
            ImplicitQuantileNetwork, **network_keys("iqn", embedding_dim=8, hidden_sizes=[16], head_hidden_sizes=[])
        ),
        {"num_tau_samples": 4, "num_tau_prime_samples": 4, "num_quantile_samples": 4},
    ),
    "c51": (
        C51,
        functools.partial(CategoricalNetwork, **network_keys("c51", hidden_sizes=[16], dueling=True, noisy=True)),
        {"num_atoms": 11},
    ),
}


@pytest.mark.parametrize("space", sorted(SPACES))
@pytest.mark.parametrize("algo", sorted(NETWORKS))
def test_every_q_algorithm_acts_and_learns_on_every_space(algo, space):
    algo_class, network, keys = NETWORKS[algo]
    space = SPACES[space]
    agent = algo_class(space, ACTIONS, network, ADAM, total_steps=100, **algo_keys(algo, **keys))
    buffer = ReplayBuffer(64, space, ACTIONS, **from_the_run(num_envs=2, seed=0, gamma=0.99), share_frames="auto")
    for t in range(10):
        obs = batch_of(space, 2, seed=t)
        actions, _ = agent.act(obs, explore=True)
        buffer.add(obs, actions, np.ones(2), batch_of(space, 2, seed=t + 1), np.zeros(2, bool), np.zeros(2, bool))
    assert np.isfinite(float(agent.update(buffer.sample(8)).metrics["loss"]))
    greedy, _ = agent.act(batch_of(space, 3, seed=99), explore=False)
    assert greedy.shape == (3,) and np.array_equal(greedy, agent.act(batch_of(space, 3, seed=99), explore=False)[0])


@pytest.mark.parametrize("space", sorted(SPACES))
def test_drqn_acts_and_learns_on_every_space(space):
    space = SPACES[space]
    agent = DRQN(
        space,
        ACTIONS,
        functools.partial(
            RecurrentQNetwork, **network_keys("drqn", encoder_sizes=[16], lstm_size=8, discrete_embedding=4)
        ),
        ADAM,
        total_steps=100,
        **algo_keys("drqn", batch_size=2, burn_in=1),
    )
    buffer = SequenceBuffer(20, 4, 2, space, ACTIONS, **from_the_run(returns=False), share_frames="auto")
    state = None
    for t in range(12):
        before = agent.initial_state(1) if state is None else state
        obs = batch_of(space, 1, seed=t)
        actions, state = agent.act(obs, state, explore=True)
        buffer.add(
            obs, actions, np.ones(1), batch_of(space, 1, seed=t + 1), np.array([t == 11]), np.zeros(1, bool), before
        )
    assert np.isfinite(float(agent.update(buffer.sample(2)).metrics["loss"]))


@pytest.mark.parametrize("algo", ["sac", "redq"])
@pytest.mark.parametrize("space", ["discrete", "multi_discrete", "multi_binary", "index_grid"])
def test_sac_and_redq_read_indices_and_bits_one_hot(algo, space):
    space, action_space = SPACES[space], gym.spaces.Box(-1, 1, (2,), np.float32)
    cfg = compose_config(
        f"algo={algo}",
        "env=pendulum",
        "~algo_env",
        "network.actor.hidden_sizes=[16]",
        "network.critic.hidden_sizes=[16]",
        "algo.ensemble_size=2",
    )
    agent = agent_from(cfg, space, action_space)
    buffer = ReplayBuffer(64, space, action_space, **from_the_run(seed=0), share_frames="auto")
    for t in range(10):
        obs = batch_of(space, 1, seed=t)
        actions, _ = agent.act(obs, explore=True)
        buffer.add(obs, actions, np.ones(1), batch_of(space, 1, seed=t + 1), np.zeros(1, bool), np.zeros(1, bool))
    assert np.isfinite(float(agent.update(buffer.sample(8)).metrics["critic_loss"]))


def test_sac_refuses_an_image_part_in_one_line():
    cfg = compose_config("algo=sac", "env=pendulum", "~algo_env")
    with pytest.raises(
        ConfigError,
        match=r"algo=sac reads vectors, indices and bits, not images \(observation part "
        r"'image': Box\(0, 10, \(3, 7, 7\), uint8\)\)",
    ):
        build_agent(cfg, DICT, gym.spaces.Box(-1, 1, (1,)), torch.device("cpu"))


def test_a_vector_observation_still_reaches_the_network_as_its_size():
    assert network_input(gym.spaces.Box(-1, 1, (4,))) == 4
    assert network_input(DISCRETE) is DISCRETE


# --- Dict and Tuple envs --------------------------------------------------------------------
class NestedEnv(gym.Env):
    """A Tuple of a Discrete, a Dict (a vector and a text) and a MultiBinary."""

    observation_space = gym.spaces.Tuple(
        (
            gym.spaces.Discrete(3),
            gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32), "note": gym.spaces.Text(20)}),
            gym.spaces.MultiBinary(2),
        )
    )
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (1, {"pos": np.zeros(2, np.float32), "note": "go to the door"}, np.array([1, 0], np.int8)), {}

    def step(self, action):
        return self.reset()[0], 1.0, True, False, {}


def test_observation_parts_flattens_nested_spaces_and_drops_text_with_a_log_line(caplog):
    with caplog.at_level(logging.INFO, logger="rl_hydra.envs.wrappers"):
        env = ObservationParts(NestedEnv())
    assert list(env.observation_space.spaces) == ["0", "1.pos", "2"]
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs) and obs["0"] == 1
    assert "observation part '1.note' (Text) is text, which no network encodes: dropped" in caplog.text
    kept = ObservationParts(NestedEnv(), keep_text=True)
    words = kept.reset(seed=0)[0]["1.note"]
    assert kept.observation_space.contains(kept.reset(seed=0)[0])
    assert np.count_nonzero(words) == 4 and np.array_equal(words, ObservationParts.words("Go to the DOOR"))


def test_blackjack_s_tuple_trains_end_to_end_and_predicts_from_the_env_s_own_observations(tmp_path):
    from rl_hydra import train

    run = train(
        "env=gym", "env.id=Blackjack-v1", *TINY, "algo.learning_starts=100", run_dir=tmp_path / "run", checkpoint="last"
    )
    assert run.summary["status"] == "completed" and run.summary["global_step"] == 300
    raw, _ = gym.make("Blackjack-v1").reset(seed=0)  # a tuple, as gymnasium gives it
    action = run.predict(raw)
    assert action in (0, 1) and action == run.predict({"0": raw[0], "1": raw[1], "2": raw[2]})
    batch = {"0": np.array([raw[0], 20]), "1": np.array([raw[1], 5]), "2": np.array([raw[2], 0])}
    assert run.predict(batch).shape == (2,) and run.predict(batch)[0] == action
    assert run.evaluate(episodes=3)["episodes"] == 3
    taxi = train("env=taxi", *TINY, "algo.learning_starts=100", run_dir=tmp_path / "taxi", checkpoint="last")
    assert taxi.predict(328) in range(6) and taxi.predict([328, 0]).shape == (2,)


def test_drqn_trains_on_a_discrete_env_end_to_end(tmp_path):
    summary = run_training(
        tmp_path / "run", "algo=drqn", "env=gym", "env.id=FrozenLake-v1", *TINY, "algo.learning_starts=100"
    )
    assert summary["status"] == "completed"


# --- exact resume of toy-text envs ----------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["env=taxi"],
        pytest.param(["env=frozen_lake"], marks=pytest.mark.slow),
        ["env=gym", "env.id=Blackjack-v1"],
        ["algo=drqn", "env=cliff_walking"],
    ],
)
def test_a_stopped_and_resumed_toy_text_run_continues_its_very_episodes(tmp_path, monkeypatch, args):
    from rl_hydra.loops.runner import StopRequested
    from rl_hydra.runs.run_dir import RunDirectory
    from rl_hydra.training import run
    from tests.conftest import metric_rows, stop_at
    from tests.runs.test_resume import FAST, assert_same

    cfg = compose_config(*FAST, *args, "train.total_steps=400")
    uninterrupted = run(cfg, tmp_path / "a")
    with monkeypatch.context() as patch:
        stop_at(patch, 250)
        with pytest.raises(StopRequested):
            run(cfg, tmp_path / "b")
    saved = RunDirectory(tmp_path / "b").load_checkpoint("last")
    assert saved["env"]["exact"] is True  # the env's state, not fresh episodes
    resumed = run(cfg, tmp_path / "b", resume=True)
    assert resumed["eval_return_mean"] == uninterrupted["eval_return_mean"]
    assert metric_rows(tmp_path / "a") == metric_rows(tmp_path / "b")
    final_a, final_b = (RunDirectory(tmp_path / d).load_checkpoint("last") for d in "ab")
    assert_same(final_a["agent"], final_b["agent"])
    assert_same(final_a["buffer"], final_b["buffer"])


# --- the env groups ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["algo=drqn", "env=popgym"],
        ["env=popgym", "env.id=popgym-CountRecallEasy-v0"],
        ["env=popgym", "env.id=popgym-AutoencodeEasy-v0"],
        ["env=minigrid"],
        ["algo=drqn", "env=minigrid"],
    ],
)
@pytest.mark.filterwarnings("ignore:.*share an object:UserWarning")  # gymnasium's checker on POPGym's infos
def test_popgym_and_minigrid_ids_register_themselves_and_train(tmp_path, args):
    skip_without_env_extra(*args)
    summary = run_training(tmp_path / "run", *args, *TINY, "algo.learning_starts=100")
    assert summary["status"] == "completed" and summary["global_step"] == 300


def test_minigrid_s_view_is_a_channels_first_index_grid_and_its_mission_is_dropped(caplog):
    skip_without_env_extra("env=minigrid")
    from rl_hydra.envs import make_env

    with caplog.at_level(logging.INFO, logger="rl_hydra.envs.wrappers"):
        env = make_env(compose_config("env=minigrid").env, seed=0)
    space = env.single_observation_space
    assert list(space.spaces) == ["direction", "image"] and space["image"].shape == (3, 7, 7)
    assert space["image"] == gym.spaces.MultiDiscrete(
        INDEX_GRID.nvec, dtype=np.uint8
    )  # 11 objects, 6 colours, 3 states
    assert make_encoder(space)[1] == 4 + 64  # one-hot direction, grid_cnn on the one-hot view
    said = "observation part 'mission' (MissionSpace) is text, which no network encodes: dropped"
    assert said in caplog.text or any(line.startswith(said) for line in wrappers._said)  # said once per process
    kept = make_env(compose_config("env=minigrid", "env.keep_text=true").env, seed=0)
    assert kept.single_observation_space["mission"].shape == (ObservationParts.TEXT_WORDS,)
    obs, _ = kept.reset(seed=0)
    assert np.array_equal(obs["mission"][0], ObservationParts.words("get to the green goal square"))


def test_minigrid_s_navigation_actions_are_its_first_three_and_a_run_acts_only_with_them(tmp_path):
    skip_without_env_extra("env=minigrid")
    from rl_hydra import train
    from rl_hydra.envs import make_env

    env = make_env(compose_config("env=minigrid", "env.id=MiniGrid-MemoryS7-v0", "env.actions=navigation").env, seed=0)
    assert env.single_action_space == gym.spaces.Discrete(3)
    env.reset(seed=0)
    start = tuple(env.envs[0].unwrapped.agent_pos)
    env.step(np.array([2]))  # forward, under MiniGrid's own number (the agent starts facing an open cell)
    assert tuple(env.envs[0].unwrapped.agent_pos) == (start[0] + 1, start[1])
    run = train(
        "env=minigrid",
        "env.actions=navigation",
        *TINY,
        "algo.learning_starts=100",
        run_dir=tmp_path / "run",
        checkpoint="last",
    )
    raw, _ = gym.make("MiniGrid-Empty-5x5-v0").reset(seed=0)
    assert run.predict(raw) in range(3)
    with pytest.raises(ConfigError, match="^env.actions='nav' is not allowed; choose one of: all, navigation$"):
        validate_run_config(compose_config("env=minigrid", "env.actions=nav"))  # the schema's one list


def test_minigrid_evaluates_with_5_percent_random_actions_so_a_stalled_greedy_policy_moves_on():
    skip_without_env_extra("env=minigrid")
    from rl_hydra.envs import make_env
    from rl_hydra.loops.evaluate import evaluate

    class AlwaysForward:  # a greedy policy that walks into the wall and stays there
        def act(self, obs, state=None, *, explore):
            return np.full(len(obs["direction"]), 2), state

    env_cfg = compose_config("env=minigrid", "env.actions=navigation").env
    env = make_env(env_cfg, seed=0, num_envs=20)
    _, greedy_lengths = evaluate(AlwaysForward(), env, seed=0)
    returns, lengths = evaluate(AlwaysForward(), env, seed=0, epsilon=env_cfg.eval_epsilon)
    assert env_cfg.eval_epsilon == 0.05 and (greedy_lengths == 100).all()  # every greedy episode times out
    assert (returns > 0).any() and (lengths < 100).any()


def test_a_minigrid_run_predicts_from_gymnasium_s_own_observation_and_from_its_parts(tmp_path):
    skip_without_env_extra("env=minigrid")
    from rl_hydra import train

    run = train("env=minigrid", *TINY, "algo.learning_starts=100", run_dir=tmp_path / "run", checkpoint="last")
    raw, _ = gym.make("MiniGrid-Empty-5x5-v0").reset(seed=0)  # image (7, 7, 3), direction, mission
    parts = {"direction": raw["direction"], "image": np.moveaxis(raw["image"], -1, 0)}
    assert run.predict(raw) == run.predict(parts) and run.predict(raw) in range(7)
