import gymnasium as gym
import numpy as np
import torch

from rl_hydra.buffers.replay import ReplayBuffer, n_step_returns
from tests.conftest import from_the_run, run_training

OBS = gym.spaces.Box(-10, 10, (2,), dtype=np.float32)
ACTIONS = gym.spaces.Discrete(3)


def add_rows(buffer, values):
    """One vector step per value; obs rows hold [value, -value]."""
    for v in values:
        obs = np.array([[v, -v]], dtype=np.float32)
        buffer.add(
            obs, np.array([int(v) % 3]), np.array([float(v)]), obs + 0.5, np.array([v % 2 == 0]), np.array([v % 3 == 0])
        )


def test_add_keeps_fields_and_terminated_truncated_apart():
    buffer = ReplayBuffer(10, OBS, ACTIONS, **from_the_run(), share_frames="auto")
    add_rows(buffer, [1, 2, 3])
    assert len(buffer) == 3
    s = buffer.storage
    torch.testing.assert_close(s["obs"][:3, 0], torch.tensor([1.0, 2.0, 3.0]))
    torch.testing.assert_close(s["next_obs"][:3, 1], torch.tensor([-0.5, -1.5, -2.5]))
    assert s["actions"][:3].tolist() == [1, 2, 0]
    assert s["terminated"][:3].tolist() == [0.0, 1.0, 0.0]
    assert s["truncated"][:3].tolist() == [0.0, 0.0, 1.0]


def test_wrap_around_overwrites_oldest_rows():
    buffer = ReplayBuffer(4, OBS, ACTIONS, **from_the_run(), share_frames="auto")
    add_rows(buffer, [1, 2, 3, 4, 5, 6])
    assert len(buffer) == 4 and buffer.pos == 2
    assert sorted(buffer.storage["rewards"].tolist()) == [3.0, 4.0, 5.0, 6.0]
    # a vector step of 3 envs that crosses the end of the ring
    vector = ReplayBuffer(4, OBS, ACTIONS, **from_the_run(num_envs=3), share_frames="auto")
    for start in (0, 3):
        obs = np.arange(start, start + 3, dtype=np.float32)[:, None].repeat(2, 1)
        vector.add(obs, np.zeros(3, dtype=np.int64), obs[:, 0], obs, np.zeros(3, bool), np.zeros(3, bool))
    assert vector.storage["rewards"].tolist() == [4.0, 5.0, 2.0, 3.0] and vector.pos == 2


def test_sample_shapes_and_only_filled_rows():
    buffer = ReplayBuffer(100, OBS, ACTIONS, **from_the_run(seed=3), share_frames="auto")
    add_rows(buffer, [1, 2, 3])
    batch = buffer.sample(256)
    assert batch.obs.shape == (256, 2) and batch.actions.shape == (256,)
    assert batch.actions.dtype == torch.int64 and batch.rewards.shape == (256,)
    assert set(batch.rewards.tolist()) == {1.0, 2.0, 3.0}  # never an empty row


def test_sample_batches_draws_what_repeated_sample_calls_draw():
    one_at_a_time, gathered = (
        ReplayBuffer(100, OBS, ACTIONS, **from_the_run(seed=5), share_frames="auto"),
        ReplayBuffer(100, OBS, ACTIONS, **from_the_run(seed=5), share_frames="auto"),
    )
    for buffer in (one_at_a_time, gathered):
        add_rows(buffer, range(40))
    gathered.max_gather_rows = 32  # 4 batches of 8 per gather: 10 batches take 3 gathers
    expected = [one_at_a_time.sample(8) for _ in range(10)]
    batches = list(gathered.sample_batches(8, 10))
    assert len(batches) == 10
    for got, want in zip(batches, expected):
        for field in want._fields:
            assert torch.equal(getattr(got, field), getattr(want, field)), field
            assert getattr(got, field).shape[0] == 8
    assert torch.equal(one_at_a_time.sample(3).obs, gathered.sample(3).obs)  # the streams stay in step


