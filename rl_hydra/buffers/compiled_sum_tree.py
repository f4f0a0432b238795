"""SumTree's search, stratified draw and update compiled with numba: one call each instead of dozens.

At batch sizes of 32 to 256 the numpy tree (sum_tree.py) spends its time in numpy's per-call
overhead, about 45 calls of a microsecond for a draw and a priority update. Here each is one
compiled call over the same arrays, doing the same arithmetic in the same order: built with the
same layout, both trees hold the same sums and draw the same rows bit for bit; the weights and
priorities, powers, may differ in the last bit (numpy takes x ** 0.5 as a square root).
tests/buffers/test_prioritized.py checks both. By default the compiled tree is narrower at the top (a root
of at most 128 children, then groups of 32; the numpy tree's root has up to 4096): a compiled
loop pays per node visited, not per call, and the root's cumulative sum is redone after every
update. Above 4096 leaves the two defaults therefore add the same leaves in a different order,
and their totals may differ in the last bits.

numba is an optional extra (`pip install -e ".[numba]"`); `make_sum_tree` falls back to the
numpy tree without it.
"""

from __future__ import annotations

import logging

import numpy as np

from rl_hydra.buffers.sum_tree import SumTree
from rl_hydra.errors import NotInstalled

try:
    import numba
except ImportError:  # the numpy tree serves
    numba = None  # type: ignore[assignment]  # the module's name, None without it

log = logging.getLogger(__name__)

ROOT_WIDTH = 128  # the compiled tree's widest root; the numpy tree's is 4096 (fewer levels, fewer calls)


def make_sum_tree(capacity: int, backend: str = "auto") -> SumTree:
    """The sum tree for `backend` (buffer.sum_tree): "numba" (compiled; needs numba), "numpy", or
    "auto" (numba if installed, else numpy with a log line naming the install)."""
    if numba is None and backend == "numba":
        raise NotInstalled('buffer.sum_tree=numba needs numba: pip install -e ".[numba]" (or buffer.sum_tree=auto)')
    if numba is None and backend == "auto":
        log.info(
            'prioritized replay: numpy sum tree, numba not installed (pip install -e ".[numba]" '
            "for the compiled one: about 3x faster sampling on small observations)"
        )
    if backend == "numpy" or numba is None:
        return SumTree(capacity)
    return CompiledSumTree(capacity)


