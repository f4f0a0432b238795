"""Pixel env groups (env=atari, env=minatar): spaces, preprocessing, learning-only transforms,
ids that register themselves, the missing-extra line, videos and resume (docs/pixels.md)."""

from __future__ import annotations

import logging
import subprocess
import sys
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
from omegaconf import OmegaConf

from rl_hydra import choices
from rl_hydra.commands.video import record_gif
from rl_hydra.envs.learning import LearningSignal
from rl_hydra.envs.make import env_factory, make_env
from rl_hydra.errors import ConfigError
from rl_hydra.loops.evaluate import evaluate
from rl_hydra.loops.rollout import Rollout
from rl_hydra.schema import validate_config
from tests.conftest import ROOT, compose_config

MINATAR_CHANNELS = {"Asterix": 4, "Breakout": 4, "Freeway": 7, "Seaquest": 10, "SpaceInvaders": 6}


@pytest.fixture
def atari():
    """compose(*overrides).env of env=atari, its own values (no algorithm's Atari preset); skips
    without the atari extra."""
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    return lambda *overrides: compose_config("env=atari", "~algo_env", *overrides).env


@pytest.fixture
def minatar():
    pytest.importorskip("minatar")
    return lambda *overrides: compose_config("env=minatar", *overrides).env


class RandomAgent:
    """Acts from its own seeded generator: the same actions whatever the env's learning keys."""

    def __init__(self, num_actions: int, seed: int = 0):
        self.num_actions, self.rng = num_actions, np.random.default_rng(seed)

    def act(self, obs, state=None, *, explore: bool):
        return self.rng.integers(self.num_actions, size=len(obs)), state


def wrapper_of(env: gym.Env, kind: type) -> gym.Wrapper:
    while not isinstance(env, kind):
        env = env.env
    return env


# --- spaces and preprocessing ---------------------------------------------------------------
def test_atari_observations_are_stacks_of_four_84x84_uint8_frames(atari):
    env = make_env(atari(), seed=0)
    assert env.single_observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    obs, info = env.reset(seed=[0])
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    assert 1 <= info["episode_frame_number"][0] <= 30  # no-op starts
    assert env.single_action_space == gym.spaces.Discrete(6)  # Pong's minimal action set
    ale = env.envs[0].unwrapped.ale
    assert ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert ale.getInt("max_num_frames_per_episode") == 108_000


def test_atari_frames_are_stacked_oldest_first(atari):
    stacked = env_factory(atari("env.id=ALE/Breakout-v5"))()
    single = env_factory(atari("env.id=ALE/Breakout-v5", "env.preprocessing.frame_stack=1"))()
    obs, frame = stacked.reset(seed=5)[0], single.reset(seed=5)[0]
    assert all(np.array_equal(obs[k], frame[0]) for k in range(4))  # a new episode repeats its first frame
    for action in [1, 1, 2, 2, 3, 3, 2, 0, 1, 3]:
        previous = obs
        obs, frame = stacked.step(action)[0], single.step(action)[0]
        assert np.array_equal(obs[-1], frame[0])  # the newest frame last
        assert np.array_equal(obs[:-1], previous[1:])  # the others move one place towards the front
    assert not np.array_equal(obs[0], obs[-1])


def test_atari_preprocessing_keys_reach_the_wrappers_and_ale(atari):
    env = env_factory(
        atari(
            "env.preprocessing.noop_max=0",
            "env.preprocessing.frame_skip=3",
            "env.preprocessing.screen_size=64",
            "env.preprocessing.frame_stack=2",
            "env.kwargs.repeat_action_probability=0.0",
        )
    )()
    preprocessing = wrapper_of(env, gym.wrappers.AtariPreprocessing)
    assert (preprocessing.noop_max, preprocessing.frame_skip, preprocessing.screen_size) == (0, 3, (64, 64))
    assert env.observation_space.shape == (2, 64, 64)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    _, info = env.reset(seed=0)
    assert info["episode_frame_number"] == 0  # no no-ops
    assert env.step(0)[4]["episode_frame_number"] == 3  # one agent step, three frames
    with pytest.raises(
        ConfigError,
        match=r"env.wrappers\[0\] \(gymnasium.wrappers.AtariPreprocessing\) does not "
        r"fit: Expect the `noop_max` to be non-negative",
    ):
        env_factory(atari("env.preprocessing.noop_max=-1"))()


def test_minatar_observations_are_channel_first_bool_grids(minatar):
    cfg = minatar()
    for game, channels in MINATAR_CHANNELS.items():
        cfg.id = f"MinAtar/{game}-v1"
        env = env_factory(cfg)()
        assert env.observation_space.shape == (channels, 10, 10) and env.observation_space.dtype == bool
        obs, _ = env.reset(seed=1)
        obs = env.step(env.action_space.sample())[0]
        assert obs.dtype == bool and np.array_equal(obs, np.moveaxis(env.unwrapped.game.state(), -1, 0))
        assert env.unwrapped.game.sticky_action_prob == 0.1  # MinAtar's default


