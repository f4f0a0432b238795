"""metrics.csv: the run's own record of every row, which resume, evaluate and sweep reports read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rl_hydra.runs.metrics import MetricsCSV
from rl_hydra.runs.run_dir import RunDirectory


class CSVLogger:
    """Always on: the Reporter adds it when the `logger` list leaves it out."""

    def __init__(self) -> None:
        self.file: MetricsCSV | None = None

    def start(self, run_dir: RunDirectory, config: Mapping[str, Any], step: int, columns: Sequence[str]) -> None:  # noqa: ARG002
        # rows after `step` are stale, also from a first attempt killed before its first checkpoint
        self.file = MetricsCSV(run_dir.metrics_csv, columns, resume_from_step=step, directory=run_dir)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        assert self.file is not None, "log() before start()"
        self.file.log(step, metrics)

    def finish(self, status: str) -> None:  # noqa: ARG002
        if self.file is not None:
            self.file.close()
