"""Frame stacks stored one frame per row: a replay buffer's observations for Atari-like envs
(`SharedFrames`), and a sequence buffer's (`FrameRings`, at the end).

An Atari observation is a stack of the last S frames (4 x 84 x 84 uint8), and consecutive
observations of an env share S - 1 of them. Storing each observation and next observation
whole keeps every frame 2S times; here each row keeps only its observation's newest frame,
and a stack is rebuilt at sample time from the rows of the same env before it (num_envs rows
apart). Two kinds of rows keep a whole stack beside, in a small table, because their frames
do not come from the rows around them:

- a row whose observation does not continue the one before (an episode's first observation,
  which repeats its first frame, or the first row after a run starts or resumes): its stack;
- a row whose episode ended (terminated or truncated): its next observation, the episode's
  real last one (the next row holds the next episode's first).

Whether an observation continues the one before is checked on the frames themselves
(obs[:-1] == previous obs[1:]), so the rebuilt stacks equal what the env produced, byte for
byte, whatever the stacking wrapper pads with. A row can be drawn once the row after it is
stored (its next observation) and while the S - 1 rows before it are (the oldest rows of a
full ring lose them): `ReplayBuffer` excludes those rows.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from rl_hydra import speed
from rl_hydra.config import ConfigError


def shares_frames(observation_space: gym.Space, setting: bool | str) -> bool:
    """`buffer.share_frames`: true, false, or auto (uint8 stacks of frames: a Box (S >= 2, H, W);
    a grid of indices, such as MiniGrid's MultiDiscrete view, is no stack)."""
    shape = tuple(observation_space.shape or ())
    stacks = (isinstance(observation_space, gym.spaces.Box) and observation_space.dtype == np.uint8
              and len(shape) == 3 and shape[0] >= 2)
    if setting is True and not stacks:
        raise ConfigError(f"buffer.share_frames=true needs observations that stack uint8 frames, (S >= 2, H, W); "
                          f"the env has {observation_space} (use buffer.share_frames=auto or false)")
    return stacks if setting == "auto" else bool(setting)


class SharedFrames:
    """Observations (S, H, W) of `capacity` rows, each row storing one (H, W) frame."""

    def __init__(self, capacity: int, observation_space: gym.Space, num_envs: int, device: torch.device):
        self.capacity, self.num_envs, self.device = capacity, num_envs, device
        self.stack, *frame_shape = tuple(observation_space.shape)
        self.frame_shape = tuple(frame_shape)
        storage = speed.zeros({"frames": ((capacity, *frame_shape), torch.uint8),
                                     "starts": ((capacity,), torch.bool)}, torch.device("cpu"))
        self.frames, self.starts = storage["frames"].numpy(), storage["starts"].numpy()
        self.first_stacks: dict[int, np.ndarray] = {}    # row -> its whole observation (a start)
        self.final_stacks: dict[int, np.ndarray] = {}    # row -> its whole next observation (an end)
        self.previous: np.ndarray | None = None          # (num_envs, S, H, W): the last observations added

    @property
    def bytes_per_row(self) -> int:
        return int(np.prod(self.frame_shape)) + 1

    def add(self, rows: np.ndarray, obs: np.ndarray, next_obs: np.ndarray, ended: np.ndarray) -> None:
        """Rows (n,) of one vector step: observations and next observations (n, S, H, W), ended (n,)."""
        for row in rows:   # the rows' old entries go with the rows
            self.first_stacks.pop(int(row), None)
            self.final_stacks.pop(int(row), None)
        self.frames[rows] = obs[:, -1]
        if self.previous is None:
            continues = np.zeros(len(rows), dtype=bool)
        else:
            continues = np.array([np.array_equal(o[:-1], p[1:]) for o, p in zip(obs, self.previous)])
        self.starts[rows] = ~continues
        for i in np.flatnonzero(~continues):
            self.first_stacks[int(rows[i])] = obs[i].copy()
        for i in np.flatnonzero(ended):
            self.final_stacks[int(rows[i])] = next_obs[i].copy()
        self.previous = obs.copy()

    def observations(self, rows: np.ndarray) -> np.ndarray:
        """The observations (B, S, H, W) of rows (B,), rebuilt from the frames of their env's rows before them."""
        stack, steps = self.stack, self.num_envs
        window = (rows[:, None] - np.arange(stack - 1, -1, -1) * steps) % self.capacity   # (B, S) oldest first
        out = self.frames[window]                                                         # (B, S, H, W)
        starts = self.starts[window[:, 1:]]                                               # (B, S - 1)
        for b in np.flatnonzero(starts.any(axis=1)):   # a start within the window: older frames from its stack
            p = stack - 1 - int(np.argmax(starts[b, ::-1]))                               # the newest start's position
            out[b, :p] = self.first_stacks[int(window[b, p])][stack - 1 - p : stack - 1]
        return out

    def next_observations(self, rows: np.ndarray, ended: np.ndarray) -> np.ndarray:
        """The next observations (B, S, H, W) of rows (B,): the next row's observation, or the
        episode's real last one where it `ended` (B,) at that row."""
        out = self.observations((rows + self.num_envs) % self.capacity)
        for b in np.flatnonzero(ended):
            out[b] = self.final_stacks[int(rows[b])]
        return out

    def state_dict(self, size: int) -> dict:
        """The frames and flags of the first `size` rows (views, not copies) and the side tables."""
        def table(stacks: dict[int, np.ndarray]) -> dict:
            rows = sorted(stacks)
            shape = (len(rows), self.stack, *self.frame_shape)
            return {"rows": torch.tensor(rows, dtype=torch.int64),
                    "stacks": torch.from_numpy(np.stack([stacks[r] for r in rows]) if rows
                                               else np.zeros(shape, np.uint8))}
        return {"frames": torch.from_numpy(self.frames[:size]), "starts": torch.from_numpy(self.starts[:size]),
                "first_stacks": table(self.first_stacks), "final_stacks": table(self.final_stacks)}

    def load_state_dict(self, state: dict) -> None:
        size = len(state["frames"])
        self.frames[:size] = state["frames"].numpy()
        self.starts[:size] = state["starts"].numpy()
        for name in ("first_stacks", "final_stacks"):
            table = state[name]
            setattr(self, name, {int(r): s for r, s in zip(table["rows"].tolist(), table["stacks"].numpy())})
        self.previous = None   # the next observation added is stored whole: exact whatever the env resumes with


class FrameRings:
    """Each env's frames, stored once, in the order the env produced them: the observations of
    a sequence buffer's chunks (buffers/sequence.py) for stacks of frames (S, H, W).

    Env i's frames are numbered 0, 1, 2, ... as they are written and frame k sits in row
    k % `frames_per_env` of env i's ring. An episode writes its first observation's S frames
    (whatever the stacking wrapper padded it with), then each step's next observation's newest
    frame, the real last one included. So an episode's observations are consecutive windows of
    S frames, and a chunk, which never crosses an episode boundary, is named by its env and the
    number of its first observation's oldest frame. A chunk can be drawn while none of its
    frames has been overwritten (`drawable`).
    """

    def __init__(self, num_envs: int, frames_per_env: int, observation_space: gym.Space):
        self.stack, *frame_shape = tuple(observation_space.shape)
        self.frames_per_env = frames_per_env
        self.frames = speed.zeros({"frames": ((num_envs, frames_per_env, *frame_shape), torch.uint8)},
                                        torch.device("cpu"))["frames"].numpy()   # (n, K, H, W)
        self.written = np.zeros(num_envs, dtype=np.int64)       # frames written per env so far
        self.episode_begins = np.ones(num_envs, dtype=bool)    # the next observation starts an episode

    @property
    def frame_bytes(self) -> int:
        return int(np.prod(self.frames.shape[2:]))

    def add(self, obs: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        """One step of every env, observations and next observations (n, S, H, W); returns the
        number of each observation's oldest frame (n,)."""
        oldest = np.empty(len(obs), dtype=np.int64)
        for i in range(len(obs)):
            if self.episode_begins[i]:
                self._write(i, obs[i])
                self.episode_begins[i] = False
            elif not np.array_equal(obs[i], self.window(i, self.written[i] - self.stack)):
                raise ValueError("buffer.share_frames: an observation does not continue the step before it (it is "
                                 "not the last next observation stored, and no episode began)")
            if not np.array_equal(next_obs[i][:-1], obs[i][1:]):
                raise ValueError("buffer.share_frames: a next observation does not continue the observation "
                                 "(next_obs[:-1] != obs[1:]), so these are not stacks of frames; "
                                 "set buffer.share_frames=false")
            oldest[i] = self.written[i] - self.stack
            self._write(i, next_obs[i][-1:])
        return oldest

    def end_episodes(self, envs: np.ndarray) -> None:
        """The next observation of these envs begins an episode (its whole stack is written)."""
        self.episode_begins[envs] = True

    def _write(self, env: int, frames: np.ndarray) -> None:
        rows = (self.written[env] + np.arange(len(frames))) % self.frames_per_env
        self.frames[env, rows] = frames
        self.written[env] += len(frames)

    def window(self, env: int, first: int, count: int | None = None) -> np.ndarray:
        """Frames first .. first + count - 1 of an env (count: S by default)."""
        count = self.stack if count is None else count
        return self.frames[env, (first + np.arange(count)) % self.frames_per_env]

    def drawable(self, envs: np.ndarray, firsts: np.ndarray) -> np.ndarray:
        """Whether each chunk, named by its env and first frame (B,), still has all its frames."""
        return firsts >= self.written[envs] - self.frames_per_env

    def stacks(self, envs: np.ndarray, firsts: np.ndarray, count: int) -> torch.Tensor:
        """`count` consecutive observations (count, B, S, H, W) of B chunks: observation t stacks
        frames first + t .. first + t + S - 1 of the chunk's env."""
        offsets = np.arange(count + self.stack - 1)                                        # (T + S - 1,)
        rows = (firsts[:, None] + offsets) % self.frames_per_env                           # (B, T + S - 1)
        frames = torch.from_numpy(self.frames[envs[:, None], rows]).transpose(0, 1)       # (T + S - 1, B, H, W)
        return frames.unfold(0, self.stack, 1).movedim(-1, 2).contiguous()                 # (T, B, S, H, W)

    def state_dict(self) -> dict:
        """Each env's written rows (views, not copies) and the counters."""
        kept = np.minimum(self.written, self.frames_per_env)
        return {"frames": [torch.from_numpy(self.frames[i, : kept[i]]) for i in range(len(kept))],
                "frames_per_env": self.frames_per_env, "written": torch.from_numpy(self.written.copy()),
                "episode_begins": torch.from_numpy(self.episode_begins.copy())}

    def load_state_dict(self, state: dict) -> None:
        if len(state["written"]) != len(self.written):
            raise ValueError(f"buffer holds the frames of {len(state['written'])} envs but env.num_envs="
                             f"{len(self.written)}")
        if state["frames_per_env"] != self.frames_per_env:
            raise ValueError(f"buffer keeps {state['frames_per_env']} frames per env but this one "
                             f"{self.frames_per_env} (buffer.capacity, buffer.sequence_length or buffer.stride differ)")
        for i, saved in enumerate(state["frames"]):
            self.frames[i, : len(saved)] = saved.numpy()
        self.written[:] = state["written"].numpy()
        self.episode_begins[:] = state["episode_begins"].numpy()
