"""Uniform replay of single transitions in preallocated tensors (a ring buffer), with n-step returns.

Rows are stored as the env produced them, one per env and step; each part of an observation (a
Dict observation's image and direction, say) in a column of its own, in its own compact dtype
(rl_hydra/spaces.py), and a batch gives them back as a dict. With `n_step` > 1 each sampled
row becomes an n-step transition at sample time (`n_step_returns`): the discounted sum of the
next rewards of the same env, stopped where its episode ended, the observation to bootstrap
from and the discount gamma^k for the k rewards actually summed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import gymnasium as gym
import numpy as np
import torch

from rl_hydra import spaces
from rl_hydra.buffers.device import DeviceMemoryShort, to_device
from rl_hydra.buffers.frames import SharedFrames, shares_frames
from rl_hydra.protocols import Batch, restore_generator

log = logging.getLogger(__name__)


STORED = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")  # columns, in Batch's order


def column_name(field: str, part: str) -> str:
    """The storage column of an observation field's part: "obs" for a one-array observation,
    "obs/image" for a part of a Dict one."""
    return f"{field}/{part}" if part else field


def n_step_returns(rewards: torch.Tensor, ended: torch.Tensor, gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The discounted sum of up to n rewards of one env, stopped after the step where its episode ended.

    Returns (the sums (B,), k: how many rewards each one summed (B,), 1..n). Step i counts
    when no earlier step of the n ended its episode; the caller bootstraps from step k - 1.
    """
    # rewards, ended: (B, n); ended is bool (terminated or truncated at that step)
    batch, n = rewards.shape
    still_running = (~ended[:, :-1]).to(rewards.dtype).cumprod(dim=1)  # (B, n - 1)
    counted = torch.cat([rewards.new_ones(batch, 1), still_running], dim=1)  # (B, n)
    powers = gamma ** torch.arange(n, device=rewards.device, dtype=rewards.dtype)  # (n,)
    return (counted * powers * rewards).sum(dim=1), counted.sum(dim=1).long()  # (B,), (B,)


def check_host_memory(
    total_bytes: int,
    device: torch.device,
    capacity: int,
    bytes_per_row: int,
    kind: str = "replay buffer",
    row: str = "transition",
    detail: str = "",
) -> None:
    """Say which buffer this is (`kind`: its describe()) and how much memory it takes (capacity
    rows of `row`s); refuse one that its device cannot hold (the machine's available memory, or
    a GPU's free memory)."""
    log.info(
        "%s: %d %ss x %s = %s%s%s",
        kind,
        capacity,
        row,
        human_bytes(bytes_per_row),
        human_bytes(total_bytes),
        detail,
        f", in {device}'s memory" if device.type == "cuda" else "",
    )
    available: int | None
    if device.type == "cuda":
        available, where = torch.cuda.mem_get_info(device)[0], f"{device} has"
    else:
        available, where = (available_memory() if device.type == "cpu" else None), "this machine has"
    if available is not None and total_bytes > available:
        raise DeviceMemoryShort(
            f"buffer.capacity={capacity} needs {human_bytes(total_bytes)} "
            f"({human_bytes(bytes_per_row)} per {row}) but {where} {human_bytes(available)} free; "
            f"lower buffer.capacity (at most {available // bytes_per_row})"
        )


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (Linux), else None."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} GB"


def as_numpy(value) -> np.ndarray:
    """An array or tensor (on any device) as a numpy array."""
    return value.cpu().numpy() if torch.is_tensor(value) else np.asarray(value)


def split_rows(value, size: int) -> list:
    """A batch field (a tensor, or a dict of parts) cut into consecutive pieces of `size` rows."""
    if isinstance(value, dict):
        pieces = {key: part.split(size) for key, part in value.items()}
        return [dict(zip(pieces, piece)) for piece in zip(*pieces.values())]
    return list(value.split(size))


