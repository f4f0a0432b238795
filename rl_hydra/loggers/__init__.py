"""Where a run's metrics go: the `logger` config group (conf/logger/), one class per option, all
getting the same rows as metrics.csv (rl_hydra.loops.reporting.Reporter hands them out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from rl_hydra.config import ConfigError
from rl_hydra.loggers.base import Logger
from rl_hydra.loggers.csv import CSVLogger
from rl_hydra.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger", "build_loggers"]


def build_loggers(node: Mapping[str, Any] | None) -> dict[str, Logger]:
    """{name: logger} for what `cfg.logger` chooses ({name: {_target_: ...}}), with "csv" first and
    always there: metrics.csv is the run's record. A config from before the group existed (a run
    resumed from an older directory) gets CSV and TensorBoard."""
    if node is None:
        return {"csv": CSVLogger(), "tensorboard": TensorBoardLogger()}
    loggers = {str(name): _build(str(name), spec) for name, spec in node.items()}
    csv = loggers.pop("csv", None) or CSVLogger()
    return {"csv": csv, **loggers}


def _build(name: str, spec: Mapping[str, Any]) -> Logger:
    try:
        return instantiate(spec)
    except InstantiationException as error:
        if isinstance(error.__cause__, ConfigError):
            raise error.__cause__ from None
        raise ConfigError(f"cannot build logger={name} ({spec.get('_target_')}): {error.__cause__ or error}") from None
