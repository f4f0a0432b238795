"""Replay shards: what a Ray replay actor holds. Actors `add` finished n-step transitions (or
sequences) with the priorities they computed; the learner `sample`s batches and sends back
`update_priorities`. Plain classes: rl_hydra/distributed/cluster.py makes them Ray actors.

A transition shard holds the run's own transition buffer (buffer=prioritized: Ape-X; buffer=replay:
uniform), built for one-step rows: an actor has already summed each row's n rewards, so the row's
`rewards` is the n-step return, `next_obs` the observation to bootstrap from, and the discount
gamma^k of the k rewards summed is kept beside the buffer, row by row (k < n where an episode ended).

A sequence shard keeps whole chunks as an actor's sequence buffer cut them (stored recurrent
state, padding mask, episode start), drawn by R2D2's sequence priority in a sum tree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from rl_hydra.buffers import compiled_sum_tree
from rl_hydra.build import build
from rl_hydra.errors import ConfigError
from rl_hydra.protocols import Batch, SequenceBatch


def as_tensors(value: Any) -> Any:
    """Numpy arrays (in dicts, tuples, NamedTuples) as tensors, sharing their memory where it is
    writable (Ray hands over read-only arrays from its object store: those are copied)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value if value.flags.writeable else value.copy())
    if isinstance(value, dict):
        return {key: as_tensors(part) for key, part in value.items()}
    if isinstance(value, tuple):
        parts = [as_tensors(part) for part in value]
        return type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
    return value


def as_arrays(value: Any) -> Any:
    """Tensors (in dicts, tuples, NamedTuples) as numpy arrays on the host: what Ray ships cheapest."""
    if torch.is_tensor(value):
        return value.detach().cpu().numpy()
    if isinstance(value, dict):
        return {key: as_arrays(part) for key, part in value.items()}
    if isinstance(value, tuple):
        parts = [as_arrays(part) for part in value]
        return type(value)(*parts) if hasattr(value, "_fields") else tuple(parts)
    return value


