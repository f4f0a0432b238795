"""The frame-sharing replay buffer against a naive buffer of whole stacks: the same samples, byte
for byte, across episode ends and with several envs; its memory per transition; checkpoints."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.wrappers import FrameStackObservation

from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.config import ConfigError
from rl_hydra.envs.make import SameStepVectorEnv, final_observations

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


def fill(buffers, steps: int, num_envs: int = 2, seed: int = 0):
    env = SameStepVectorEnv([lambda: FrameStackObservation(RandomFrames(), 4)] * num_envs)
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
    return [cls(capacity, space, ACTIONS, num_envs=num_envs, seed=0, n_step=n_step, gamma=0.9,
                share_frames=share, **kwargs) for share in (True, False)]


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
    assert ends >= 10 * num_envs   # many episode ends inside the samples
    batch = assert_same_batches(shared, naive)
    assert batch.obs.shape == (400, 4, 6, 7) and batch.obs.dtype == torch.uint8
    assert bool((batch.terminated + batch.truncated).sum() > 0)


def test_after_the_ring_wraps_only_rows_with_their_whole_stack_are_drawn():
    shared, naive = pair(60, num_envs=2, n_step=2)
    fill([shared, naive], 500, num_envs=2)
    assert len(shared) == 60 - 2 * (2 + 3)   # minus lookahead (n-step future + next row) and the stack's history
    assert_same_batches(shared, naive, draws=2000)


def test_prioritized_replay_shares_frames_too():
    shared, naive = pair(80, num_envs=2, n_step=3, cls=PrioritizedReplayBuffer)
    fill([shared, naive], 400, num_envs=2)
    batch = assert_same_batches(shared, naive, draws=256)
    drawable = set(((shared.oldest + shared.behind * 2 + np.arange(len(shared))) % shared.capacity).tolist())
    assert set(batch.indices.tolist()) <= drawable   # zero priority for rows without future or history


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
    assert frames.data_ptr() == shared.frames.frames.ctypes.data   # a view of the buffer's memory


def test_one_atari_transition_costs_about_one_frame():
    frame = 84 * 84
    atari = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    shared = ReplayBuffer(1000, atari, ACTIONS)
    naive = ReplayBuffer(1000, atari, ACTIONS, share_frames=False)
    assert shared.bytes_per_row <= 1.1 * frame                    # 7,077 bytes: frame, flag, action, reward, ends
    assert naive.bytes_per_row >= 8 * frame                        # both stacks whole


def test_a_buffer_the_machine_cannot_hold_is_refused_before_allocating(monkeypatch):
    import rl_hydra.buffers.replay as replay

    monkeypatch.setattr(replay, "available_memory", lambda: 10_000_000)
    atari = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
    with pytest.raises(ConfigError, match=r"buffer.capacity=1000000 needs 7.1 GB .* lower buffer.capacity"):
        ReplayBuffer(1_000_000, atari, ACTIONS)
