"""metrics.csv (one row per logged step, fixed columns) mirrored to TensorBoard."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable


class MetricsLogger:
    def __init__(self, csv_path: Path, columns: Iterable[str], tensorboard_dir: Path | None = None,
                 resume_from_step: int | None = None):
        self.columns = ["step", *columns]
        self.csv_path = csv_path
        if resume_from_step is not None and csv_path.is_file():
            self._truncate_after(resume_from_step)
        new_file = not csv_path.is_file() or csv_path.stat().st_size == 0
        self.file = open(csv_path, "a", newline="")
        self.writer = csv.DictWriter(self.file, fieldnames=self.columns, extrasaction="ignore")
        if new_file:
            self.writer.writeheader()
            self.file.flush()
        self.tb = None
        if tensorboard_dir is not None:
            from torch.utils.tensorboard import SummaryWriter  # slow import, only when used
            # TensorBoard drops the events at steps >= purge_step: those after the checkpoint, not its own
            purge = None if resume_from_step is None else resume_from_step + 1
            self.tb = SummaryWriter(str(tensorboard_dir), purge_step=purge)

    def _truncate_after(self, step: int) -> None:
        """Drop rows logged after `step` (they belong to progress a resume replays)."""
        with open(self.csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        kept = [row for row in rows if int(row["step"]) <= step]
        with open(self.csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(kept)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.writer.writerow({"step": step, **{k: _fmt(v) for k, v in values.items()}})
        self.file.flush()
        if self.tb is not None:
            for key, value in values.items():
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    self.tb.add_scalar(key, value, step)

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)
