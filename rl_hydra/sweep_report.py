"""The end of a sweep (`train.py -m`): one stderr line naming the jobs that failed, and a non-zero
exit. Failing jobs do not stop the others; this Hydra callback looks at every job's summary.json
once the sweep is over, in the process that launched it, whichever launcher ran the jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

failed_jobs: list[str] = []   # set by the last sweep of this process; read by rl_hydra.cli.main


class SweepFailures(Callback):
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        statuses = {path.parent: json.loads(path.read_text()).get("status")
                    for path in sorted(sweep_dir.glob("*/summary.json"))}
        failed_jobs[:] = [str(job) for job, status in statuses.items() if status == "failed"]
        if failed_jobs:
            print(f"error: {len(failed_jobs)} of {len(statuses)} jobs failed (the reason is in each one's "
                  f"summary.json): {', '.join(failed_jobs)}", file=sys.stderr)
