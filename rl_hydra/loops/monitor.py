"""What the loops watch as they go: finished episodes, and updates whose metrics go non-finite."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


class TrainingDiverged(RuntimeError):
    """A loss or metric became NaN or infinite."""


class StopRequested(Exception):
    """Ctrl-C or SIGTERM arrived; raised at the next step boundary (or inside an evaluation,
    which is abandoned and re-run on resume) so that the checkpoint is consistent."""


class EpisodeStats:
    """Running return and length of each env's current episode, and the finished ones since the last row."""

    def __init__(self, num_envs: int):
        self.episode_return, self.episode_length = np.zeros(num_envs), np.zeros(num_envs, dtype=np.int64)
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.episodes = 0

    def record(self, rewards: np.ndarray, done: np.ndarray) -> None:
        self.episode_return += rewards
        self.episode_length += 1
        if np.count_nonzero(done):  # cheaper than .any() on a small array, and this runs every step
            self.finished_returns += self.episode_return[done].tolist()
            self.finished_lengths += self.episode_length[done].tolist()
            self.episodes += int(done.sum())
            self.episode_return[done] = 0.0
            self.episode_length[done] = 0

    def restart(self) -> None:
        """Every env starts a new episode (after an env reset)."""
        self.episode_return[:] = 0.0
        self.episode_length[:] = 0

    def row(self) -> dict[str, float]:
        """rollout/* columns for a metrics row; forgets the finished episodes it reports."""
        row: dict[str, float] = {"rollout/episodes": self.episodes}
        if self.finished_returns:
            row["rollout/return_mean"] = float(np.mean(self.finished_returns))
            row["rollout/length_mean"] = float(np.mean(self.finished_lengths))
            self.finished_returns, self.finished_lengths = [], []
        return row


def is_on_host(value) -> bool:
    """Whether reading `value` costs no device sync (a number, or a CPU tensor)."""
    return not torch.is_tensor(value) or value.device.type == "cpu"


class UpdateMonitor:
    """Keeps the latest update's metrics and stops the run at the first non-finite one.

    Values on the host are checked at once. Reading a flag back from an accelerator would
    make the host wait for every update, so there the check stays on the device (the number
    of the first bad update) and `check_device` reads it once per env step, i.e. once per
    training phase; the error still names that exact update.
    """

    def __init__(self, agent_on_cpu: bool, hint: str):
        self.agent_on_cpu, self.hint = agent_on_cpu, hint
        self.latest: Mapping[str, Any] = {}
        self._first_bad_update: torch.Tensor | None = None  # on the device: -1, or the first bad update

    def record(self, metrics: Mapping[str, Any], update: int, step: int) -> None:
        self.latest = metrics
        # one float sum: a NaN or inf anywhere makes it non-finite, with one conversion per metric
        on_host = list(metrics) if self.agent_on_cpu else [k for k, v in metrics.items() if is_on_host(v)]
        if on_host and not math.isfinite(sum(float(metrics[k]) for k in on_host)):
            bad = [k for k in on_host if not math.isfinite(float(metrics[k]))]
            if bad:  # not just finite values whose sum overflowed
                self._diverged(bad, update, step)
        if len(on_host) < len(metrics):
            values = torch.stack([v.float() for v in metrics.values() if not is_on_host(v)])
            first = self._first_bad_update
            if first is None:
                first = torch.full((), -1, dtype=torch.int64, device=values.device)
            bad_now = ~torch.isfinite(values).all() & (first < 0)
            self._first_bad_update = torch.where(bad_now, update, first)

    @property
    def device_check_pending(self) -> bool:
        return self._first_bad_update is not None

    def check_device(self, step: int) -> None:
        """Read the device-side check of the updates since the last call (one host sync)."""
        if self._first_bad_update is None:
            return
        first, self._first_bad_update = int(self._first_bad_update), None
        if first >= 0:
            self._diverged([k for k, v in self.latest.items() if not math.isfinite(float(v))], first, step)

    def _diverged(self, names: list[str], update, step: int) -> None:
        raise TrainingDiverged(
            f"non-finite {', '.join(names) or 'metrics'} at step {step} (update {update}); {self.hint}"
        )
