"""Prioritized replay (buffer=prioritized): the sum tree against brute force, sampling by priority,
importance weights by hand, n-step rows, lazy batches, exact checkpoints, and tiny training runs."""

import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra.buffers import compiled_sum_tree
from rl_hydra.buffers.compiled_sum_tree import CompiledSumTree
from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer
from rl_hydra.buffers.replay import Batch
from rl_hydra.buffers.sum_tree import SumTree
from rl_hydra.build import build_components
from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from rl_hydra.protocols import PrioritizedBuffer
from rl_hydra.runs.run_dir import RunDirectory
from rl_hydra.training import run
from tests.config.test_protocols import check_members
from tests.conftest import TINY, buffer_keys, compose_config, from_the_run
from tests.runs.test_resume import assert_same

needs_numba = pytest.mark.skipif(compiled_sum_tree.numba is None, reason='numba is not installed (".[numba]")')
# the numpy tree, and the compiled one where numba is installed: every tree test runs on both
TREES = [SumTree, pytest.param(CompiledSumTree, marks=needs_numba)]
OBS = gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32)
ACTIONS = gym.spaces.Discrete(3)


def make_buffer(capacity=16, **kwargs) -> PrioritizedReplayBuffer:
    """`kwargs`: what the run hands the buffer (from_the_run) and its own keys, mixed."""
    given = {key: kwargs.pop(key) for key in ("num_envs", "device", "seed", "n_step", "gamma") if key in kwargs}
    return PrioritizedReplayBuffer(
        capacity,
        OBS,
        ACTIONS,
        **from_the_run(**given),
        **buffer_keys("prioritized", **{"beta_steps": 100_000, **kwargs}),
    )


def add_steps(buffer, steps, num_envs=1):
    """One vector step per t in `steps`; env e's row holds obs [t, e] and reward t."""
    for t in steps:
        obs = np.stack([np.full(num_envs, t), np.arange(num_envs)], axis=1).astype(np.float32)
        buffer.add(
            obs,
            np.zeros(num_envs, np.int64),
            np.full(num_envs, float(t), np.float32),
            obs,
            np.zeros(num_envs, bool),
            np.zeros(num_envs, bool),
        )


def set_priorities(buffer, rows, priorities):
    buffer.update_priorities(torch.as_tensor(rows), torch.as_tensor(priorities, dtype=torch.float32))


# --- the sum tree ------------------------------------------------------------------------


@pytest.mark.parametrize("tree_class", TREES)
@pytest.mark.parametrize("capacity, branching, root_width", [(1000, 16, 512), (1000, 4, 8), (37, 3, 5), (5, 2, 100)])
def test_sum_tree_totals_and_prefix_search_match_brute_force(tree_class, capacity, branching, root_width):
    rng = np.random.default_rng(0)
    tree = tree_class(capacity, branching, root_width)
    leaves = rng.exponential(size=capacity) * (rng.random(capacity) < 0.7)  # about 30% zeros
    leaves[-1] = 0.0  # a zero at the very end: the rounding edge
    tree.set_all(leaves)
    assert tree.total == pytest.approx(leaves.sum(), rel=1e-12) and np.array_equal(tree.leaves, leaves)
    prefix = np.sort(rng.random(4000)) * tree.total
    expected = np.searchsorted(np.cumsum(leaves), prefix, side="right")
    found = tree.find_prefix_sums(prefix)
    assert np.array_equal(found, expected)
    assert np.array_equal(tree[found], leaves[found]) and (tree[found] > 0).all()
    # at or past the total (rounding): the last non-zero leaf, never a zero one
    last_positive = np.flatnonzero(leaves)[-1]
    assert tree.find_prefix_sums(np.array([tree.total, tree.total * (1 + 1e-15)])).tolist() == [last_positive] * 2


