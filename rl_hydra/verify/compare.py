"""The record against its re-run, part by part: metrics.csv's columns and rows, the checkpoints,
summary.json, and the provenance. Each comparison returns the first difference in words, or None."""

from __future__ import annotations

import math
from itertools import zip_longest
from typing import Any

from rl_hydra.runs import provenance
from rl_hydra.runs.run_dir import SUMMARY_KEYS

WALL_CLOCK = ("time/",)
SUMMARY_WALL_CLOCK = ("solved_at_s", "wall_time_s", "steps_per_second")
WALL_CLOCK_STATE = ("runner.elapsed", "runner.solved_at.elapsed_s")  # in a checkpoint
HOST_KEYS = ("host",)  # differs between machines: reported, never a difference on its own


def compare_columns(recorded: list[str], rerun: list[str]) -> str | None:
    missing = [column for column in rerun if column not in recorded]
    if missing:
        return f"metrics.csv has no column {missing[0]}, which the re-run logged"
    extra = [column for column in recorded if column not in rerun]
    if extra:
        return f"metrics.csv has a column {extra[0]}, which the re-run did not log"
    return None if recorded == rerun else "metrics.csv's columns are in another order than the re-run's"


def compare_rows(recorded: list[dict[str, str]], rerun: list[dict[str, str]], rtol: float | None) -> str | None:
    """The first difference, as `at step S, column C: recorded X, re-run Y`, or a row that one side lacks."""
    for row, other in zip_longest(recorded, rerun):
        if other is None or row is not None and int(row["step"]) < int(other["step"]):
            return f"the re-run logged no row at step {row['step']}"
        if row is None or int(other["step"]) < int(row["step"]):
            return f"the record has no row at step {other['step']}, which the re-run logged"
        for column, value in row.items():
            if column.startswith(WALL_CLOCK) or column == "step":
                continue
            redone = other.get(column, "")
            if not same_value(value, redone, rtol):
                return (
                    f"at step {row['step']}, column {column}: recorded {value or 'nothing'}, "
                    f"re-run {redone or 'nothing'}"
                )
    return None


def same_value(a: str, b: str, rtol: float | None) -> bool:
    if a == b or not rtol:
        return a == b
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=rtol, abs_tol=rtol) or (math.isnan(x) and math.isnan(y))


def same_figure(a: Any, b: Any, rtol: float | None) -> bool:
    """Two plain values (JSON's, or a checkpoint's) alike: floats within `rtol`, else equal and of one type."""
    if isinstance(a, float) and isinstance(b, float):
        return same_value(repr(a), repr(b), rtol) or (math.isnan(a) and math.isnan(b))
    return type(a) is type(b) and a == b


def compare_summaries(recorded: dict[str, Any], rerun: dict[str, Any], rtol: float | None) -> str | None:
    """summary.json's first figure that differs (its wall-clock times aside), or a key it should not have."""
    extra = sorted(set(recorded) - set(SUMMARY_KEYS))
    if extra:
        return f"summary.json has a key {extra[0]}, which a run does not write"
    for key in SUMMARY_KEYS:
        if key not in SUMMARY_WALL_CLOCK and not same_figure(recorded.get(key), rerun.get(key), rtol):
            return f"summary.json's {key}: recorded {recorded.get(key)!r}, re-run {rerun.get(key)!r}"
    return None


def compare_checkpoints(name: str, recorded: dict[str, Any], rerun: dict[str, Any], rtol: float | None) -> str | None:
    """The first tensor or value that differs, anywhere in the checkpoint (its wall-clock times aside)."""
    where = first_difference(recorded, rerun, rtol, "")
    return where and f"checkpoint {name}.pt (step {recorded['runner']['global_step']}) differs at {where}"


def first_difference(a: Any, b: Any, rtol: float | None, path: str) -> str | None:
    import torch

    if path in WALL_CLOCK_STATE:
        return None
    if torch.is_tensor(a):
        if not torch.is_tensor(b) or a.shape != b.shape or a.dtype != b.dtype:
            return path
        if a.dtype.is_floating_point and rtol:
            return None if torch.allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True) else path
        return None if torch.equal(a, b) else path
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            return path or "its top level"
        return next(
            (d for k in a if (d := first_difference(a[k], b[k], rtol, f"{path}.{k}" if path else str(k)))), None
        )
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return path
        return next(
            (d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, rtol, f"{path}[{i}]"))), None
        )
    return None if same_figure(a, b, rtol) else path


def provenance_differences(sessions: list[dict[str, Any]], device: str) -> str:
    """`provenance differs: torch 2.12.0 -> 2.13.0, ...`: what the sessions record against this process
    (the code, the libraries, the device and the host; not the pid, the command or the times)."""
    if not sessions:
        return "the run records no provenance (made before provenance.json existed)"
    now = provenance.collect(device)
    differ = []
    for key in (*provenance.CODE_KEYS, *HOST_KEYS):
        recorded = dict.fromkeys(session.get(key) for session in sessions)  # each value once, in order
        differ += [
            f"{key} {shown(key, value)} -> {shown(key, now.get(key))}" for value in recorded if value != now.get(key)
        ]
    return f"provenance differs: {', '.join(differ)}" if differ else ""


def shown(key: str, value: Any) -> str:
    return str(value)[:12] if key == "git_commit" and value else str(value)
