"""Weights & Biases: one W&B run per run directory, offline unless `logger.wandb.mode=online`.

An offline run lands in <run>/wandb/offline-run-<time>-<id>/; `wandb sync <that dir>` uploads it.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl_hydra.loggers.base import numbers, recall, remember, require, sweep_of
from rl_hydra.runs.run_dir import RunDirectory

if TYPE_CHECKING:
    from wandb import Run

log = logging.getLogger(__name__)


class WandbLogger:
    """Name: the run directory's; group: the sweep's directory; config: the composed config;
    history: every row; summary: the last values and summary.json's figures. The run finishes with
    exit code 0 when summary.json says completed, else 1. A later session of the same run
    directory continues the W&B run id recorded in its tracking.json."""

    def __init__(
        self,
        *,
        project: str,
        entity: str | None,
        mode: str,
        tags: Sequence[str],
    ):
        require("wandb", "wandb")
        self.mode: Any = mode  # one of rl_hydra/schema/loggers.py's WANDB_MODES
        self.project, self.entity, self.tags = project, entity, list(tags)
        self.run: Run | None = None
        self.run_dir: RunDirectory | None = None
        self._saved: tuple[dict[str, str], Any] | None = None

    def start(self, run_dir: RunDirectory, config: Mapping[str, Any], step: int, columns: Sequence[str]) -> None:  # noqa: ARG002
        import wandb

        from rl_hydra.runs import provenance

        # wandb.init sets WANDB_* variables and an excepthook for the process: finish puts them back
        self._saved = ({k: v for k, v in os.environ.items() if k.startswith("WANDB")}, sys.excepthook)
        if self.mode == "offline":  # wandb's process-wide setup (its analytics too) takes the mode from here
            os.environ["WANDB_MODE"] = "offline"
        self.run_dir = run_dir
        record = recall(run_dir.path, "wandb")
        sweep = sweep_of(run_dir.path)
        group = record.get("group") if record else (str(sweep) if sweep is not None else None)
        self.run = wandb.init(
            project=self.project,
            entity=self.entity,
            mode=self.mode,
            dir=run_dir.path,
            id=record.get("id"),
            resume="allow" if record else None,
            name=run_dir.path.name,
            group=group,
            tags=[*self.tags, *provenance.short_tags(run_dir)],
            config={**config, "provenance": provenance.latest(run_dir)},
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )
        remember(run_dir.path, "wandb", id=self.run.id, group=group)
        self._say_where()

    def _say_where(self) -> None:
        """One line at the start: where the run's record goes, so that it can be found."""
        assert self.run is not None, "start() first"
        if self.mode == "offline":
            log.info(
                "W&B offline run %s; upload it with: wandb sync %s",
                self.run.id,
                shlex.quote(str(Path(self.run.dir).parent)),
            )  # a sweep job's path may hold [ ] { }
        elif self.mode == "online":
            log.info("W&B run %s: %s", self.run.id, self.run.url)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        assert self.run is not None, "log() before start()"
        self.run.log(numbers(metrics), step=step)

    def finish(self, status: str) -> None:
        try:
            if self.run is not None and self.run_dir is not None:  # both set by start
                summary = self.run_dir.read_summary() or {}
                self.run.summary.update(summary if summary.get("status") == status else {"status": status})
                self.run.finish(exit_code=0 if status == "completed" else 1)
        finally:
            self._restore()

    def _restore(self) -> None:
        if self._saved is None:
            return
        environ, excepthook = self._saved
        self._saved = None
        if "WANDB_SERVICE" not in environ:  # the service this run started
            import wandb

            wandb.teardown()
        for key in [k for k in os.environ if k.startswith("WANDB") and k not in environ]:
            del os.environ[key]
        os.environ.update(environ)
        sys.excepthook = excepthook
