"""Frame stacks stored one frame per row: a replay buffer's observations for Atari-like envs.

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

from rl_hydra import host_memory
from rl_hydra.config import ConfigError


def shares_frames(observation_space: gym.Space, setting: bool | str) -> bool:
    """`buffer.share_frames`: true, false, or auto (uint8 stacks of frames: (S >= 2, H, W))."""
    shape = tuple(observation_space.shape or ())
    stacks = observation_space.dtype == np.uint8 and len(shape) == 3 and shape[0] >= 2
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
        storage = host_memory.zeros({"frames": ((capacity, *frame_shape), torch.uint8),
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
