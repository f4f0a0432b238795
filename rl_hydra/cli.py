"""Command-line entry: `python train.py ...` and the `rl-hydra-train` console script.

Both ways in (a Hydra run or sweep, and `resume=<run_dir>`) end in `rl_hydra.launch.launch`;
this module turns its RunFailed into one `error:` line on stderr and the exit code.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

from rl_hydra import sweep_report
from rl_hydra.config import CONF_DIR, flat_config
from rl_hydra.launch import EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, LOG_FORMAT, RunFailed, launch
from rl_hydra.runs.run_dir import RunDirectory

log = logging.getLogger("rl_hydra")

GROUPS = ("algo", "env", "network", "buffer", "algo_env", "hparams_search", "logger")


# what `--help` lists: the groups a user picks, each with what it is for (algo/base, the optimizer
# group and suite/ are building blocks of the others)
USER_GROUPS = {"algo": "the algorithm", "env": "the environment; env=gym env.id=<any registered id>",
               "network": "default: the algorithm's own", "buffer": "default: the algorithm's own",
               "logger": "a list, e.g. logger=[csv,tensorboard,mlflow]",
               "hparams_search": "with -m: an Optuna search, +hparams_search=<name>"}


def help_groups() -> str:
    """The `--help` section on groups: each user group's options, old alias names left out."""
    from rl_hydra.config import ENV_ALIASES

    lines = []
    for group, what in USER_GROUPS.items():
        options = [p.stem for p in sorted((CONF_DIR / group).glob("*.yaml")) if p.stem not in ENV_ALIASES]
        lines.append(f"{group}: {', '.join(options)}  ({what})")
    lines.append("algo_env: a tuned preset (conf/algo_env/<algo>_<env>.yaml) applies by itself when one exists; "
                 "~algo_env drops it")
    return "\n".join(lines)


if not OmegaConf.has_resolver("rl_hydra.help_groups"):
    OmegaConf.register_new_resolver("rl_hydra.help_groups", help_groups)


def fail(message: str, code: int):
    """Exit with `code` after one line on stderr: `error: ...`, or for a run stopped on request
    (Ctrl-C, SIGTERM), which is not an error, the message alone."""
    print(message if code == EXIT_INTERRUPTED else f"error: {message}", file=sys.stderr)
    sys.exit(code)


def search_dirs(argv: list[str], conf_dir: Path = CONF_DIR) -> list[Path]:
    """The config directories Hydra composes from: rl_hydra's, and those a `hydra.searchpath=[...]`
    argument adds (`file://` entries; a `pkg://` one is not looked into)."""
    dirs = [conf_dir]
    for arg in argv:
        if arg.startswith("hydra.searchpath="):
            entries = arg.split("=", 1)[1].strip("[]").split(",")
            dirs += [Path(entry.strip().strip("'\"")[len("file://"):]) for entry in entries
                     if entry.strip().strip("'\"").startswith("file://")]
    return dirs


