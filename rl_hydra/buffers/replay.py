"""Uniform replay of single transitions in preallocated tensors (a ring buffer)."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch

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

    def __init__(self, capacity: int, observation_space: gym.Space, action_space: gym.Space,
                 num_envs: int = 1, device: str | torch.device = "cpu", seed: int = 0):
        self.capacity = check_int("buffer.capacity", capacity, minimum=1)
        self.device = torch.device(device)
        self.num_envs = num_envs
        obs_shape = tuple(observation_space.shape)
        action_shape, action_dtype = action_layout(action_space)
        empty = lambda shape, dtype=torch.float32: torch.zeros((self.capacity, *shape), dtype=dtype, device=self.device)
        self.storage = {
            "obs": empty(obs_shape), "actions": empty(action_shape, action_dtype), "rewards": empty(()),
            "next_obs": empty(obs_shape), "terminated": empty(()), "truncated": empty(()),
        }
        # on CPU, numpy views of the same memory make `add` several times cheaper
        self.host_views = ({key: column.numpy() for key, column in self.storage.items()}
                           if self.device.type == "cpu" else None)
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Store one transition per env; arguments are arrays or tensors with a leading num_envs axis."""
        values = {"obs": obs, "actions": actions, "rewards": rewards, "next_obs": next_obs,
                  "terminated": terminated, "truncated": truncated}
        n = len(rewards)
        if self.pos + n <= self.capacity:
            rows = slice(self.pos, self.pos + n)
        else:  # wraps around the end
            rows = torch.arange(self.pos, self.pos + n, device=self.device) % self.capacity
        if self.host_views is not None:
            rows = rows if isinstance(rows, slice) else rows.numpy()
            for key, value in values.items():
                self.host_views[key][rows] = value.cpu().numpy() if torch.is_tensor(value) else value
        else:
            for key, value in values.items():
                column = self.storage[key]
                column[rows] = torch.as_tensor(value, dtype=column.dtype).to(self.device, non_blocking=True)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> Batch:
        idx = torch.randint(self.size, (batch_size,), device=self.device, generator=self.generator)
        if self.host_views is not None:  # numpy's take is about twice as fast as tensor indexing here
            rows = idx.numpy()
            return Batch(**{key: torch.from_numpy(view.take(rows, axis=0)) for key, view in self.host_views.items()})
        return Batch(**{key: column[idx] for key, column in self.storage.items()})

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
