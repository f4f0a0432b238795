"""Where a run's numbers go while it trains: metrics.csv and TensorBoard rows, and the progress bar."""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

from rl_hydra.runs.metrics import MetricsLogger
from rl_hydra.runs.run_dir import RunDirectory


class Reporter:
    """One metrics row per logged step (columns fixed at the start) and a progress bar that shows
    steps, steps/s since the previous row and the latest evaluation return."""

    def __init__(self, run_dir: RunDirectory, metric_names, total_steps: int, progress: bool):
        self.run_dir, self.total_steps, self.show_progress = run_dir, total_steps, progress
        self.columns = ["time/elapsed_s", "time/sps", "rollout/return_mean", "rollout/length_mean",
                        "rollout/episodes", *(f"train/{m}" for m in metric_names),
                        "eval/return_mean", "eval/return_std", "eval/length_mean"]
        self.metrics: MetricsLogger | None = None
        self.progress = None

    def start(self, step: int) -> None:
        """Open the files; a resumed run (step > 0) drops rows logged after its checkpoint."""
        self.run_dir.path.mkdir(parents=True, exist_ok=True)
        self.metrics = MetricsLogger(self.run_dir.metrics_csv, self.columns, self.run_dir.tensorboard,
                                     resume_from_step=step or None)
        self.progress = tqdm(total=self.total_steps, initial=step, unit="step", dynamic_ncols=True,
                             disable=not self.show_progress, mininterval=0.5)
        self._row_time, self._row_step = time.perf_counter(), step

    def write(self, step: int, row: dict[str, Any], eval_return: float | None) -> None:
        """Log `row` at `step`, with time/sps since the previous row added."""
        now = time.perf_counter()
        sps = (step - self._row_step) / max(now - self._row_time, 1e-9)
        self._row_time, self._row_step = now, step
        self.metrics.log(step, {"time/sps": round(sps, 1), **row})
        self.progress.update(step - self.progress.n)
        postfix = {"sps": f"{sps:.0f}"}
        if eval_return is not None:
            postfix["eval"] = f"{eval_return:.1f}"
        self.progress.set_postfix(postfix, refresh=False)

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.progress.close()