def check_group_choices(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject `group=option` arguments whose option file does not exist, in one line.

    Hydra would also refuse them, but with a multi-line report; sweep lists
    (`algo=dqn,iqn`) are checked value by value.
    """
    dirs = search_dirs(argv, conf_dir)
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        if key not in GROUPS or "(" in value or value in ("null", ""):
            continue
        options = sorted({p.stem for d in dirs for p in (d / key).glob("*.yaml")})
        for choice in value.strip("[]").split(","):   # a sweep list, or a list option (logger=[csv,mlflow])
            if choice and choice not in options:
                fail(f"{key}={choice} is not a config option; choose one of: {', '.join(options)}", EXIT_CONFIG)


def check_override_keys(argv: list[str], conf_dir: Path = CONF_DIR) -> None:
    """Reject `key=value` arguments whose key the composed config lacks, in one line with the
    closest keys (Hydra's own report is six lines and exits 1), and a required key (`???`, such
    as env=gym's env.id) that is not given. New keys need `+key=value`."""
    import difflib

    from hydra import compose, initialize_config_dir

    pairs = [arg.split("=", 1) for arg in argv if "=" in arg and not arg.startswith("-")]
    keys = [key for key, _ in pairs if not key.startswith(("+", "~", "hydra.", "hydra/")) and key not in GROUPS
            and "@" not in key]
    # the groups as chosen (the first option of a sweep list), so that their keys are there
    groups = [f"{key}={value if value.startswith('[') else value.split(',')[0]}" for key, value in pairs
              if key.lstrip("+~") in GROUPS and not key.startswith("~") and "(" not in value]
    try:
        searchpath = [arg for arg in argv if arg.startswith("hydra.searchpath=")]   # config dirs of one's own
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="train", overrides=[*groups, *searchpath])
    except Exception:  # noqa: BLE001 - whatever fails here, Hydra reports itself
        return
    for key in sorted(OmegaConf.missing_keys(cfg) - {key.lstrip("+") for key, _ in pairs}):
        fail(f"{key} is required here (it is ??? in the chosen groups); e.g. env=gym env.id=MountainCar-v0"
             if key == "env.id" else f"{key} is required here (it is ??? in the chosen groups); give {key}=...",
             EXIT_CONFIG)
    # every key and every prefix of one: algo.optimizer.lr, algo.optimizer, algo
    known = {".".join(key.split(".")[:n]) for key in flat_config(cfg) for n in range(1, key.count(".") + 2)}
    for key in keys:
        parent = key.rsplit(".", 1)[0]
        indexes_a_list = isinstance(OmegaConf.select(cfg, parent, default=None), ListConfig)  # hidden_sizes.0=64
        if key not in known and not indexes_a_list:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            fail(f"{key} is not a key of the config; {hint}(a new key is added with +{key}=...; "
                 f"python train.py --cfg job shows every key)", EXIT_CONFIG)


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def hydra_main(cfg: DictConfig) -> float | None:
    """Train and return the final eval return (what a sweeper optimises).

    In a multirun a failing job records its failure and returns None so the other
    jobs go on (the Optuna sweeper tells Optuna the trial failed); a
    single run exits non-zero with one line. Parallel jobs would garble each
    other's progress bars, so a multirun has none unless train.progress=true is given.
    """
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun and not any(o.startswith("train.progress=") for o in hydra_cfg.overrides.task):
        cfg.train.progress = False
    try:
        summary = launch(cfg, Path(hydra_cfg.runtime.output_dir), keep_refused=multirun,
                         overrides=list(hydra_cfg.overrides.task), hydra_cfg=hydra_cfg)
    except RunFailed as error:
        if multirun and error.code != EXIT_INTERRUPTED:   # the job's train.log has the line too
            print(f"error: {hydra_cfg.runtime.output_dir}: {error}", file=sys.stderr)
            sweep_report.record_failure(hydra_cfg.sweep.dir, hydra_cfg.runtime.output_dir)
            return None
        fail(str(error), error.code)
    return summary["eval_return_mean"]


# what a resume may change: how long and how it runs, never what it trains (env, algorithm,
# network, buffer, seed: the checkpoint holds their state)
RESUMABLE = ("train.", "checkpoint.", "logger.", "device", "torch_threads", "compile", "flush_denormal", "fast_paths")


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
    cfg = OmegaConf.load(config_file)
    OmegaConf.set_struct(cfg, True)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except OverrideParseException as error:
        fail(f"cannot parse the overrides {' '.join(overrides)}: {str(error).splitlines()[0]}", EXIT_CONFIG)
    allowed = ", ".join(f"{key}*" if key.endswith(".") else key for key in RESUMABLE)
    changes = {}
    for override in parsed:
        key = override.key_or_group
        if override.is_sweep_override() or override.type.name != "CHANGE" or key.lstrip("+~") in GROUPS \
                or key.startswith("hydra"):
            fail(f"{override.input_line!r} cannot be applied when resuming; only key=value changes of existing "
                 f"keys are allowed ({allowed})", EXIT_CONFIG)
        if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
            known = sorted(flat_config(cfg))
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else ""
            fail(f"{key} is not a key of the run's config ({config_file}){hint}", EXIT_CONFIG)
        if not key.startswith(tuple(k for k in RESUMABLE if k.endswith("."))) and key not in RESUMABLE:
            fail(f"{key} cannot change when resuming: the run's checkpoint was trained with it; a resume may "
                 f"change {allowed} (for another {key}, start a new run)", EXIT_CONFIG)
        old = plain(OmegaConf.select(cfg, key))
        OmegaConf.update(cfg, key, override.value())
        if plain(OmegaConf.select(cfg, key)) != old:
            changes[key] = [old, plain(OmegaConf.select(cfg, key))]
    return cfg, changes


def plain(value):
    """A config value as plain Python (lists and dicts included)."""
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def resume_main(run_dir: str, overrides: list[str]) -> None:
    """`train.py resume=<run_dir> [key=value ...]`: continue a run in place with its saved config.
    Its changes are checked as a fresh run's are, and written only once the run is under way."""
    directory = RunDirectory(run_dir)
    cfg, changes = resume_config(directory, overrides)
    console = logging.StreamHandler(sys.stdout)  # as Hydra's job logging does; launch adds train.log
    console.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.getLogger().addHandler(console)
    logging.getLogger().setLevel(logging.INFO)
    try:
        launch(cfg, directory.path, resume=True, overrides=overrides, config_changes=changes)
    except RunFailed as error:
        fail(str(error), error.code)
    finally:
        logging.getLogger().removeHandler(console)


def main() -> None:
    argv = sys.argv[1:]
    resume = [arg for arg in argv if arg.startswith("resume=")]
    if resume:
        resume_main(resume[-1].split("=", 1)[1], [arg for arg in argv if not arg.startswith("resume=")])
        return
    check_group_choices(argv)
    check_override_keys(argv)
    hydra_main()
    if sweep_report.failed_jobs:   # a sweep some of whose jobs failed (the line is printed)
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":   # python -m rl_hydra.cli, as train.py
    main()
