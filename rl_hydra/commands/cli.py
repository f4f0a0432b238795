"""Command-line entry: `python train.py ...` and the `rl-hydra-train` console script.

Both ways in (a Hydra run or sweep, and `resume=<run_dir>`) end in `rl_hydra.commands.launch.launch`;
this module turns its RunFailed into one `error:` line on stderr and the exit code.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.types import IntervalSweep, Override
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from rl_hydra.commands import sweep_report
from rl_hydra.commands.launch import EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED, RunFailed, fail, launching
from rl_hydra.commands.resume import resume_main
from rl_hydra.config import (
    CONF_DIR,
    ENV_ALIASES,
    ConfigError,
    check_required,
    flat_config,
    hydra_scope,
    integral_overrides,
)
from rl_hydra.errors import BadArgument
from rl_hydra.loops.steps import Steps, drive
from rl_hydra.runs.names import register_job_dir_resolver
from rl_hydra.runs.record import remove_refused_run
from rl_hydra.runs.run_dir import RunDirectory
from rl_hydra.runs.sweep_parent import mark_sweep_process
from rl_hydra.schema import key_lines, type_refusal

log = logging.getLogger("rl_hydra")

# what `--help` lists: the groups a user picks, each with what it is for (algo/base, the optimizer
# group and suite/ are building blocks of the others)
USER_GROUPS = {
    "algo": "the algorithm",
    "env": "the environment; env=gym env.id=<any registered id>",
    "network": "default: the algorithm's own",
    "buffer": "default: the algorithm's own",
    "logger": "a list, e.g. logger=[csv,tensorboard,mlflow]",
    "distributed": "none: one process; apex: actors and replay on Ray (docs/distributed.md)",
    "protocol": "preset: each preset's own budget and schedule; shared: one for all, to compare algorithms",
    "hparams_search": "with -m: an Optuna search, +hparams_search=<name>",
}


def help_groups(searchpath=()) -> str:
    """The `--help` section on groups: each user group's options, old alias names left out, with
    those of the config directories on `hydra.searchpath`, found as a run finds them."""
    from hydra.core.global_hydra import GlobalHydra

    overrides = [f"hydra.searchpath=[{','.join(searchpath)}]"] if searchpath else []
    with hydra_scope():
        loader = GlobalHydra.instance().config_loader()
        options = {group: shown(group_options(loader, group, "train", overrides)) for group in USER_GROUPS}
    lines = [f"{group}: {', '.join(options[group])}  ({what})" for group, what in USER_GROUPS.items()]
    lines.append(
        "algo_env: a tuned preset (conf/algo_env/<algo>_<env>.yaml) applies by itself when one exists; "
        "~algo_env drops it"
    )
    return "\n".join(lines)


def group_options(loader, group: str, config_name: str, searchpath: list[str]) -> list[str]:
    """A config group's options, those of the config dirs on hydra.searchpath (its overrides) included."""
    return sorted(loader.get_group_options(group, config_name=config_name, overrides=searchpath))


def as_typed(override: Override) -> str:
    """The override as the command line has it (Hydra's parser always keeps it; its type allows None)."""
    assert override.input_line is not None
    return override.input_line


def shown(options: list[str]) -> list[str]:
    """The options a message offers: old alias names (ENV_ALIASES) still work but are never shown."""
    return [option for option in options if option not in ENV_ALIASES]


if not OmegaConf.has_resolver("rl_hydra.help_groups"):
    OmegaConf.register_new_resolver("rl_hydra.help_groups", help_groups)
register_job_dir_resolver()  # hydra.sweep.subdir, resolved in whichever process runs a job


