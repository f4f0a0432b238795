"""The end of a sweep (`train.py -m`): one stderr line naming the jobs that failed, and a non-zero
exit. Failing jobs do not stop the others: each one that fails appends its directory to
`<sweep dir>/failed_jobs.txt` (whichever process the launcher ran it in), and this Hydra callback,
in the process that launched the sweep, reads that file once the sweep is over.

At the start of a sweep the same callback shortens the joblib launcher's opening line."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

FAILED_JOBS = "failed_jobs.txt"
failed_jobs: list[str] = []   # set by the last sweep of this process; read by rl_hydra.cli.main
JOBLIB_LOGGER = "hydra_plugins.hydra_joblib_launcher._core"   # logs in the launching process


def shorten_joblib_line(record: logging.LogRecord) -> bool:
    """A logging filter: the joblib launcher opens a sweep with its whole call,
    "Joblib.Parallel(n_jobs=2,backend=loky,prefer=processes,require=None,verbose=0,timeout=None,
    ...) is launching 4 jobs", settings a user did not choose and need not read. It becomes
    "launching 4 jobs, 2 at a time". Other lines pass unchanged."""
    match = re.fullmatch(r"Joblib\.Parallel\((.*)\) is launching (\d+) jobs", record.getMessage())
    if match is not None:
        n_jobs = re.search(r"(?:^|,)n_jobs=(-?\d+)(?:,|$)", match.group(1))
        at_a_time = f", {parallel_jobs(int(n_jobs.group(1)))} at a time" if n_jobs else ""
        record.msg, record.args = f"launching {match.group(2)} jobs{at_a_time}", ()
    return True


def parallel_jobs(n_jobs: int) -> int:
    """How many jobs joblib runs at once for `n_jobs`: a negative one counts back from the CPUs
    (-1: all of them)."""
    if n_jobs > 0:
        return n_jobs
    import joblib

    return max(joblib.cpu_count() + 1 + n_jobs, 1)


def record_failure(sweep_dir: str | Path, job_dir: str | Path) -> None:
    """Called by a failing job; one short line, appended (safe from parallel jobs)."""
    with open(Path(sweep_dir) / FAILED_JOBS, "a") as f:
        f.write(f"{job_dir}\n")


class SweepFailures(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        (Path(config.hydra.sweep.dir) / FAILED_JOBS).unlink(missing_ok=True)   # a re-launch counts anew
        logging.getLogger(JOBLIB_LOGGER).addFilter(shorten_joblib_line)   # once: the same filter is not added twice

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        record = sweep_dir / FAILED_JOBS
        failed_jobs[:] = sorted(set(record.read_text().split("\n")) - {""}) if record.is_file() else []
        if failed_jobs:
            jobs = len(list(sweep_dir.glob("*/.hydra")))
            print(f"error: {len(failed_jobs)} of {jobs} jobs failed (each one's error is above and in its "
                  f"train.log; listed in {record}): {', '.join(failed_jobs)}", file=sys.stderr)