def action_layout(action_space: gym.Space) -> tuple[tuple[int, ...], torch.dtype]:
    if isinstance(action_space, gym.spaces.Discrete):
        return (), torch.int64
    return spaces.shape_of(action_space), torch.float32


class ReplayBuffer:
    """Holds the last `capacity` transitions; `add` takes one row per vector env.

    `n_step` and `gamma` are the run's `algo.n_step` and `algo.gamma`, handed here and not to a
    feed-forward agent (build.build_components), which learns from the returns and discounts its
    batches carry. A row is drawn only once its next n - 1 steps are stored.
    """

    recurrent = False
    max_gather_rows = 16384  # sample_batches gathers at most this many rows at once
    sampling = "uniform"  # how rows are drawn: describe()'s first word

    def __init__(
        self,
        capacity: int,
        observation_space: gym.Space,
        action_space: gym.Space,
        *,
        num_envs: int,
        device: str | torch.device,
        seed: int,
        n_step: int,
        gamma: float,
        share_frames: bool | str,
    ):
        self.capacity = capacity
        self.n_step = n_step
        self.gamma = gamma
        self.num_envs = num_envs
        share = shares_frames(observation_space, share_frames)
        # rows of the same env's later (earlier) steps a drawable row needs: its n-step future
        # (and, with shared frames, the row after it, which holds its next observation) and its
        # frame history (the stack's older frames)
        self.lookahead = self.n_step - 1 + int(share)
        self.lookbehind = spaces.shape_of(observation_space)[0] - 1 if share else 0
        if (self.lookahead or self.lookbehind) and self.capacity % num_envs:
            # a step of an env is num_envs rows after the one before only if the ring holds whole vector steps
            self.capacity += num_envs - self.capacity % num_envs
            log.info(
                "buffer.capacity rounded up to %d, a multiple of the %d envs (n-step returns)", self.capacity, num_envs
            )
        self.device = torch.device(device)
        # where rows are drawn and a batch's n-step arithmetic runs: with shared frames on the
        # host, beside the frames' own index (the frames themselves live on `device`), so that
        # a batch is worked out with no device round trip and its stacks are sent one index copy
        self.rows_device = torch.device("cpu") if share else self.device
        parts = spaces.layout(observation_space)  # {part: (shape, dtype)}; {"": ...} for one array
        self.parts = list(parts)
        action_shape, action_dtype = action_layout(action_space)
        rows = lambda shape, dtype=torch.float32: ((self.capacity, *shape), dtype)  # noqa: E731
        observations = {
            field: {column_name(field, part): rows(shape, dtype) for part, (shape, dtype) in parts.items()}
            for field in ("obs", "next_obs")
        }
        columns = {
            **observations["obs"],
            "actions": rows(action_shape, action_dtype),
            "rewards": rows(()),
            **observations["next_obs"],
            "terminated": rows(()),
            "truncated": rows(()),
        }
        # one frame per row (buffers/frames.py) instead of the two observation columns
        self.frames_shared, self.frames = share, None
        if share:
            del columns["obs"], columns["next_obs"]
        self.bytes_per_row = sum(
            int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size() for shape, dtype in columns.values()
        ) // self.capacity + (SharedFrames.row_bytes(observation_space) if share else 0)
        check_host_memory(
            self.capacity * self.bytes_per_row,
            self.device,
            self.capacity,
            self.bytes_per_row,
            kind=self.describe(),
            detail="" if share else f" (an observation: {spaces.describe_layout(observation_space)}, stored twice)",
        )
        if share:  # allocated once the check passed: on a GPU the frames take their memory at once
            self.frames = SharedFrames(self.capacity, observation_space, num_envs, self.device)
        # add and sample pair columns with values by position (STORED's order, an observation's
        # parts in spaces.parts order)
        self.storage = {
            name: torch.zeros(shape, dtype=dtype, device=self.rows_device) for name, (shape, dtype) in columns.items()
        }
        assert tuple(self.storage) == tuple(columns)
        # on CPU, numpy views of the same memory make `add` several times cheaper
        self.host_views = (
            tuple(column.numpy() for column in self.storage.values()) if self.rows_device.type == "cpu" else None
        )
        self.pos = 0
        self.size = 0
        self.generator = torch.Generator(device=self.rows_device)
        self.generator.manual_seed(seed)
        self._constants: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def describe(self) -> str:
        """The kind of buffer in words, e.g. "prioritized replay buffer (3-step returns, frames
        stored once)", for the log line that also gives its size: the size alone does not say
        how rows are drawn or what a row holds. Needs only what __init__ sets before it logs."""
        details = []
        if self.n_step > 1:
            details.append(f"{self.n_step}-step returns")
        if self.frames_shared:
            details.append("frames stored once")
        kind = f"{self.sampling} replay buffer"
        return f"{kind} ({', '.join(details)})" if details else kind

    def __len__(self) -> int:
        """Rows that can be drawn: all stored ones but the last `lookahead` vector steps' (their
        returns or next observations are not stored yet) and, once the ring is full, the oldest
        `lookbehind` steps' (their frame history was overwritten)."""
        return max(0, self.size - (self.lookahead + self.behind) * self.num_envs)

    @property
    def behind(self) -> int:
        """Vector steps at the old end that cannot be drawn now."""
        return self.lookbehind if self.size == self.capacity else 0

    @property
    def oldest(self) -> int:
        """The row of the oldest stored transition."""
        return self.pos if self.size == self.capacity else 0

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        """Store one transition per env; arguments are arrays or tensors with a leading num_envs axis."""
        values = (*spaces.split(obs), actions, rewards, *spaces.split(next_obs), terminated, truncated)  # columns'
        n = len(rewards)
        if self.frames is not None:
            frame_rows = (self.pos + np.arange(n)) % self.capacity
            self.frames.add(
                frame_rows,
                as_numpy(obs),
                as_numpy(next_obs),
                as_numpy(terminated).astype(bool) | as_numpy(truncated).astype(bool),
            )
            values = (actions, rewards, terminated, truncated)
        rows: slice | torch.Tensor
        if self.pos + n <= self.capacity:
            rows = slice(self.pos, self.pos + n)
        else:  # wraps around the end
            rows = torch.arange(self.pos, self.pos + n, device=self.rows_device) % self.capacity
        if self.host_views is not None:
            host_rows = rows if isinstance(rows, slice) else rows.numpy()
            for view, value in zip(self.host_views, values):
                view[host_rows] = value.cpu().numpy() if torch.is_tensor(value) else value
        else:
            for column, value in zip(self.storage.values(), values):
                column[rows] = to_device(torch.as_tensor(value, dtype=column.dtype), self.rows_device)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample_indices(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rows to draw (batch_size,) and their importance weights (None: all 1): uniform here."""
        if self.lookahead == 0 and self.lookbehind == 0:
            return torch.randint(self.size, (batch_size,), device=self.rows_device, generator=self.generator), None
        offsets = torch.randint(len(self), (batch_size,), device=self.rows_device, generator=self.generator)
        return (self.oldest + self.behind * self.num_envs + offsets) % self.capacity, None

    def sample(self, batch_size: int) -> Batch:
        return self.batch_at(*self.sample_indices(batch_size))

    def batch_at(self, idx: torch.Tensor, weights: torch.Tensor | None = None) -> Batch:
        """The transitions starting at rows `idx` (B,), as a Batch with `weights` (B,) (None: all 1)."""
        batch_size = idx.shape[0]
        discounts, ones = self.constants(batch_size)
        weights = ones if weights is None else weights
        if self.n_step == 1 and self.frames is None:
            if self.host_views is not None:  # numpy's take is about twice as fast as tensor indexing here
                rows = idx.numpy()
                columns = [torch.from_numpy(view.take(rows, axis=0)) for view in self.host_views]
            else:
                columns = [column[idx] for column in self.storage.values()]
            k = len(self.parts)  # the columns: obs parts, actions, rewards, next_obs parts, terminated, truncated
            return Batch(
                spaces.join(self.parts, columns[:k]),
                columns[k],
                columns[k + 1],
                spaces.join(self.parts, columns[k + 2 : 2 * k + 2]),
                columns[2 * k + 2],
                columns[2 * k + 3],
                discounts=discounts,
                weights=weights,
                indices=idx,
            )
        return self.n_step_batch(idx, weights)

    def n_step_batch(self, idx: torch.Tensor, weights: torch.Tensor) -> Batch:
        store = self.storage
        steps = torch.arange(self.n_step, device=self.rows_device) * self.num_envs  # (n,) the same env's next rows
        rows = (idx[:, None] + steps) % self.capacity  # (B, n)
        ended = (store["terminated"][rows] + store["truncated"][rows]) > 0  # (B, n)
        returns, k = n_step_returns(store["rewards"][rows], ended, self.gamma)  # (B,), (B,)
        last = rows.gather(1, (k - 1)[:, None]).squeeze(1)  # (B,) the step to bootstrap from
        obs, next_obs = self.observations(idx, last, ended.gather(1, (k - 1)[:, None]).squeeze(1))
        batch = Batch(
            obs=obs,
            actions=store["actions"][idx],
            rewards=returns,
            next_obs=next_obs,
            terminated=store["terminated"][last],
            truncated=store["truncated"][last],
            discounts=self.gamma ** k.to(returns.dtype),
            weights=weights,
            indices=idx,
        )
        return batch if self.rows_device == self.device else to_device(batch, self.device)

    def observations(self, idx: torch.Tensor, last: torch.Tensor, ended: torch.Tensor) -> tuple:
        """The observations of rows `idx` (B,) and the next observations of rows `last` (B,),
        where `ended` (B,) says whether the episode ended at that row."""
        if self.frames is None:
            return tuple(
                spaces.join(self.parts, [self.storage[column_name(field, part)][rows] for part in self.parts])
                for field, rows in (("obs", idx), ("next_obs", last))
            )
        return self.frames.observations(idx.numpy(), last.numpy(), ended.numpy())

    def constants(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(gamma, 1) columns of a batch, made once per batch size: the one-step discounts and uniform weights."""
        if batch_size not in self._constants:
            self._constants[batch_size] = (
                torch.full((batch_size,), self.gamma, device=self.rows_device),
                torch.ones(batch_size, device=self.rows_device),
            )
        return self._constants[batch_size]

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
            yield from (Batch(*fields) for fields in zip(*(split_rows(value, batch_size) for value in rows)))

    def state_dict(self) -> dict:
        """Views of the stored rows, not copies: a checkpoint streams them to disk from where they
        are (a buffer of several GB is not held twice)."""
        if self.host_views is not None:  # a tensor of just the stored rows' memory (torch.save writes whole storages)
            storage = {key: torch.from_numpy(view[: self.size]) for key, view in zip(self.storage, self.host_views)}
        else:
            storage = {key: column[: self.size].clone() for key, column in self.storage.items()}
        state = {"pos": self.pos, "size": self.size, "generator": self.generator.get_state(), "storage": storage}
        if self.frames is not None:
            state["frames"] = self.frames.state_dict(self.size)
        return state

    def load_state_dict(self, state: dict) -> None:
        if state["size"] > self.capacity:
            raise ValueError(f"buffer holds {state['size']} transitions but buffer.capacity={self.capacity}")
        for key, column in self.storage.items():
            column[: state["size"]] = state["storage"][key].to(self.rows_device)
        if self.frames is not None:
            self.frames.load_state_dict(state["frames"])
        self.pos, self.size = state["pos"], state["size"]
        restore_generator(self.generator, state["generator"])