@pytest.mark.parametrize("tree_class", TREES)
def test_sum_tree_updates_with_repeated_indices_keep_the_last_value_and_exact_sums(tree_class):
    rng = np.random.default_rng(1)
    tree, reference = tree_class(300, branching=4, root_width=8), np.zeros(300)
    for _ in range(200):
        indices = rng.integers(0, 300, size=rng.integers(1, 40))
        indices[-1] = indices[0]  # at least one repeat
        values = rng.exponential(size=len(indices)) * (rng.random(len(indices)) < 0.9)
        tree.update(indices, values)
        for i, v in zip(indices, values):  # one at a time: the last value wins
            reference[i] = v
    assert np.array_equal(tree.leaves, reference)
    rebuilt = SumTree(300, branching=4, root_width=8)
    rebuilt.set_all(reference)  # every sum from the leaves alone: bit for bit what the updates left
    assert all(np.array_equal(a, b) for a, b in zip(tree.values, rebuilt.values))
    assert all(np.array_equal(a, b) for a, b in zip(tree.running, rebuilt.running))
    assert tree.total == rebuilt.total == pytest.approx(reference.sum(), rel=1e-12)
    prefix = rng.random(500) * tree.total
    assert np.array_equal(tree.find_prefix_sums(prefix), np.searchsorted(np.cumsum(reference), prefix, side="right"))


@needs_numba
@pytest.mark.parametrize(
    "capacity, branching, root_width", [(100_000, 32, 128), (300_000, 32, 128), (1000, 4, 8), (37, 3, 5), (5, 2, 100)]
)
def test_compiled_sum_tree_gives_the_numpy_trees_rows_and_sums_bit_for_bit(capacity, branching, root_width):
    rng = np.random.default_rng(2)
    plain, compiled = SumTree(capacity, branching, root_width), CompiledSumTree(capacity, branching, root_width)
    for _ in range(60):
        indices = rng.integers(0, capacity, size=40)
        indices[-1] = indices[0]  # a repeat
        values = rng.exponential(size=40) * (rng.random(40) < 0.8)  # zeros too
        for tree in (plain, compiled):
            tree.update(indices, values)
        assert np.array_equal(plain.flat_values, compiled.flat_values)
        assert np.array_equal(plain.flat_running, compiled.flat_running) and plain.total == compiled.total
        if plain.total > 0:
            prefix = np.append(rng.random(64) * plain.total, plain.total)  # and the rounding edge
            assert np.array_equal(plain.find_prefix_sums(prefix), compiled.find_prefix_sums(prefix))
            u, beta = rng.random(32), rng.choice([0.4, 0.5, 0.77, 1.0])
            (rows, weights), (compiled_rows, compiled_weights) = (
                tree.draw_stratified(u, beta) for tree in (plain, compiled)
            )
            assert np.array_equal(rows, compiled_rows) and compiled_weights.dtype == np.float32
            # numpy's ** and numba's pow may round the last bit apart (numpy takes sqrt for 0.5)
            np.testing.assert_array_max_ulp(weights, compiled_weights, maxulp=1)
    rows = rng.integers(0, capacity, size=50)
    errors = rng.normal(size=50).astype(np.float32)  # what an update hands back
    largest = [tree.update_priorities(rows, errors, 1e-6, 0.6) for tree in (plain, compiled)]
    np.testing.assert_array_max_ulp(plain.leaves, compiled.leaves, maxulp=1)
    assert largest[0] == pytest.approx(largest[1], rel=1e-15) == pytest.approx(((np.abs(errors) + 1e-6) ** 0.6).max())
    with pytest.raises(IndexError):  # as numpy's indexing does, not a write past the array
        compiled.update(np.array([capacity + branching**3]), np.ones(1))


@needs_numba
def test_a_buffer_draws_the_same_batches_with_either_tree():
    # alpha = beta = 1: no pow that could round apart, so the two buffers go on identically
    buffers = [
        make_buffer(capacity=64, alpha=1.0, beta=1.0, n_step=2, num_envs=2, sum_tree=tree)
        for tree in ("numpy", "numba")
    ]
    assert [type(b.tree) for b in buffers] == [SumTree, CompiledSumTree]
    for t in range(60):  # wraps the ring
        batches = []
        for buffer in buffers:
            add_steps(buffer, [t], num_envs=2)
        if t == 0:  # no row has its 2-step future yet
            continue
        for buffer in buffers:
            batches.append(buffer.sample(16))
            buffer.update_priorities(batches[-1].indices, batches[-1].rewards - 30.0)
        for name, x, y in zip(Batch._fields, *batches):
            assert torch.equal(x, y), (t, name)
    assert np.array_equal(buffers[0].tree.leaves, buffers[1].tree.leaves)


