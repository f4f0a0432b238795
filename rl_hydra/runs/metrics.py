"""metrics.csv: one row per logged step, fixed columns; a resumed run drops the rows logged after
its checkpoint (and a row a killed process left half-written)."""

from __future__ import annotations

import csv
import io
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

from rl_hydra.runs.run_dir import WriteFailed, atomic_write_text, no_follow

log = logging.getLogger("rl_hydra")


class MetricsCSV:
    def __init__(self, csv_path: Path, columns: Iterable[str], resume_from_step: int | None = None):
        self.columns = ["step", *columns]
        self.csv_path = csv_path
        try:
            if resume_from_step is not None and csv_path.is_file():
                self._truncate_after(resume_from_step)
            new_file = not csv_path.is_file() or csv_path.stat().st_size == 0
            self.file = open(csv_path, "a", newline="", opener=no_follow)
            self.writer = csv.DictWriter(self.file, fieldnames=self.columns, extrasaction="ignore")
            if new_file:
                self.writer.writeheader()
                self.file.flush()
        except OSError as error:
            raise WriteFailed(csv_path, error) from error

    def _truncate_after(self, step: int) -> None:
        """Keep the whole rows up to `step` (those after it belong to progress a resume replays),
        replacing the file atomically: a kill during the rewrite leaves the old file."""
        with open(self.csv_path, newline="") as f:
            lines = f.read().splitlines(keepends=True)
        whole = [line for line in lines if line.endswith("\n")]  # a killed writer may leave the last one cut
        if len(whole) < len(lines):
            log.warning(
                "%s ended in a half-written row (%r, left by a process killed while it wrote): dropped",
                self.csv_path,
                lines[-1][:60],
            )
        kept = [
            row
            for row in csv.DictReader(whole)
            if None not in row
            and None not in row.values()
            and row["step"].isascii()
            and row["step"].isdigit()
            and int(row["step"]) <= step
        ]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(kept)
        atomic_write_text(self.csv_path, out.getvalue())

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        try:
            self.writer.writerow({"step": step, **{k: _fmt(v) for k, v in values.items()}})
            self.file.flush()
        except OSError as error:
            raise WriteFailed(self.csv_path, error) from error

    def close(self) -> None:
        try:
            self.file.close()
        except OSError as error:
            raise WriteFailed(self.csv_path, error) from error


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)
