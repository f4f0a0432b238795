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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, overload

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
        replacing the file atomically (a kill during the rewrite leaves the old file) and row by row:
        memory stays one row, whatever the file's size."""
        cut: list[str] = []

        def whole_lines(text: Iterable[str]) -> Iterator[str]:
            for line in text:
                if line.endswith("\n"):
                    yield line
                else:  # a killed writer may leave the last one cut
                    cut.append(line)

        def rewrite(f) -> None:
            out = io.TextIOWrapper(f, encoding="utf-8", newline="", write_through=True)
            writer = csv.DictWriter(out, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            with self.directory.folder(self.csv_path.parent) as folder, folder.read(self.csv_path.name) as raw:
                text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
                for row in csv.DictReader(whole_lines(text)):
                    if (
                        None not in row
                        and None not in row.values()
                        and row["step"].isascii()
                        and row["step"].isdigit()
                        and int(row["step"]) <= step
                    ):
                        writer.writerow(row)
            out.flush()
            out.detach()

        self.directory.write_bytes(self.csv_path, rewrite)
        if cut:
            log.warning(
                "%s ended in a half-written row (%r, left by a process killed while it wrote): dropped",
                self.csv_path,
                cut[-1][:60],
            )

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


# the longest line a run writes is a few hundred characters; csv's own field limit is 131,072
MAX_LINE = 65_536


class Rows(Sequence[dict[str, str]]):
    """metrics.csv's checked rows, kept as one string each and made a {column: value} mapping
    when read: about the file's size in memory, where a dict per row held some 40 times it."""

    def __init__(self, columns: list[str], lines: list[str]):
        self.columns, self.lines = columns, lines

    def __len__(self) -> int:
        return len(self.lines)

    @overload
    def __getitem__(self, index: int) -> dict[str, str]: ...
    @overload
    def __getitem__(self, index: slice) -> Rows: ...
    def __getitem__(self, index: int | slice) -> dict[str, str] | Rows:
        if isinstance(index, slice):
            return Rows(self.columns, self.lines[index])
        return dict(zip(self.columns, self.lines[index].split(",")))

    def __iter__(self) -> Iterator[dict[str, str]]:
        return (dict(zip(self.columns, line.split(","))) for line in self.lines)

    def step(self, index: int) -> int:
        line = self.lines[index]
        return int(line[: line.index(",")] if "," in line else line)


@dataclass
class Metrics:
    columns: list[str]
    rows: Rows

    def steps(self) -> list[int]:
        return [self.rows.step(index) for index in range(len(self.rows))]

    def up_to(self, step: int) -> list[dict[str, str]]:
        kept = sum(1 for index in range(len(self.rows)) if self.rows.step(index) <= step)  # steps ascend
        return list(self.rows[:kept])


def whole_lines(f: IO[str]) -> Iterator[str]:
    """`f`'s lines that end in a newline, each read up to MAX_LINE characters: `Differs` for a
    longer one (a file padded with a gigabyte of NUL bytes is refused, not read whole and then
    dropped as a cut write); a last line without its newline is a cut write, skipped."""
    for number, line in enumerate(iter(lambda: f.readline(MAX_LINE + 1), ""), start=1):
        if len(line) > MAX_LINE:
            raise Differs(f"metrics.csv line {number} is longer than {MAX_LINE:,} characters: not a row a run writes")
        if line.endswith("\n"):
            yield line


def read_metrics(directory: RunDirectory) -> Metrics:
    """metrics.csv, every row checked against its header: `Differs` for a row with more or fewer
    fields, an empty line, or a step that is not after the one before it (a duplicated row). As on
    resume (runs/metrics.py), whole lines only: a last line without its newline is a cut write.
    Streamed: one line at a time is parsed, and a checked row is kept as one string."""
    path = directory.metrics_csv
    if not path.is_file():
        return Metrics([], Rows([], []))
    try:
        with open(path, newline="") as f:
            return checked_rows(csv.reader(whole_lines(f)))
    except (OSError, UnicodeDecodeError, csv.Error) as error:  # csv.Error: a field over csv's limit, 131,072
        raise Differs(f"metrics.csv cannot be read ({type(error).__name__}: {str(error).splitlines()[0]})") from None


def checked_rows(lines: Iterator[list[str]]) -> Metrics:
    """The header and the rows of `lines` (csv's fields), each checked as read_metrics says."""
    columns = next(lines, None)
    if columns is None:
        return Metrics([], Rows([], []))
    if columns[:1] != ["step"]:
        raise Differs(f"metrics.csv's header begins with {columns[:1] or 'nothing'}, not step")
    kept: list[str] = []
    previous = -1
    for number, fields in enumerate(lines, start=2):
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
        kept.append(",".join(fields))  # numbers and empty fields only: no comma inside a field
        previous = int(step)
    return Metrics(columns, Rows(columns, kept))


def finite(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except (TypeError, ValueError):
        return False