def test_a_seeded_minatar_episode_does_not_depend_on_the_one_before(minatar):
    played, fresh = env_factory(minatar())(), env_factory(minatar())()
    played.reset(seed=0)
    for _ in range(30):
        played.step(2)
    actions = [0, 1, 2, 2, 1, 0, 0, 2] * 4
    first = [played.reset(seed=9)[0]] + [played.step(a)[0] for a in actions]
    again = [fresh.reset(seed=9)[0]] + [fresh.step(a)[0] for a in actions]
    assert all(np.array_equal(a, b) for a, b in zip(first, again))


# --- learning-only transforms ---------------------------------------------------------------
def test_learning_signal_clips_and_marks_lost_lives_of_games_that_go_on():
    signal = LearningSignal(3, clip_rewards=True, terminal_on_life_loss=True)
    signal.start({"lives": np.array([3, 3, 3])})
    no = np.zeros(3, dtype=bool)
    rewards, terminated = signal(
        np.array([4.0, -2.0, 0.0]), no, np.array([False, False, True]), {"lives": np.array([2, 3, 5])}
    )  # env 2 ended: its row is the next game's
    assert rewards.tolist() == [1.0, -1.0, 0.0] and terminated.tolist() == [True, False, False]
    _, terminated = signal(np.zeros(3), no, no, {"lives": np.array([2, 2, 5])})
    assert terminated.tolist() == [False, True, False]


def test_learning_keys_default_to_none_and_are_checked():
    cartpole = compose_config("env=cartpole").env
    assert make_env(cartpole, seed=0).learning is None
    with pytest.raises(
        ConfigError,
        match=r"^env.learning.terminal_on_life_loss=true needs an env that reports "
        r"info\['lives'\] \(ALE's games do\); env.id=CartPole-v1 does not$",
    ):
        make_env(compose_config("env=cartpole", "+env.learning.terminal_on_life_loss=true").env, seed=0)
    with pytest.raises(ConfigError, match=r"env.learning.clip is not a key; choose from: clip_rewards, "):
        validate_config(compose_config("env=cartpole", "+env.learning.clip=true"))
    with pytest.raises(ConfigError, match=r"env.learning.clip_rewards='yes' is not allowed"):
        validate_config(compose_config("env=cartpole", "+env.learning.clip_rewards=yes"))


def test_the_buffer_gets_clipped_rewards_and_the_episode_returns_the_raw_score(atari):
    env = make_env(atari("env.id=ALE/SpaceInvaders-v5"), seed=0)
    rollout = Rollout(env)
    rollout.start()
    raw_total, stored = 0.0, []
    for _ in range(250):
        step = rollout.step(env.action_space.sample())
        assert np.array_equal(step.rewards, np.sign(step.raw_rewards))
        raw_total += float(step.raw_rewards.sum())
        stored.append(step.rewards)
    assert raw_total > 25 and set(np.concatenate(stored).tolist()) == {0.0, 1.0}  # aliens are worth 5 to 30
    episodes = rollout.episodes
    assert sum(episodes.finished_returns) + episodes.episode_return.sum() == raw_total  # metrics.csv's returns
    unclipped = make_env(atari("env.id=ALE/SpaceInvaders-v5", "env.learning.clip_rewards=false"), seed=0)
    assert unclipped.learning is None


def test_a_lost_life_is_terminal_for_learning_only(atari):
    env = make_env(atari("env.id=ALE/Breakout-v5", "env.learning.terminal_on_life_loss=true"), seed=0)
    rollout = Rollout(env)
    rollout.start()
    life_losses, steps = 0, 0
    while not rollout.episodes.finished_lengths:
        step = rollout.step(env.action_space.sample())
        steps += 1
        if step.terminated[0] and not step.done[0]:  # the buffer sees an end; the game goes on
            life_losses += 1
            assert np.array_equal(step.next_obs[0, :-1], step.obs[0, 1:])  # no reset: the stack rolls on
    assert life_losses == 4 and step.done[0] and step.terminated[0]  # five lives, one game
    assert rollout.episodes.finished_lengths == [steps]


def test_evaluation_scores_full_games_whatever_the_learning_keys(atari):
    results = []
    for learning in ("true", "false"):
        cfg = atari(
            "env.id=ALE/Breakout-v5",
            f"env.learning.clip_rewards={learning}",
            f"env.learning.terminal_on_life_loss={learning}",
        )
        env = make_env(cfg, seed=0)
        returns, lengths = evaluate(RandomAgent(env.single_action_space.n), env, seed=11)
        results.append((returns.tolist(), lengths.tolist(), env.envs[0].unwrapped.ale.lives()))
    assert results[0] == results[1]
    assert results[0][2] == 5  # the game was over (all lives lost), and the env reset itself


