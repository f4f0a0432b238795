"""A run directory's record of what it holds, kept by whoever launches into it: the config it
trains with (.hydra/), whether a launch's config is the same, a refused sweep job's record, and
the removal of what a refused or killed launch left. Everything that writes here is called with
the directory's lock held (RunLock) or on a directory no run has used."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import flat_config
from rl_hydra.runs.run_dir import RunDirectory, RunError, RunLock, resume_command
from rl_hydra.runs.trust import read_config_data

log = logging.getLogger("rl_hydra")
STARTED = time.time()  # a run directory made after this, and left empty by a refusal, is removed


class RunConflict(RunError):
    """The directory holds a run with another config."""


# a sweep turns the progress bar off; it changes no result
IGNORED_DIFFERENCES = ("train.progress",)


def check_same_config(directory: RunDirectory, cfg: DictConfig, overrides: Sequence[str]) -> None:
    """A directory that already holds a run's output may only be launched into again with the same
    config (a re-launched sweep); a different one is refused, naming the keys that differ. Keys
    the recorded config lacks were added to rl_hydra's configs since the run began: they do not
    count as a difference (a sweep re-launched after an upgrade still finds its runs), and the
    log names them, unless this launch's own overrides set them (the run did not have what they ask)."""
    recorded = directory.recorded_config
    if not recorded.is_file():
        return
    before, now = flat_config(read_config_data(recorded)), flat_config(resolved(cfg))
    added = sorted(now.keys() - before.keys())
    asked = set(added) & {str(o).split("=", 1)[0].lstrip("+~") for o in overrides if "=" in str(o)}
    differ = sorted(
        k
        for k in before.keys() | now.keys()
        if (k in before and before.get(k) != now.get(k) or k in asked) and k not in IGNORED_DIFFERENCES
    )
    if differ:
        shown = ", ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in differ[:5])
        more = f" and {len(differ) - 5} more" if len(differ) > 5 else ""
        raise RunConflict(
            f"{directory.path} already holds a run with another config ({shown}{more}); "
            f"launch into a new directory, or continue that run with "
            f"{resume_command(directory.path, '[key=value ...]')}"
        )
    if added:
        log.info("keys added since this run began (not in its recorded config): %s", ", ".join(added))


def record_config(
    directory: RunDirectory,
    cfg: DictConfig,
    overrides: Sequence[str],
    hydra_cfg: DictConfig | None,
    config_changes: dict[str, list[Any]] | None,
) -> None:
    """.hydra/: the composed config, the overrides and Hydra's own config, written once when the
    run begins (Hydra's own writing at job start is off: conf/train.yaml hydra.output_subdir); a
    resume's changes rewrite the config and add their overrides."""
    if directory.config_yaml.is_file() and not config_changes:
        return
    if directory.config_yaml.is_file():
        overrides = [*directory.recorded_overrides(), *overrides]
        hydra_cfg = None  # Hydra's config is the one the run began with
    directory.write_text(directory.config_yaml, OmegaConf.to_yaml(resolved(cfg)))
    directory.write_text(directory.hydra / "overrides.yaml", yaml.safe_dump(list(overrides)))
    if hydra_cfg is not None:
        directory.write_text(directory.hydra / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
    with directory.folder(directory.hydra) as hydra:
        hydra.unlink("run_config.yaml")  # an older version's second copy


def resolved(cfg: DictConfig) -> Any:
    """The config as the run uses it, every interpolation resolved by the launch that composed it:
    a record holds values only (runs/trust.py reads it as data). A refused job's config whose
    interpolation does not resolve is kept as composed."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        return OmegaConf.to_container(cfg, resolve=False)


def record_refusal(
    directory: RunDirectory, cfg: DictConfig, overrides: Sequence[str], hydra_cfg: DictConfig | None, reason: str
) -> None:
    """A refused sweep job's record (its config and a failed summary.json), in a directory that
    holds no run and no other process uses; never over another run."""
    with contextlib.suppress(RunError, OSError), RunLock(directory):
        if directory.holds_output() or directory.summary_json.is_file():
            return
        record_config(directory, cfg, overrides, hydra_cfg, None)
        directory.write_summary({"status": "failed", "reason": reason, **directory.identity(cfg, algo_class_name(cfg))})


def remove_debris(directory: RunDirectory) -> None:
    """A finished run is never written again, so the temp files of a process killed while it
    finished (its provenance, say) are removed here, under the lock; nothing else is touched."""
    if directory.temp_files():
        with contextlib.suppress(RunError, OSError), RunLock(directory):
            directory.remove_temp_files()


def remove_refused_run(directory: RunDirectory) -> None:
    """A refused single run leaves nothing behind: the directory Hydra made for it is removed
    when it holds nothing (but the lock this process took) and was made by this process (never
    a directory that was there), and so are the folders made for it (outputs/<date>/) that it
    leaves empty, up to the working directory."""
    with contextlib.suppress(OSError):
        with directory.folder() as folder:
            if os.fstat(folder.fd).st_mtime < STARTED - 1:
                return
            if folder.names() == [directory.lock_file.name]:
                folder.unlink(directory.lock_file.name)
        directory.forget_handle()
        directory.path.rmdir()
        here = Path.cwd().resolve()
        for parent in directory.path.resolve().parents:
            if parent == here or not parent.is_relative_to(here) or any(parent.iterdir()):
                break
            parent.rmdir()


def algo_class_name(cfg: DictConfig) -> str:
    """The algo's class name, what summary.json names when the run's config choice is unknown."""
    return OmegaConf.select(cfg, "algo._target_", default="?").rsplit(".", 1)[-1]
