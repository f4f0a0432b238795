"""`python train.py resume=<run_dir> [key=value ...]`: continue a run in place with its recorded
config, changed only where a resume may change it (RESUMABLE)."""

from __future__ import annotations

import dataclasses
import logging
import sys

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rl_hydra.commands.launch import EXIT_CONFIG, LOG_FORMAT, RunFailed, fail, launch
from rl_hydra.config import flat_config
from rl_hydra.errors import ConfigError
from rl_hydra.runs.run_dir import RunDirectory, RunError
from rl_hydra.runs.trust import read_config
from rl_hydra.schema import type_refusal
from rl_hydra.schema.keys import check, fields

# the config groups: a resume changes values, never a group's choice
GROUPS = ("algo", "env", "network", "buffer", "algo_env", "hparams_search", "logger")


# what a resume may change: how long and how it runs, never what it trains (env, algorithm,
# network, buffer, seed: the checkpoint holds their state)
RESUMABLE = (
    "train.",
    "checkpoint.",
    "logger.",
    "device",
    "torch_threads",
    "compile",
    "flush_denormal",
    "fast_paths",
    "distributed.address",  # where the cluster is, not what trains: a record never chooses it
    "env.vectorization",  # sync and async step the same transitions (envs/vector.py); envpool is refused below
)


def resume_config(directory: RunDirectory, overrides: list[str]) -> tuple[DictConfig, dict[str, list]]:
    """The run's recorded config with `key=value` changes applied in memory, parsed as Hydra parses
    a fresh run's (`3e3` is a number), and {key: [old, new]} for those that change a value."""
    import difflib

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    from rl_hydra.runs.run_dir import RunBusy, RunLock

    try:
        RunLock.check_free(directory)
    except RunBusy as error:
        fail(str(error), EXIT_CONFIG)
    config_file = directory.recorded_config
    if not config_file.is_file():
        fail(f"resume={directory.path} is not a run directory (no .hydra/config.yaml)", EXIT_CONFIG)
    try:
        cfg = read_record(directory)
    except RunError as error:
        fail(str(error), EXIT_CONFIG)
    OmegaConf.set_struct(cfg, True)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except (OverrideParseException, ValueError) as error:  # ValueError: an integer of over 4,300 digits
        given = " ".join(o if len(o) <= 80 else f"{o[:60]}...({len(o)} characters)" for o in overrides)
        fail(f"cannot parse the overrides {given}: {str(error).splitlines()[0]}", EXIT_CONFIG)
    allowed = ", ".join(f"{key}*" if key.endswith(".") else key for key in RESUMABLE)
    changes = {}
    for override in parsed:
        key = override.key_or_group
        if (
            override.is_sweep_override()
            or override.type.name != "CHANGE"
            or key.lstrip("+~") in GROUPS
            or key.startswith("hydra")
        ):
            fail(
                f"{override.input_line!r} cannot be applied when resuming; only key=value changes of existing "
                f"keys are allowed ({allowed})",
                EXIT_CONFIG,
            )
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            known = sorted(flat_config(cfg))
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            fail(f"{key} is not a key of the run's config ({config_file}){hint}", EXIT_CONFIG)
        if not key.startswith(tuple(k for k in RESUMABLE if k.endswith("."))) and key not in RESUMABLE:
            fail(
                f"{key} cannot change when resuming: the run's checkpoint was trained with it; a resume may "
                f"change {allowed} (for another {key}, start a new run)",
                EXIT_CONFIG,
            )
        old = plain(OmegaConf.select(cfg, key))
        value = override.value()
        try:
            try:
                OmegaConf.update(cfg, key, value)
            except OmegaConfBaseException:  # `6e2` for an integer key is 600, as for a fresh run
                if not (isinstance(value, float) and value.is_integer()):
                    raise
                OmegaConf.update(cfg, key, int(value))
        except OmegaConfBaseException as error:  # the key's type refuses the value (the schema's, as a launch)
            owner = getattr(error, "object_type", None)
            rule = (
                dict((name, rule) for name, rule, _ in fields(owner)).get(key.rsplit(".", 1)[-1])
                if isinstance(owner, type) and dataclasses.is_dataclass(owner)
                else None
            )
            try:
                if rule is not None:
                    check(value, key, rule)
            except ConfigError as refused:
                fail(str(refused), EXIT_CONFIG)
            fail(type_refusal(error) or f"{override.input_line}: {str(error).splitlines()[0]}", EXIT_CONFIG)
        if plain(OmegaConf.select(cfg, key)) != old:
            changes[key] = [old, plain(OmegaConf.select(cfg, key))]
    named = {key for key in changes} | {o.key_or_group for o in parsed}
    try:
        check_destinations(cfg, named)
        check_processes(cfg, named, directory)
    except RunError as error:
        fail(str(error), EXIT_CONFIG)
    machine = machine_settings(cfg, named)
    if changes:  # rewritten into the record with the changes the command line made (none: nothing is rewritten)
        changes.update(machine)
    return cfg, changes