def resume_argument(argv: list[str]) -> tuple[str | None, list[str]]:
    """(the run directory of `resume=<path>`, the other arguments). The path is taken as the shell
    gave it, never through Hydra's override parser: a sweep job's directory is named from its
    overrides (`seed=0,train.total_steps=2000`), which that parser cannot read as one value. A path
    quoted for Hydra as well (`"resume='<path>'"`) is read too."""
    paths = [argument[len("resume=") :] for argument in argv if argument.startswith("resume=")]
    others = [argument for argument in argv if not argument.startswith("resume=")]
    if not paths:
        return None, others
    path = paths[-1]
    if len(path) >= 2 and path[0] == path[-1] and path[0] in "'\"":
        path = path[1:-1]
    if not path:
        raise BadArgument("resume= needs a run directory: python train.py resume=<run dir> [key=value ...]")
    return path, others


class HydraFlags(argparse.ArgumentParser):
    """Hydra 1.3's command-line flags, read here before Hydra runs (hydra.main reads them again):
    the names, choices and defaults of Hydra's own parser, which tests/cli/test_command_line.py
    compares flag by flag. A flag it refuses is one ConfigError line, not argparse's usage."""

    def __init__(self) -> None:
        super().__init__(add_help=False)
        self.add_argument("--help", "-h", action="store_true")
        self.add_argument("--hydra-help", action="store_true")
        self.add_argument("--version", action="version", version=f"Hydra {hydra.__version__}")
        self.add_argument("overrides", nargs="*")
        self.add_argument("--cfg", "-c", choices=["job", "hydra", "all"])
        self.add_argument("--resolve", action="store_true")
        self.add_argument("--package", "-p")
        self.add_argument("--run", "-r", action="store_true")
        self.add_argument("--multirun", "-m", action="store_true")
        self.add_argument("--shell-completion", "-sc", action="store_true")
        self.add_argument("--config-path", "-cp")
        self.add_argument("--config-name", "-cn")
        self.add_argument("--config-dir", "-cd")
        self.add_argument("--experimental-rerun")
        self.add_argument(
            "--info",
            "-i",
            nargs="?",
            const="all",
            choices=["all", "config", "defaults", "defaults-tree", "plugins", "searchpath"],
        )

    def error(self, message: str):
        raise BadArgument(f"{message}; python train.py --hydra-help lists Hydra's flags")


