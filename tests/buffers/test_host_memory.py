"""rl_hydra.host_memory: replay storage, network weights and Adam moments in memory advised for
huge pages, with the same values, the same objects and checkpoints of the same size."""

from __future__ import annotations

import io
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra import speed
from rl_hydra.buffers.device import DeviceFeed
from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from rl_hydra.build import build_agent
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.recurrent import RecurrentQNetwork
from rl_hydra.speed import host_memory
from rl_hydra.speed.numpy_mirror import numpy_forward
from tests.buffers.test_frames import fill as fill_frames
from tests.buffers.test_frames import fill_sequences
from tests.conftest import buffer_keys, compose_config, from_the_run, network_keys

CPU = torch.device("cpu")
OBS, ACTIONS = gym.spaces.Box(-10, 10, (4,), dtype=np.float32), gym.spaces.Discrete(2)
linux_huge_pages = pytest.mark.skipif(
    not (host_memory.can_use_huge_pages(CPU) and Path("/proc/self/smaps").is_file()),
    reason="transparent huge pages are a Linux feature",
)


def mapping_of(address: int) -> dict:
    """The /proc/self/smaps entry (start, end, VmFlags) of the mapping that holds `address`."""
    entry: dict = {}
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split()[0]
        if "-" in first and ":" not in first:  # a mapping's header line: start-end perms ...
            start, end = (int(part, 16) for part in first.split("-"))
            entry = {"start": start, "end": end} if start <= address < end else {}
        elif entry and line.startswith("VmFlags:"):
            return {**entry, "flags": line.split(":", 1)[1].split()}
    raise AssertionError(f"no mapping holds {address:#x}")


def in_one_huge_page_mapping(tensors) -> bool:
    addresses = [t.data_ptr() for t in tensors]
    mapping = mapping_of(addresses[0])
    return "hg" in mapping["flags"] and all(mapping["start"] <= a < mapping["end"] for a in addresses)


@linux_huge_pages
def test_relocated_replay_storage_lies_in_one_mapping_advised_for_huge_pages():
    buffer = ReplayBuffer(100_000, OBS, ACTIONS, **from_the_run(), share_frames="auto")
    assert host_memory.relocate_storage(buffer)
    assert in_one_huge_page_mapping(buffer.storage.values())  # "hg": madvise(MADV_HUGEPAGE) took
    assert [view.ctypes.data for view in buffer.host_views] == [c.data_ptr() for c in buffer.storage.values()]
    obs = np.ones((1, 4), np.float32)
    buffer.add(obs, np.array([1]), np.array([2.0]), obs, np.array([False]), np.array([True]))
    batch = buffer.sample(8)
    assert batch.rewards.tolist() == [2.0] * 8 and batch.truncated.tolist() == [1.0] * 8
    sequences = SequenceBuffer(50, 4, 2, OBS, ACTIONS, **from_the_run(returns=False), share_frames="auto")
    assert host_memory.relocate_storage(DeviceFeed(sequences, CPU))  # a feed's buffer is found inside it
    assert in_one_huge_page_mapping([*sequences.steps.values(), sequences.episode_start])
    sequences.add(obs, np.array([1]), np.array([2.0]), obs, np.array([True]), np.array([False]), (torch.ones(1, 3),))
    assert in_one_huge_page_mapping(sequences.states)  # allocated at the first add, and moved then


# --- a relocated buffer against the plain one: the same rows stored, the same batches drawn ----------
FRAMES = gym.spaces.Box(0, 255, (4, 6, 7), dtype=np.uint8)


def replay(cls=ReplayBuffer, num_envs=2, n_step=3, share_frames=False, **keys):
    space = FRAMES if share_frames else OBS
    run = from_the_run(num_envs=num_envs, n_step=n_step, gamma=0.9)
    return cls(64, space, ACTIONS, **run, **keys, share_frames=share_frames)


def prioritized(share_frames=False):
    keys = buffer_keys("prioritized", beta_steps=50)
    del keys["share_frames"]
    return replay(PrioritizedReplayBuffer, share_frames=share_frames, **keys)


def sequences(share_frames=False):
    space = FRAMES if share_frames else OBS
    return SequenceBuffer(
        40, 5, 3, space, ACTIONS, **from_the_run(num_envs=2, returns=False), share_frames=share_frames
    )


