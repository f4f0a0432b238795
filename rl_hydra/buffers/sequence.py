"""Replay of fixed-length sequences for recurrent agents (DRQN, R2D2-style chunks).

Each env's steps are gathered into an open chunk. A chunk is stored when it holds
`sequence_length` steps (the next one then starts `stride` steps later, so
consecutive chunks overlap by `sequence_length - stride` steps) or when its
episode ends (the rest is padding, masked out). Chunks never cross an episode
boundary. With each chunk the buffer keeps the hidden state the actor had before
the chunk's first step, so training starts from it rather than from zeros.

Stacks of frames (Atari's (4, 84, 84) uint8) are stored once, whatever the chunks' overlap:
each env's frames go to a ring of their own (buffers/frames.py::FrameRings), a chunk names its
env and its first frame, and its observations are rebuilt from the ring when it is drawn. The
rings keep the frames of the last `capacity` x `stride` env steps (plus one chunk's); chunks
come more often than every `stride` steps when episodes end inside a chunk, and a chunk whose
frames were overwritten is no longer drawn.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import gymnasium as gym
import numpy as np
import torch

from rl_hydra import spaces
from rl_hydra.buffers.frames import FrameRings, shares_frames
from rl_hydra.buffers.replay import action_layout, as_numpy, check_host_memory, column_name, human_bytes
from rl_hydra.protocols import SequenceBatch, restore_generator


class SequenceBuffer:
    """Holds the last `capacity` chunks; `add` takes one step per vector env plus the actor's state."""

    recurrent = True

    def __init__(
        self,
        capacity: int,
        sequence_length: int,
        stride: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        num_envs: int,
        device: str | torch.device,
        seed: int,
        share_frames: bool | str,
    ):
        self.capacity = capacity
        self.sequence_length = length = sequence_length
        self.stride = stride
        self.device = torch.device(device)
        self.num_envs = num_envs
        parts = spaces.layout(observation_space)  # {part: (shape, dtype)}; {"": ...} for one array
        self.parts = list(parts)
        self.obs_columns = [column_name("obs", part) for part in self.parts]  # "obs", or "obs/<part>" each
        action_shape, action_dtype = action_layout(action_space)
        share = shares_frames(observation_space, share_frames)

        # stored chunks, time-major so that sampling B of them gives (T, B, ...) directly
        steps = lambda t, shape=(), dtype=torch.float32: ((t, capacity, *shape), dtype)  # noqa: E731
        observations = (
            {}
            if share
            else {column_name("obs", part): steps(length + 1, shape, dtype) for part, (shape, dtype) in parts.items()}
        )
        layout = {
            **observations,
            "actions": steps(length, action_shape, action_dtype),
            "rewards": steps(length),
            "terminated": steps(length),
            "mask": steps(length),
            "episode_start": ((capacity,), torch.bool),
        }
        total = sum(torch.Size(shape).numel() * dtype.itemsize for shape, dtype in layout.values())
        self.frames: FrameRings | None = None
        if share:  # each env's frames once; a chunk is its env and first frame (int64 each)
            frames_per_env = -(-capacity // num_envs) * stride + length + spaces.shape_of(observation_space)[0]
            self.frames = FrameRings(num_envs, frames_per_env, observation_space)
            self.chunk_env, self.chunk_first = np.zeros(capacity, np.int64), np.zeros(capacity, np.int64)
            self.open_first = np.zeros(num_envs, np.int64)  # the open chunk's first frame, per env
            total += num_envs * frames_per_env * self.frames.frame_bytes + 16 * capacity
        observed = "" if share else f"; an observation: {spaces.describe_layout(observation_space)}"
        check_host_memory(
            total,
            self.device,
            capacity,
            total // capacity,
            kind=self.describe(),
            row="chunk",
            detail=f" ({human_bytes(total / (capacity * stride))} per step at buffer.stride={stride}, "
            f"plus the actor's state per chunk{observed})",
        )
        stored = {name: torch.zeros(shape, dtype=dtype, device=self.device) for name, (shape, dtype) in layout.items()}
        self.episode_start = stored.pop("episode_start")
        self.steps = stored
        self.states: list[torch.Tensor] = []  # (capacity, ...) per state tensor; shapes known at the first add
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

        # the open chunk of each env; row i holds env i's steps since its chunk began
        numpy_dtype = lambda dtype: torch.empty(0, dtype=dtype).numpy().dtype  # noqa: E731
        self.open = {
            **(
                {}
                if share
                else {
                    column_name("obs", part): np.zeros((num_envs, length + 1, *shape), numpy_dtype(dtype))
                    for part, (shape, dtype) in parts.items()
                }
            ),
            "actions": np.zeros(
                (num_envs, length, *action_shape), np.int64 if action_dtype == torch.int64 else np.float32
            ),
            "rewards": np.zeros((num_envs, length), np.float32),
            "terminated": np.zeros((num_envs, length), np.float32),
        }
        self.open_states: list[torch.Tensor] = []  # (num_envs, length, ...): the actor's state before each step
        self.open_length = np.zeros(num_envs, dtype=np.int64)
        self.open_episode_start = np.ones(num_envs, dtype=bool)  # envs begin with a fresh episode

    def describe(self) -> str:
        """The kind of buffer in words, e.g. "sequence buffer (16-step chunks, frames stored once)",
        for the log line that also gives its size (ReplayBuffer.describe's counterpart)."""
        details = f"{self.sequence_length}-step chunks" + (", frames stored once" if self.frames is not None else "")
        return f"sequence buffer ({details})"

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, truncated, state: Sequence[torch.Tensor]) -> None:
        """Record one step of every env: arrays with a leading num_envs axis; `state` is the
        actor's state before it acted on `obs` (each tensor (num_envs, ...)); `next_obs` is the
        real next observation, also at the end of an episode."""
        if not self.states:
            self._allocate_states(state)
        rows, t = np.arange(self.num_envs), self.open_length
        if self.frames is None:
            for key, part, next_part in zip(self.obs_columns, spaces.split(obs), spaces.split(next_obs)):
                self.open[key][rows, t] = part
                self.open[key][rows, t + 1] = next_part
        else:
            oldest = self.frames.add(as_numpy(obs), as_numpy(next_obs))  # (n,) each observation's oldest frame
            self.open_first[t == 0] = oldest[t == 0]  # where a chunk opens with this step
        self.open["actions"][rows, t] = actions
        self.open["rewards"][rows, t] = rewards
        self.open["terminated"][rows, t] = terminated
        t_index = torch.as_tensor(t, device=self.device)
        for open_state, actor_state in zip(self.open_states, state):
            open_state[torch.arange(self.num_envs, device=self.device), t_index] = actor_state.to(self.device)
        self.open_length += 1

        done = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        if self.frames is not None:
            self.frames.end_episodes(np.flatnonzero(done))
        for i in np.flatnonzero(done | (self.open_length == self.sequence_length)).tolist():
            self._store(i)
            if done[i]:
                self.open_length[i], self.open_episode_start[i] = 0, True
            else:
                self._slide(i)

    def start_episodes(self) -> None:
        """Every env starts a new episode (the loop reset them): unfinished chunks are dropped."""
        self.open_length[:] = 0
        self.open_episode_start[:] = True
        if self.frames is not None:
            self.frames.end_episodes(np.arange(self.num_envs))

    def _store(self, i: int) -> None:
        """Copy env i's open chunk, padded with zeros after its last step, into the ring."""
        length = int(self.open_length[i])
        for key, column in self.steps.items():
            column[:, self.pos] = 0
            if key == "mask":
                column[:length, self.pos] = 1.0
            else:
                real = self.open[key][i, : length + 1 if key in self.obs_columns else length]
                column[: len(real), self.pos] = torch.as_tensor(real, dtype=column.dtype, device=self.device)
        if self.frames is not None:
            self.chunk_env[self.pos], self.chunk_first[self.pos] = i, self.open_first[i]
        self.episode_start[self.pos] = bool(self.open_episode_start[i])
        for stored, open_state in zip(self.states, self.open_states):
            stored[self.pos] = open_state[i, 0]
        self.pos = (self.pos + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _slide(self, i: int) -> None:
        """Start env i's next chunk `stride` steps after the one just stored (same episode)."""
        keep = self.sequence_length - self.stride
        for key, window in self.open.items():
            more = key in self.obs_columns  # observations have one step more than actions
            window[i, : keep + more] = window[i, self.stride : self.sequence_length + more].copy()
        for open_state in self.open_states:
            open_state[i, :keep] = open_state[i, self.stride :].clone()
        self.open_length[i], self.open_episode_start[i] = keep, False
        if self.frames is not None:
            self.open_first[i] += self.stride  # one frame per step within an episode

    def _allocate_states(self, state: Sequence[torch.Tensor]) -> None:
        self.states = [torch.zeros((self.capacity, *s.shape[1:]), dtype=s.dtype, device=self.device) for s in state]
        self.open_states = [
            torch.zeros((self.num_envs, self.sequence_length, *s.shape[1:]), dtype=s.dtype, device=self.device)
            for s in state
        ]

    def sample(self, batch_size: int) -> SequenceBatch:
        """`batch_size` stored chunks, uniformly, as (time, batch, ...) tensors."""
        return self.batch_at(self.sample_indices(batch_size))

    def sample_indices(self, batch_size: int) -> torch.Tensor:
        """Stored chunks (B,) drawn uniformly among those that can be drawn."""
        if self.size == 0:
            raise RuntimeError("the sequence buffer holds no chunk yet; sample after the first add completes one")
        if self.frames is None:
            return torch.randint(self.size, (batch_size,), device=self.device, generator=self.generator)
        drawable = np.flatnonzero(self.frames.drawable(self.chunk_env[: self.size], self.chunk_first[: self.size]))
        picks = torch.randint(len(drawable), (batch_size,), device=self.device, generator=self.generator)
        return torch.from_numpy(drawable).to(self.device)[picks]

    def batch_at(self, idx: torch.Tensor) -> SequenceBatch:
        """The chunks `idx` (B,) as (time, batch, ...) tensors."""
        steps = {key: stored[:, idx] for key, stored in self.steps.items()}
        if self.frames is not None:
            rows = idx.cpu().numpy()
            obs = self.frames.stacks(self.chunk_env[rows], self.chunk_first[rows], self.sequence_length + 1)
            steps["obs"] = obs.to(self.device)  # (L + 1, B, S, H, W)
        else:  # (L + 1, B, *shape), or a dict of them: one per part
            steps["obs"] = spaces.join(self.parts, [steps.pop(key) for key in self.obs_columns])
        return SequenceBatch(**steps, episode_start=self.episode_start[idx], state=tuple(s[idx] for s in self.states))

    def sample_batches(self, batch_size: int, count: int) -> Iterator[SequenceBatch]:
        """`count` batches for one training phase (see ReplayBuffer.sample_batches)."""
        for _ in range(count):
            yield self.sample(batch_size)

    def state_dict(self) -> dict:
        """Stored chunks and each env's open chunk, so that a resumed run goes on exactly. On the
        CPU the chunks are views, one tensor per time step, not copies (see ReplayBuffer.state_dict)."""
        stored: dict[str, list[torch.Tensor] | torch.Tensor]
        if self.device.type == "cpu":  # column[t, :size] is contiguous; a tensor of just its bytes
            stored = {
                key: [torch.from_numpy(column[t, : self.size].numpy()) for t in range(len(column))]
                for key, column in self.steps.items()
            }
        else:
            stored = {key: column[:, : self.size].clone() for key, column in self.steps.items()}
        frames = (
            {}
            if self.frames is None
            else {
                "frames": self.frames.state_dict(),
                "open_first": torch.from_numpy(self.open_first.copy()),
                "chunk_env": torch.from_numpy(self.chunk_env[: self.size].copy()),
                "chunk_first": torch.from_numpy(self.chunk_first[: self.size].copy()),
            }
        )
        return {
            **frames,
            "pos": self.pos,
            "size": self.size,
            "generator": self.generator.get_state(),
            "steps": stored,
            "episode_start": self.episode_start[: self.size].clone(),
            "states": [s[: self.size].clone() for s in self.states],
            "open": {key: torch.from_numpy(window.copy()) for key, window in self.open.items()},
            "open_states": [s.clone() for s in self.open_states],
            "open_length": torch.from_numpy(self.open_length.copy()),
            "open_episode_start": torch.from_numpy(self.open_episode_start.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["size"] > self.capacity:
            raise ValueError(f"buffer holds {state['size']} chunks but buffer.capacity={self.capacity}")
        saved_length = len(state["steps"]["mask"])
        if saved_length != self.sequence_length:
            raise ValueError(
                f"buffer holds chunks of {saved_length} steps but buffer.sequence_length={self.sequence_length}"
            )
        if len(state["open_length"]) != self.num_envs:
            raise ValueError(
                f"buffer holds open chunks of {len(state['open_length'])} envs but env.num_envs={self.num_envs}"
            )
        if ("frames" in state) != (self.frames is not None):
            raise ValueError(
                f"buffer.share_frames resolves to {self.frames is not None} here but not in the run that "
                f"saved this buffer; resume with the run's own buffer.share_frames"
            )
        size = state["size"]
        for key, column in self.steps.items():
            for t, saved in enumerate(state["steps"][key]):  # a list of (size, ...) or a (T, size, ...) tensor
                column[t, :size] = saved.to(self.device)
        self.episode_start[:size] = state["episode_start"].to(self.device)
        if self.frames is not None:
            self.frames.load_state_dict(state["frames"])
            self.open_first[:] = state["open_first"].numpy()
            self.chunk_env[:size], self.chunk_first[:size] = state["chunk_env"].numpy(), state["chunk_first"].numpy()
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
        restore_generator(self.generator, state["generator"])
