"""metrics.csv: one row per logged step, fixed columns; a resumed run drops the rows logged after
its checkpoint."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Iterable, Mapping


class MetricsCSV:
    def __init__(self, csv_path: Path, columns: Iterable[str], resume_from_step: int | None = None):
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

    def _truncate_after(self, step: int) -> None:
        """Drop rows logged after `step` (they belong to progress a resume replays)."""
        with open(self.csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        kept = [row for row in rows if int(row["step"]) <= step]
        with open(self.csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(kept)

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        self.writer.writerow({"step": step, **{k: _fmt(v) for k, v in values.items()}})
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)