def command_line(argv: list[str]) -> tuple[argparse.Namespace, list[Override]]:
    """The command line as Hydra reads it: its flags (HydraFlags) and the overrides, parsed by
    Hydra's override parser (a value that does not parse: one ConfigError line)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    args = HydraFlags().parse_args(argv)
    try:
        return args, OverridesParser.create().parse_overrides(args.overrides)
    except OverrideParseException as error:
        raise BadArgument(f"cannot parse {error.override!r}: {str(error).splitlines()[0]}") from None
    except ValueError:  # Python refuses an integer of over 4,300 digits: the override parser's int() raises
        huge = max(args.overrides, key=len)
        raise BadArgument(
            f"{huge[:30]}... ({len(huge)} characters) holds a number out of range; no key takes a number that large"
        ) from None


def integers_written(argv: list[str], overrides: list[Override]) -> tuple[list[str], list[Override]]:
    """The command line with each integer key's 1e3 written 1000 (config.integral_overrides), and
    its overrides parsed again; as it was when none is."""
    given = [as_typed(override) for override in overrides]
    written = dict(zip(given, integral_overrides(given)))
    if all(text == typed for text, typed in written.items()):
        return argv, overrides
    argv = [written.get(argument, argument) for argument in argv]
    return argv, command_line(argv)[1]


def check_config(
    overrides: list[Override], *, multirun: bool = False, config_name: str = "train", launches: bool = True
) -> DictConfig:
    """The one check before Hydra runs: compose the config as the run will, with Hydra's compose
    API, and turn Hydra's refusal into one ConfigError line (a group option that does not exist,
    with the group's options and the closest one; a key the config lacks, with the closest key and
    how to add one), then refuse a required key (`???`) left out and, for a command that `launches`
    a run without -m, a group that only acts in a sweep. A sweep (-m) is composed with each swept
    key's first value, as its first job is; every value of a swept group must be one of its options."""
    from hydra import compose
    from hydra.errors import HydraException

    with composing(overrides, config_name, multirun) as (options, chosen):
        try:
            cfg = compose(config_name=config_name, overrides=chosen, return_hydra_config=True)
        except (HydraException, OverflowError) as error:
            refusal = refusal_line(error, overrides, chosen, options, config_name)
            raise BadArgument(refusal or str(error).splitlines()[0]) from None
    if launches and not multirun:
        check_sweep_only(cfg.hydra.runtime.choices, overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    check_required(cfg)
    return cfg


# the groups that act only in a sweep: without -m Hydra runs one plain job and ignores them
SWEEP_ONLY = {"hparams_search": "an Optuna search", "hydra/sweeper": "a sweeper", "hydra/launcher": "a launcher"}


def check_sweep_only(choices, overrides: list[Override]) -> None:
    """Refuse a group that acts only in a sweep (SWEEP_ONLY) chosen without -m, which would
    otherwise train one plain run and say nothing; the line gives the command with -m."""
    for group, what in SWEEP_ONLY.items():
        choice = choices.get(group)
        if choice is None or (group.startswith("hydra/") and choice == "basic"):
            continue
        given = next((as_typed(o) for o in overrides if o.key_or_group == group), f"{group}={choice}")
        command = shlex.join(["python", "train.py", "-m", *(as_typed(o) for o in overrides)])
        raise BadArgument(f"{given} is {what}, which runs only in a sweep: add -m ({command})")


def first_job(override: Override, loader, options) -> str:
    """The override as the first job of a sweep has it: a swept key's first value (an Optuna
    interval's lower end), split as Hydra's basic sweeper splits it. Each value of a swept config
    group must be one of the group's options."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not override.is_sweep_override():
        return as_typed(override)
    key, swept = override.get_key_element(), override.value()
    if isinstance(swept, IntervalSweep):  # the one sweep that is not discrete
        return f"{key}={swept.start}"
    override.config_loader = loader  # glob(...) lists the group's options through it
    jobs = [f"{key}={value}" for value in override.sweep_string_iterator()]
    allowed = options(override.key_or_group)
    for job in OverridesParser.create().parse_overrides(jobs) if allowed else []:
        value = job.value()
        for choice in value if isinstance(value, list) else [value]:
            if choice is not None and str(choice) not in allowed:
                raise BadArgument(not_an_option(override.key_or_group, choice, allowed))
    return jobs[0] if jobs else as_typed(override)


def not_an_option(group: str, choice, allowed: list[str]) -> str:
    """`algo=dqnn is not a config option; choose one of: ...; did you mean dqn?` (old aliases not offered)."""
    offered = shown(allowed)
    return f"{group}={choice} is not a config option; choose one of: {', '.join(offered)}{closest(choice, offered)}"


def closest(typed, candidates: list[str]) -> str:
    """`; did you mean <the closest candidate>?`, or nothing when none is close."""
    import difflib

    close = difflib.get_close_matches(str(typed), candidates, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def missing_option(error, overrides: list[Override], options) -> str:
    """One line for Hydra's MissingConfigException: a group option that does not exist."""
    group, _, option = (error.missing_cfg_file or "").rpartition("/")
    if not group:  # the primary config itself
        return str(error).splitlines()[0]
    if any(override.key_or_group == group for override in overrides):  # as given on the command line
        return not_an_option(group, option, options(group))
    offered = shown(options(group))  # from a file's defaults
    return f"{str(error).splitlines()[0]}; choose one of: {', '.join(offered)}{closest(option, offered)}"


def refused_override(error, chosen: list[str], config_name: str) -> str:
    """One line for Hydra's refusal of an override: a key the config lacks (or one of whose parents
    it lacks: `trian.total_steps`) gets the closest key and how to add a new one (+key=...); any
    other refusal Hydra's words, joined."""
    from hydra import compose
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = error.__cause__
    wrong_type = type_refusal(cause)  # a value its schema's type refuses (rl_hydra/schema)
    if wrong_type is not None:
        return wrong_type
    parsed = OverridesParser.create().parse_overrides(chosen)
    lacking = getattr(cause, "full_key", None) if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) else None
    key = next(
        (
            override.key_or_group
            for override in parsed
            if not override.is_delete()
            and lacking is not None
            and (override.key_or_group == lacking or override.key_or_group.startswith(f"{lacking}."))
        ),
        None,
    )
    if key is None:  # not an override's key the config lacks
        lines = [line.strip().rstrip(".") for line in str(error).splitlines() if line.strip()]
        if cause is not None and str(cause).strip():
            lines.append(str(cause).strip().splitlines()[0])
        return "; ".join(lines) or type(error).__name__
    try:  # the config without the refused key, for the closest one
        others = [as_typed(override) for override in parsed if override.key_or_group != key]
        cfg = compose(config_name=config_name, overrides=others, return_hydra_config=key.startswith("hydra."))
    except HydraException:
        known = []
    else:  # every key and every prefix of one: algo.optimizer.lr, algo.optimizer, algo
        known = sorted({".".join(k.split(".")[:n]) for k in flat_config(cfg) for n in range(1, k.count(".") + 2)})
    hint = closest(key, known).removeprefix("; ")
    return (
        f"{key} is not a key of the config; {hint + ' ' if hint else ''}(a new key is added with +{key}=...; "
        f"python train.py --cfg job shows every key)"
    )


