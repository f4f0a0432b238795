"""`rl-hydra-verify RUN_DIR [--steps N|all]`: re-run a run's first steps from its recorded config
and compare the metrics it logs, column by column (wall-clock columns aside), with the ones the
run recorded; checkpoints the re-run reaches (best.pt, last.pt) are compared tensor by tensor.

Training on the CPU is deterministic, so a run made by this code on this kind of machine is
re-made exactly: a difference means the record was altered, or the code or a library changed
(the provenance differences are named). On CUDA exact equality is not promised; values are
compared within a relative tolerance there, and the verdict says so.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import ConfigError
from rl_hydra.runs import provenance
from rl_hydra.runs.run_dir import RunDirectory, RunError

DEFAULT_STEPS = 5000   # at most this many steps unless --steps says otherwise: a check, not a rerun
CUDA_RTOL = 1e-3       # on CUDA, values within this relative difference count as equal
WALL_CLOCK = ("time/",)


@dataclass
class Verdict:
    ok: bool
    message: str   # one line


def verify_run(run_dir: str | Path, steps: int | str | None = None, rtol: float | None = None) -> Verdict:
    """Re-run `run_dir`'s first `steps` env steps (default: up to its first checkpoint, at most
    DEFAULT_STEPS; "all": as far as its recorded config goes) into a temporary directory and compare.
    Raises RunError for a directory that cannot be verified."""
    directory = RunDirectory(run_dir)
    sessions = (provenance.read(directory) or {}).get("sessions") or [{}]
    cfg, limit, note = recorded_config(directory, sessions)
    recorded = read_rows(directory.metrics_csv)
    if not recorded:
        raise RunError(f"{directory.path} has no logged metrics to compare (metrics.csv is missing or empty)")
    last = min(int(recorded[-1]["step"]), limit)
    if steps == "all":
        target = last
    elif steps is None:
        target = min(int(cfg.train.checkpoint_every), DEFAULT_STEPS, last)
    else:
        target = min(int(steps), last)
    target = max(target, int(recorded[0]["step"]))   # at least one logged row
    device, rtol, device_note = pick_device(cfg, sessions[0], rtol)
    with tempfile.TemporaryDirectory(prefix="rl-hydra-verify-") as tmp:
        rerun_dir = RunDirectory(tmp)
        rerun(cfg, rerun_dir, target, device)
        difference = compare_rows([r for r in recorded if int(r["step"]) <= target],
                                  [r for r in read_rows(rerun_dir.metrics_csv) if int(r["step"]) <= target], rtol)
        compared = [name for name in ("best", "last") if same_step(directory, rerun_dir, name)]
        for name in compared if difference is None else ():
            difference = compare_checkpoints(directory, rerun_dir, name, rtol)
            if difference:
                break
    how = f"within rtol={rtol:g} ({device_note})" if rtol else "exactly"
    rows = sum(1 for r in recorded if int(r["step"]) <= target)
    if difference is None:
        checkpoints = f"; checkpoints {', '.join(n + '.pt' for n in compared)} equal too" if compared else ""
        return Verdict(True, f"verified {directory.path}: the first {target} steps re-run from the recorded config "
                             f"match the record {how} ({rows} logged rows{checkpoints}{note})")
    explain = provenance_differences(sessions[0], device)
    return Verdict(False, f"{directory.path} does not match its record ({how}): {difference}"
                          f"; {explain or 'the code and library versions are the same'}")


def recorded_config(directory: RunDirectory, sessions: list[dict[str, Any]]) -> tuple[DictConfig, int, str]:
    """(the config the run's first session trained with, how far it alone made the record, a note).
    A resume that changed the config (train.total_steps=... extends the schedules) is undone,
    and only the steps before it are compared."""
    path = directory.recorded_config
    if not path.is_file():
        raise RunError(f"{directory.path} is not a run directory (no .hydra/config.yaml)")
    cfg = OmegaConf.load(path)
    limit, note = math.inf, ""
    changed = [s for s in sessions[1:] if s.get("config_changes")]
    for session in reversed(changed):
        for key, (old, _) in session["config_changes"].items():
            OmegaConf.update(cfg, key, old)
    if changed:
        limit = int(changed[0]["start_step"])
        note = f"; only the steps before {limit}, where a resume changed the config"
    return cfg, limit, note


def pick_device(cfg: DictConfig, session: dict[str, Any], rtol: float | None) -> tuple[str, float | None, str]:
    """(the device to re-run on, the tolerance, why one applies): the recorded device where it
    exists here; CUDA, on either side, compares within CUDA_RTOL unless `rtol` is given."""
    import torch

    recorded = str(session.get("device") or cfg.device)
    device = "cuda" if recorded.startswith("cuda") and torch.cuda.is_available() else "cpu"
    if recorded.startswith("cuda") or device == "cuda":
        return device, CUDA_RTOL if rtol is None else rtol, f"recorded on {recorded}, re-run on {device}"
    return device, rtol, "as asked"


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


def rerun(cfg: DictConfig, directory: RunDirectory, steps: int, device: str) -> None:
    """Train the recorded config for `steps` env steps into `directory`, with metrics.csv the only
    logger (no TensorBoard, and nothing sent to MLflow or W&B) and no progress bar."""
    from rl_hydra.training import run

    cfg = cfg.copy()
    cfg.device, cfg.logger, cfg.train.progress = device, {}, False
    with quiet():
        try:
            run(cfg, directory.path, stop_after=steps)
        except ConfigError as error:
            raise RunError(f"the recorded config no longer builds: {error}") from None


def read_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def compare_rows(recorded: list[dict[str, str]], rerun: list[dict[str, str]], rtol: float | None) -> str | None:
    """The first difference, as `at step S, column C: recorded X, re-run Y`, or None."""
    rerun_at = {row["step"]: row for row in rerun}
    for row in recorded:
        other = rerun_at.get(row["step"])
        if other is None:
            return f"the re-run logged no row at step {row['step']}"
        for column, value in row.items():
            if column is None or column.startswith(WALL_CLOCK) or column == "step":
                continue
            if not same_value(value, other.get(column, ""), rtol):
                return f"at step {row['step']}, column {column}: recorded {value or 'nothing'}, " \
                       f"re-run {other.get(column) or 'nothing'}"
    extra = sorted(set(rerun_at) - {row["step"] for row in recorded}, key=int)
    return f"the record has no row at step {extra[0]}, which the re-run logged" if extra else None


def same_value(a: str, b: str, rtol: float | None) -> bool:
    if a == b or not rtol:
        return a == b
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=rtol, abs_tol=rtol) or (math.isnan(x) and math.isnan(y))


def same_step(directory: RunDirectory, rerun_dir: RunDirectory, name: str) -> bool:
    """Whether the re-run wrote checkpoint `name` at the step the record's was written."""
    recorded = directory.checkpoint_step(name)
    return recorded is not None and recorded == rerun_dir.checkpoint_step(name)


def compare_checkpoints(directory: RunDirectory, rerun_dir: RunDirectory, name: str, rtol: float | None) -> str | None:
    recorded, rerun = directory.load_checkpoint(name), rerun_dir.load_checkpoint(name)
    for part in ("agent", "buffer"):
        if part in recorded and part in rerun:
            where = first_difference(recorded[part], rerun[part], rtol, part)
            if where:
                return f"checkpoint {name}.pt (step {directory.checkpoint_step(name)}) differs at {where}"
    return None


def first_difference(a: Any, b: Any, rtol: float | None, path: str) -> str | None:
    import torch

    if torch.is_tensor(a):
        if not torch.is_tensor(b) or a.shape != b.shape or a.dtype != b.dtype:
            return path
        if a.dtype.is_floating_point and rtol:
            return None if torch.allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True) else path
        return None if torch.equal(a, b) else path
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            return path
        return next((d for k in a if (d := first_difference(a[k], b[k], rtol, f"{path}.{k}"))), None)
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return path
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := first_difference(x, y, rtol, f"{path}[{i}]"))),
                    None)
    return None if a == b else path


