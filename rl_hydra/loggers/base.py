"""The logger protocol, and what the loggers share: optional imports, the run directory's record
of which tracking runs it continues (tracking.json), and the sweep a run belongs to."""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from rl_hydra.errors import NotInstalled
from rl_hydra.runs.run_dir import RunDirectory, atomic_write_bytes

TRACKING_RECORD = "tracking.json"  # in a run (or sweep) directory: {"mlflow": {"run_id": ...}, "wandb": {...}}


class Logger(Protocol):
    """One option of the `logger` config group (conf/logger/<name>.yaml builds it by `_target_`).
    The Reporter hands every logger the same rows, by the names and steps metrics.csv has."""

    def start(self, run_dir: RunDirectory, config: Mapping[str, Any], step: int, columns: Sequence[str]) -> None:
        """Open for the run in `run_dir` trained with `config` (the whole config, resolved, as plain
        data: what a tracker records as the run's parameters), at `step`: 0 for a new run, the
        checkpoint's step when a run continues (resume, or a re-launched sweep), whatever was
        logged after it then being stale. `columns`: the metric names a row may hold."""

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One row at env step `step`: {name: value}, a value None (or NaN) where it has none yet."""

    def finish(self, status: str) -> None:
        """The session ends with summary.json's status (`completed`, `failed`, `interrupted`);
        summary.json and the checkpoints are written by then, except after an unexpected exception."""


def require(package: str, option: str) -> ModuleType:
    """Import an optional package, or raise ConfigError naming the pip command that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise NotInstalled(f'logger={option} needs the {package} package: pip install -e ".[{option}]"') from None


def numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics that have a value (not None, not NaN), as floats."""
    return {
        key: float(value)
        for key, value in metrics.items()
        if value is not None and not (isinstance(value, float) and math.isnan(value))
    }


def recall(directory: Path, name: str) -> dict[str, Any]:
    """What logger `name` remembered in `directory` (empty: nothing, it starts afresh)."""
    path = directory / TRACKING_RECORD
    return json.loads(path.read_text()).get(name, {}) if path.is_file() else {}


def remember(directory: Path, name: str, **values: Any) -> None:
    path = directory / TRACKING_RECORD
    record = json.loads(path.read_text()) if path.is_file() else {}
    record[name] = values
    text = json.dumps(record, indent=2) + "\n"
    atomic_write_bytes(path, lambda f: f.write(text.encode()))


def sweep_of(run_dir: Path) -> Path | None:
    """The sweep directory when `run_dir` is a job of the Hydra multirun this process runs (in
    whatever process its launcher runs it), else None."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hydra = HydraConfig.get()
    if hydra.mode != RunMode.MULTIRUN or Path(hydra.runtime.output_dir).resolve() != run_dir.resolve():
        return None
    return Path(hydra.sweep.dir)
