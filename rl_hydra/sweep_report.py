"""The end of a sweep (`train.py -m`): one stderr line naming the jobs that failed, and a non-zero
exit. Failing jobs do not stop the others: each one that fails appends its directory to
`<sweep dir>/failed_jobs.txt` (whichever process the launcher ran it in), and this Hydra callback,
in the process that launched the sweep, reads that file once the sweep is over."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

FAILED_JOBS = "failed_jobs.txt"
failed_jobs: list[str] = []   # set by the last sweep of this process; read by rl_hydra.cli.main


def record_failure(sweep_dir: str | Path, job_dir: str | Path) -> None:
    """Called by a failing job; one short line, appended (safe from parallel jobs)."""
    with open(Path(sweep_dir) / FAILED_JOBS, "a") as f:
        f.write(f"{job_dir}\n")


class SweepFailures(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        (Path(config.hydra.sweep.dir) / FAILED_JOBS).unlink(missing_ok=True)   # a re-launch counts anew

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        record = sweep_dir / FAILED_JOBS
        failed_jobs[:] = sorted(set(record.read_text().split("\n")) - {""}) if record.is_file() else []
        if failed_jobs:
            jobs = len(list(sweep_dir.glob("*/.hydra")))
            print(f"error: {len(failed_jobs)} of {jobs} jobs failed (each one's error is above and in its "
                  f"train.log; listed in {record}): {', '.join(failed_jobs)}", file=sys.stderr)
