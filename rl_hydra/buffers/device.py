"""Where replay lives on a GPU run: `buffer.device=auto|cpu|cuda`.

On a CUDA run the buffer can live in GPU memory, so that a sampled batch never crosses PCIe
(`cuda`; `auto` takes it where it fits in the GPU's free memory). Otherwise it lives in host
memory and DeviceFeed hands each batch to the run's device: gathered on the host, copied into
pinned memory and sent with a non-blocking copy, which overlaps with the GPU work already queued.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rl_hydra.errors import MachineLimit

log = logging.getLogger(__name__)


class DeviceMemoryShort(MachineLimit):
    """The buffer does not fit in its device's free memory."""


def storage_device(choice: str, run_device: torch.device) -> torch.device:
    """The device `buffer.device` asks for, on a run on `run_device` (auto: the run's own)."""
    if choice == "cuda" and run_device.type != "cuda":
        raise MachineLimit(
            f"buffer.device=cuda needs a CUDA run (device=cuda); this run's device is {run_device}; "
            "use buffer.device=auto or cpu"
        )
    return torch.device("cpu") if choice == "cpu" else run_device


def build_on_device(make: Callable[[torch.device], Any], choice: str, run_device: torch.device):
    """The buffer `make(storage device)` builds, where `buffer.device` says; `auto` falls back to host
    memory (with a log line) where the GPU's free memory cannot hold it. Batches come on `run_device`."""
    storage = storage_device(choice, run_device)
    try:
        buffer = make(storage)
    except DeviceMemoryShort as error:
        if choice != "auto" or storage.type == "cpu":
            raise
        log.info("buffer.device=auto: %s; the buffer stays in host memory and each batch is copied over", error)
        storage = torch.device("cpu")
        buffer = make(storage)
    return buffer if storage == run_device else DeviceFeed(buffer, run_device)


def to_device(value, device: torch.device):
    """Every tensor in `value` (a batch: tuples, named tuples and dicts of tensors) on `device`; from
    host to GPU through pinned memory, without blocking."""
    if torch.is_tensor(value):
        if device.type == "cuda" and value.device.type == "cpu":
            return value.pin_memory().to(device, non_blocking=True)
        return value.to(device)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    if isinstance(value, tuple):
        items = [to_device(item, device) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return value


class DeviceFeed:
    """A buffer in host memory whose batches come on the run's device; everything else is the buffer's."""

    def __init__(self, buffer, device: torch.device):
        self.buffer, self.device = buffer, device

    def __getattr__(self, name: str):
        return getattr(self.buffer, name)

    def __len__(self) -> int:
        return len(self.buffer)

    def sample(self, batch_size: int):
        return to_device(self.buffer.sample(batch_size), self.device)

    def sample_batches(self, batch_size: int, count: int) -> Iterator:
        for batch in self.buffer.sample_batches(batch_size, count):
            yield to_device(batch, self.device)
