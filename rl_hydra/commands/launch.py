"""The one way a run starts, whoever starts it: `python train.py` (Hydra), `train.py resume=<dir>`
and the Python API `rl_hydra.train(...)` all call `launch`.

A run directory is a record, so a launch writes nothing into it until everything is known to
work: the config is validated, what the directory already holds is checked (the same config, not
finished), and the run is built (rl_hydra.training.run). Only then, at `take_directory`, does it
take the directory's lock (one writer at a time), look again under the lock, record the config
in .hydra/ and a provenance session, and open train.log. Every failure becomes a `RunFailed`
with one user-facing line and its exit code: 2 for a command that cannot work (nothing was
written), 1 for a run that failed, 130 for a run stopped by Ctrl-C/SIGTERM (it keeps a checkpoint).
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import validate_run_config
from rl_hydra.errors import ConfigError
from rl_hydra.loops.steps import Steps, Turn, drive
from rl_hydra.runs import provenance
from rl_hydra.runs.provenance import Session
from rl_hydra.runs.record import (
    algo_class_name,
    check_same_config,
    record_config,
    record_refusal,
    remove_debris,
    remove_refused_run,
)
from rl_hydra.runs.run_dir import (
    DISK_FULL,
    RunBusy,
    RunDirectory,
    RunError,
    RunLock,
    WriteFailed,
    resume_command,
)
from rl_hydra.runs.sweep_parent import sweep_job

log = logging.getLogger("rl_hydra")

EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's job log format


def fail(message: str, code: int):
    """Exit with `code` after one line on stderr: `error: ...`, or for a run stopped on request
    (Ctrl-C, SIGTERM), which is not an error, the message alone."""
    print(message if code == EXIT_INTERRUPTED else f"error: {message}", file=sys.stderr)
    sys.exit(code)


class RunFailed(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class AlreadyFinished(Exception):
    """Found under the lock: the run was finished by another process in the meantime."""

    def __init__(self, summary: dict[str, Any]):
        super().__init__("already finished")
        self.summary = summary


def launch(
    cfg: DictConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    overrides: Sequence[str] | None = None,
    hydra_cfg: DictConfig | None = None,
    keep_refused: bool = False,
    config_changes: dict[str, list[Any]] | None = None,
) -> dict[str, Any]:
    """Train `cfg` into `run_dir` and return its summary; raises RunFailed.

    `overrides` (this launch's command line) and `hydra_cfg` (Hydra's node, or the part of it a
    run keeps) go to .hydra/ when the directory has no config yet; `config_changes` ({key: [old,
    new]}, a resume's key=value changes) rewrite its config. A refused command writes nothing,
    except that a refused sweep job (`keep_refused`) records its config and a failed summary.json
    in its own new directory, so that the sweep's report lists it. `launching`'s steps, driven alone."""
    return drive(
        launching(
            cfg,
            run_dir,
            resume=resume,
            overrides=overrides,
            hydra_cfg=hydra_cfg,
            keep_refused=keep_refused,
            config_changes=config_changes,
        )
    )


def launching(
    cfg: DictConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    overrides: Sequence[str] | None = None,
    hydra_cfg: DictConfig | None = None,
    keep_refused: bool = False,
    config_changes: dict[str, list[Any]] | None = None,
) -> Steps[dict[str, Any]]:
    """`launch` as steps (rl_hydra/loops/steps.py), for whoever drives them: one run, or a pack's member."""
    directory = RunDirectory(run_dir)
    overrides = list(overrides or [])
    with sweep_job():  # a sweep job in a worker process ends with its sweep (kill -9 included)
        return (yield from _launch(cfg, directory, resume, overrides, hydra_cfg, keep_refused, config_changes))


def _launch(
    cfg: DictConfig,
    directory: RunDirectory,
    resume: bool,
    overrides: list[str],
    hydra_cfg: DictConfig | None,
    keep_refused: bool,
    config_changes: dict[str, list[Any]] | None,
) -> Steps[dict[str, Any]]:
    try:
        validate_run_config(cfg)
        RunLock.check_free(directory)
        directory.check_links()
        if directory.config_yaml.is_file():
            directory.read_hydra_record()  # before the lock: no later read of .hydra/ can refuse
        if config_changes:  # as validated: `3e3` given for an integer key is 3000
            config_changes = {key: [old, OmegaConf.select(cfg, key)] for key, (old, _) in config_changes.items()}
        finished = check_directory(directory, cfg, resume, overrides, config_changes)
        if finished is not None:
            log.info(
                "%s already holds a finished run (step %d); not training again", directory.path, finished["global_step"]
            )
            remove_debris(directory)
            return finished
        return (yield from _train(cfg, directory, resume, overrides, hydra_cfg, config_changes))
    except (ConfigError, RunError) as error:  # RunBusy, RunConflict, a damaged record file
        failure = RunFailed(str(error), EXIT_CONFIG)
        failure.__cause__ = error
    except RunFailed as error:
        failure = error
    if failure.code == EXIT_CONFIG and not resume:
        if keep_refused and not isinstance(failure.__cause__, RunBusy):
            record_refusal(directory, cfg, overrides, hydra_cfg, str(failure))
        elif not keep_refused:
            remove_refused_run(directory)
    raise failure


def check_directory(
    directory: RunDirectory,
    cfg: DictConfig,
    resume: bool,
    overrides: Sequence[str],
    config_changes: dict[str, list[Any]] | None,
) -> dict[str, Any] | None:
    """What the directory already holds, read only: raises RunFailed for a launch that does not
    fit it; returns the summary of a finished run that this launch would not train further."""
    if not resume and directory.holds_output():
        check_same_config(directory, cfg, overrides)
    provenance.read(directory)  # a damaged provenance.json is refused before the run writes to it
    summary = directory.read_summary() or {}
    finished = summary.get("status") == "completed" and (
        summary.get("global_step", 0) >= cfg.train.total_steps or summary.get("solved_at_step") is not None
    )
    if finished and config_changes:
        reached = (
            f"was solved at step {summary['solved_at_step']}"
            if summary.get("solved_at_step") is not None
            else f"ended at step {summary['global_step']}"
        )
        raise RunFailed(
            f"{directory.path} {reached}; {format_changes(config_changes)} would not train it "
            f"further (to extend it, give a larger train.total_steps); nothing was changed",
            EXIT_CONFIG,
        )
    return summary if finished else None


def format_changes(changes: dict[str, list[Any]]) -> str:
    """The changes of a resume that could have trained a finished run further, its budget
    (`train.total_steps=100`); `this resume` where it changes none of it (train.progress alone)."""
    budget = [
        f"{key}={new}" for key, (_, new) in changes.items() if key in ("train.total_steps", "train.stop_at_return")
    ]
    return ", ".join(budget) if budget else "this resume"


def _train(
    cfg: DictConfig,
    directory: RunDirectory,
    resume: bool,
    overrides: list[str],
    hydra_cfg: DictConfig | None,
    config_changes: dict[str, list[Any]] | None,
) -> Steps[dict[str, Any]]:
    """Build and train (torch is imported here, in the job, so that the process launching a
    parallel sweep stays light); the directory is taken only once the run is built."""
    from rl_hydra.training import running

    checkpointed = (directory.checkpoints / "last.pt").is_file()
    if resume and not checkpointed:
        log.info("%s has no checkpoint yet (stopped before its first one): training from step 0", directory.path)
    resume = checkpointed  # a re-launched sweep continues too
    with contextlib.ExitStack() as held:
        session: list[Session] = []
        log_file: list[logging.Handler] = []
        early = HeldBackLog()
        held.callback(early.discard)

        def take_directory(step: int, device) -> None:
            held.enter_context(RunLock(directory))
            finished = check_directory(directory, cfg, resume, overrides, config_changes)
            if finished is not None:
                raise AlreadyFinished(finished)
            directory.remove_temp_files()
            record_config(directory, cfg, overrides, hydra_cfg, config_changes)
            session.append(Session(directory, device, step, config_changes))
            log_file.append(held.enter_context(log_to_file(directory)))
            early.release(log_file[0])  # what building the run logged (the buffer's size, ...)
            log.info("run directory: %s", directory.path)

        try:
            summary = yield from running(cfg, directory, resume=resume, on_ready=take_directory)
        except AlreadyFinished as done:
            return done.summary
        except Exception as error:  # noqa: BLE001 - every failure becomes one line and an exit code
            failure, status = classify(error, cfg, directory, committed=bool(session))
            if log_file:  # the console gets the line from the caller; the run's log keeps it too
                level = logging.WARNING if failure.code == EXIT_INTERRUPTED else logging.ERROR
                log_file[0].handle(
                    logging.makeLogRecord(
                        {
                            "name": "rl_hydra",
                            "levelno": level,
                            "msg": str(failure),
                            "levelname": logging.getLevelName(level),
                        }
                    )
                )
            if session:
                end_session(session[0], directory, status)
            raise failure from (error if failure.code == EXIT_CONFIG else None)
        end_session(session[0], directory, summary["status"])
        return summary


def classify(error: Exception, cfg: DictConfig, directory: RunDirectory, committed: bool) -> tuple[RunFailed, str]:
    """(the one-line failure for the caller, the session's status) for what ended a run;
    `committed`: whether the run had taken the directory (else nothing may be written there)."""
    from rl_hydra.loops.runner import StopRequested, TrainingDiverged

    if isinstance(error, RunFailed):
        return error, "failed"
    if isinstance(error, WriteFailed):
        return RunFailed(write_failure(directory, error), EXIT_FAILED), "failed"
    if isinstance(error, (ConfigError, RunError)):  # a bad config, a busy or unfitting directory or checkpoint
        return RunFailed(str(error), EXIT_CONFIG), "failed"
    if isinstance(error, TrainingDiverged):
        return RunFailed(f"training diverged: {error}", EXIT_FAILED), "failed"
    if isinstance(error, StopRequested):
        return RunFailed(
            f"stopped; the last checkpoint is in {directory.checkpoints / 'last.pt'}; "
            f"resume with: {resume_command(directory.path)}",
            EXIT_INTERRUPTED,
        ), "interrupted"
    # an env that raised, or a bug: recorded like any failure, traceback kept
    reason = type(error).__name__ + (f": {str(error).splitlines()[0]}" if str(error) else "")
    trace = "".join(traceback.format_exception(error))
    if not committed:  # failed while being built: the directory is not this run's to write
        print(trace, end="", file=sys.stderr)
        return RunFailed(f"run failed before it started: {reason} (traceback above)", EXIT_FAILED), "failed"
    with contextlib.suppress(OSError, RunError):
        directory.write_text(directory.path / "traceback.txt", trace)
        directory.write_summary({"status": "failed", "reason": reason, **directory.identity(cfg, algo_class_name(cfg))})
    return RunFailed(f"run failed: {reason} (traceback in {directory.path / 'traceback.txt'})", EXIT_FAILED), "failed"


def end_session(session: Session, directory: RunDirectory, status: str) -> None:
    """Complete the session's provenance record (best effort: a full disk has been reported already)."""
    with contextlib.suppress(OSError, RunError, ValueError):
        session.end(status, (directory.read_summary() or {}).get("global_step"))


def write_failure(directory: RunDirectory, error: WriteFailed) -> str:
    """One line: what could not be written and why, where the run can go on from, and how."""
    step = directory.checkpoint_step("last")
    where = (
        f"the last good checkpoint is {directory.checkpoints / 'last.pt'} (step {step})"
        if step is not None
        else "no checkpoint was written yet"
    )
    fix = "free some space, then" if error.disk_full else "once that is fixed,"
    resume = f"resume with: {resume_command(directory.path)}" if step is not None else "launch the run again"
    return f"{error}; {where}; {fix} {resume}"


class HeldBackLog:
    """Until a run takes its directory, its INFO log records are held back from the console (a
    refused command prints its one error line and nothing else) and kept for its train.log;
    warnings pass at once."""

    def __init__(self) -> None:
        self.root = logging.getLogger()
        self.console = list(self.root.handlers)
        self.memory = logging.handlers.MemoryHandler(capacity=10_000, flushLevel=logging.CRITICAL + 1)
        self.memory.setLevel(logging.INFO)
        for handler in self.console:
            handler.addFilter(self.passes)
        self.root.addHandler(self.memory)

    @staticmethod
    def passes(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING

    def release(self, log_file: logging.Handler | None = None) -> None:
        """Stop holding back: show the held records on the console and write them all to `log_file`."""
        self.stop()
        for record in self.memory.buffer:
            for handler in self.console if record.levelno < logging.WARNING else ():
                if record.levelno >= handler.level:
                    handler.handle(record)
            if log_file is not None:
                log_file.handle(record)
        self.memory.buffer.clear()

    def discard(self) -> None:
        self.stop()
        self.memory.buffer.clear()

    def stop(self) -> None:
        """Stop keeping records and let the console show everything again."""
        self.root.removeHandler(self.memory)
        for handler in self.console:
            handler.removeFilter(self.passes)


@contextlib.contextmanager
def log_to_file(directory: RunDirectory) -> Iterator[logging.Handler]:
    """Send the log (INFO and up: rl_hydra's and whatever else reaches the root logger) to the
    run's train.log for the duration. Hydra's job logging writes to the console only (conf/hydra/job_logging):
    the file is opened here, once the run has the directory."""
    logger, root = logging.getLogger("rl_hydra"), logging.getLogger()
    handler = QuietFileHandler(directory)
    handler.addFilter(TurnFilter())  # in a pack, each member's train.log gets its own lines
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    handler.setLevel(logging.INFO)
    level = logger.level
    root.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


class TurnFilter(logging.Filter):
    """Passes the records logged while the run that opened the log has its turn (loops/steps.py Turn)."""

    def __init__(self) -> None:
        super().__init__()
        self.owner = Turn.current

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: ARG002
        return Turn.current is self.owner


class QuietFileHandler(logging.FileHandler):
    """A FileHandler that, when its file cannot be written (a full disk), says so in one line and
    stops, instead of printing a traceback for every record; the run's own writes then report it.
    It appends to the run's own train.log, reached by the run's handle (RunDirectory.append): never
    through a link, never into a file with a second name."""

    def __init__(self, directory: RunDirectory):
        self.directory = directory
        super().__init__(directory.path / "train.log", encoding="utf-8")

    def _open(self):
        return self.directory.append(self.directory.path / "train.log")

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: ARG002
        error = sys.exc_info()[1]
        why = "the disk is full" if getattr(error, "errno", None) in DISK_FULL else f"{type(error).__name__}: {error}"
        print(
            f"warning: writing {self.baseFilename} failed: {why}; the log goes on in the console only", file=sys.stderr
        )
        logging.getLogger().removeHandler(self)
