"""Prioritized experience replay, the proportional variant (Schaul et al. 2016, arXiv:1511.05952).

Row i is drawn with probability P(i) = p_i / sum_k p_k, where p_i = (|delta_i| + epsilon)^alpha and
delta_i is the row's loss in its latest update (|TD error| for DQN, the per-sample loss of the
distributional agents), which the loop hands back through `update_priorities`. A row not drawn
yet has the largest priority seen so far (1 at first), so new transitions are drawn soon after
they arrive. The bias this puts into the updates is corrected by importance weights
w_i = (N * P(i))^-beta, N the rows that can be drawn, which the agent's loss multiplies per
sample (Batch.weights).

Choices made here, where the paper leaves room:
- A batch is stratified: [0, total) is cut into batch_size equal segments and one point is
  drawn uniformly in each (the paper's Appendix B.2.1), so a batch covers the whole distribution.
- The weights are divided by the largest weight *of the batch*, not of the whole buffer (the
  paper's max_i w_i, which would need a min-tree): they stay in (0, 1] and only scale updates down.
- beta grows linearly from `beta` to `beta_final` over `beta_steps` sample calls (one per update)
  and stays there; the buffer cannot know the run's length, so `beta_steps` is set in the config
  (conf/buffer/prioritized.yaml) as a number of updates. None keeps beta constant.
- With n-step returns a row may only be drawn once the next n - 1 steps of its env are stored
  (with shared frames, n: the row after holds its next observation): rows have priority 0 until
  then and the largest priority when they become drawable. A row that the ring overwrites gets
  priority 0 (or the largest priority when it is drawable at once) with its new data; with shared
  frames, the rows whose stack lost its oldest frame to the overwrite get priority 0.

The priorities live in a float64 sum tree on the CPU, also for a CUDA buffer: compiled with numba
where it is installed (compiled_sum_tree.py), else in numpy (sum_tree.py); both draw the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from rl_hydra.buffers import compiled_sum_tree
from rl_hydra.buffers.device import to_device
from rl_hydra.buffers.replay import Batch, ReplayBuffer


class PrioritizedReplayBuffer(ReplayBuffer):
    """ReplayBuffer that draws rows by priority; `update_priorities` takes each update's new ones."""

    sampling = "prioritized"

    def __init__(
        self,
        *args: Any,
        seed: int,
        beta_steps: int | None,
        alpha: float,
        beta: float,
        beta_final: float,
        epsilon: float,
        sum_tree: str,
        **kwargs: Any,
    ):
        super().__init__(*args, seed=seed, **kwargs)  # ReplayBuffer's keys: capacity, the spaces, num_envs, ...
        self.alpha = alpha  # 0: uniform over the drawable rows
        self.beta = beta
        self.beta_final = beta_final
        self.beta_steps = beta_steps
        self.epsilon = epsilon
        self.tree = compiled_sum_tree.make_sum_tree(self.capacity, sum_tree)  # the base may have rounded capacity up
        self.max_priority = 1.0  # the largest p_i so far: a new row's priority
        self.sample_calls = 0  # beta's annealing step
        self.priority_rng = np.random.default_rng(seed)  # on the CPU, with the tree

    @property
    def current_beta(self) -> float:
        if self.beta_steps is None:
            return self.beta
        return self.beta + min(1.0, self.sample_calls / self.beta_steps) * (self.beta_final - self.beta)

    def add(self, obs, actions, rewards, next_obs, terminated, truncated) -> None:
        start, n, was_full = self.pos, len(rewards), self.size == self.capacity
        super().add(obs, actions, rewards, next_obs, terminated, truncated)
        new_rows = (start + np.arange(n)) % self.capacity  # (n,) maybe overwriting old rows
        if self.lookahead == 0 and self.lookbehind == 0:
            self.tree.update(new_rows, np.full(n, self.max_priority))
            return
        steps = self.num_envs
        rows, priorities = [new_rows], [np.zeros(n)]  # not drawable yet
        if self.lookahead and self.size >= (self.lookahead + 1) * steps:
            # the rows `lookahead` vector steps back now have their n-step future (and next observation) stored
            rows.append((new_rows - self.lookahead * steps) % self.capacity)
            priorities.append(np.full(n, self.max_priority))
        elif self.lookahead == 0:
            priorities[0] = np.full(n, self.max_priority)
        if self.lookbehind and was_full:
            # the rows `lookbehind` vector steps after the overwritten ones lost the oldest frame of their stack
            rows.append((new_rows + self.lookbehind * steps) % self.capacity)
            priorities.append(np.zeros(n))
        self.tree.update(np.concatenate(rows), np.concatenate(priorities))

    def sample_indices(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows (B,) drawn with probability P(i), one in each of B equal segments of the priority
        mass, and their importance weights (B,) (N * P(i))^-beta divided by the batch's largest."""
        total = self.tree.total
        if not total > 0:
            raise RuntimeError(
                f"nothing to sample: the priorities sum to {total} ({len(self)} rows drawable; "
                "nan or inf: a loss that diverged)"
            )
        # (N P(i))^-beta / max_j (N P(j))^-beta over the batch: N and the total cancel out
        rows, weights = self.tree.draw_stratified(self.priority_rng.random(batch_size), self.current_beta)  # (B,), (B,)
        self.sample_calls += 1
        return (
            to_device(torch.from_numpy(rows), self.rows_device),
            to_device(torch.from_numpy(weights), self.rows_device),
        )

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """p_i = (|priority_i| + epsilon)^alpha for the rows `indices` (B,), tensors on any device."""
        errors = priorities.detach().cpu().numpy()  # (B,)
        largest = self.tree.update_priorities(indices.cpu().numpy(), errors, self.epsilon, self.alpha)
        self.max_priority = max(self.max_priority, largest)

    def sample_batches(self, batch_size: int, count: int) -> Iterator[Batch]:
        """`count` batches, each drawn only when the loop asks for the next one: after the priorities
        of the batch before were updated (the base class's gathering up front would miss them)."""
        return (self.sample(batch_size) for _ in range(count))

    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "priorities": torch.from_numpy(self.tree.state_dict()["leaves"]),
            "max_priority": self.max_priority,
            "sample_calls": self.sample_calls,
            "priority_rng": self.priority_rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.tree.load_state_dict({"leaves": state["priorities"].numpy()})
        self.max_priority, self.sample_calls = float(state["max_priority"]), int(state["sample_calls"])
        self.priority_rng.bit_generator.state = state["priority_rng"]
