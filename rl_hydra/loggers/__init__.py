"""Where a run's metrics go: the `logger` config group (conf/logger/), one class per option, all
getting the same rows as metrics.csv (rl_hydra.loops.reporting.Reporter hands them out).

A record may come from someone else, so a resume (`started_from_record`) starts only the loggers
that write the run's own files (OWN_FILES: metrics.csv, tb/ by the run's handle), and another that
the record names only where its command line repeats one of its keys (`logger.mlflow.tracking_uri=...`):
MLflow's local store would land in the current directory, W&B offline in ~/.cache/wandb.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate

from rl_hydra.errors import ClassMismatch, ConfigError
from rl_hydra.loggers.base import Logger
from rl_hydra.loggers.csv import CSVLogger
from rl_hydra.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger", "build_loggers", "started_from_record"]

log = logging.getLogger(__name__)

OWN_FILES = ("csv", "tensorboard")  # loggers that write only inside the run directory, by its handle
# None: a fresh run builds every logger its config names; a set: a resume's repeated logger names
REPEATED: ContextVar[frozenset[str] | None] = ContextVar("rl_hydra_repeated_loggers", default=None)


@contextlib.contextmanager
def started_from_record(repeated: Iterable[str]) -> Iterator[None]:
    """While a run is continued from its record: build only OWN_FILES and the `repeated` loggers."""
    token = REPEATED.set(frozenset(repeated))
    try:
        yield
    finally:
        REPEATED.reset(token)


def build_loggers(node: Mapping[str, Any] | None) -> dict[str, Logger]:
    """{name: logger} for what `cfg.logger` chooses ({name: {_target_: ...}}), with "csv" first and
    always there: metrics.csv is the run's record. A config from before the group existed (a run
    resumed from an older directory) gets CSV and TensorBoard."""
    if node is None:
        return {"csv": CSVLogger(), "tensorboard": TensorBoardLogger()}
    loggers = {str(name): _build(str(name), spec) for name, spec in node.items() if chosen_here(str(name))}
    csv = loggers.pop("csv", None) or CSVLogger()
    return {"csv": csv, **loggers}


def chosen_here(name: str) -> bool:
    """Whether this command builds the logger `name`: always for a fresh run; from a record only a
    logger of the run's own files, or one the resume's command line repeats (a line says so)."""
    repeated = REPEATED.get()
    if repeated is None or name in OWN_FILES or name in repeated:
        return True
    log.info(
        "logger.%s is not started: a resume sends rows elsewhere only where its command line says "
        "(give logger.%s.<key>=<value>, e.g. one of its recorded keys, to start it)",
        name,
        name,
    )
    return False


def _build(name: str, spec: Mapping[str, Any]) -> Logger:
    try:
        return instantiate(spec)
    except InstantiationException as error:
        if isinstance(error.__cause__, ConfigError):
            raise error.__cause__ from None
        raise ClassMismatch(
            f"cannot build logger={name} ({spec.get('_target_')}): {error.__cause__ or error}"
        ) from None
