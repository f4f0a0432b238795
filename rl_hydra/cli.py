"""Command-line entry: `python train.py ...` and the `rl-hydra-train` console script.

One-line errors and exit codes live here: 2 for a config that cannot work,
1 for a run that failed, 130 for a run stopped by Ctrl-C/SIGTERM (it keeps a
checkpoint and says how to resume).
"""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import ConfigError
from rl_hydra.runs.run_dir import RunDirectory, RunError

log = logging.getLogger("rl_hydra")

CONF_DIR = Path(__file__).resolve().parent / "conf"   # ships with the package; a link to ./conf in a checkout
GROUPS = ("algo", "env", "network", "buffer", "algo_env", "hparams_search")
EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


class RunFailed(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def fail(message: str, code: int):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)


def check_group_choices(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject `group=option` arguments whose option file does not exist, in one line.

    Hydra would also refuse them, but with a multi-line report; sweep lists
    (`algo=dqn,iqn`) are checked value by value.
    """
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key not in GROUPS or "(" in value or value in ("null", ""):
            continue
        options = sorted(p.stem for p in (conf_dir / key).glob("*.yaml"))
        for choice in value.split(","):
            if choice not in options:
                fail(f"{key}={choice} is not a config option; choose one of: {', '.join(options)}", EXIT_CONFIG)


def execute(cfg: DictConfig, run_dir: Path, resume: bool = False) -> dict[str, Any]:
    """Train into run_dir, or skip it if it already holds a finished run, or continue an
    interrupted one found there (a re-launched sweep). Errors become RunFailed.

    Torch is imported here, in the job, so that the process launching a parallel sweep
    stays light (its workers import what they train with)."""
    from rl_hydra.loops.runner import StopRequested, TrainingDiverged
    from rl_hydra.training import run

    directory = RunDirectory(run_dir)
    summary = directory.read_summary()
    finished = summary and summary.get("status") == "completed" and (
        summary.get("global_step", 0) >= cfg.train.total_steps or summary.get("solved_at_step") is not None)
    if finished:
        log.info("%s already holds a finished run (step %d); not training again", run_dir, summary["global_step"])
        return summary
    resume = resume or (directory.checkpoints / "last.pt").is_file()
    try:
        return run(cfg, run_dir, resume=resume)
    except (ConfigError, RunError) as error:
        if not resume:
            directory.write_summary({"status": "failed", "reason": str(error)})
        raise RunFailed(str(error), EXIT_CONFIG) from None
    except TrainingDiverged as error:
        raise RunFailed(f"training diverged: {error}", EXIT_FAILED) from None
    except StopRequested:
        raise RunFailed(f"stopped; the last checkpoint is in {run_dir}/checkpoints/last.pt; "
                        f"resume with: python train.py resume={run_dir}", EXIT_INTERRUPTED) from None
    except Exception as error:  # an env that raised, or a bug: recorded like any failure, traceback kept
        reason = type(error).__name__ + (f": {str(error).splitlines()[0]}" if str(error) else "")
        directory.path.mkdir(parents=True, exist_ok=True)
        (directory.path / "traceback.txt").write_text(traceback.format_exc())
        directory.write_summary({"status": "failed", "reason": reason})
        raise RunFailed(f"run failed: {reason} (traceback in {directory.path / 'traceback.txt'})",
                        EXIT_FAILED) from None


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def hydra_main(cfg: DictConfig) -> float | None:
    """Train and return the final eval return (what a sweeper optimises).

    In a multirun a failing job records its failure and returns None so the other
    jobs go on (Optuna marks the trial failed; a NaN would crash its sweeper); a
    single run exits non-zero with one line. Parallel jobs would garble each
    other's progress bars, so a multirun has none unless train.progress=true is given.
    """
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun and not any(o.startswith("train.progress=") for o in hydra_cfg.overrides.task):
        cfg.train.progress = False
    try:
        summary = execute(cfg, Path(hydra_cfg.runtime.output_dir))
    except RunFailed as error:
        if multirun and error.code != EXIT_INTERRUPTED:
            log.error("%s", error)
            return None
        fail(str(error), error.code)
    return summary["eval_return_mean"]


def resume_main(run_dir: str, overrides: list[str]) -> None:
    """`train.py resume=<run_dir> [key=value ...]`: continue a run in place with its saved config."""
    directory = RunDirectory(run_dir)
    config_file = directory.path / ".hydra" / "config.yaml"
    if not config_file.is_file():
        fail(f"resume={run_dir} is not a run directory (no .hydra/config.yaml)", EXIT_CONFIG)
    cfg = OmegaConf.load(config_file)
    OmegaConf.set_struct(cfg, True)
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+~") in GROUPS or not _ or key.startswith(("+", "~", "hydra")):
            fail(f"{override!r} cannot be applied when resuming; only key=value changes of existing "
                 f"keys (such as train.total_steps=...) are allowed", EXIT_CONFIG)
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            fail(f"{key} is not a key of the run's config ({config_file})", EXIT_CONFIG)
        OmegaConf.update(cfg, key, yaml.safe_load(value))
    if overrides:
        config_file.write_text(OmegaConf.to_yaml(cfg))
        with open(directory.path / ".hydra" / "overrides.yaml", "a") as f:
            f.write(yaml.safe_dump(overrides))
    _log_to_run_dir(directory.path)
    try:
        execute(cfg, directory.path, resume=True)
    except RunFailed as error:
        fail(str(error), error.code)


def _log_to_run_dir(path: Path) -> None:
    """What Hydra's job logging does for a normal run: console + append to train.log."""
    formatter = logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    for handler in (logging.StreamHandler(sys.stdout), logging.FileHandler(path / "train.log")):
        handler.setFormatter(formatter)
        root.addHandler(handler)


def main() -> None:
    argv = sys.argv[1:]
    resume = [arg for arg in argv if arg.startswith("resume=")]
    if resume:
        resume_main(resume[-1].split("=", 1)[1], [arg for arg in argv if not arg.startswith("resume=")])
        return
    check_group_choices(argv)
    hydra_main()