def machine_settings(cfg: DictConfig, given: set[str]) -> dict[str, list]:
    """What the record may not choose for this machine, unless the command line repeats it:
    compile=true (torch.compile runs a C++ compiler and fills its cache) is off, torch_threads is
    at most this machine's CPU count. The math is the same; {key: [recorded, used]} of what changed."""
    import os

    used = {
        "compile": bool(cfg.compile) and "compile" in given,
        "torch_threads": min(int(cfg.torch_threads), os.cpu_count() or 1) if "torch_threads" not in given else None,
    }
    changed = {}
    for key, value in used.items():  # run-level keys every record holds (rl_hydra/schema/run.py)
        recorded = cfg[key]
        if value is not None and value != recorded:
            cfg[key] = value
            changed[key] = [recorded, value]
    return changed


def check_processes(cfg: DictConfig, given: set[str], directory: RunDirectory) -> None:
    """Before any env is made: a record's env.vectorization=async starts one process per env, so
    more than this machine's CPUs is refused unless the command line asks for it; envpool's thread
    pool is the same; and the checkpoint's envs must be as many as env.num_envs."""
    import os

    how, count, cpus = cfg.env.vectorization, int(cfg.env.num_envs), os.cpu_count() or 1
    if how in ("async", "envpool") and count > cpus and "env.vectorization" not in given:
        raise RunError(
            f"the run records env.vectorization={how} with env.num_envs={count}: {count} worker "
            f"{'processes' if how == 'async' else 'threads'}, more than this machine's {cpus} CPUs; give "
            f"env.vectorization=sync (the same transitions, in this process) or env.vectorization={how} to start them"
        )
    held = checkpoint_env_count(directory)
    if held is not None and held != count:
        raise RunError(
            f"checkpoint {directory.checkpoints / 'last.pt'} holds the state of {held} envs, but the run's config "
            f"has env.num_envs={count}: the record does not hold together"
        )


def checkpoint_env_count(directory: RunDirectory) -> int | None:
    """How many envs last.pt's exact env state is of (None: no checkpoint, or no exact env state)."""
    import torch

    if not (directory.checkpoints / "last.pt").is_file():
        return None
    env = directory.load_checkpoint("last").get("env")
    episodes = env.get("episode_return") if isinstance(env, dict) else None
    return int(episodes.shape[0]) if isinstance(episodes, torch.Tensor) and episodes.dim() == 1 else None


def read_record(directory: RunDirectory) -> DictConfig:
    """The run's config, once every file of the record holds together (check_record). A record
    that does not, while another process has taken the run meanwhile (a second resume that checked
    the lock a moment before the first took it), is RunBusy: that process is writing it. Once that
    writer is gone, the record is judged again, as it then is."""
    from rl_hydra.runs.run_dir import RunLock

    def judged() -> DictConfig:
        cfg = read_config(directory)  # data, never code: rl_hydra/runs/trust.py
        check_record(directory)
        return cfg

    try:
        return judged()
    except RunError:
        RunLock.check_free(directory)  # RunBusy: the record is in flux under its writer
    return judged()


