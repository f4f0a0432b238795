"""Frame stacks stored one frame per row: a replay buffer's observations for Atari-like envs
(`SharedFrames`), and a sequence buffer's (`FrameRings`, at the end).

An Atari observation is a stack of the last S frames (4 x 84 x 84 uint8), and consecutive
observations of an env share S - 1 of them. Storing each observation and next observation
whole keeps every frame 2S times; here each row keeps only its observation's newest frame,
and a stack is rebuilt at sample time from the rows of the same env before it (num_envs rows
apart). Two kinds of rows keep a whole stack beside, in a pool of stacks, because their frames
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

from rl_hydra.buffers.device import to_device
from rl_hydra.errors import EnvMismatch
from rl_hydra.spaces import shape_of


def shares_frames(observation_space: gym.Space, setting: bool | str) -> bool:
    """`buffer.share_frames`: true, false, or auto (uint8 stacks of frames: a Box (S >= 2, H, W);
    a grid of indices, such as MiniGrid's MultiDiscrete view, is no stack)."""
    shape = tuple(observation_space.shape or ())
    stacks = (
        isinstance(observation_space, gym.spaces.Box)
        and observation_space.dtype == np.uint8
        and len(shape) == 3
        and shape[0] >= 2
    )
    if setting is True and not stacks:
        raise EnvMismatch(
            f"buffer.share_frames=true needs observations that stack uint8 frames, (S >= 2, H, W); "
            f"the env has {observation_space} (use buffer.share_frames=auto or false)"
        )
    return stacks if setting == "auto" else bool(setting)


class SharedFrames:
    """Observations (S, H, W) of `capacity` rows, each row storing one (H, W) frame.

    The frames, and the whole stacks of the two kinds of rows above (a pool of slots, `stacks`),
    live on `device`: on a GPU a batch's stacks are gathered there and never cross PCIe. What
    says where each frame of a stack comes from (the start flags, and each row's slots in the
    pool, -1 for none) is a few bytes per row and stays on the host, where the buffer draws its
    rows: a batch's frame indices are worked out there and sent in one copy, and adding a step
    never reads from the device.
    """

    def __init__(self, capacity: int, observation_space: gym.Space, num_envs: int, device: torch.device):
        self.capacity, self.num_envs, self.device = capacity, num_envs, torch.device(device)
        self.stack, *frame_shape = shape_of(observation_space)
        self.frame_shape = tuple(frame_shape)
        self.frames = torch.zeros((capacity, *frame_shape), dtype=torch.uint8, device=self.device)
        self.starts = np.zeros(capacity, dtype=bool)
        # row -> the slot of its whole observation (a start: "first") or next observation (an end: "final")
        self.slots = {kind: np.full(capacity, -1, dtype=np.int64) for kind in ("first", "final")}
        self.stacks = torch.zeros((0, self.stack, *frame_shape), dtype=torch.uint8, device=self.device)
        self.free: list[int] = []  # slots of `stacks` no row names
        self.grow(max(16, 4 * num_envs))
        self.previous: np.ndarray | None = None  # (num_envs, S, H, W): the last observations added
        self.back = np.arange(self.stack - 1, -1, -1) * num_envs  # (S,) vector steps back, oldest first
        self.positions = np.arange(self.stack)  # (S,)

    @staticmethod
    def row_bytes(observation_space: gym.Space) -> int:
        """Bytes a row takes: a frame, its start flag, its two slots."""
        return int(np.prod(shape_of(observation_space)[1:])) + 1 + 2 * 8

    def grow(self, count: int) -> None:
        """Room for `count` more stacks in the pool (at least doubling it)."""
        old = len(self.stacks)
        size = max(2 * old, old + count)
        stacks = torch.zeros((size, self.stack, *self.frame_shape), dtype=torch.uint8, device=self.device)
        stacks[:old] = self.stacks
        self.stacks = stacks
        self.free.extend(range(size - 1, old - 1, -1))  # popped from the end: the lowest first

    def take_slots(self, count: int) -> np.ndarray:
        if len(self.free) < count:
            self.grow(count - len(self.free))
        return np.array([self.free.pop() for _ in range(count)], dtype=np.int64)

    def to_device(self, array: np.ndarray) -> torch.Tensor:
        return to_device(torch.from_numpy(np.ascontiguousarray(array)), self.device)

    def add(self, rows: np.ndarray, obs: np.ndarray, next_obs: np.ndarray, ended: np.ndarray) -> None:
        """Rows (n,) of one vector step: observations and next observations (n, S, H, W), ended (n,)."""
        for taken in self.slots.values():  # the rows' old stacks go with the rows
            old = taken[rows]
            self.free.extend(old[old >= 0].tolist())
            taken[rows] = -1
        if self.previous is None:
            continues = np.zeros(len(rows), dtype=bool)
        else:
            continues = np.array([np.array_equal(o[:-1], p[1:]) for o, p in zip(obs, self.previous)])
        self.starts[rows] = ~continues
        starts, ends = np.flatnonzero(~continues), np.flatnonzero(ended)
        slots = self.take_slots(len(starts) + len(ends))
        self.slots["first"][rows[starts]], self.slots["final"][rows[ends]] = slots[: len(starts)], slots[len(starts) :]
        self.frames[self.to_device(rows)] = self.to_device(obs[:, -1])
        if len(slots):
            self.stacks[self.to_device(slots)] = self.to_device(np.concatenate([obs[starts], next_obs[ends]]))
        self.previous = obs.copy()

    def observations(self, rows: np.ndarray, last: np.ndarray, ended: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The observations (B, S, H, W) of rows (B,) and the next observations of rows `last` (B,),
        where `ended` (B,) says whether the episode ended at that row, gathered on the device at once."""
        frame, pooled, from_pool = self.sources(np.concatenate([rows, (last + self.num_envs) % self.capacity]))
        # a next observation where the episode ended: the real last one, whole from the pool
        ends = len(rows) + np.flatnonzero(ended)
        pooled[ends] = self.slots["final"][last[ended], None] * self.stack + self.positions
        from_pool[ends] = True
        # one copy to the device: every frame's row, then the k frames from the pool: where they go, where they are
        moved = np.flatnonzero(from_pool)  # (k,)
        index = self.to_device(np.concatenate([frame.ravel(), moved, pooled.ravel()[moved]]))
        n, k = frame.size, len(moved)
        out = self.frames.index_select(0, index[:n])  # (2B * S, H, W)
        if k:
            out.index_copy_(
                0, index[n : n + k], self.stacks.view(-1, *self.frame_shape).index_select(0, index[n + k :])
            )
        return tuple(out.view(2, len(rows), self.stack, *self.frame_shape))

    def sources(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each frame of the observations of rows (B,) is: its row in `frames` (B, S), its
        index in the pool's frames (B, S), and which of the two holds it (B, S)."""
        window = (rows[:, None] - self.back) % self.capacity  # (B, S) oldest first
        # the newest start after the window's oldest position (0: none); the frames before it
        # come from that row's whole first observation, whose last frame is the start's own
        newest = (self.starts[window[:, 1:]] * self.positions[1:]).max(axis=1)  # (B,)
        slot = np.maximum(self.slots["first"][window[np.arange(len(rows)), newest]], 0)  # (B,)
        in_stack = np.minimum(self.positions + (self.stack - 1) - newest[:, None], self.stack - 1)  # (B, S)
        return window, slot[:, None] * self.stack + in_stack, self.positions < newest[:, None]

    def state_dict(self, size: int) -> dict:
        """The frames and flags of the first `size` rows (views of host memory, not copies) and the side tables."""

        def table(kind: str) -> dict:
            rows = np.flatnonzero(self.slots[kind] >= 0)
            return {"rows": torch.from_numpy(rows), "stacks": self.stacks[self.to_device(self.slots[kind][rows])].cpu()}

        return {
            "frames": stored_rows(self.frames, size),
            "starts": torch.from_numpy(self.starts[:size]),
            "first_stacks": table("first"),
            "final_stacks": table("final"),
        }

    def load_state_dict(self, state: dict) -> None:
        size = len(state["frames"])
        self.frames[:size] = state["frames"].to(self.device)
        self.starts[:size] = state["starts"].numpy()
        self.free = list(range(len(self.stacks) - 1, -1, -1))
        for kind in ("first", "final"):
            table = state[f"{kind}_stacks"]
            rows = table["rows"].numpy()
            slots = self.take_slots(len(rows))
            self.slots[kind].fill(-1)
            self.slots[kind][rows] = slots
            if len(rows):
                self.stacks[self.to_device(slots)] = table["stacks"].to(self.device)
        self.previous = None  # the next observation added is stored whole: exact whatever the env resumes with


def stored_rows(tensor: torch.Tensor, size: int) -> torch.Tensor:
    """The first `size` rows of `tensor` in host memory: on the CPU a tensor of just their memory
    (torch.save writes a view's whole storage), from a GPU a copy."""
    if tensor.device.type == "cpu":
        return torch.from_numpy(tensor.numpy()[:size])
    return tensor[:size].cpu()


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
        self.stack, *frame_shape = shape_of(observation_space)
        self.frames_per_env = frames_per_env
        # (n, K, H, W): a tensor's memory, indexed through numpy (as ReplayBuffer's host views)
        self.frames = torch.zeros((num_envs, frames_per_env, *frame_shape), dtype=torch.uint8).numpy()
        self.written = np.zeros(num_envs, dtype=np.int64)  # frames written per env so far
        self.episode_begins = np.ones(num_envs, dtype=bool)  # the next observation starts an episode

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
                raise ValueError(
                    "buffer.share_frames: an observation does not continue the step before it (it is "
                    "not the last next observation stored, and no episode began)"
                )
            if not np.array_equal(next_obs[i][:-1], obs[i][1:]):
                raise ValueError(
                    "buffer.share_frames: a next observation does not continue the observation "
                    "(next_obs[:-1] != obs[1:]), so these are not stacks of frames; "
                    "set buffer.share_frames=false"
                )
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
        offsets = np.arange(count + self.stack - 1)  # (T + S - 1,)
        rows = (firsts[:, None] + offsets) % self.frames_per_env  # (B, T + S - 1)
        frames = torch.from_numpy(self.frames[envs[:, None], rows]).transpose(0, 1)  # (T + S - 1, B, H, W)
        return frames.unfold(0, self.stack, 1).movedim(-1, 2).contiguous()  # (T, B, S, H, W)

    def state_dict(self) -> dict:
        """Each env's written rows (views, not copies) and the counters."""
        kept = np.minimum(self.written, self.frames_per_env)
        return {
            "frames": [torch.from_numpy(self.frames[i, : kept[i]]) for i in range(len(kept))],
            "frames_per_env": self.frames_per_env,
            "written": torch.from_numpy(self.written.copy()),
            "episode_begins": torch.from_numpy(self.episode_begins.copy()),
        }

    def load_state_dict(self, state: dict) -> None:
        if len(state["written"]) != len(self.written):
            raise ValueError(
                f"buffer holds the frames of {len(state['written'])} envs but env.num_envs={len(self.written)}"
            )
        if state["frames_per_env"] != self.frames_per_env:
            raise ValueError(
                f"buffer keeps {state['frames_per_env']} frames per env but this one "
                f"{self.frames_per_env} (buffer.capacity, buffer.sequence_length or buffer.stride differ)"
            )
        for i, saved in enumerate(state["frames"]):
            self.frames[i, : len(saved)] = saved.numpy()
        self.written[:] = state["written"].numpy()
        self.episode_begins[:] = state["episode_begins"].numpy()
