"""The frame-sharing replay and sequence buffers against naive buffers of whole stacks: the same
samples, byte for byte, across episode ends and with several envs; memory per transition; checkpoints."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import FrameStackObservation

from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from rl_hydra.envs.make import final_observations
from rl_hydra.errors import ConfigError
from tests.conftest import buffer_keys, from_the_run

ACTIONS = gym.spaces.Discrete(3)


class RandomFrames(gym.Env):
    """Random 6x7 frames; episodes end by termination (p = 0.05) or a 30-step time limit."""

    observation_space = gym.spaces.Box(0, 255, (6, 7), dtype=np.uint8)
    action_space = ACTIONS

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, (6, 7), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = self.np_random.integers(0, 256, (6, 7), dtype=np.uint8)
        return frame, float(self.t), bool(self.np_random.random() < 0.05), self.t >= 30, {}


def frame_stacks(num_envs: int) -> SyncVectorEnv:
    return SyncVectorEnv(
        [lambda: FrameStackObservation(RandomFrames(), 4)] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
    )


def fill(buffers, steps: int, num_envs: int = 2, seed: int = 0):
    env = frame_stacks(num_envs)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    ends = 0
    for _ in range(steps):
        actions = rng.integers(3, size=num_envs)
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        real_next = final_observations(next_obs, terminated | truncated, info)
        for buffer in buffers:
            buffer.add(obs, actions, rewards, real_next, terminated, truncated)
        ends += int(np.count_nonzero(terminated | truncated))
        obs = next_obs
    env.close()
    return ends


def pair(capacity: int, num_envs: int = 2, n_step: int = 1, cls=ReplayBuffer, **kwargs):
    space = gym.spaces.Box(0, 255, (4, 6, 7), dtype=np.uint8)
    return [
        cls(
            capacity,
            space,
            ACTIONS,
            **from_the_run(num_envs=num_envs, n_step=n_step, gamma=0.9),
            share_frames=share,
            **kwargs,
        )
        for share in (True, False)
    ]


def assert_same_batches(shared, naive, draws: int = 400):
    batch = shared.sample(draws)
    want = naive.batch_at(batch.indices)
    for field in batch._fields:
        got, expected = getattr(batch, field), getattr(want, field)
        assert got.dtype == expected.dtype and torch.equal(got, expected), field
    return batch


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("n_step", [1, 3])
def test_rebuilt_stacks_equal_the_stored_stacks_across_episode_ends(num_envs, n_step):
    shared, naive = pair(10_000, num_envs, n_step)
    assert shared.frames is not None and naive.frames is None
    ends = fill([shared, naive], 200, num_envs)
    assert ends >= 10 * num_envs  # many episode ends inside the samples
    batch = assert_same_batches(shared, naive)
    assert batch.obs.shape == (400, 4, 6, 7) and batch.obs.dtype == torch.uint8
    assert bool((batch.terminated + batch.truncated).sum() > 0)


def test_after_the_ring_wraps_only_rows_with_their_whole_stack_are_drawn():
    shared, naive = pair(60, num_envs=2, n_step=2)
    fill([shared, naive], 500, num_envs=2)
    assert len(shared) == 60 - 2 * (2 + 3)  # minus lookahead (n-step future + next row) and the stack's history
    assert_same_batches(shared, naive, draws=2000)


def test_prioritized_replay_shares_frames_too():
    keys = buffer_keys("prioritized", beta_steps=100)
    keys.pop("share_frames")  # pair sets it
    shared, naive = pair(80, num_envs=2, n_step=3, cls=PrioritizedReplayBuffer, **keys)
    fill([shared, naive], 400, num_envs=2)
    batch = assert_same_batches(shared, naive, draws=256)
    drawable = set(((shared.oldest + shared.behind * 2 + np.arange(len(shared))) % shared.capacity).tolist())
    assert set(batch.indices.tolist()) <= drawable  # zero priority for rows without future or history


def test_a_checkpoint_round_trip_continues_with_the_same_samples(tmp_path):
    shared, _ = pair(200)
    fill([shared], 150)
    path = tmp_path / "buffer.pt"
    torch.save(shared.state_dict(), path)
    restored, _ = pair(200)
    restored.load_state_dict(torch.load(path, weights_only=True, mmap=True))
    for buffer in (shared, restored):
        fill([buffer], 30, seed=1)
    a, b = shared.sample(300), restored.sample(300)
    for field in a._fields:
        assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_a_checkpoint_holds_only_the_stored_rows_and_no_copy_of_them():
    shared, _ = pair(1000)
    fill([shared], 50)
    state = shared.state_dict()
    frames = state["frames"]["frames"]
    assert frames.shape == (100, 6, 7) and frames.untyped_storage().nbytes() == 100 * 6 * 7
    assert frames.data_ptr() == shared.frames.frames.data_ptr()  # a view of the buffer's memory


def test_one_atari_transition_costs_about_one_frame():
    frame = 84 * 84
    atari = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    shared = ReplayBuffer(1000, atari, ACTIONS, **from_the_run(), share_frames="auto")
    naive = ReplayBuffer(1000, atari, ACTIONS, **from_the_run(), share_frames=False)
    assert shared.bytes_per_row <= 1.1 * frame  # 7,093 bytes: frame, flag, two slots, action, reward, ends
    assert naive.bytes_per_row >= 8 * frame  # both stacks whole


def test_a_buffer_the_machine_cannot_hold_is_refused_before_allocating(monkeypatch):
    import rl_hydra.buffers.replay as replay

    monkeypatch.setattr(replay, "available_memory", lambda: 10_000_000)

    class AllocatedTooSoon(replay.SharedFrames):  # on a GPU the frames would take their memory at once
        def __init__(self, *args, **kwargs):
            raise AssertionError("the frames were allocated before the memory check")

    monkeypatch.setattr(replay, "SharedFrames", AllocatedTooSoon)
    atari = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    with pytest.raises(ConfigError, match=r"buffer.capacity=1000000 needs 7.1 GB .* lower buffer.capacity"):
        ReplayBuffer(1_000_000, atari, ACTIONS, **from_the_run(), share_frames="auto")


# DRQN's sequence buffer: each env's frames once, in a ring of its own; chunks name their first frame


def sequence_pair(capacity: int, num_envs: int, length: int = 5, stride: int = 3):
    space = gym.spaces.Box(0, 255, (4, 6, 7), dtype=np.uint8)
    return [
        SequenceBuffer(
            capacity,
            length,
            stride,
            space,
            ACTIONS,
            **from_the_run(num_envs=num_envs, seed=0, returns=False),
            share_frames=share,
        )
        for share in (True, False)
    ]


def fill_sequences(buffers, steps: int, num_envs: int, seed: int = 0) -> np.ndarray:
    """Steps of `num_envs` frame-stacking envs into `buffers`; returns the episodes begun per env."""
    env = frame_stacks(num_envs)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    episodes = np.ones(num_envs, dtype=np.int64)
    for step in range(steps):
        actions = rng.integers(3, size=num_envs)
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        real_next = final_observations(next_obs, terminated | truncated, info)
        state = (torch.full((num_envs, 2), float(step)),)
        for buffer in buffers:
            buffer.add(obs, actions, rewards, real_next, terminated, truncated, state)
        episodes += terminated | truncated
        obs = next_obs
    env.close()
    return episodes


def assert_same_sequences(shared, naive, draws: int = 300):
    idx = shared.sample_indices(draws)
    a, b = shared.batch_at(idx), naive.batch_at(idx)
    assert a.obs.shape == b.obs.shape and a.obs.dtype == b.obs.dtype == torch.uint8
    real = torch.cat([torch.ones_like(a.mask[:1]), a.mask]).bool()  # (L + 1, B): obs of real steps and their next
    assert torch.equal(a.obs[real], b.obs[real])  # the padding after an episode's end differs
    assert torch.equal(a.mask, b.mask)
    for field in ("actions", "rewards", "terminated", "episode_start"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert all(torch.equal(x, y) for x, y in zip(a.state, b.state))
    return idx, a


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("stride", [1, 3, 5])
def test_sequences_rebuild_the_stored_stacks_across_episode_ends(num_envs, stride):
    shared, naive = sequence_pair(1000, num_envs, stride=stride)
    assert shared.frames is not None and naive.frames is None
    fill_sequences([shared, naive], 300, num_envs)
    if shared.frames.drawable(shared.chunk_env[: shared.size], shared.chunk_first[: shared.size]).all():
        assert torch.equal(shared.sample_indices(50), naive.sample_indices(50))  # the same draws as naive's
    _, batch = assert_same_sequences(shared, naive)
    assert bool((batch.mask == 0).any())  # chunks that end early among them


def test_each_frame_is_stored_once_whatever_the_overlap():
    shared, _ = sequence_pair(1000, num_envs=2, length=16, stride=1)  # each step in 16 chunks
    episodes = fill_sequences([shared], 200, num_envs=2)
    # an episode writes its first stack (4 frames), then one frame per step
    assert shared.frames.written.tolist() == (200 + 4 * episodes).tolist()


def test_chunks_whose_frames_were_overwritten_are_not_drawn():
    shared, naive = sequence_pair(6, num_envs=2, length=5, stride=5)  # rings of 3 x 5 + 5 + 4 = 24 frames
    fill_sequences([shared, naive], 400, num_envs=2)
    drawable = shared.frames.drawable(shared.chunk_env, shared.chunk_first)
    assert 0 < drawable.sum() < 6  # short episodes: chunks come faster
    idx, _ = assert_same_sequences(shared, naive, draws=500)
    assert set(idx.tolist()) == set(np.flatnonzero(drawable).tolist())


def test_an_atari_step_costs_about_one_frame_in_a_sequence_buffer(caplog):
    atari = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    with caplog.at_level("INFO"):
        SequenceBuffer(
            1000, 16, 8, atari, ACTIONS, **from_the_run(returns=False), share_frames="auto"
        )  # chunks overlapping by half, as by default
    assert "7.1 KB per step at buffer.stride=8" in caplog.text  # 84 x 84 = 7,056 bytes: one frame


def test_sequence_checkpoints_are_views_and_resume_exactly(tmp_path):
    shared, _ = sequence_pair(50, num_envs=2)
    fill_sequences([shared], 100, num_envs=2)
    state = shared.state_dict()
    frames = state["frames"]["frames"][1]
    assert frames.data_ptr() == shared.frames.frames[1].ctypes.data  # a view, not a copy
    assert frames.untyped_storage().nbytes() == min(shared.frames.written[1], shared.frames.frames_per_env) * 42
    torch.save(state, tmp_path / "buffer.pt")
    restored, _ = sequence_pair(50, num_envs=2)
    restored.load_state_dict(torch.load(tmp_path / "buffer.pt", weights_only=True, mmap=True))
    for buffer in (shared, restored):
        buffer.start_episodes()  # as the recurrent loop does when the envs start fresh episodes
        fill_sequences([buffer], 40, num_envs=2, seed=1)
    a, b = shared.sample(64), restored.sample(64)
    for field in ("obs", "actions", "rewards", "terminated", "mask", "episode_start"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    _, naive = sequence_pair(50, num_envs=2)
    with pytest.raises(ValueError, match="buffer.share_frames"):
        naive.load_state_dict(torch.load(tmp_path / "buffer.pt", weights_only=True))


def test_observations_that_are_not_frame_stacks_are_refused():
    vector = gym.spaces.Box(-1, 1, (4,), dtype=np.float32)
    with pytest.raises(ConfigError, match=r"buffer.share_frames=true needs observations that stack uint8 frames"):
        SequenceBuffer(10, 4, 2, vector, ACTIONS, **from_the_run(returns=False), share_frames=True)
    shared, _ = sequence_pair(10, num_envs=1, length=2, stride=2)
    obs = np.random.default_rng(0).integers(0, 256, (1, 4, 6, 7), dtype=np.uint8)
    state = (torch.zeros(1, 2),)
    with pytest.raises(ValueError, match="not stacks of frames; set buffer.share_frames=false"):
        shared.add(obs, np.zeros(1, np.int64), np.zeros(1), obs, np.zeros(1, bool), np.zeros(1, bool), state)


def test_a_sequence_buffer_the_machine_cannot_hold_is_refused_before_allocating(monkeypatch, caplog):
    import rl_hydra.buffers.replay as replay

    monkeypatch.setattr(replay, "available_memory", lambda: 10_000_000)
    atari = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    with pytest.raises(ConfigError, match=r"buffer.capacity=100000 needs 11.3 GB \(113.\d KB per chunk\)"):
        SequenceBuffer(100_000, 16, 16, atari, ACTIONS, **from_the_run(returns=False), share_frames="auto")