@contextlib.contextmanager
def composing(
    overrides: list[Override], config_name: str, multirun: bool
) -> Iterator[tuple[Callable[[str], list[str]], list[str]]]:
    """A Hydra scope to compose in, with (each group's options, those of hydra.searchpath's config
    dirs included; the overrides as composed: a sweep's first job)."""
    from hydra.core.global_hydra import GlobalHydra

    with hydra_scope():
        loader = GlobalHydra.instance().config_loader()
        searchpath = [as_typed(o) for o in overrides if o.get_key_element() == "hydra.searchpath"]

        def options(group: str) -> list[str]:
            return group_options(loader, group, config_name, searchpath)

        yield options, [first_job(o, loader, options) if multirun else as_typed(o) for o in overrides]


def refusal_line(
    error: Exception,
    overrides: list[Override],
    chosen: list[str],
    options: Callable[[str], list[str]],
    config_name: str,
) -> str | None:
    """One line for Hydra's refusal to compose `chosen`, or None for an error that is not one."""
    from hydra.errors import HydraException, MissingConfigException

    if isinstance(error, MissingConfigException):
        return missing_option(error, overrides, options)
    if isinstance(error, HydraException):  # ConfigCompositionException, ...
        return refused_override(error, chosen, config_name)
    if isinstance(error, OverflowError):  # a float key given an integer past a float's range
        return type_refusal(error) or str(error).splitlines()[0]
    return None


@contextlib.contextmanager
def composed_by_hydra(overrides: list[Override], config_name: str) -> Iterator[None]:
    """Around hydra.main for a single run, whose config Hydra alone composes: its refusal to compose
    becomes one `error:` line and exit code 2, as check_config makes a sweep's. HYDRA_FULL_ERROR=1
    (put back after) makes Hydra raise it here instead of printing it and exiting 1; an error raised
    inside the run itself (hydra_main's frame on its traceback) is not a refusal and goes on."""
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except Exception as error:
        run_code = hydra_main.__wrapped__.__code__  # the undecorated function (functools.wraps)
        if any(frame.f_code is run_code for frame, _ in traceback.walk_tb(error.__traceback__)):
            raise
        with composing(overrides, config_name, multirun=False) as (options, chosen):
            refusal = refusal_line(error, overrides, chosen, options, config_name)
        if refusal is None:  # refused after composing (a required key that hydra.run.dir reads): name it
            try:
                check_config(overrides, config_name=config_name)
            except ConfigError as found:
                refusal = str(found)
        if refusal is None:
            raise
        fail(refusal, EXIT_CONFIG)
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous


