"""`rl-hydra-verify RUN_DIR [--steps N|all]`: re-run a run's first steps from its recorded config
and compare the whole record with the re-run: metrics.csv's columns and every row (wall-clock
columns aside), the checkpoints it reaches (best.pt, last.pt) tensor by tensor, summary.json when
it reaches the end, and the provenance (code and library versions, device, host).

Training on the CPU is deterministic, so a run made by this code on this kind of machine is
re-made exactly: a difference means the record was altered, or the code or a library changed
(the provenance differences are named). On CUDA exact equality is not promised; values are
compared within a relative tolerance there, and the verdict says so. The run directory is read as
data (rl_hydra/runs/trust.py); a resume's config changes are replayed at the step it made them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import yaml
from omegaconf import DictConfig

from rl_hydra.commands.launch import EXIT_CONFIG, EXIT_FAILED, EXIT_INTERRUPTED
from rl_hydra.config import validate_run_config
from rl_hydra.distributed.settings import requested as distributed_requested
from rl_hydra.errors import ConfigError
from rl_hydra.runs.run_dir import RunDirectory, RunError, atomic_write_text
from rl_hydra.verify.compare import (
    compare_checkpoints,
    compare_columns,
    compare_rows,
    compare_summaries,
    provenance_differences,
)
from rl_hydra.verify.record import (
    Differs,
    Metrics,
    Segment,
    check_eval_files,
    check_summary_derives,
    config_segments,
    read_checkpoints,
    read_choices,
    read_metrics,
    read_sessions,
    replay_limit,
    step_of,
)
from rl_hydra.verify.scratch import scratch_directory, stop_on_signal, stopped_line

DEFAULT_STEPS = 5000  # the default window's length, unless the first update falls later: a check, not a rerun
# the default window never ends past this many steps, whatever the record's config says: past it, --steps
MAX_DEFAULT_STEPS = 20 * DEFAULT_STEPS
CUDA_RTOL = 1e-3  # on CUDA, values within this relative difference count as equal
EXIT_CODES = (
    f"exit status: 0 verified (a provenance that differs is named), {EXIT_FAILED} the record differs, "
    f"{EXIT_CONFIG} it cannot be verified, {EXIT_INTERRUPTED} stopped by Ctrl-C or SIGTERM"
)


@dataclass
class Verdict:
    ok: bool
    message: str  # one line


def verify_run(run_dir: str | Path, steps: int | str | None = None, rtol: float | None = None) -> Verdict:
    """Re-run `run_dir`'s first `steps` env steps (default: `default_window`; "all": the whole
    record) into a temporary directory and compare. Raises RunError for a directory that cannot be
    verified (one line: missing, damaged, or naming code the project does not trust)."""
    from rl_hydra.runs.run_dir import RunLock

    directory = RunDirectory(run_dir)
    RunLock.check_free(directory)  # a run being written is no record yet: RunBusy, one line
    sessions = read_sessions(directory)
    try:
        segments = config_segments(directory, sessions)
        if distributed_requested(segments[0].cfg):
            kind = segments[0].cfg.distributed.name
            raise RunError(
                f"{directory.path} is a distributed run (distributed={kind}): its actors race each other, "
                f"so it is not bit-reproducible and cannot be verified by a re-run"
            )
        metrics = read_metrics(directory)
        if not metrics.rows and not (directory.checkpoints.is_dir() or directory.summary_json.is_file()):
            raise RunError(f"{directory.path} has no logged metrics to compare (metrics.csv is missing or empty)")
        if not metrics.rows:
            raise Differs("metrics.csv is missing or holds no rows, though the run has checkpoints or a summary")
        checkpoints = read_checkpoints(directory, metrics, segments[0].cfg, sessions)
        check_summary_derives(directory.read_summary(), metrics, segments[-1].cfg)
        check_eval_files(directory, metrics)
        choices = read_choices(directory)
    except Differs as damaged:
        return Verdict(False, f"{directory.path} does not match its record: {damaged}")
    device, rtol, device_note = pick_device(rtol)
    segments = [Segment(segment.start, rerun_config(segment.cfg, device)) for segment in segments]
    limit = replay_limit(segments, sessions)
    target = window(segments[0].cfg, metrics, checkpoints, steps, limit)
    how = f"within rtol={rtol:g} ({device_note})" if rtol else "exactly"
    with scratch_directory() as rerun_dir:
        if choices is not None:  # summary.json names the algo and env from them: the re-run's then alike
            hydra = {"hydra": {"runtime": {"choices": choices}}}
            atomic_write_text(rerun_dir.hydra / "hydra.yaml", yaml.safe_dump(hydra))
        rerun(segments, rerun_dir, target)
        compared, difference = compare_record(directory, metrics, checkpoints, rerun_dir, target, rtol)
    made_by = [s for s in sessions if s["start_step"] < target] or sessions[:1]
    explain = provenance_differences(made_by, device)
    if difference:
        return Verdict(
            False,
            f"{directory.path} does not match its record ({how}): {difference}"
            f"; {explain or 'the code, the libraries and the device are the same'}",
        )
    resumed = [s.start for s in segments[1:] if s.start < target]
    replayed = f"; with the config changes of the resume at step {', '.join(map(str, resumed))}" if resumed else ""
    if limit is not None:
        replayed += (
            f"; only up to step {limit}: a resume after a stop did what fell due at {limit + 1} with a changed config"
        )
    also = f"; {', '.join(compared)} equal too" if compared else ""
    return Verdict(
        True,
        f"verified {directory.path}{f' ({explain})' if explain else ''}: the first {target} steps "
        f"re-run from the recorded config match the record {how} "
        f"({len(metrics.up_to(target))} logged rows{also}{replayed})",
    )


def window(
    cfg: DictConfig, metrics: Metrics, checkpoints: dict[str, dict], steps: int | str | None, limit: int | None
) -> int:
    """The env steps to re-run: `steps`, or the whole record ("all"), or `default_window`; never
    past the record's last row or `limit` (replay_limit), and at least to its first row."""
    recorded = metrics.steps()
    if steps == "all":
        target = recorded[-1]
    elif steps is None:
        best = step_of(checkpoints["best"]) if "best" in checkpoints else None
        target = min(default_window(cfg, recorded, best), MAX_DEFAULT_STEPS)
        if recorded[0] > target:
            raise RunError(
                f"metrics.csv's first row is at step {recorded[0]}, past verify's default window of at most "
                f"{MAX_DEFAULT_STEPS} steps; give --steps {recorded[0]} (or --steps all) to re-run that far"
            )
    else:
        target = int(steps)
    if limit is not None:
        target = min(target, limit)
    return max(min(target, recorded[-1]), recorded[0])


