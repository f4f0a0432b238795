"""Replay of fixed-length sequences for recurrent agents (DRQN, R2D2-style chunks).

Each env's steps are gathered into an open chunk. A chunk is stored when it holds
`sequence_length` steps (the next one then starts `stride` steps later, so
consecutive chunks overlap by `sequence_length - stride` steps) or when its
episode ends (the rest is padding, masked out). Chunks never cross an episode
boundary. With each chunk the buffer keeps the hidden state the actor had before
the chunk's first step, so training starts from it rather than from zeros.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch

from rl_hydra import host_memory
from rl_hydra.buffers.replay import action_layout, observation_dtype
from rl_hydra.config import ConfigError, check_int


class SequenceBatch(NamedTuple):
    obs: torch.Tensor            # (L + 1, B, *obs_shape): obs[t + 1] is the real next observation of step t
    actions: torch.Tensor        # (L, B) int64 for Discrete
    rewards: torch.Tensor        # (L, B) float32
    terminated: torch.Tensor     # (L, B) float32, 1 where the episode ended in a terminal state
    mask: torch.Tensor           # (L, B) float32, 1 on real steps, 0 on padding after the episode's end
    episode_start: torch.Tensor  # (B,) bool, the chunk's first step is its episode's first step
    state: tuple[torch.Tensor, ...]  # each (B, ...): the actor's state before the chunk's first step


class SequenceBuffer:
    """Holds the last `capacity` chunks; `add` takes one step per vector env plus the actor's state."""

    recurrent = True

    def __init__(self, capacity: int, sequence_length: int, stride: int, observation_space: gym.Space,
                 action_space: gym.Space, num_envs: int = 1, device: str | torch.device = "cpu", seed: int = 0):
        self.capacity = check_int("buffer.capacity", capacity, minimum=1)
        self.sequence_length = length = check_int("buffer.sequence_length", sequence_length, minimum=1)
        stride = check_int("buffer.stride", stride, minimum=1)
        if stride > length:
            raise ConfigError(f"buffer.stride={stride} is out of range; expected an integer >= 1 and "
                              f"<= buffer.sequence_length={length} (chunks may overlap, not leave gaps)")
        self.stride = stride
        self.device = torch.device(device)
        self.num_envs = num_envs
        obs_shape, obs_dtype = tuple(observation_space.shape), observation_dtype(observation_space)
        action_shape, action_dtype = action_layout(action_space)

        # stored chunks, time-major so that sampling B of them gives (T, B, ...) directly; on the CPU in huge pages
        steps = lambda t, shape=(), dtype=torch.float32: ((t, capacity, *shape), dtype)  # noqa: E731
        stored = host_memory.zeros({
            "obs": steps(length + 1, obs_shape, obs_dtype), "actions": steps(length, action_shape, action_dtype),
            "rewards": steps(length), "terminated": steps(length), "mask": steps(length),
            "episode_start": ((capacity,), torch.bool),
        }, self.device)
        self.episode_start = stored.pop("episode_start")
        self.steps = stored
        self.states: list[torch.Tensor] = []   # (capacity, ...) per state tensor; shapes known at the first add
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

        # the open chunk of each env; row i holds env i's steps since its chunk began
        numpy_obs_dtype = torch.empty(0, dtype=obs_dtype).numpy().dtype
        self.open = {"obs": np.zeros((num_envs, length + 1, *obs_shape), numpy_obs_dtype),
                     "actions": np.zeros((num_envs, length, *action_shape),
                                         np.int64 if action_dtype == torch.int64 else np.float32),
                     "rewards": np.zeros((num_envs, length), np.float32),
                     "terminated": np.zeros((num_envs, length), np.float32)}
        self.open_states: list[torch.Tensor] = []  # (num_envs, length, ...): the actor's state before each step
        self.open_length = np.zeros(num_envs, dtype=np.int64)
        self.open_episode_start = np.ones(num_envs, dtype=bool)  # envs begin with a fresh episode

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, truncated, state: Sequence[torch.Tensor]) -> None:
        """Record one step of every env: arrays with a leading num_envs axis; `state` is the
        actor's state before it acted on `obs` (each tensor (num_envs, ...)); `next_obs` is the
        real next observation, also at the end of an episode."""
        if not self.states:
            self._allocate_states(state)
        rows, t = np.arange(self.num_envs), self.open_length
        self.open["obs"][rows, t] = obs
        self.open["obs"][rows, t + 1] = next_obs
        self.open["actions"][rows, t] = actions
        self.open["rewards"][rows, t] = rewards
        self.open["terminated"][rows, t] = terminated
        t_index = torch.as_tensor(t, device=self.device)
        for open_state, actor_state in zip(self.open_states, state):
            open_state[torch.arange(self.num_envs, device=self.device), t_index] = actor_state.to(self.device)
        self.open_length += 1

        done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        for i in np.flatnonzero(done | (self.open_length == self.sequence_length)):
            self._store(i)
            if done[i]:
                self.open_length[i], self.open_episode_start[i] = 0, True
            else:
                self._slide(i)

    def start_episodes(self) -> None:
        """Every env starts a new episode (the loop reset them): unfinished chunks are dropped."""
        self.open_length[:] = 0
        self.open_episode_start[:] = True

    def _store(self, i: int) -> None:
        """Copy env i's open chunk, padded with zeros after its last step, into the ring."""
        length = int(self.open_length[i])
        for key, column in self.steps.items():
            column[:, self.pos] = 0
            if key == "mask":
                column[:length, self.pos] = 1.0
            else:
                real = self.open[key][i, : length + 1 if key == "obs" else length]
                column[: len(real), self.pos] = torch.as_tensor(real, dtype=column.dtype, device=self.device)
        self.episode_start[self.pos] = bool(self.open_episode_start[i])
        for stored, open_state in zip(self.states, self.open_states):
            stored[self.pos] = open_state[i, 0]
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _slide(self, i: int) -> None:
        """Start env i's next chunk `stride` steps after the one just stored (same episode)."""
        keep = self.sequence_length - self.stride
        for key, window in self.open.items():
            window[i, : keep + (key == "obs")] = window[i, self.stride : self.sequence_length + (key == "obs")].copy()
        for open_state in self.open_states:
            open_state[i, :keep] = open_state[i, self.stride :].clone()
        self.open_length[i], self.open_episode_start[i] = keep, False

    def _allocate_states(self, state: Sequence[torch.Tensor]) -> None:
        self.states = host_memory.zeros_list([((self.capacity, *s.shape[1:]), s.dtype) for s in state], self.device)
        self.open_states = [torch.zeros((self.num_envs, self.sequence_length, *s.shape[1:]), dtype=s.dtype,
                                        device=self.device) for s in state]

    def sample(self, batch_size: int) -> SequenceBatch:
        """`batch_size` stored chunks, uniformly, as (time, batch, ...) tensors."""
        if self.size == 0:
            raise RuntimeError("the sequence buffer holds no chunk yet; sample after the first add completes one")
        idx = torch.randint(self.size, (batch_size,), device=self.device, generator=self.generator)
        steps = {key: column[:, idx] for key, column in self.steps.items()}
        return SequenceBatch(**steps, episode_start=self.episode_start[idx], state=tuple(s[idx] for s in self.states))

    def sample_batches(self, batch_size: int, count: int) -> Iterator[SequenceBatch]:
        """`count` batches for one training phase (see ReplayBuffer.sample_batches)."""
        for _ in range(count):
            yield self.sample(batch_size)

    def state_dict(self) -> dict:
        """Stored chunks and each env's open chunk, so that a resumed run goes on exactly."""
        return {"pos": self.pos, "size": self.size, "generator": self.generator.get_state(),
                "steps": {key: column[:, : self.size].clone() for key, column in self.steps.items()},
                "episode_start": self.episode_start[: self.size].clone(),
                "states": [s[: self.size].clone() for s in self.states],
                "open": {key: torch.from_numpy(window.copy()) for key, window in self.open.items()},
                "open_states": [s.clone() for s in self.open_states],
                "open_length": torch.from_numpy(self.open_length.copy()),
                "open_episode_start": torch.from_numpy(self.open_episode_start.copy())}

    def load_state_dict(self, state: dict) -> None:
        if state["size"] > self.capacity:
            raise ValueError(f"buffer holds {state['size']} chunks but buffer.capacity={self.capacity}")
        saved_length = state["steps"]["mask"].shape[0]
        if saved_length != self.sequence_length:
            raise ValueError(f"buffer holds chunks of {saved_length} steps but buffer.sequence_length="
                             f"{self.sequence_length}")
        if len(state["open_length"]) != self.num_envs:
            raise ValueError(f"buffer holds open chunks of {len(state['open_length'])} envs but env.num_envs="
                             f"{self.num_envs}")
        size = state["size"]
        for key, column in self.steps.items():
            column[:, :size] = state["steps"][key].to(self.device)
        self.episode_start[:size] = state["episode_start"].to(self.device)
        if state["open_states"]:
            self._allocate_states([s[:, 0] for s in state["open_states"]])
            for stored, saved in zip(self.states, state["states"]):
                stored[:size] = saved.to(self.device)
            for open_state, saved in zip(self.open_states, state["open_states"]):
                open_state.copy_(saved.to(self.device))
        for key, window in self.open.items():
            window[:] = state["open"][key].numpy()
        self.open_length[:] = state["open_length"].numpy()
        self.open_episode_start[:] = state["open_episode_start"].numpy()
        self.pos, self.size = state["pos"], size
        self.generator.set_state(state["generator"])
