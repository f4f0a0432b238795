"""The end of a sweep (`train.py -m`): one stderr line naming the jobs that failed, and a non-zero
exit. Failing jobs do not stop the others: each one that fails appends its directory to
`<sweep dir>/failed_jobs.txt` (whichever process the launcher ran it in), and this Hydra callback,
in the process that launched the sweep, reads that file once the sweep is over. Each line carries
the id of the sweep that wrote it (RL_HYDRA_SWEEP_ID, which the launcher's workers inherit), so two
sweeps sent to one sweep directory, or a re-launch, count only their own failures.

The joblib launcher's opening line is shortened by ShortJoblibLine, a filter on the console handler
of Hydra's own logging (conf/hydra/hydra_logging/console.yaml), which the launcher sets up anew
before it logs that line."""

from __future__ import annotations

import logging
import os
import re
import sys
import uuid
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

FAILED_JOBS = "failed_jobs.txt"
SWEEP_ID = "RL_HYDRA_SWEEP_ID"
failed_jobs: list[str] = []  # set by the last sweep of this process; read by rl_hydra.commands.cli.main


class ShortJoblibLine(logging.Filter):
    """The joblib launcher opens a sweep with its whole call, "Joblib.Parallel(n_jobs=2,backend=loky,
    prefer=processes,require=None,verbose=0,timeout=None,...) is launching 4 jobs", settings a user
    did not choose and need not read. It becomes "launching 4 jobs, 2 at a time". Other lines pass
    unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
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
    """Called by a failing job; one short line, appended (safe from parallel jobs) to the sweep's
    own file (files.Folder.append: never through a link, never into a file with a second name)."""
    from rl_hydra.runs.aggregate import shown
    from rl_hydra.runs.errors import RunError
    from rl_hydra.runs.files import Folder

    try:
        with Folder.open(sweep_dir) as folder, folder.append(FAILED_JOBS, encoding="utf-8") as f:
            f.write(f"{os.environ.get(SWEEP_ID, '')}\t{shown(job_dir)}\n")  # one line, whatever the name
    except (RunError, OSError) as error:  # the job's own failure is reported already
        print(f"warning: the sweep's list of failed jobs was not written: {error}", file=sys.stderr)


def failures_of(record: Path, sweep_id: str) -> list[str]:
    """The job directories that sweep `sweep_id` recorded as failed (and those of jobs run where the
    id did not reach: a line without one counts for every sweep)."""
    lines = record.read_text().splitlines() if record.is_file() else []
    return sorted(
        {job for line in lines for owner, _, job in [line.rpartition("\t")] if job and owner in (sweep_id, "")}
    )


class SweepFailures(Callback):
    def __init__(self) -> None:
        self.sweep_id = uuid.uuid4().hex
        self.previous: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ARG002
        self.previous = os.environ.get(SWEEP_ID)
        os.environ[SWEEP_ID] = self.sweep_id  # the workers the launcher starts inherit it

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ARG002
        if self.previous is None:
            os.environ.pop(SWEEP_ID, None)
        else:
            os.environ[SWEEP_ID] = self.previous
        sweep_dir = Path(config.hydra.sweep.dir)
        record = sweep_dir / FAILED_JOBS
        failed_jobs[:] = failures_of(record, self.sweep_id)
        if failed_jobs:
            from rl_hydra.runs.aggregate import shown

            jobs = len(list(sweep_dir.glob("*/.hydra")))
            print(
                f"error: {len(failed_jobs)} of {jobs} jobs failed (each one's error is above and in its "
                f"train.log; listed in {shown(record)}): {shown(', '.join(failed_jobs))}",
                file=sys.stderr,
            )