BUFFERS = {
    "replay": replay,
    "replay, 1-step": lambda: replay(n_step=1),
    "prioritized": prioritized,
    "frames": lambda: replay(share_frames=True),
    "prioritized frames": lambda: prioritized(share_frames=True),
    "sequence": sequences,
    "sequence frames": lambda: sequences(share_frames=True),
}


def fill_random(buffers, steps: int, num_envs: int = 2) -> None:
    """Random transitions (episodes ending now and then) of `num_envs` envs into each of `buffers`."""
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(num_envs, 4)).astype(np.float32)
    for step in range(steps):
        next_obs = rng.normal(size=(num_envs, 4)).astype(np.float32)
        actions, rewards = rng.integers(2, size=num_envs), rng.normal(size=num_envs).astype(np.float32)
        terminated, truncated = rng.random(num_envs) < 0.1, rng.random(num_envs) < 0.05
        state = (torch.full((num_envs, 3), float(step)),)
        for buffer in buffers:
            extra = (state,) if buffer.recurrent else ()
            buffer.add(obs, actions, rewards, next_obs, terminated, truncated, *extra)
        obs = next_obs


def fill_any(buffers, steps: int) -> None:
    if buffers[0].frames is None:
        fill_random(buffers, steps)
    elif buffers[0].recurrent:
        for buffer in buffers:  # the env steps from a reset again
            buffer.start_episodes()
        fill_sequences(buffers, steps, num_envs=2)
    else:
        fill_frames(buffers, steps, num_envs=2)


