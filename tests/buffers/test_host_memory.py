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
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from rl_hydra.build import build_agent
from rl_hydra.networks.mlp import QNetwork
from rl_hydra.networks.recurrent import RecurrentQNetwork
from rl_hydra.speed import host_memory
from rl_hydra.speed.numpy_mirror import numpy_forward
from tests.conftest import compose_config, from_the_run, network_keys

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
def test_replay_storage_lies_in_one_mapping_advised_for_huge_pages():
    buffer = ReplayBuffer(100_000, OBS, ACTIONS, **from_the_run(), share_frames="auto")
    assert buffer.storage["obs"].data_ptr() % host_memory.HUGE_PAGE == 0
    assert in_one_huge_page_mapping(buffer.storage.values())  # "hg": madvise(MADV_HUGEPAGE) took
    obs = np.ones((1, 4), np.float32)
    buffer.add(obs, np.array([1]), np.array([2.0]), obs, np.array([False]), np.array([True]))
    batch = buffer.sample(8)
    assert batch.rewards.tolist() == [2.0] * 8 and batch.truncated.tolist() == [1.0] * 8
    sequences = SequenceBuffer(50, 4, 2, OBS, ACTIONS, **from_the_run(returns=False), share_frames="auto")
    assert in_one_huge_page_mapping([*sequences.steps.values(), sequences.episode_start])


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
