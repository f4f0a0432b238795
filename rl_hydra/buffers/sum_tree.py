"""A sum tree: `capacity` non-negative leaf values, their total, and the leaf where a running sum passes a value.

Prioritized replay draws leaf i with probability value_i / total: draw a prefix sum s in [0, total)
and find the first leaf whose running sum value_0 + ... + value_i exceeds s. Every operation takes
a whole batch at once with numpy; the only Python loop is over the tree's few levels.

Layout. Level 0 holds the leaves; each level above holds the sums of `branching` consecutive
nodes of the one below (a group of siblings), until at most `root_width` nodes are left: the
root's children. At batch sizes of 32 to 256 the cost is numpy's per-call overhead (about a
microsecond a call) far more than arithmetic, so the tree is wide and shallow: 100,000 leaves
at the defaults (32, 4096) make one level of groups under a root of 3,125 children, 1,000,000
leaves two levels under 977 (a binary tree would have 17 and 20 levels of a few calls each).
Each group keeps its running sums, so a batch descends a level with one comparison, and the
root's children are searched with one `searchsorted` in their cumulative sum. An update
recomputes the running sums of the groups it touched, and the root's cumulative sum is
recomputed once before the next search. Sums are float64 and always recomputed from the values
below (never adjusted by a difference): no rounding error accumulates, and the sums depend on
the leaves alone (a tree rebuilt from its leaves is identical, which is what a checkpoint stores).
compiled_sum_tree.CompiledSumTree runs the same operations on the same arrays as compiled loops.
"""

from __future__ import annotations

import numpy as np


