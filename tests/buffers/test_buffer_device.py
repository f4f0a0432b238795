"""buffer.device=auto|cpu|cuda: where replay lives on a GPU run, refused in one line where it cannot
live, and batches from host memory handed to the run's device (rl_hydra/buffers/device.py). The
CUDA runs themselves: tests/speed/test_cuda.py."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra.buffers.device import DeviceFeed, DeviceMemoryShort, build_on_device, storage_device, to_device
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from tests.conftest import TINY, compose_config, from_the_run, run_training

CPU, CUDA, META = torch.device("cpu"), torch.device("cuda"), torch.device("meta")
OBS, ACTIONS = gym.spaces.Box(-1, 1, (3,), dtype=np.float32), gym.spaces.Discrete(2)


def test_auto_is_the_runs_own_device_and_cpu_keeps_it_on_the_host():
    assert storage_device("auto", CPU) == CPU and storage_device("auto", CUDA) == CUDA
    assert storage_device("cpu", CUDA) == CPU and storage_device("cuda", CUDA) == CUDA


@pytest.mark.parametrize(
    "choice, run_device, message",
    [("cuda", CPU, r"buffer.device=cuda needs a CUDA run \(device=cuda\); this run's device is cpu")],
)
def test_a_device_the_buffer_cannot_live_on_is_refused_in_one_line(choice, run_device, message):
    with pytest.raises(ConfigError, match=message):
        storage_device(choice, run_device)


def short_on_the_gpu(made: list):
    """A buffer maker whose GPU has too little free memory (the fault injected where the buffer
    measures it)."""

    def make(storage: torch.device):
        made.append(storage)
        if storage.type == "cuda":
            raise DeviceMemoryShort("buffer.capacity=100 needs 9.0 GB but cuda has 1.0 GB free")
        return ReplayBuffer(100, OBS, ACTIONS, **from_the_run(device=storage), share_frames="auto")

    return make


def test_a_device_that_is_no_choice_is_refused_by_the_schema():
    with pytest.raises(ConfigError, match=r"buffer.device='gpu' is not allowed; choose one of: auto, cpu, cuda"):
        validate_run_config(compose_config("buffer.device=gpu"))


def test_auto_falls_back_to_host_memory_when_the_gpu_is_short_and_says_so(caplog):
    made = []
    with caplog.at_level(logging.INFO, logger="rl_hydra.buffers.device"):
        buffer = build_on_device(short_on_the_gpu(made), "auto", CUDA)
    assert made == [CUDA, CPU] and isinstance(buffer, DeviceFeed) and buffer.device == CUDA
    assert buffer.storage["rewards"].device == CPU
    assert "the buffer stays in host memory" in caplog.text


def test_buffer_device_cuda_is_refused_when_the_gpu_is_short():
    with pytest.raises(DeviceMemoryShort, match="needs 9.0 GB but cuda has 1.0 GB free"):
        build_on_device(short_on_the_gpu([]), "cuda", CUDA)


def test_the_host_memory_check_names_the_capacity_that_fits(tmp_path):
    with pytest.raises(
        ConfigError, match=r"buffer.capacity=10000000000 needs .* free; lower buffer.capacity \(at most"
    ):
        run_training(tmp_path / "run", "algo=dqn", "env=cartpole", "buffer.capacity=10000000000", *TINY)
    assert not (tmp_path / "run").exists()


def test_a_feed_hands_every_tensor_of_a_batch_to_the_run_device_and_passes_the_rest_through():
    buffer = ReplayBuffer(100, OBS, ACTIONS, **from_the_run(device=CPU), share_frames="auto")
    for i in range(20):
        buffer.add(
            np.full((1, 3), i, np.float32),
            np.array([i % 2]),
            np.ones(1, np.float32),
            np.full((1, 3), i + 1, np.float32),
            np.zeros(1, bool),
            np.zeros(1, bool),
        )
    feed = DeviceFeed(buffer, META)
    batches = list(feed.sample_batches(8, 2))
    assert len(batches) == 2 and all(t.device == META for batch in batches for t in batch)
    assert feed.sample(4).obs.device == META
    assert len(feed) == len(buffer) == 20 and feed.state_dict().keys() == buffer.state_dict().keys()


def test_to_device_reaches_into_dicts_and_the_state_tuple_of_a_sequence_batch():
    from rl_hydra.protocols import SequenceBatch

    fields = {name: torch.zeros(2) for name in SequenceBatch._fields}
    batch = SequenceBatch(
        **{
            **fields,
            "obs": {"image": torch.zeros(2, 3), "direction": torch.zeros(2)},
            "state": (torch.zeros(1, 2, 4), torch.zeros(1, 2, 4)),
        }
    )
    moved = to_device(batch, META)
    assert type(moved) is SequenceBatch and moved._fields == batch._fields
    tensors = [
        moved.obs["image"],
        moved.obs["direction"],
        *moved.state,
        *(getattr(moved, name) for name in SequenceBatch._fields if name not in ("obs", "state")),
    ]
    assert all(t.device == META for t in tensors)


def test_a_cpu_run_keeps_its_buffer_unwrapped():
    from rl_hydra.build import build_components

    _, _, buffer = build_components(compose_config("algo=dqn", "env=cartpole", *TINY), CPU)
    assert isinstance(buffer, ReplayBuffer)