def default_window(cfg: DictConfig, recorded: list[int], best: int | None) -> int:
    """Up to the first checkpoint (at most DEFAULT_STEPS), and always past the first gradient
    update: to the first checkpoint and the first logged row after it. best.pt's step is included
    when it falls within that or within DEFAULT_STEPS, so that best.pt is compared too."""
    from rl_hydra.training import first_update_step

    schedule = SimpleNamespace(learning_starts=cfg.algo.learning_starts, train_every=cfg.algo.train_every)
    updated = first_update_step(schedule) + cfg.env.num_envs - 1  # n envs may reach it n - 1 steps later
    every = int(cfg.train.checkpoint_every)
    target = max(
        min(every, DEFAULT_STEPS),
        (updated // every + 1) * every,
        next((step for step in recorded if step > updated), 0),
    )
    if best is not None and best <= max(target, DEFAULT_STEPS):
        target = max(target, best)
    return target


def pick_device(rtol: float | None) -> tuple[str, float | None, str]:
    """(the device to re-run on, the tolerance, why one applies), from this machine and the command
    line alone, never from the record (which could claim a GPU to loosen the comparison): CUDA
    where this machine has it, compared within CUDA_RTOL unless `rtol` is given; else the CPU, exactly."""
    import torch

    if torch.cuda.is_available():
        return "cuda", CUDA_RTOL if rtol is None else rtol, "re-run on cuda"
    return "cpu", rtol, "as asked"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The re-run's own log lines (buffer size, evaluations, checkpoints) are not this command's output."""
    logger = logging.getLogger("rl_hydra")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def rerun_config(cfg: DictConfig, device: str) -> DictConfig:
    """`cfg` as the re-run trains it: on `device`, with metrics.csv the only logger (no TensorBoard,
    and nothing sent to MLflow or W&B) and no progress bar; and what the record may not choose for
    this machine (the math is the same): no torch.compile, async envs stepped in this process (the
    same transitions), at most this machine's CPUs as torch threads. Checked as a launch checks it."""
    import os

    cfg = cfg.copy()
    cfg.device, cfg.logger, cfg.train.progress, cfg.compile = device, {}, False, False
    cfg.torch_threads = min(int(cfg.torch_threads), os.cpu_count() or 1)
    if cfg.env.vectorization == "async":
        cfg.env.vectorization = "sync"
    try:
        validate_run_config(cfg)
    except ConfigError as error:
        raise RunError(f"the recorded config no longer builds: {error}") from None
    return cfg


def rerun(segments: list[Segment], directory: RunDirectory, steps: int) -> None:
    """Train the configs for `steps` env steps into `directory`, each from the step a resume
    changed the config at (resuming there, as the run did)."""
    from rl_hydra.loops.monitor import TrainingDiverged
    from rl_hydra.training import run

    ends = [*(segment.start for segment in segments[1:]), math.inf]
    for number, (segment, end) in enumerate(zip(segments, ends)):
        if segment.start >= steps:
            break
        with quiet():
            try:
                run(segment.cfg, directory.path, resume=number > 0, stop_after=int(min(end, steps)))
            except ConfigError as error:
                raise RunError(f"the recorded config no longer builds: {error}") from None
            except TrainingDiverged:
                return  # as the run did, if it diverged at the same step: the rows say


def compare_record(
    directory: RunDirectory,
    metrics: Metrics,
    checkpoints: dict[str, dict],
    rerun_dir: RunDirectory,
    target: int,
    rtol: float | None,
) -> tuple[list[str], str | None]:
    """(what was compared besides the rows, the first difference or None). A checkpoint is
    compared where the record's was saved within the window (last.pt: at its end); best.pt must
    then be the re-run's best too."""
    rerun_metrics = read_metrics(rerun_dir)
    difference = compare_columns(metrics.columns, rerun_metrics.columns) or compare_rows(
        metrics.up_to(target), rerun_metrics.up_to(target), rtol
    )
    compared: list[str] = []
    for name, recorded in checkpoints.items():
        step = step_of(recorded)
        if difference or step > target or (name == "last" and step != target):
            continue
        redone = rerun_dir.load_checkpoint(name) if (rerun_dir.checkpoints / f"{name}.pt").is_file() else {}
        if step_of(redone) != step:
            theirs = f"from step {step_of(redone)}" if redone else "none"
            return compared, f"checkpoint {name}.pt is from step {step}; the re-run's by step {target}: {theirs}"
        difference = compare_checkpoints(name, recorded, redone, rtol)
        compared.append(f"{name}.pt")
    summary = directory.read_summary()
    if not difference and summary and summary.get("status") == "completed" and summary.get("global_step") == target:
        difference = compare_summaries(summary, rerun_dir.read_summary() or {}, rtol)
        compared.append("summary.json")
    return compared, difference


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rl-hydra-verify", description=__doc__.split("\n\n")[0], epilog=EXIT_CODES)
    parser.add_argument("run_dir", help="a run directory (outputs/...)")
    parser.add_argument(
        "--steps",
        default=None,
        help=f"env steps to re-run: a number, or 'all' (default: to the first checkpoint, at most {DEFAULT_STEPS} "
        f"steps unless the first gradient update falls later (then to the first checkpoint and logged row after "
        f"it); to best.pt's step only when it lies within that or within {DEFAULT_STEPS}; never past "
        f"{MAX_DEFAULT_STEPS} steps or the record's last row)",
    )
    parser.add_argument(
        "--rtol",
        type=float,
        default=None,
        help=f"compare within this relative tolerance (default: exact on the CPU, {CUDA_RTOL} on CUDA)",
    )
    args = parser.parse_args(argv)
    if args.steps not in (None, "all") and not (args.steps.isdigit() and int(args.steps) > 0):
        print(
            f"error: --steps={args.steps} is not allowed; give a positive number of env steps or 'all'", file=sys.stderr
        )
        return EXIT_CONFIG
    steps = args.steps if args.steps in (None, "all") else int(args.steps)
    with stop_on_signal(args.run_dir):
        from rl_hydra.loops.monitor import StopRequested  # imports torch: a stop may come meanwhile

        try:
            verdict = verify_run(args.run_dir, steps, args.rtol)
        except RunError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_CONFIG
        except StopRequested:  # from the re-run, which stopped at a step boundary
            print(stopped_line(args.run_dir), file=sys.stderr)
            return EXIT_INTERRUPTED
    print(verdict.message if verdict.ok else f"error: {verdict.message}", file=sys.stdout if verdict.ok else sys.stderr)
    return 0 if verdict.ok else EXIT_FAILED
