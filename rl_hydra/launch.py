"""The one way a run starts, whoever starts it: `python train.py` (Hydra), `train.py resume=<dir>`
and the Python API `rl_hydra.train(...)` all call `launch`.

It makes sure the run directory holds the config it runs (Hydra writes .hydra/ itself; the other
two callers have it written here), that the `rl_hydra` log goes to the directory's train.log, and
then trains, skips a finished run, or continues an interrupted one. Every failure becomes a
`RunFailed` with one user-facing line and its exit code: 2 for a config that cannot work, 1 for a
run that failed, 130 for a run stopped by Ctrl-C/SIGTERM (it keeps a checkpoint).
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from pathlib import Path
from typing import Any, Iterator, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import ConfigError, flat_config
from rl_hydra.runs.run_dir import RunDirectory, RunError

log = logging.getLogger("rl_hydra")

EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"   # Hydra's job log format


class RunFailed(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def launch(cfg: DictConfig, run_dir: str | Path, *, resume: bool = False, overrides: Sequence[str] | None = None,
           hydra_cfg: DictConfig | None = None, keep_refused: bool = False) -> dict[str, Any]:
    """Train `cfg` into `run_dir` and return its summary; raises RunFailed.

    `overrides` and `hydra_cfg` are written to .hydra/ when the directory has no config yet
    (Hydra's own runs already have it). A config refused before the first step leaves nothing
    behind, unless `keep_refused` (a sweep's job: its failed summary.json lists it in the
    sweep's report)."""
    directory = RunDirectory(run_dir)
    if not (directory.hydra / "config.yaml").is_file():
        write_run_config(directory, cfg, overrides or [], hydra_cfg)
    if resume:   # resume=<dir> may change existing keys: what it runs becomes the run's config
        record_run_config(directory, cfg)
    else:
        check_same_run(directory, cfg)
    try:
        with log_to_file(directory.path / "train.log"):
            log.info("run directory: %s", directory.path)
            return _train_or_skip(cfg, directory, resume, keep_refused)
    except RunFailed as error:
        if error.code == EXIT_CONFIG and not resume and not keep_refused:
            remove_refused_run(directory)
        raise


# the run's own record of the config it trains with: Hydra rewrites .hydra/config.yaml at every launch
RUN_CONFIG = "run_config.yaml"
IGNORED_DIFFERENCES = ("train.progress",)   # a sweep turns the progress bar off; it changes no result


def check_same_run(directory: RunDirectory, cfg: DictConfig) -> None:
    """A directory that already holds a run's output may only be launched into again with the same
    config (a re-launched sweep); a different one is refused, naming the keys that differ. A job
    refused before its first step left no output, so a corrected config simply runs there. Keys
    the recorded config lacks were added to rl_hydra's configs since the run began: they do not
    count as a difference (a sweep re-launched after an upgrade still finds its runs), and the
    log names them, unless this launch's own overrides set them (the run did not have what they ask)."""
    recorded = directory.hydra / RUN_CONFIG
    if recorded.is_file() and (directory.checkpoints.is_dir() or directory.metrics_csv.is_file()):
        before, now = flat_config(OmegaConf.load(recorded)), flat_config(cfg)
        added = sorted(now.keys() - before.keys())
        if added:
            log.info("keys added since this run began (not in its recorded config): %s", ", ".join(added))
        asked = set(added) & overridden_keys(directory)
        differ = sorted(k for k in before.keys() | now.keys()
                        if (k in before and before.get(k) != now.get(k) or k in asked) and k not in IGNORED_DIFFERENCES)
        if differ:
            shown = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in differ[:5])
            more = f" and {len(differ) - 5} more" if len(differ) > 5 else ""
            raise RunFailed(f"{directory.path} already holds a run with another config ({shown}{more}); "
                            f"launch into a new directory, or continue that run with "
                            f"python train.py resume={directory.path} [key=value ...]", EXIT_CONFIG)
    record_run_config(directory, cfg)


def overridden_keys(directory: RunDirectory) -> set[str]:
    """The keys this launch's command-line overrides set (.hydra/overrides.yaml, written at each launch)."""
    path = directory.hydra / "overrides.yaml"
    overrides = yaml.safe_load(path.read_text()) if path.is_file() else None
    return {str(o).split("=", 1)[0].lstrip("+~") for o in overrides or [] if "=" in str(o)}


def record_run_config(directory: RunDirectory, cfg: DictConfig) -> None:
    directory.hydra.mkdir(parents=True, exist_ok=True)
    (directory.hydra / RUN_CONFIG).write_text(OmegaConf.to_yaml(cfg))


def remove_refused_run(directory: RunDirectory) -> None:
    """Remove what a refused launch wrote (.hydra/, train.log, its summary), and the directory
    itself if that leaves it empty; never anything else that was there."""
    import shutil

    if directory.checkpoints.exists() or directory.metrics_csv.exists():
        return
    shutil.rmtree(directory.hydra, ignore_errors=True)
    for name in ("train.log", "summary.json"):
        (directory.path / name).unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.path.rmdir()


def write_run_config(directory: RunDirectory, cfg: DictConfig, overrides: Sequence[str],
                     hydra_cfg: DictConfig | None) -> None:
    """What Hydra writes into a run directory: the composed config, the overrides, its own config."""
    directory.hydra.mkdir(parents=True, exist_ok=True)
    (directory.hydra / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (directory.hydra / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    if hydra_cfg is not None:
        (directory.hydra / "hydra.yaml").write_text(OmegaConf.to_yaml({"hydra": hydra_cfg}))


@contextlib.contextmanager
def log_to_file(path: Path) -> Iterator[None]:
    """Send the `rl_hydra` log (INFO and up) to `path` for the duration, unless a handler already
    writes there (Hydra's job logging does for its own runs)."""
    logger, target = logging.getLogger("rl_hydra"), str(path.resolve())
    handlers = [h for lg in (logging.getLogger(), logger) for h in lg.handlers]
    if any(getattr(h, "baseFilename", None) == target for h in handlers):
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def _target_name(cfg: DictConfig) -> str:
    """The algo's class name, what summary.json names when the run's config choice is unknown."""
    return OmegaConf.select(cfg, "algo._target_", default="?").rsplit(".", 1)[-1]


def _train_or_skip(cfg: DictConfig, directory: RunDirectory, resume: bool, keep_refused: bool) -> dict[str, Any]:
    """Train, or skip a directory that holds a finished run, or continue an interrupted one found
    there (a re-launched sweep). Torch is imported here, in the job, so that the process
    launching a parallel sweep stays light."""
    from rl_hydra.loops.runner import StopRequested, TrainingDiverged
    from rl_hydra.training import run

    run_dir = directory.path
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
        if not resume and keep_refused:
            directory.write_summary({"status": "failed", "reason": str(error),
                                     **directory.identity(cfg, _target_name(cfg))})
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
        directory.write_summary({"status": "failed", "reason": reason, **directory.identity(cfg, _target_name(cfg))})
        raise RunFailed(f"run failed: {reason} (traceback in {directory.path / 'traceback.txt'})",
                        EXIT_FAILED) from None