def test_box_actions_are_stored_as_float_vectors():
    buffer = ReplayBuffer(5, OBS, gym.spaces.Box(-1, 1, (2,)), **from_the_run(), share_frames="auto")
    buffer.add(
        np.zeros((1, 2)), np.array([[0.25, -0.5]]), np.ones(1), np.zeros((1, 2)), np.zeros(1, bool), np.zeros(1, bool)
    )
    torch.testing.assert_close(buffer.sample(1).actions, torch.tensor([[0.25, -0.5]]))


def test_state_dict_round_trip_continues_identically():
    buffer = ReplayBuffer(8, OBS, ACTIONS, **from_the_run(seed=1), share_frames="auto")
    add_rows(buffer, range(11))
    buffer.sample(4)
    restored = ReplayBuffer(8, OBS, ACTIONS, **from_the_run(seed=99), share_frames="auto")
    restored.load_state_dict(buffer.state_dict())
    assert (restored.pos, restored.size) == (buffer.pos, buffer.size)
    for key in buffer.storage:
        assert torch.equal(restored.storage[key], buffer.storage[key])
    # same sampling stream, and the same rows after more adds
    assert torch.equal(restored.sample(5).obs, buffer.sample(5).obs)
    add_rows(buffer, [20])
    add_rows(restored, [20])
    assert torch.equal(restored.storage["obs"], buffer.storage["obs"])


def test_truncated_transitions_bootstrap_from_the_real_final_observation(tmp_path, monkeypatch):
    """CartPole cut by a 5-step time limit: next_obs of the cut step must follow the
    dynamics from obs (x' = x + 0.02 * x_dot), not be the next episode's reset state."""
    import rl_hydra.loops.off_policy as off_policy

    captured = {}
    original = off_policy.loop

    def spy(runner):
        yield from original(runner)
        captured["buffer"] = runner.local.buffer

    monkeypatch.setattr(off_policy, "loop", spy)
    run_training(
        tmp_path,
        "env.max_episode_steps=5",
        "algo.learning_starts=100000",
        "train.total_steps=60",
        "train.eval_every=60",
        "train.eval_episodes=1",
        "train.progress=false",
        "checkpoint.save_buffer=false",
    )
    s = captured["buffer"].storage
    n = len(captured["buffer"])
    truncated = s["truncated"][:n].bool()
    assert truncated.sum() >= 5, "the time limit should have cut several episodes"
    obs, next_obs = s["obs"][:n][truncated], s["next_obs"][:n][truncated]
    torch.testing.assert_close(next_obs[:, 0], obs[:, 0] + 0.02 * obs[:, 1], rtol=0, atol=1e-5)
    # and the row after a cut starts a new episode from the reset state, not from next_obs
    cut_rows = truncated.nonzero().squeeze(1)
    cut_rows = cut_rows[cut_rows + 1 < n]
    assert not torch.allclose(s["obs"][cut_rows + 1], s["next_obs"][cut_rows])


# --- n-step returns -------------------------------------------------------------------


def test_n_step_returns_by_hand():
    rewards = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    ended = torch.tensor(
        [
            [False, False, False],  # all three summed
            [False, True, False],  # the episode ends at the 2nd step
            [True, True, False],  # ... at the 1st
            [False, False, True],
        ]
    )  # at the 3rd: all three summed still
    returns, k = n_step_returns(rewards, ended, gamma=0.5)
    torch.testing.assert_close(returns, torch.tensor([1 + 1 + 1.0, 1 + 1.0, 1.0, 3.0]))
    assert k.tolist() == [3, 2, 1, 3]


