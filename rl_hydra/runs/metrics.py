"""metrics.csv: one row per logged step, fixed columns; a resumed run drops the rows logged after
its checkpoint (and a row a killed process left half-written). `read_metrics` reads it back as a
record is read (resume, verify and evaluate's curves): every row checked."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_hydra.runs.run_dir import RunDirectory, WriteFailed

log = logging.getLogger("rl_hydra")


class MetricsCSV:
    def __init__(
        self,
        csv_path: Path,
        columns: Iterable[str],
        resume_from_step: int | None = None,
        directory: RunDirectory | None = None,
    ):
        """Append to `csv_path` (in `directory`, reached by its handle: the run's own file, never
        through a link or into a file with a second name)."""
        self.columns = ["step", *columns]
        self.csv_path = csv_path
        self.directory = directory if directory is not None else RunDirectory(csv_path.parent)
        try:
            if resume_from_step is not None and csv_path.is_file():
                self._truncate_after(resume_from_step)
            self.file = self.directory.append(csv_path, encoding="utf-8")
            new_file = os.fstat(self.file.fileno()).st_size == 0
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
        self.directory.write_text(self.csv_path, out.getvalue())

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


# what metrics.csv holds: steps in ASCII digits, values as Python writes floats (repr) or integers
STEP = re.compile(r"[0-9]+", re.ASCII)
NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*(?:e[-+]?[0-9]+)?|inf|nan|True|False)", re.ASCII)


class Differs(Exception):
    """The record differs from what it should hold; the message says where, in one line."""


@dataclass
class Metrics:
    columns: list[str]
    rows: list[dict[str, str]]

    def steps(self) -> list[int]:
        return [int(row["step"]) for row in self.rows]

    def up_to(self, step: int) -> list[dict[str, str]]:
        return [row for row in self.rows if int(row["step"]) <= step]


def read_metrics(directory: RunDirectory) -> Metrics:
    """metrics.csv, every row checked against its header: `Differs` for a row with more or fewer
    fields, an empty line, or a step that is not after the one before it (a duplicated row). As on
    resume (runs/metrics.py), whole lines only: a last line without its newline is a cut write."""
    path = directory.metrics_csv
    if not path.is_file():
        return Metrics([], [])
    try:
        with open(path, newline="") as f:
            lines = list(csv.reader(line for line in f if line.endswith("\n")))
    except (OSError, UnicodeDecodeError, csv.Error) as error:  # csv.Error: a field over csv's limit, 131,072
        raise Differs(f"metrics.csv cannot be read ({type(error).__name__}: {str(error).splitlines()[0]})") from None
    if not lines:
        return Metrics([], [])
    columns, rows, previous = lines[0], [], -1
    if columns[:1] != ["step"]:
        raise Differs(f"metrics.csv's header begins with {columns[:1] or 'nothing'}, not step")
    for number, fields in enumerate(lines[1:], start=2):
        if len(fields) != len(columns):
            raise Differs(f"metrics.csv line {number} has {len(fields)} fields, its header {len(columns)}")
        step = fields[0]
        if not STEP.fullmatch(step):
            raise Differs(f"metrics.csv line {number} has step {step!r}, not a number of env steps in digits 0-9")
        for column, value in zip(columns[1:], fields[1:]):
            if value and not NUMBER.fullmatch(value):
                raise Differs(
                    f"metrics.csv line {number} has {column}={value[:40]!r}, not a number as a run writes one"
                )
        if int(step) <= previous:
            raise Differs(
                f"metrics.csv line {number} is at step {step}, not after the line before it "
                f"(step {previous}): a row repeated or out of order"
            )
        rows.append(dict(zip(columns, fields)))
        previous = int(step)
    return Metrics(columns, rows)


def finite(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except (TypeError, ValueError):
        return False