def assert_equal(a, b) -> None:
    """Tensors and arrays, or (named) tuples, lists and dicts of them, equal in dtype and values."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_equal(a[key], b[key])
    elif isinstance(a, tuple | list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_equal(x, y)
    elif torch.is_tensor(a):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def storage_addresses(buffer) -> set[int]:
    """Where the CPU tensors that `buffer` and the objects it holds keep (directly or under numpy) start."""
    found = (
        host_memory.storage_tensor(v)
        for o in host_memory.held_objects(buffer)
        for v in host_memory.leaves(vars(o).values())
    )
    return {tensor.data_ptr() for tensor in found if tensor is not None and tensor.numel()}


@pytest.mark.parametrize("kind", BUFFERS)
def test_a_relocated_buffer_stores_and_samples_what_the_plain_one_does(kind):
    plain, moved = BUFFERS[kind](), BUFFERS[kind]()
    before = storage_addresses(moved)
    assert host_memory.relocate_storage(moved)
    assert before and not before & storage_addresses(moved)  # all of it moved, the frames' too
    for rounds in (3, 2):  # draws, more rows (the ring wraps), and draws again
        fill_any([plain, moved], 90)
        for _ in range(rounds):
            a, b = plain.sample(32), moved.sample(32)
            assert_equal(a, b)
            if hasattr(plain, "update_priorities"):  # the same new priorities steer the next draws
                errors = torch.rand(32, generator=torch.Generator().manual_seed(len(plain)))
                plain.update_priorities(a.indices, errors)
                moved.update_priorities(b.indices, errors)
    assert_equal(plain.state_dict(), moved.state_dict())


def test_a_buffer_holding_transitions_is_left_alone():
    buffer = replay()
    fill_random([buffer], 10)
    columns = dict(buffer.storage)
    assert not host_memory.relocate_storage(buffer)
    assert all(buffer.storage[key] is column for key, column in columns.items())
    chunks = sequences()  # no chunk stored yet (len 0), but the open one has its actor state
    obs, no = np.ones((2, 4), np.float32), np.zeros(2, bool)
    chunks.add(obs, np.array([1, 0]), np.array([0.5, 1.0]), obs, no, no, (torch.ones(2, 3),))
    assert len(chunks) == 0 and not host_memory.relocate_storage(chunks)
    assert "_allocate_states" not in vars(chunks)


class Holder:
    """Storage as a buffer might keep it: views, one tensor under two names, numpy views, elsewhere."""

    def __init__(self):
        self.block = torch.zeros(6, 4)
        self.rows = (self.block[:2], self.block[2:])  # views of one block
        self.columns = {"a": torch.zeros(5, dtype=torch.int64), "b": torch.zeros(5, dtype=torch.bool)}
        self.same = self.columns["a"]  # one tensor under two names
        self.host = [self.block.numpy()[1:], self.columns["a"].numpy()]  # numpy views of them
        self.elsewhere = torch.zeros(3, device="meta")
        self.parameter = torch.nn.Parameter(torch.zeros(2))


@linux_huge_pages
def test_relocation_keeps_views_shared_tensors_and_numpy_views_aliased():
    holder = Holder()
    elsewhere, parameter = holder.elsewhere, holder.parameter
    assert host_memory.relocate_storage(holder)
    assert in_one_huge_page_mapping([holder.block, *holder.columns.values()])
    assert holder.same is holder.columns["a"]
    assert holder.elsewhere is elsewhere and holder.parameter is parameter
    holder.block[3] = 7.0
    holder.columns["a"][1] = 5
    assert holder.rows[1][1].tolist() == [7.0] * 4 and holder.host[0][2].tolist() == [7.0] * 4
    assert holder.host[1].tolist() == [0, 5, 0, 0, 0] and holder.rows[0].shape == (2, 4)
    assert holder.columns["b"].dtype == torch.bool and not holder.columns["b"].any()


@linux_huge_pages
def test_relocated_weights_keep_values_objects_and_the_numpy_mirror():
    torch.manual_seed(0)
    net = QNetwork(4, 2, **network_keys("dqn", hidden_sizes=[32, 32]))
    params = list(net.parameters())
    before = [p.detach().clone() for p in params]
    host_memory.relocate([net])
    assert list(net.parameters()) == params and all(torch.equal(p, b) for p, b in zip(params, before))
    assert in_one_huge_page_mapping(params)
    optimizer = speed.adam(params, lr=0.1)
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    for _ in range(2):  # the mirror's numpy views follow the new storage: optimizer steps show through
        net(torch.from_numpy(obs)).sum().backward()
        optimizer.step()
        assert np.allclose(numpy_forward(net, obs), net(torch.from_numpy(obs)).detach().numpy(), atol=1e-5)
    moments = [optimizer.state[p][key] for p in params for key in ("exp_avg", "exp_avg_sq")]
    assert in_one_huge_page_mapping(moments)
    checkpoint = io.BytesIO()
    torch.save(optimizer.state_dict(), checkpoint)
    resumed = speed.adam(params, lr=0.1)  # a resumed run's optimizer keeps its moments there too
    resumed.load_state_dict(torch.load(io.BytesIO(checkpoint.getvalue())))
    loaded = [resumed.state[p][key] for p in params for key in ("exp_avg", "exp_avg_sq")]
    assert in_one_huge_page_mapping(loaded) and all(torch.equal(a, b) for a, b in zip(loaded, moments))
    # each tensor owns a storage of its own bytes: a checkpoint holds no more than before
    saved = io.BytesIO()
    torch.save({"net": net.state_dict(), "optimizer": optimizer.state_dict()}, saved)
    assert len(saved.getvalue()) < 3 * sum(p.numel() * 4 for p in params) + 20_000


def test_a_relocated_lstm_renews_its_flat_weights():
    torch.manual_seed(0)
    net = RecurrentQNetwork(4, 2, **network_keys("drqn"))
    obs, state = torch.randn(3, 2, 4), net.initial_state(2)
    expected, _ = net(obs, state)
    host_memory.relocate([net])
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2.0)  # written where the LSTM now reads them
    assert not torch.allclose(net(obs, state)[0], expected)
    with torch.no_grad():
        for p in net.parameters():
            p.div_(2.0)
    torch.testing.assert_close(net(obs, state)[0], expected)


@linux_huge_pages
@pytest.mark.parametrize("algo", ["dqn", "redq"])
def test_built_agents_keep_their_networks_in_huge_pages(algo):
    cfg = compose_config(f"algo={algo}", "env=pendulum" if algo == "redq" else "env=cartpole")
    env = gym.make(cfg.env.id)
    agent = build_agent(cfg, env.observation_space, env.action_space, CPU)
    modules = [value for value in vars(agent).values() if isinstance(value, torch.nn.Module)]
    assert len(modules) >= 2  # an online network and its target
    assert in_one_huge_page_mapping([p for module in modules for p in module.parameters()])


def test_storage_off_the_cpu_is_plain_zeros():
    columns = host_memory.zeros({"obs": ((5, 2), torch.float32), "actions": ((5,), torch.int64)}, torch.device("meta"))
    assert columns["obs"].device.type == "meta" and columns["actions"].dtype == torch.int64