def fill_two_envs(buffer, steps=13):
    """Two envs with their own episodes: env 0 terminates every 4th step, env 1 is truncated
    every 5th step. Returns each env's transitions as stored, in order."""
    streams = {0: [], 1: []}
    for t in range(steps):
        obs = np.array([[t, 0.0], [t, 1.0]], dtype=np.float32)
        rewards = np.array([t + 1.0, 10.0 * (t + 1)], dtype=np.float32)
        terminated, truncated = np.array([t % 4 == 3, False]), np.array([False, t % 5 == 4])
        buffer.add(obs, np.array([t % 3, (t + 1) % 3]), rewards, obs + 0.5, terminated, truncated)
        for env in (0, 1):
            streams[env].append((obs[env], rewards[env], obs[env] + 0.5, terminated[env], truncated[env]))
    return streams


def brute_force_n_step(stream, t, n, gamma):
    """(return, bootstrap obs, terminated, truncated, discount) of the n-step transition from step t."""
    total = 0.0
    for k in range(n):
        _, reward, next_obs, terminated, truncated = stream[t + k]
        total += gamma**k * reward
        if terminated or truncated:
            break
    return total, next_obs, float(terminated), float(truncated), gamma ** (k + 1)


def test_n_step_batches_match_a_brute_force_reading_of_each_envs_stream():
    n, gamma, steps = 3, 0.9, 13
    buffer = ReplayBuffer(
        100, OBS, ACTIONS, **from_the_run(num_envs=2, seed=0, n_step=n, gamma=gamma), share_frames="auto"
    )
    streams = fill_two_envs(buffer, steps)
    assert len(buffer) == 2 * (steps - (n - 1))  # the last n - 1 steps wait for their future
    batch = buffer.sample(500)
    drawn_steps = set()
    for i in range(500):
        row = int(batch.indices[i])
        t, env = divmod(row, 2)
        drawn_steps.add(t)
        want = brute_force_n_step(streams[env], t, n, gamma)
        torch.testing.assert_close(batch.obs[i], torch.from_numpy(streams[env][t][0]))
        torch.testing.assert_close(batch.rewards[i], torch.tensor(want[0], dtype=torch.float32))
        torch.testing.assert_close(batch.next_obs[i], torch.from_numpy(want[1]))
        assert (float(batch.terminated[i]), float(batch.truncated[i])) == want[2:4]
        torch.testing.assert_close(batch.discounts[i], torch.tensor(want[4], dtype=torch.float32))
    assert drawn_steps == set(range(steps - (n - 1)))
    assert torch.equal(batch.weights, torch.ones(500))


def test_n_step_batches_after_the_ring_wraps_skip_rows_without_their_future():
    n, gamma = 3, 0.5
    buffer = ReplayBuffer(
        9, OBS, ACTIONS, **from_the_run(num_envs=2, seed=1, n_step=n, gamma=gamma), share_frames="auto"
    )
    assert buffer.capacity == 10  # rounded up to whole vector steps
    streams = fill_two_envs(buffer, steps=13)  # steps 8..12 are kept
    assert len(buffer) == 10 - 2 * (n - 1)
    batch = buffer.sample(300)
    for i in range(300):
        row = int(batch.indices[i])
        env, slot = row % 2, row // 2
        t = next(t for t in range(8, 13) if t % 5 == slot)  # vector step t sits in slot t % 5
        assert t <= 12 - (n - 1)
        want = brute_force_n_step(streams[env], t, n, gamma)
        torch.testing.assert_close(batch.rewards[i], torch.tensor(want[0], dtype=torch.float32))
        torch.testing.assert_close(batch.next_obs[i], torch.from_numpy(want[1]))


def test_one_step_batches_discount_by_gamma():
    buffer = ReplayBuffer(10, OBS, ACTIONS, **from_the_run(gamma=0.97), share_frames="auto")
    add_rows(buffer, [1, 2, 3])
    batch = buffer.sample(4)
    assert torch.equal(batch.discounts, torch.full((4,), 0.97)) and torch.equal(batch.weights, torch.ones(4))
    assert torch.equal(batch.rewards, buffer.storage["rewards"][batch.indices])
