"""Seeds table for REDQ: evaluation return at chosen steps, wall time and updates/s.

    python scripts/redq_table.py algo=redq env=pendulum                 # train seeds 0-4, then the table
    python scripts/redq_table.py --runs outputs/seeds/<stamp>/seed_*     # table of finished runs only

Seeds run one after another through scripts/seeds_table.py (`python train.py
<overrides> seed=S`). The return columns read `eval/return_mean` at each of --steps
from every run's metrics.csv; wall time, updates and steps come from summary.json.
"""

from __future__ import annotations

import argparse
import csv
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from seeds_table import ROOT, option, run_seed  # noqa: E402


def eval_returns(run_dir: Path, steps: list[int]) -> list[float | None]:
    """eval/return_mean logged at exactly each of `steps` (None where there is none)."""
    by_step: dict[int, float] = {}
    if not (run_dir / "metrics.csv").is_file():
        return [None] * len(steps)
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("eval/return_mean"):
                by_step[int(row["step"])] = float(row["eval/return_mean"])
    return [by_step.get(step) for step in steps]


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(run_dirs: list[Path], steps: list[int], target: float | None) -> str:
    head = " | ".join(f"return @ {s:,}" for s in steps)
    lines = [f"| seed | {head} | wall time (s) | updates | updates/s |",
             "| ---: |" + " ---: |" * (len(steps) + 3)]
    columns: list[list[float]] = [[] for _ in range(len(steps) + 3)]
    finals = []
    for run_dir in run_dirs:
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"status": "no summary"}
        returns = eval_returns(run_dir, steps)
        updates, wall = summary.get("updates"), summary.get("wall_time_s")
        rate = updates / wall if updates and wall else None
        values = [*returns, wall, updates, rate]
        for column, value in zip(columns, values):
            if value is not None:
                column.append(value)
        finals.append(returns[-1])
        cells = [fmt(v) for v in returns] + [fmt(wall), fmt(updates, 0), fmt(rate, 0)]
        lines.append(f"| {summary.get('seed', run_dir.name)} | " + " | ".join(cells) + " |")
    medians = [statistics.median(c) if c else None for c in columns]
    cells = [fmt(v) for v in medians[:-2]] + [fmt(medians[-2], 0), fmt(medians[-1], 0)]
    lines.append("| median | " + " | ".join(cells) + " |")
    if target is not None:
        hits = sum(1 for r in finals if r is not None and r >= target)
        lines.append(f"\nreturn @ {steps[-1]:,} >= {target:g} on {hits} of {len(finals)} seeds")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 2000, 3000])
    parser.add_argument("--target", type=float, default=-200.0)
    parser.add_argument("--runs", type=Path, nargs="+", help="tabulate these finished run directories instead")
    parser.add_argument("--out", type=Path, default=None, help="parent folder of the per-seed run directories")
    args, overrides = parser.parse_known_args()
    if args.runs:
        print(table(args.runs, args.steps, args.target))
        return
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    tag = f"{option(overrides, 'algo', 'dqn')}_{option(overrides, 'env', 'cartpole')}"
    out = args.out or ROOT / "outputs" / "seeds" / f"{stamp}_{tag}"
    run_dirs = []
    for seed in args.seeds:
        run_seed(overrides, seed, out / f"seed_{seed}", quiet=True)
        run_dirs.append(out / f"seed_{seed}")
    print(f"python scripts/redq_table.py {shlex.join(sys.argv[1:])}\n")
    print(table(run_dirs, args.steps, args.target))
    print(f"\nrun directories: {out}")


if __name__ == "__main__":
    main()
