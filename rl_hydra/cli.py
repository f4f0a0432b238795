"""Command-line glue: one-line errors, exit codes and what the Hydra main returns."""

from __future__ import annotations

import logging
import math
import signal
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rl_hydra.config import ConfigError
from rl_hydra.loops.runner import TrainingDiverged
from rl_hydra.runs.run_dir import RunDirectory, RunError

log = logging.getLogger("rl_hydra")

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


def fail(message: str, code: int) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def check_group_choices(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject `group=option` arguments whose option file does not exist, in one line.

    Hydra would also refuse them, but with a multi-line report; sweep lists
    (`algo=dqn,iqn`) are checked value by value.
    """
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir()}
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key not in groups or "(" in value or value in ("null", ""):
            continue
        options = sorted(p.stem for p in (conf_dir / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice not in options:
                fail(f"{key}={choice} is not a config option; choose one of: {', '.join(options)}", EXIT_CONFIG)


def _stop_on_sigterm() -> None:
    def handler(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


def hydra_task(cfg: DictConfig) -> float:
    """Body of the @hydra.main function: train and return the final eval return.

    In a multirun a failing job records its failure and returns NaN so the other
    jobs go on; a single run exits non-zero with one line.
    """
    from rl_hydra.train import run

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    _stop_on_sigterm()
    try:
        summary = run(cfg, run_dir)
    except (ConfigError, RunError) as error:
        RunDirectory(run_dir).write_summary({"status": "failed", "reason": str(error)})
        return _report(f"{error}", EXIT_CONFIG, multirun)
    except TrainingDiverged as error:
        return _report(f"training diverged: {error}", EXIT_FAILED, multirun)
    except KeyboardInterrupt:
        fail(f"interrupted; the last checkpoint is in {run_dir}/checkpoints/last.pt; "
             f"resume with: python train.py resume={run_dir}", EXIT_INTERRUPTED)
    return summary["eval_return_mean"]


def _report(message: str, code: int, multirun: bool) -> float:
    if multirun:  # the sweep goes on; the job's log and summary.json keep the reason
        log.error(message)
        return math.nan
    fail(message, code)