class NoopAgent:
    """Never presses FIRE: Breakout's ball is never launched, and no life is ever lost."""

    def act(self, obs, state=None, *, explore):
        return np.zeros(len(obs), dtype=np.int64), state


def test_atari_evaluates_epsilon_greedy_so_that_a_policy_without_fire_cannot_stall_a_game(atari):
    assert atari().eval_epsilon == 0.05  # Mnih et al. 2015's evaluation
    lengths = {}
    for epsilon in (0.0, 0.05):  # an agent step is 4 frames: a 4,000-frame limit is about 1,000 steps
        cfg = atari(
            "env.id=ALE/Breakout-v5", "env.kwargs.max_num_frames_per_episode=4000", f"env.eval_epsilon={epsilon}"
        )
        env = make_env(cfg, seed=0, num_envs=3)
        first, again = (evaluate(NoopAgent(), env, seed=5, epsilon=cfg.eval_epsilon) for _ in range(2))
        env.close()
        assert all(np.array_equal(a, b) for a, b in zip(first, again))  # the random actions follow the seed
        lengths[epsilon] = first[1]
    assert (lengths[0.0] > 950).all()  # greedy: every game runs into the frame limit
    assert (lengths[0.05] < 800).all()  # epsilon-greedy: the ball is launched, and the five lives are lost


# --- ids that register themselves, and the missing extra --------------------------------------
def test_ale_ids_register_themselves_in_a_fresh_process():
    pytest.importorskip("ale_py")
    code = (
        "import gymnasium as gym; from rl_hydra.envs import make_env; from tests.conftest import compose_config\n"
        "assert 'ALE/Breakout-v5' not in gym.registry\n"
        "env = make_env(compose_config('env=gym', 'env.id=ALE/Breakout-v5').env, seed=0)\n"
        "print(env.single_observation_space.shape)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "(210, 160, 3)"


def test_minatar_ids_register_themselves(minatar, monkeypatch):
    for name in [name for name in gym.registry if name.startswith("MinAtar/")]:
        monkeypatch.delitem(gym.registry, name)
    env = make_env(compose_config("env=gym", "env.id=MinAtar/Seaquest-v1").env, seed=0)
    assert env.single_observation_space.shape == (10, 10, 10)  # env=gym: MinAtar's own layout


@pytest.mark.parametrize(
    "group, env_id, extra, module",
    [
        ("atari", "ALE/Pong-v5", "atari", "ale_py"),
        ("minatar", "MinAtar/Breakout-v1", "minatar", "minatar"),
    ],
)
def test_a_missing_extra_is_one_line_naming_the_pip_command(monkeypatch, group, env_id, extra, module):
    monkeypatch.setitem(choices.ENV_EXTRAS, extra, f"no_such_{module}")
    line = f'env.id={env_id} needs the {extra} extra (no_such_{module} is not installed): pip install -e ".[{extra}]"'
    for overrides in ([f"env={group}"], ["env=gym", f"env.id={env_id}"]):
        with pytest.raises(ConfigError) as error:
            env_factory(compose_config(*overrides).env)
        assert str(error.value) == line


# --- video and resume ---------------------------------------------------------------------
# MinAtar renders float64 RGB in [0, 1] and declares no fps (gymnasium warns); the GIF converts it
@pytest.mark.filterwarnings("ignore:.*(render fps|RGB-array rendering):UserWarning")
@pytest.mark.parametrize(
    "group, env_id, actions, size",
    [("atari", "ALE/Breakout-v5", 4, (160, 210)), ("minatar", "MinAtar/Breakout-v1", 3, (160, 160))],
)
def test_video_of_an_evaluation_episode(request, tmp_path, group, env_id, actions, size):
    cfg = request.getfixturevalue(group)(f"env.id={env_id}")
    run = SimpleNamespace(cfg=OmegaConf.create({"env": cfg}), agent=RandomAgent(actions))
    path = record_gif(run, tmp_path / "episode.gif", max_frames=12)
    from PIL import Image

    with Image.open(path) as gif:
        assert gif.size == size and gif.n_frames > 1 and gif.convert("RGB").getextrema() != ((0, 0),) * 3


def test_a_resume_that_cannot_restore_the_env_starts_fresh_episodes_and_says_so(minatar, caplog):
    cfg = minatar()
    rollout = Rollout(make_env(cfg, seed=0))
    rollout.start()
    rollout.step(np.array([1]))
    state = rollout.state_dict()
    assert state == {"exact": False}
    resumed = Rollout(make_env(cfg, seed=0))
    with caplog.at_level(logging.INFO, logger="rl_hydra.loops.rollout"):
        resumed.load_state_dict(state)
    assert "env.id=MinAtar/Breakout-v1 cannot be captured for an exact resume" in caplog.text
    assert "starts fresh episodes" in caplog.text
    assert resumed.start().shape == (1, 4, 10, 10)