# where a run connects to: a record never chooses it (docs/runs.md, 'Opening someone else's run')
DESTINATIONS = {
    "distributed.address": "the Ray cluster to join",
    "logger.mlflow.tracking_uri": "the MLflow server or store",
    "logger.wandb.entity": "the W&B entity",
    "logger.wandb.project": "the W&B project",
}


def check_destinations(cfg: DictConfig, given: set[str]) -> None:
    """Refuse a resume whose record names where to connect (a Ray address, a tracker's server)
    unless the command line repeats it: the record may come from someone else. W&B's names count
    only where it would go online."""
    for key, what in DESTINATIONS.items():
        value = OmegaConf.select(cfg, key, default=None)
        if key.startswith("logger.wandb.") and OmegaConf.select(cfg, "logger.wandb.mode", default=None) != "online":
            continue
        if value is not None and value != "auto" and key not in given:
            raise RunError(
                f"the run records {key}={value}, {what}; a resume connects only where its command line says: "
                f"give {key}=<where> (or {key}=null)"
                if key != "logger.wandb.project"
                else f"the run records {key}={value}, {what}, and logger.wandb.mode=online; a resume connects "
                f"only where its command line says: give {key}=<project> (or logger.wandb.mode=offline)"
            )


def check_record(directory: RunDirectory) -> None:
    """Every file of the record parses and holds together, before a resume takes the directory:
    provenance.json, summary.json, .hydra's overrides and choices, metrics.csv, the checkpoints
    (one RunError line otherwise, and nothing is written)."""
    from rl_hydra.runs.metrics import Differs, read_metrics
    from rl_hydra.runs.provenance import read_sessions, running_misfit
    from rl_hydra.runs.run_dir import read_choices, read_overrides

    sessions = read_sessions(directory)
    summary = directory.read_summary() or {}
    read_overrides(directory)
    read_choices(directory)
    try:
        metrics = read_metrics(directory)
    except Differs as error:
        raise RunError(f"{directory.metrics_csv}: {error}") from None
    steps = {}
    for name in ("last", "best"):
        if (directory.checkpoints / f"{name}.pt").exists():
            steps[name] = directory.load_checkpoint(name)["runner"]["global_step"]
    recorded = metrics.steps()
    if "last" in steps and summary.get("status") == "completed" and summary.get("global_step") != steps["last"]:
        raise RunError(
            f"{directory.path}'s summary.json says the run completed at step {summary.get('global_step')!r}, "
            f"but checkpoints/last.pt is at step {steps['last']}: the record does not hold together"
        )
    running = running_misfit(summary, sessions, steps.get("last"))  # an extension killed or stopped by a full disk
    if running:
        raise RunError(f"{directory.path}'s {running}: the record does not hold together")
    if "best" in steps and recorded and steps["best"] not in recorded:
        raise RunError(
            f"{directory.path}'s checkpoints/best.pt is from step {steps['best']}, at which metrics.csv logged "
            f"no evaluation: the record does not hold together"
        )


def plain(value):
    """A config value as plain Python (lists and dicts included)."""
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def resume_main(run_dir: str, overrides: list[str]) -> None:
    """`train.py resume=<run_dir> [key=value ...]`: continue a run in place with its saved config.
    Its changes are checked as a fresh run's are, and written only once the run is under way."""
    from rl_hydra.loggers import started_from_record

    directory = RunDirectory(run_dir)
    cfg, changes = resume_config(directory, overrides)
    console = logging.StreamHandler(sys.stdout)  # as Hydra's job logging does; launch adds train.log
    console.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(console)
    logging.getLogger().setLevel(logging.INFO)
    repeated = {o.split("=", 1)[0].split(".")[1] for o in overrides if o.startswith("logger.") and o.count(".") >= 2}
    try:
        with started_from_record(repeated):
            launch(cfg, directory.path, resume=True, overrides=overrides, config_changes=changes)
    except RunFailed as error:
        fail(str(error), error.code)
    finally:
        logging.getLogger().removeHandler(console)