def train_job(cfg: DictConfig) -> float | None:
    """Hydra's task: train and return the final eval return (what a sweeper optimises).

    In a multirun a failing job records its failure and returns None so the other
    jobs go on (the Optuna sweeper tells Optuna the trial failed); a
    single run exits non-zero with one line. Parallel jobs would garble each
    other's progress bars, so a multirun has none unless train.progress=true is given.
    `job_steps`' steps driven alone; the packed launcher drives many jobs' steps at once.
    """
    return drive(job_steps(cfg))


def job_steps(cfg: DictConfig) -> Steps[float | None]:
    """`train_job` as steps (rl_hydra/loops/steps.py), with Hydra's config of the job set."""
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if not multirun:  # a single run's config was composed by Hydra alone: check_config did not see it
        try:
            check_sweep_only(hydra_cfg.runtime.choices, command_line(list(hydra_cfg.overrides.task))[1])
        except ConfigError as error:
            remove_refused_run(RunDirectory(hydra_cfg.runtime.output_dir))
            fail(str(error), EXIT_CONFIG)
    if multirun and not any(o.startswith("train.progress=") for o in hydra_cfg.overrides.task):
        cfg.train.progress = False
    try:
        summary = yield from launching(
            cfg,
            Path(hydra_cfg.runtime.output_dir),
            keep_refused=multirun,
            overrides=list(hydra_cfg.overrides.task),
            hydra_cfg=hydra_cfg,  # type: ignore[arg-type]  # a DictConfig, typed as its schema
        )
    except RunFailed as error:
        if multirun and error.code != EXIT_INTERRUPTED:  # the job's train.log has the line too
            print(f"error: {hydra_cfg.runtime.output_dir}: {error}", file=sys.stderr)
            sweep_report.record_failure(hydra_cfg.sweep.dir, hydra_cfg.runtime.output_dir)
            return None
        fail(str(error), error.code)
    return summary["eval_return_mean"]


train_job.steps = job_steps  # type: ignore[attr-defined]  # what the packed launcher drives (hydra_plugins)
hydra_main = hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")(train_job)


def main() -> None:
    """`python train.py [flags] [overrides]`: a resume, a Hydra run (its config composed once, by
    hydra.main), or a sweep once its first job composes (check_config); a refusal is one `error:`
    line and exit code 2."""
    try:
        resume, argv = resume_argument(sys.argv[1:])
        args, overrides = command_line(argv)
        argv, overrides = integers_written(argv, overrides)
        if resume is not None:
            resume_main(resume, [as_typed(override) for override in overrides])
            return
        sys.argv[1:] = argv  # as written: hydra.main reads the command line again
        config_name = args.config_name or "train"
        single_run = False
        if not (args.shell_completion or args.experimental_rerun or args.config_path or args.config_dir):
            multirun = args.multirun or any(
                o.key_or_group == "hydra.mode" and o.value() == "MULTIRUN" for o in overrides
            )
            launches = not (args.cfg or args.info or args.help or args.hydra_help)
            single_run = launches and not multirun
            if not single_run:  # a sweep's first job, checked before any job runs; or what is shown
                cfg = check_config(overrides, multirun=multirun, config_name=config_name, launches=launches)
            if args.help:  # after Hydra's help: each key's help and range, from the schema
                atexit.register(lambda: print("== Keys ==\n" + "\n".join(key_lines(cfg))))
    except ConfigError as error:
        fail(str(error), EXIT_CONFIG)
    mark_sweep_process()  # a sweep's jobs in worker processes stop when this process is gone (kill -9)
    with composed_by_hydra(overrides, config_name) if single_run else contextlib.nullcontext():
        hydra_main()  # a single run's config is composed here, once
    if sweep_report.failed_jobs:  # a sweep some of whose jobs failed (the line is printed)
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":  # python -m rl_hydra.commands.cli, as train.py
    main()
