"""Replay of fixed-length sequences for recurrent agents (DRQN, R2D2-style chunks).

Each env's steps are gathered into an open chunk. A chunk is stored when it holds
`sequence_length` steps (the next one then starts `stride` steps later, so
consecutive chunks overlap by `sequence_length - stride` steps) or when its
episode ends (the rest is padding, masked out). Chunks never cross an episode
boundary. With each chunk the buffer keeps the hidden state the actor had before
the chunk's first step, so training starts from it rather than from zeros.

Stacks of frames (Atari's (4, 84, 84) uint8) are kept once per chunk: each step's newest frame
and the older frames of the chunk's first observation, L + S frames instead of (L + 1) S.
A stack is rebuilt at sample time from the frames before it in its chunk, which never crosses
an episode boundary. Overlapping chunks (stride < sequence_length) each keep their own frames.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple, Sequence

import gymnasium as gym
import numpy as np
import torch

from rl_hydra import host_memory
from rl_hydra.buffers.frames import shares_frames
from rl_hydra.buffers.replay import action_layout, check_host_memory, human_bytes, observation_dtype
from rl_hydra.config import ConfigError, check_choice, check_int


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
                 action_space: gym.Space, num_envs: int = 1, device: str | torch.device = "cpu", seed: int = 0,
                 share_frames: bool | str = "auto"):
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
        check_choice("buffer.share_frames", share_frames, (True, False, "auto"))
        self.share_frames = shares_frames(observation_space, share_frames)

        # stored chunks, time-major so that sampling B of them gives (T, B, ...) directly; on the CPU in huge pages
        steps = lambda t, shape=(), dtype=torch.float32: ((t, capacity, *shape), dtype)  # noqa: E731
        observations = {"obs": steps(length + 1, obs_shape, obs_dtype)}
        if self.share_frames:   # each step's newest frame, and the first observation's older ones
            self.frame_stack, *frame_shape = obs_shape
            observations = {"obs": steps(length + 1, frame_shape, torch.uint8),
                            "obs_history": steps(self.frame_stack - 1, frame_shape, torch.uint8)}
        layout = {**observations, "actions": steps(length, action_shape, action_dtype),
                  "rewards": steps(length), "terminated": steps(length), "mask": steps(length),
                  "episode_start": ((capacity,), torch.bool)}
        bytes_per_chunk = sum(torch.Size(shape).numel() * dtype.itemsize
                              for shape, dtype in layout.values()) // capacity
        check_host_memory(capacity * bytes_per_chunk, self.device, capacity, bytes_per_chunk, row="chunk",
                          detail=f" ({human_bytes(bytes_per_chunk / stride)} per step at buffer.stride={stride}, "
                                 f"plus the actor's state per chunk)")
        stored = host_memory.zeros(layout, self.device)
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
            if key == "obs_history":   # written whole with "obs"
                continue
            column[:, self.pos] = 0
            if key == "mask":
                column[:length, self.pos] = 1.0
            else:
                real = self.open[key][i, : length + 1 if key == "obs" else length]
                if key == "obs" and self.share_frames:
                    real = self._frames_of(real)
                column[: len(real), self.pos] = torch.as_tensor(real, dtype=column.dtype, device=self.device)
        self.episode_start[self.pos] = bool(self.open_episode_start[i])
        for stored, open_state in zip(self.states, self.open_states):
            stored[self.pos] = open_state[i, 0]
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _frames_of(self, stacks: np.ndarray) -> np.ndarray:
        """The newest frame (T, H, W) of each of a chunk's observations (T, S, H, W); the first
        one's older frames go to `obs_history`. Each observation must continue the one before."""
        if not np.array_equal(stacks[1:, :-1], stacks[:-1, 1:]):
            raise ValueError("buffer.share_frames: an observation of the episode does not continue the one before "
                             "(obs[t + 1][:-1] != obs[t][1:]), so these are not stacks of frames; "
                             "set buffer.share_frames=false")
        self.steps["obs_history"][:, self.pos] = torch.as_tensor(stacks[0, :-1], device=self.device)
        return stacks[:, -1]

    def _stacks(self, history: torch.Tensor, newest: torch.Tensor) -> torch.Tensor:
        """Observations (T, B, S, H, W) from the chunks' first older frames (S - 1, B, H, W) and
        newest frames (T, B, H, W): observation t stacks frames t .. t + S - 1 of their concatenation."""
        frames = torch.cat([history, newest])                                    # (S - 1 + T, B, H, W)
        return frames.unfold(0, self.frame_stack, 1).movedim(-1, 2).contiguous()  # (T, B, S, H, W)

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
        if self.share_frames:
            steps["obs"] = self._stacks(steps.pop("obs_history"), steps["obs"])
        return SequenceBatch(**steps, episode_start=self.episode_start[idx], state=tuple(s[idx] for s in self.states))

    def sample_batches(self, batch_size: int, count: int) -> Iterator[SequenceBatch]:
        """`count` batches for one training phase (see ReplayBuffer.sample_batches)."""
        for _ in range(count):
            yield self.sample(batch_size)

    def state_dict(self) -> dict:
        """Stored chunks and each env's open chunk, so that a resumed run goes on exactly. On the
        CPU the chunks are views, one tensor per time step, not copies (see ReplayBuffer.state_dict)."""
        if self.device.type == "cpu":   # column[t, :size] is contiguous; a tensor of just its bytes
            stored = {key: [torch.from_numpy(column[t, : self.size].numpy()) for t in range(len(column))]
                      for key, column in self.steps.items()}
        else:
            stored = {key: column[:, : self.size].clone() for key, column in self.steps.items()}
        return {"pos": self.pos, "size": self.size, "generator": self.generator.get_state(), "steps": stored,
                "episode_start": self.episode_start[: self.size].clone(),
                "states": [s[: self.size].clone() for s in self.states],
                "open": {key: torch.from_numpy(window.copy()) for key, window in self.open.items()},
                "open_states": [s.clone() for s in self.open_states],
                "open_length": torch.from_numpy(self.open_length.copy()),
                "open_episode_start": torch.from_numpy(self.open_episode_start.copy())}

    def load_state_dict(self, state: dict) -> None:
        if state["size"] > self.capacity:
            raise ValueError(f"buffer holds {state['size']} chunks but buffer.capacity={self.capacity}")
        saved_length = len(state["steps"]["mask"])
        if saved_length != self.sequence_length:
            raise ValueError(f"buffer holds chunks of {saved_length} steps but buffer.sequence_length="
                             f"{self.sequence_length}")
        if len(state["open_length"]) != self.num_envs:
            raise ValueError(f"buffer holds open chunks of {len(state['open_length'])} envs but env.num_envs="
                             f"{self.num_envs}")
        if ("obs_history" in state["steps"]) != self.share_frames:
            raise ValueError(f"buffer.share_frames resolves to {self.share_frames} here but not in the run that "
                             f"saved this buffer; resume with the run's own buffer.share_frames")
        size = state["size"]
        for key, column in self.steps.items():
            for t, saved in enumerate(state["steps"][key]):   # a list of (size, ...) or a (T, size, ...) tensor
                column[t, :size] = saved.to(self.device)
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