class SumTree:
    """`capacity` leaves (float64, >= 0) under a `branching`-ary tree of sums; see the module docstring."""

    def __init__(self, capacity: int, branching: int = 32, root_width: int = 4096):
        if capacity < 1 or branching < 2 or root_width < 1:
            raise ValueError(
                f"SumTree needs capacity, root_width >= 1 and branching >= 2, got {capacity}, {root_width}, {branching}"
            )
        self.capacity, self.branching = capacity, branching
        k, levels = branching, 0
        while -(-capacity // k**levels) > root_width:
            levels += 1
        width = -(-capacity // k**levels)  # the root's children: each the sum of k^levels leaves
        sizes = [width * k ** (levels - level) for level in range(levels + 1)]
        # values[l] (width * k^(levels - l),): the nodes of level l, zeros past the capacity's; values[-1]: the root's
        # children. Views of one flat array (as running's are below), so that compiled code gets a few arrays.
        self.value_offsets = np.cumsum([0, *sizes])  # (levels + 2,) where each level starts
        self.flat_values = np.zeros(self.value_offsets[-1])
        self.values = [self.flat_values[a:b] for a, b in zip(self.value_offsets[:-1], self.value_offsets[1:])]
        # running[l] (groups, k + 1): per group of k siblings [0, v_0, v_0 + v_1, ..., v_0 + ... + v_(k-2), inf];
        # the last child's end is inf so that a search past a group's sum (rounding) stops at its last child
        self.group_offsets = np.cumsum([0, *(size // k for size in sizes[:-1])])  # (levels + 1,)
        self.flat_running = np.zeros((self.group_offsets[-1], k + 1))
        self.flat_running[:, k] = np.inf
        self.running = [self.flat_running[a:b] for a, b in zip(self.group_offsets[:-1], self.group_offsets[1:])]
        self.root_cumsum = np.zeros(width + 1)  # (W + 1,) [0, c_0, c_0 + c_1, ..., total]
        self.root_stale = False

    @property
    def total(self) -> float:
        return float(self._root_cumsum()[-1])

    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (capacity,), a read-only view."""
        view = self.values[0][: self.capacity]
        view.flags.writeable = False
        return view

    def __getitem__(self, indices: np.ndarray) -> np.ndarray:
        return self.values[0].take(indices)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves `indices` (n,) to `values` (n,); where an index repeats, its last value wins."""
        indices, values = np.asarray(indices, dtype=np.int64), np.asarray(values, dtype=np.float64)
        order = np.argsort(indices, kind="stable")  # (n,) equal indices keep their order
        ordered = indices[order]  # (n,) sorted
        last = np.ones(len(ordered), dtype=bool)  # (n,) the last of each run of equal indices
        np.not_equal(ordered[1:], ordered[:-1], out=last[:-1])
        nodes = ordered[last]  # (m,) unique, sorted
        self.values[0][nodes] = values[order[last]]
        self._update_groups(nodes)

    def update_priorities(self, indices: np.ndarray, errors: np.ndarray, epsilon: float, alpha: float) -> float:
        """Set leaves `indices` (n,) to the priorities (|error| + epsilon)^alpha of `errors` (n,) (the
        last of a repeated index wins); returns the largest priority set."""
        priorities = (np.abs(errors, dtype=np.float64) + epsilon) ** alpha  # (n,)
        self.update(indices, priorities)
        return float(priorities.max())

    def set_all(self, values: np.ndarray) -> None:
        """Set every leaf (capacity,) and rebuild the sums above (the same as `update` on every leaf)."""
        self.values[0][: self.capacity] = values
        self._update_groups(np.arange(0, self.capacity, self.branching))  # one leaf per group

    def _update_groups(self, nodes: np.ndarray) -> None:
        """Recompute the sums above the level-0 nodes `nodes` (m,), sorted, from the values below."""
        k = self.branching
        for level, running in enumerate(self.running):
            groups = nodes // k  # (m,) repeats: the same sums again
            sums = self.values[level].reshape(-1, k).take(groups, axis=0).cumsum(axis=1)  # (m, k) running sums
            running[groups, 1:k] = sums[:, :-1]
            self.values[level + 1][groups] = sums[:, -1]  # the group's sum: its parent
            nodes = groups
        self.root_stale = True

    def _root_cumsum(self) -> np.ndarray:
        if self.root_stale:
            np.cumsum(self.values[-1], out=self.root_cumsum[1:])
            self.root_stale = False
        return self.root_cumsum

    def find_prefix_sums(self, prefix_sums: np.ndarray) -> np.ndarray:
        """For each s in `prefix_sums` (B,), 0 <= s < total: the first leaf whose running sum exceeds s (B,).

        A leaf of value 0 is never returned while total > 0: where rounding puts s at or past the
        end of the last non-zero leaf of a subtree, that leaf is returned.
        """
        k, s = self.branching, np.asarray(prefix_sums, dtype=np.float64)
        cumsum = self._root_cumsum()  # (W + 1,)
        nodes = cumsum[1:-1].searchsorted(s, side="right")  # (B,) the root's child whose range holds s
        remaining = s - cumsum.take(nodes)  # (B,) s within that child's subtree
        row_starts = np.arange(0, len(s) * (k + 1), k + 1)  # (B,) where each row begins in a flat (B, k + 1)
        for running in reversed(self.running):  # from the root's children down to the leaves
            rows = running.take(nodes, axis=0)  # (B, k + 1) running sums in each node's group
            child = (rows <= remaining[:, None]).argmin(axis=1) - 1  # (B,) the last child starting at or before s
            remaining -= rows.ravel().take(row_starts + child)  # (B,) minus the siblings before it
            nodes = nodes * k + child  # (B,) the child's index on the level below
        values = self.values[0].take(nodes)  # (B,)
        if not values.all():  # rare: rounding passed the last non-zero leaf of a subtree
            zero = values == 0
            positive = np.flatnonzero(self.values[0] > 0)  # (P,) the leaves that can be drawn
            before = positive.searchsorted(nodes[zero]) - 1  # the closest one before each (or the first)
            nodes[zero] = positive[np.maximum(before, 0)]
        return nodes

    def draw_stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """One leaf from each of B equal segments of the total, at (b + u_b) * total / B for u (B,) in
        [0, 1), and its weight (min_j p_j / p_i)^beta over the drawn leaves p (B,): rows (B,) int64,
        weights (B,) float32. The total must be positive."""
        batch = len(u)
        rows = self.find_prefix_sums((np.arange(batch) + u) * (self.total / batch))  # (B,)
        p = self.values[0].take(rows)  # (B,) all > 0
        return rows, ((p.min() / p) ** beta).astype(np.float32)  # (B,), (B,)

    def state_dict(self) -> dict:
        """The leaf values (capacity,) (a copy); every sum above follows from them."""
        return {"leaves": self.values[0][: self.capacity].copy()}

    def load_state_dict(self, state: dict) -> None:
        leaves = np.asarray(state["leaves"], dtype=np.float64)
        if leaves.shape != (self.capacity,):
            raise ValueError(f"sum tree state of {leaves.shape} leaves does not fit one of {self.capacity}")
        self.set_all(leaves)