def test_sum_tree_choice_errors_name_the_key_and_the_install(monkeypatch):
    with pytest.raises(ConfigError, match=r"buffer.sum_tree='fast' is not allowed; choose one of: auto, numba, numpy"):
        validate_run_config(compose_config("algo=rainbow", "buffer.sum_tree=fast"))  # the schema's choices
    monkeypatch.setattr(compiled_sum_tree, "numba", None)
    with pytest.raises(ConfigError, match=r'buffer.sum_tree=numba needs numba: pip install -e "\.\[numba\]"'):
        make_buffer(sum_tree="numba")
    assert type(make_buffer(sum_tree="auto").tree) is SumTree  # without numba, auto falls back to numpy


# --- sampling and weights --------------------------------------------------------------------


def test_draws_follow_the_priorities_chi_square():
    stats = pytest.importorskip("scipy.stats", reason="needs scipy (the dev extra brings it)")
    buffer = make_buffer(capacity=20, alpha=0.6, seed=3)
    add_steps(buffer, range(20))
    errors = np.linspace(0.0, 4.0, 20)  # |TD error| per row
    set_priorities(buffer, np.arange(20), errors)
    counts = np.zeros(20)
    for _ in range(1000):
        np.add.at(counts, buffer.sample(32).indices.numpy(), 1)
    p = (errors + buffer.epsilon) ** 0.6
    expected = p / p.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > 0.01
    # the same draws read as uniform (alpha ignored) are far off: the test can tell
    assert stats.chisquare(counts, np.full(20, counts.sum() / 20)).pvalue < 1e-6


def test_importance_weights_by_hand_and_beta_annealing():
    buffer = make_buffer(capacity=8, alpha=0.5, beta=0.4, beta_final=1.0, beta_steps=4, epsilon=0.0001)
    add_steps(buffer, range(4))
    set_priorities(buffer, [0, 1, 2, 3], [0.0, 1.0, 3.0, 8.0])
    p = (np.array([0.0, 1.0, 3.0, 8.0]) + 0.0001) ** 0.5
    for beta in [0.4, 0.55, 0.7, 0.85, 1.0, 1.0]:
        assert buffer.current_beta == pytest.approx(beta)
        batch = buffer.sample(6)
        rows = batch.indices.numpy()
        w = (4 * p[rows] / p.sum()) ** -beta  # (N P(i))^-beta, N = 4 rows drawable
        np.testing.assert_allclose(batch.weights.numpy(), w / w.max(), rtol=1e-6)
        assert batch.weights.dtype == torch.float32 and batch.weights.max() == 1.0
    assert buffer.sample_calls == 6


def test_new_rows_get_the_largest_priority_so_far_and_overwritten_rows_lose_theirs():
    buffer = make_buffer(capacity=4, alpha=1.0, epsilon=1e-3)
    add_steps(buffer, [0, 1])
    assert buffer.tree.leaves.tolist() == [1.0, 1.0, 0.0, 0.0]  # 1 at first
    set_priorities(buffer, [0, 1], [0.0, 5.0])  # row 0 almost never drawn now
    assert buffer.max_priority == pytest.approx(5.001)
    add_steps(buffer, [2, 3, 4])  # row 0 is overwritten by step 4
    np.testing.assert_allclose(buffer.tree.leaves, [5.001, 5.001, 5.001, 5.001])
    set_priorities(buffer, [3], [1.0])  # a smaller priority does not lower the max
    assert buffer.max_priority == pytest.approx(5.001)


def test_n_step_rows_wait_for_their_future_and_overwritten_rows_drop_out():
    n_step, num_envs = 3, 2
    buffer = make_buffer(capacity=12, n_step=n_step, num_envs=num_envs, gamma=0.5)
    for t in range(15):  # wraps the ring of 6 vector steps twice
        add_steps(buffer, [t], num_envs)
        stored = buffer.storage["obs"][: buffer.size, 0].numpy()  # the step of each stored row
        # rows of step s are drawable once step s + n - 1 is stored
        drawable = {row for row, s in enumerate(stored) if s + n_step - 1 <= t}
        assert {int(r) for r in np.flatnonzero(buffer.tree.leaves)} == drawable, t
        assert len(drawable) == len(buffer)
        ready = [row for row, s in enumerate(stored) if s == t - n_step + 1]  # drawable since this step
        assert buffer.tree[np.array(ready, dtype=np.int64)].tolist() == [buffer.max_priority] * len(ready)
        if drawable:
            set_priorities(buffer, sorted(drawable), np.arange(len(drawable)))  # not all alike
            batch = buffer.sample(64)
            assert set(batch.indices.tolist()) <= drawable
            # every reward summed is the same env's next steps: t, t + 1, t + 2 with gamma 0.5
            first = batch.obs[:, 0].numpy()
            np.testing.assert_allclose(batch.rewards.numpy(), first + 0.5 * (first + 1) + 0.25 * (first + 2))