def provenance_differences(recorded: dict[str, Any], device: str) -> str:
    """`provenance differs: torch 2.12.0 -> 2.13.0, ...` between the record and this process."""
    if not recorded:
        return "the run records no provenance (made before provenance.json existed)"
    now = provenance.collect(device)
    differ = [f"{key} {recorded.get(key)} -> {now.get(key)}" for key in provenance.CODE_KEYS
              if recorded.get(key) != now.get(key)]
    return f"provenance differs: {', '.join(differ)}" if differ else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rl-hydra-verify", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run directory (outputs/...)")
    parser.add_argument("--steps", default=None,
                        help=f"env steps to re-run: a number, or 'all' (default: up to the first checkpoint, "
                             f"at most {DEFAULT_STEPS})")
    parser.add_argument("--rtol", type=float, default=None,
                        help=f"compare within this relative tolerance (default: exact on the CPU, {CUDA_RTOL} on CUDA)")
    args = parser.parse_args(argv)
    if args.steps not in (None, "all") and not (args.steps.isdigit() and int(args.steps) > 0):
        print(f"error: --steps={args.steps} is not allowed; give a positive number of env steps or 'all'",
              file=sys.stderr)
        return 2
    steps = args.steps if args.steps in (None, "all") else int(args.steps)
    try:
        verdict = verify_run(args.run_dir, steps, args.rtol)
    except RunError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(verdict.message if verdict.ok else f"error: {verdict.message}", file=sys.stdout if verdict.ok else sys.stderr)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