class TransitionShard:
    """The run's transition buffer (`cfg.buffer`) for rows that arrive as finished n-step transitions."""

    def __init__(self, buffer_cfg: dict, observation_space, action_space, gamma: float, seed: int):
        node = OmegaConf.create(buffer_cfg)
        node.pop("device", None)
        self.refused: str | None = None  # why the buffer could not be built here (`ready` says it)
        try:
            self.buffer = build(
                node,
                "buffer",
                observation_space=observation_space,
                action_space=action_space,
                num_envs=1,
                device="cpu",
                seed=seed,
                n_step=1,
                gamma=gamma,
                share_frames=False,
            )
        except ConfigError as error:  # too large for this node's memory, ...
            self.refused = str(error)
            return
        self.discounts = np.zeros(self.buffer.capacity, np.float32)  # gamma^k of each row's return
        self.prioritized = hasattr(self.buffer, "update_priorities")
        self.added = 0

    def add(self, batch: Batch, priorities: np.ndarray | None) -> int:
        """Store an actor's transitions (B rows) and their initial priorities (B,); rows stored so far."""
        n = len(batch.rewards)
        rows = (self.buffer.pos + np.arange(n)) % self.buffer.capacity
        self.buffer.add(batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.terminated, batch.truncated)
        self.discounts[rows] = batch.discounts
        if self.prioritized and priorities is not None:
            self.buffer.update_priorities(torch.from_numpy(rows), torch.from_numpy(np.asarray(priorities)))
        self.added += n
        return self.added

    def __len__(self) -> int:
        return len(self.buffer)

    def ready(self) -> str | None:
        """None, or why the shard's buffer could not be built (one line)."""
        return self.refused

    def sample(self, batch_size: int, count: int) -> list[Batch] | None:
        """`count` batches (numpy arrays), or None while fewer than `batch_size` rows are stored."""
        if len(self.buffer) < batch_size:
            return None
        batches = []
        for _ in range(count):
            batch = self.buffer.sample(batch_size)
            batches.append(as_arrays(batch._replace(discounts=torch.from_numpy(self.discounts[batch.indices.numpy()]))))
        return batches

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        if self.prioritized:
            self.buffer.update_priorities(torch.from_numpy(indices), torch.from_numpy(priorities))

    def state_dict(self) -> dict[str, Any]:
        return {
            "buffer": self.buffer.state_dict(),
            "discounts": torch.from_numpy(self.discounts.copy()),
            "added": self.added,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.discounts[:] = state["discounts"].numpy()
        self.added = int(state["added"])


class SequenceShard:
    """The last `capacity` sequences (chunks), drawn with probability p_i^alpha / sum_k p_k^alpha, p_i
    the sequence's priority (R2D2: eta * max + (1 - eta) * mean of its |TD errors|), in the sum tree
    of the prioritized transition buffer. Each batch carries the importance weights (min_j p_j /
    p_i)^beta over its sequences, which DRQN's loss scales each sequence's steps by."""

    def __init__(self, buffer_cfg: dict, seed: int, alpha: float, beta: float = 0.0, epsilon: float = 1e-6):
        self.capacity = int(buffer_cfg["capacity"])  # checked with the run's config (rl_hydra/schema/buffers.py)
        self.alpha, self.beta, self.epsilon = alpha, beta, epsilon
        # the sequence buffer's schema has no sum_tree key (prioritized replay's): compiled where numba is installed
        self.tree = compiled_sum_tree.make_sum_tree(self.capacity, "auto")
        self.chunks: dict[str, Any] | None = None  # field -> (T, capacity, ...) tensors, made at the first add
        self.pos = self.size = self.added = 0
        self.rng = np.random.default_rng(seed)

    def add(self, batch: SequenceBatch, priorities: np.ndarray) -> int:
        """Store an actor's sequences (B of them, time-major) with their initial priorities (B,)."""
        batch = as_tensors(batch)
        n = len(batch.episode_start)
        if self.chunks is None:
            self.chunks = allocate_chunks(batch, self.capacity)
        rows = (self.pos + np.arange(n)) % self.capacity
        write_chunks(self.chunks, batch, torch.from_numpy(rows))
        self.tree.update_priorities(rows, np.asarray(priorities, np.float64), self.epsilon, self.alpha)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.added += n
        return self.added

    def __len__(self) -> int:
        return self.size

    def ready(self) -> str | None:
        """None: its chunks are allocated at the first add, once their shapes are known."""
        return None

    def sample(self, batch_size: int, count: int) -> list[tuple[SequenceBatch, np.ndarray]] | None:
        """`count` (batch, its rows (B,)), or None while fewer than `batch_size` sequences are stored."""
        if self.size < batch_size or self.chunks is None:
            return None
        out = []
        for _ in range(count):
            rows, weights = self.tree.draw_stratified(self.rng.random(batch_size), self.beta)  # (B,), (B,)
            batch = read_chunks(self.chunks, torch.from_numpy(rows))._replace(weights=torch.from_numpy(weights))
            out.append((as_arrays(batch), rows))
        return out

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        self.tree.update_priorities(indices, np.asarray(priorities, np.float64), self.epsilon, self.alpha)

    def state_dict(self) -> dict[str, Any]:
        chunks = (
            None
            if self.chunks is None
            else {
                key: [part[:, : self.size].clone() for part in value]
                if isinstance(value, list)
                else value[:, : self.size].clone()
                for key, value in self.chunks.items()
            }
        )
        return {
            "chunks": chunks,
            "pos": self.pos,
            "size": self.size,
            "added": self.added,
            "priorities": torch.from_numpy(self.tree.state_dict()["leaves"]),
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.size, self.added = int(state["pos"]), int(state["size"]), int(state["added"])
        if state["chunks"] is not None:
            saved = state["chunks"]
            self.chunks = {
                key: [torch.zeros((p.shape[0], self.capacity, *p.shape[2:]), dtype=p.dtype) for p in value]
                if isinstance(value, list)
                else torch.zeros((value.shape[0], self.capacity, *value.shape[2:]), dtype=value.dtype)
                for key, value in saved.items()
            }
            for key, value in saved.items():
                if isinstance(value, list):
                    for part, stored in zip(self.chunks[key], value):
                        part[:, : self.size] = stored
                else:
                    self.chunks[key][:, : self.size] = value
        self.tree.load_state_dict({"leaves": state["priorities"].numpy()})
        self.rng.bit_generator.state = state["rng"]


# A chunk's fields, stored as (T, capacity, ...) tensors with the batch axis second; `state` (B, ...)
# tensors and `episode_start` (B,) get a leading axis of 1 so that every field is indexed alike.
def chunk_fields(batch: SequenceBatch) -> dict[str, Any]:
    fields: dict[str, Any] = {key: getattr(batch, key) for key in ("actions", "rewards", "terminated", "mask")}
    if isinstance(batch.obs, dict):
        for part, value in batch.obs.items():
            fields[f"obs/{part}"] = value
    else:
        fields["obs"] = batch.obs
    fields["episode_start"] = batch.episode_start[None]
    fields["state"] = [s[None] for s in batch.state]
    return fields


def allocate_chunks(batch: SequenceBatch, capacity: int) -> dict[str, Any]:
    def empty(t: torch.Tensor) -> torch.Tensor:
        return torch.zeros((t.shape[0], capacity, *t.shape[2:]), dtype=t.dtype)

    return {
        key: [empty(p) for p in value] if isinstance(value, list) else empty(value)
        for key, value in chunk_fields(batch).items()
    }


def write_chunks(chunks: dict[str, Any], batch: SequenceBatch, rows: torch.Tensor) -> None:
    for key, value in chunk_fields(batch).items():
        if isinstance(value, list):
            for stored, part in zip(chunks[key], value):
                stored[:, rows] = part
        else:
            chunks[key][:, rows] = value


def read_chunks(chunks: dict[str, Any], rows: torch.Tensor) -> SequenceBatch:
    picked: dict[str, Any] = {
        key: [p[:, rows] for p in value] if isinstance(value, list) else value[:, rows] for key, value in chunks.items()
    }
    parts = {key[len("obs/") :]: value for key, value in picked.items() if key.startswith("obs/")}
    obs: Any = parts or picked["obs"]
    return SequenceBatch(
        obs=obs,
        actions=picked["actions"],
        rewards=picked["rewards"],
        terminated=picked["terminated"],
        mask=picked["mask"],
        episode_start=picked["episode_start"][0],
        state=tuple(s[0] for s in picked["state"]),
    )