def test_update_priorities_steers_the_next_draws_and_sample_batches_draws_lazily():
    buffer = make_buffer(capacity=10, alpha=1.0, seed=1)
    add_steps(buffer, range(10))
    batches = buffer.sample_batches(32, 3)
    first = next(batches)
    assert len(set(first.indices.tolist())) > 3  # all rows alike: spread out
    # the loop updates the first batch's priorities before it asks for the next one
    set_priorities(buffer, np.arange(10), np.where(np.arange(10) == 7, 1e4, 0.0))
    second, third = next(batches), next(batches)
    assert (second.indices == 7).sum() >= 30 and (third.indices == 7).sum() >= 30
    assert buffer.sample_calls == 3


def test_a_restored_buffer_draws_the_same_batches_bit_for_bit():
    def step(buffer):
        batch = buffer.sample(8)
        buffer.update_priorities(batch.indices, batch.rewards * 0.1 + batch.indices.float())
        return batch

    original = make_buffer(capacity=24, n_step=2, num_envs=2, beta_steps=10, seed=7)
    add_steps(original, range(9), num_envs=2)
    for _ in range(5):
        step(original)
    saved = io.BytesIO()
    torch.save(original.state_dict(), saved)  # as a checkpoint holds it: tensors and plain data
    saved.seek(0)
    restored = make_buffer(capacity=24, n_step=2, num_envs=2, beta_steps=10, seed=99)
    restored.load_state_dict(torch.load(saved, weights_only=True))
    assert np.array_equal(restored.tree.leaves, original.tree.leaves)
    for t in range(9, 20):  # go on alike: adds that wrap, draws, priority updates, beta still growing
        for buffer in (original, restored):
            add_steps(buffer, [t], num_envs=2)
        a, b = step(original), step(restored)
        for name, x, y in zip(a._fields, a, b):
            assert torch.equal(x, y), (t, name)
    assert original.sample_calls == restored.sample_calls == 16
    assert_same(original.state_dict(), restored.state_dict())


# --- training runs ---------------------------------------------------------------------------

FAST = [
    *TINY,
    "buffer=prioritized",
    "algo.learning_starts=60",
    "algo.train_every=20",
    "algo.gradient_steps=2",
    "train.total_steps=300",
    "train.eval_every=150",
    "train.checkpoint_every=100",
]


def test_buffer_prioritized_builds_a_buffer_that_fulfils_its_protocol():
    cfg = compose_config(*TINY, "algo=dqn", "buffer=prioritized", "buffer.alpha=0.5", "algo.n_step=3")
    agent, env, buffer = build_components(cfg, torch.device("cpu"))
    env.close()
    assert isinstance(buffer, PrioritizedReplayBuffer) and isinstance(buffer, PrioritizedBuffer)
    check_members(buffer, PrioritizedBuffer)
    assert (buffer.capacity, buffer.alpha, buffer.beta, buffer.n_step) == (100_000, 0.5, 0.4, 3)


@pytest.mark.parametrize("algo", ["qr_dqn", "iqn"])
def test_a_tiny_run_trains_from_the_prioritized_buffer(tmp_path, algo):
    summary = run(compose_config(*FAST, f"algo={algo}", "algo.n_step=3", "buffer.beta_steps=20"), tmp_path)
    assert summary["status"] == "completed" and summary["updates"] >= 2 * (300 - 60) // 20
    buffer = RunDirectory(tmp_path).load_checkpoint("last")["buffer"]
    leaves = buffer["priorities"].numpy()
    assert buffer["sample_calls"] == summary["updates"] and buffer["max_priority"] > 0
    assert len(np.unique(leaves[leaves > 0])) > 20  # the updates' own priorities, not only the initial ones