if numba is not None:

    def _jit(function):
        """Compiled once and cached beside this file (or in the user's cache), else compiled every run."""
        try:
            return numba.njit(cache=True, nogil=True)(function)
        except RuntimeError:  # no cache locator: nowhere writable to keep the machine code
            return numba.njit(nogil=True)(function)

    @_jit
    def _find(root_cumsum, running, group_offsets, leaves, prefix_sums, out):
        """sum_tree.SumTree.find_prefix_sums, one prefix sum at a time, into `out` (B,)."""
        k = running.shape[1] - 1
        levels = group_offsets.shape[0] - 1
        inner = root_cumsum[1:-1]
        for b in range(prefix_sums.shape[0]):
            node = np.searchsorted(inner, prefix_sums[b], side="right")  # the root's child whose range holds s
            remaining = prefix_sums[b] - root_cumsum[node]
            for level in range(levels - 1, -1, -1):  # from the root's children down
                row = running[group_offsets[level] + node]  # (k + 1,) running sums of the group
                child = 0
                while row[child + 1] <= remaining:  # the last child starting at or before s
                    child += 1
                remaining -= row[child]
                node = node * k + child
            if leaves[node] == 0.0:  # rare: rounding passed the last non-zero leaf of a subtree
                before = node - 1
                while before >= 0 and leaves[before] == 0.0:
                    before -= 1
                if before < 0:  # none before: the first non-zero leaf
                    before = node + 1
                    while leaves[before] == 0.0:
                        before += 1
                node = before
            out[b] = node
        return out

    @_jit
    def _draw_stratified(root_cumsum, running, group_offsets, leaves, u, beta, rows, weights):
        """sum_tree.SumTree.draw_stratified into `rows` (B,) and `weights` (B,)."""
        batch = u.shape[0]
        segment = root_cumsum[-1] / batch
        prefix_sums = np.empty(batch)
        for b in range(batch):
            prefix_sums[b] = (b + u[b]) * segment
        _find(root_cumsum, running, group_offsets, leaves, prefix_sums, rows)
        smallest = np.inf
        for b in range(batch):
            smallest = min(smallest, leaves[rows[b]])
        for b in range(batch):
            weights[b] = (smallest / leaves[rows[b]]) ** beta

    @_jit
    def _update(flat_values, value_offsets, running, group_offsets, root_cumsum, indices, values):
        """sum_tree.SumTree.update: set the leaves (the last value of a repeated index wins), then redo
        every sum above them from the values below, in the numpy tree's order of additions."""
        k = running.shape[1] - 1
        levels = group_offsets.shape[0] - 1
        for i in range(indices.shape[0]):
            if indices[i] < 0 or indices[i] >= value_offsets[1]:  # compiled code has no bounds checks of its own
                raise IndexError("sum tree update: a leaf index out of range")
            flat_values[indices[i]] = values[i]
        for i in range(indices.shape[0]):
            node = indices[i]
            for level in range(levels):
                group = node // k
                first = value_offsets[level] + group * k
                row = running[group_offsets[level] + group]
                total = 0.0
                for child in range(k - 1):
                    total += flat_values[first + child]
                    row[child + 1] = total
                flat_values[value_offsets[level + 1] + group] = total + flat_values[first + k - 1]
                node = group
        root = flat_values[value_offsets[levels] : value_offsets[levels + 1]]
        total = 0.0
        for child in range(root.shape[0]):
            total += root[child]
            root_cumsum[child + 1] = total

    @_jit
    def _update_priorities(
        flat_values, value_offsets, running, group_offsets, root_cumsum, indices, errors, epsilon, alpha
    ):
        """sum_tree.SumTree.update_priorities: _update with (|error| + epsilon)^alpha; the largest of them."""
        priorities = np.empty(errors.shape[0])
        largest = -np.inf
        for i in range(errors.shape[0]):
            priorities[i] = (abs(np.float64(errors[i])) + epsilon) ** alpha
            largest = max(largest, priorities[i])
        _update(flat_values, value_offsets, running, group_offsets, root_cumsum, indices, priorities)
        return largest


class CompiledSumTree(SumTree):
    """SumTree whose searches, draws and updates run as compiled loops (numba)."""

    def __init__(self, capacity: int, branching: int = 32, root_width: int = ROOT_WIDTH):
        if numba is None:
            raise ImportError('the compiled sum tree needs numba: pip install -e ".[numba]"')
        super().__init__(capacity, branching, root_width)

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        _update(
            self.flat_values,
            self.value_offsets,
            self.flat_running,
            self.group_offsets,
            self._root_cumsum(),
            np.asarray(indices, dtype=np.int64),
            np.asarray(values, dtype=np.float64),
        )

    def update_priorities(self, indices: np.ndarray, errors: np.ndarray, epsilon: float, alpha: float) -> float:
        return _update_priorities(
            self.flat_values,
            self.value_offsets,
            self.flat_running,
            self.group_offsets,
            self._root_cumsum(),
            np.asarray(indices, dtype=np.int64),
            errors,
            float(epsilon),
            float(alpha),
        )

    def find_prefix_sums(self, prefix_sums: np.ndarray) -> np.ndarray:
        s = np.asarray(prefix_sums, dtype=np.float64)
        return _find(
            self._root_cumsum(),
            self.flat_running,
            self.group_offsets,
            self.values[0],
            s,
            np.empty(len(s), dtype=np.int64),
        )

    def draw_stratified(self, u: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray]:
        rows, weights = np.empty(len(u), dtype=np.int64), np.empty(len(u), dtype=np.float32)
        _draw_stratified(
            self._root_cumsum(),
            self.flat_running,
            self.group_offsets,
            self.values[0],
            np.asarray(u, dtype=np.float64),
            float(beta),
            rows,
            weights,
        )
        return rows, weights
