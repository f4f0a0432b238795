"""Uniform replay of single transitions in preallocated tensors (a ring buffer)."""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

import gymnasium as gym
import torch

from rl_hydra import host_memory
from rl_hydra.config import check_int


class Batch(NamedTuple):
    obs: torch.Tensor          # (B, *obs_shape) float32
    actions: torch.Tensor      # (B,) int64 for Discrete, (B, action_dim) float32 for Box
    rewards: torch.Tensor      # (B,) float32
    next_obs: torch.Tensor     # (B, *obs_shape) real next observation, also at truncation
    terminated: torch.Tensor   # (B,) float32, 1 where the episode ended in a terminal state
    truncated: torch.Tensor    # (B,) float32, 1 where a time limit cut the episode


def action_layout(action_space: gym.Space) -> tuple[tuple[int, ...], torch.dtype]:
    if isinstance(action_space, gym.spaces.Discrete):
        return (), torch.int64
    return tuple(action_space.shape), torch.float32


class ReplayBuffer:
    """Holds the last `capacity` transitions; `add` takes one row per vector env."""

    recurrent = False
    max_gather_rows = 16384  # sample_batches gathers at most this many rows at once

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 num_envs: int = 1, device: str | torch.device = "cpu", seed: int = 0):
        self.capacity = check_int("buffer.capacity", capacity, minimum=1)
        self.device = torch.device(device)
        self.num_envs = num_envs
        obs_shape = tuple(observation_space.shape)
        action_shape, action_dtype = action_layout(action_space)
        rows = lambda shape, dtype=torch.float32: ((self.capacity, *shape), dtype)  # noqa: E731
        # in Batch's field order: add and sample pair columns with values by position; on the CPU in huge pages
        self.storage = host_memory.zeros({
            "obs": rows(obs_shape), "actions": rows(action_shape, action_dtype), "rewards": rows(()),
            "next_obs": rows(obs_shape), "terminated": rows(()), "truncated": rows(()),
        }, self.device)
        assert tuple(self.storage) == Batch._fields
        # on CPU, numpy views of the same memory make `add` several times cheaper
        self.host_views = (tuple(column.numpy() for column in self.storage.values())
                           if self.device.type == "cpu" else None)
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Store one transition per env; arguments are arrays or tensors with a leading num_envs axis."""
        values = (obs, actions, rewards, next_obs, terminated, truncated)  # Batch's field order
        n = len(rewards)
        if self.pos + n <= self.capacity:
            rows = slice(self.pos, self.pos + n)
        else:  # wraps around the end
            rows = torch.arange(self.pos, self.pos + n, device=self.device) % self.capacity
        if self.host_views is not None:
            rows = rows if isinstance(rows, slice) else rows.numpy()
            for view, value in zip(self.host_views, values):
                view[rows] = value.cpu().numpy() if torch.is_tensor(value) else value
        else:
            for column, value in zip(self.storage.values(), values):
                column[rows] = torch.as_tensor(value, dtype=column.dtype).to(self.device, non_blocking=True)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Batch:
        idx = torch.randint(self.size, (batch_size,), device=self.device, generator=self.generator)
        if self.host_views is not None:  # numpy's take is about twice as fast as tensor indexing here
            rows = idx.numpy()
            return Batch(*[torch.from_numpy(view.take(rows, axis=0)) for view in self.host_views])
        return Batch(*[column[idx] for column in self.storage.values()])

    def sample_batches(self, batch_size: int, count: int) -> Iterable[Batch]:
        """`count` batches for one training phase, the same ones `count` calls of `sample` draw
        (one random stream), gathered up to `max_gather_rows` rows at a time. Nothing is added
        during a phase, and one gather of 128 batches costs about what one of a batch does."""
        if count == 1:  # one update per phase (per env step, often): no generator, no splitting
            return (self.sample(batch_size),)
        return self._gathered_batches(batch_size, count)

    def _gathered_batches(self, batch_size: int, count: int) -> Iterator[Batch]:
        per_gather = max(1, self.max_gather_rows // batch_size)
        for start in range(0, count, per_gather):
            rows = self.sample(batch_size * min(per_gather, count - start))
            yield from (Batch(*fields) for fields in zip(*(column.split(batch_size) for column in rows)))

    def state_dict(self) -> dict:
        return {"pos": self.pos, "size": self.size, "generator": self.generator.get_state(),
                "storage": {key: column[: self.size].clone() for key, column in self.storage.items()}}

    def load_state_dict(self, state: dict) -> None:
        if state["size"] > self.capacity:
            raise ValueError(f"buffer holds {state['size']} transitions but buffer.capacity={self.capacity}")
        for key, column in self.storage.items():
            column[: state["size"]] = state["storage"][key].to(self.device)
        self.pos, self.size = state["pos"], state["size"]
        self.generator.set_state(state["generator"])
