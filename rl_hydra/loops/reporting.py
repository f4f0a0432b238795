"""Where a run's numbers go while it trains: the chosen loggers (metrics.csv first, then
TensorBoard, MLflow, W&B, ...: rl_hydra/loggers/) and the progress bar."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import Any

from tqdm import tqdm

from rl_hydra.loggers import Logger
from rl_hydra.loops.settings import RunSettings
from rl_hydra.runs.run_dir import RunDirectory

log = logging.getLogger(__name__)

# tqdm's layout without its own rate (an average since the start, unlike time/sps): one rate, in the postfix
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]"


class Reporter:
    """One row per logged step (columns fixed at the start) to every logger, and a progress bar
    that shows steps, steps/s since the previous row (the row's time/sps) and the latest
    evaluation return. The bar closes at the run's last row.

    `loggers` ({name: logger}, "csv" first) get the same rows. metrics.csv is the run's record: its
    errors stop the run. Any other logger that raises is warned about once and dropped, and the
    run goes on."""

    def __init__(self, run_dir: RunDirectory, metric_names, settings: RunSettings, loggers: Mapping[str, Logger]):
        self.run_dir, self.total_steps, self.show_progress = run_dir, settings.total_steps, settings.progress
        self.stop_at_return, self.config = settings.stop_at_return, settings.config
        self.columns = [
            "time/elapsed_s",
            "time/sps",
            "rollout/return_mean",
            "rollout/length_mean",
            "rollout/episodes",
            *(f"train/{m}" for m in metric_names),
            "eval/return_mean",
            "eval/return_std",
            "eval/length_mean",
        ]
        self.csv, *others = loggers.values()
        self.others = dict(zip(list(loggers)[1:], others))
        self.progress: tqdm | None = None

    def start(self, step: int) -> None:
        """Open the loggers; a resumed run (step > 0) drops rows logged after its checkpoint."""
        self.run_dir.path.mkdir(parents=True, exist_ok=True)
        self.csv.start(self.run_dir, self.config, step, self.columns)
        for name in list(self.others):
            self._call(name, "start", self.run_dir, self.config, step, self.columns)
        self.progress = tqdm(
            total=self.total_steps,
            initial=step,
            unit="step",
            dynamic_ncols=True,
            disable=not self.show_progress,
            mininterval=0.5,
            bar_format=BAR_FORMAT,
        )
        self._row_time, self._row_step = time.perf_counter(), step

    def write(self, step: int, row: dict[str, Any], eval_return: float | None) -> None:
        """Log `row` at `step`, with time/sps since the previous row added."""
        now = time.perf_counter()
        sps = (step - self._row_step) / max(now - self._row_time, 1e-9)
        self._row_time, self._row_step = now, step
        row = {"time/sps": round(sps, 1), **row}
        self.csv.log(step, row)
        for name in list(self.others):
            self._call(name, "log", step, row)
        self._advance_bar(step, sps, eval_return)
        if step >= self.total_steps or self._solved(row):
            self._end_bar(step)

    def _advance_bar(self, step: int, sps: float, eval_return: float | None) -> None:
        text = f"{sps:,.0f} steps/s"
        if eval_return is not None:
            text += f", eval return {eval_return:.1f}"
        assert self.progress is not None, "start() first"
        self.progress.set_postfix_str(text, refresh=False)
        self.progress.update(step - self.progress.n)

    def _solved(self, row: Mapping[str, Any]) -> bool:
        """Whether this row's evaluation reached train.stop_at_return, the Evaluator's rule for
        stopping: this row is then the run's last."""
        target, value = self.stop_at_return, row.get("eval/return_mean")
        return target is not None and value is not None and value >= target

    def _end_bar(self, step: int) -> None:
        """Close the bar at the run's last row, so that the lines logged after it (the last
        checkpoint, "finished: ...") start on lines of their own. A run stopped early by
        train.stop_at_return ends full at the step it reached, marked "solved", not part-way."""
        assert self.progress is not None, "start() first"
        if step < self.progress.total:
            self.progress.total = step
            self.progress.set_description("solved", refresh=False)
        self.progress.close()

    def close(self, status: str = "completed", step: int | None = None) -> None:
        """End every logger with the run's status (summary.json's: completed, failed, interrupted);
        a bar still open (a run stopped between rows) ends at `step`, the one its last checkpoint has."""
        if self.progress is None:  # never started
            return
        for name in list(self.others):
            self._call(name, "finish", status)
        self.csv.finish(status)
        if step is not None and not self.progress.disable:  # disabled: hidden, or closed by the last row
            self.progress.update(step - self.progress.n)
        self.progress.close()  # a no-op when the last row closed it

    def _call(self, name: str, method: str, *args: Any) -> None:
        logger = self.others[name]
        try:
            getattr(logger, method)(*args)
        except Exception as error:  # noqa: BLE001 - disk full, server unreachable, ...: the run goes on
            log.warning(
                "logger=%s failed (%s: %s); the run goes on without it, metrics.csv keeps every row",
                name,
                type(error).__name__,
                str(error).splitlines()[0] if str(error) else "",
            )
            del self.others[name]
            if method != "finish":
                with contextlib.suppress(Exception):  # let it release what it holds
                    logger.finish("failed")
