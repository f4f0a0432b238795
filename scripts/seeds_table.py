"""Train one config on several seeds, one after another, and print a markdown table.

    python scripts/seeds_table.py algo=qr_dqn env=cartpole
    python scripts/seeds_table.py --seeds 0 1 2 algo=iqn env=cartpole algo.num_tau_samples=16

Each seed runs `python train.py <overrides> seed=S` in its own run directory
(outputs/seeds/<time>_<algo>_<env>/seed_S unless --out is given); the table is read
back from each run's summary.json: final evaluation return (the last evaluation,
`eval_return_mean`), best evaluation return, wall time and steps per second, then the
median over seeds. Seeds run one after another so that wall times are comparable;
`--jobs 2` runs two at a time (faster, but each run's wall time then includes the
other's contention for the CPU).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def option(overrides: list[str], key: str, default: str) -> str:
    """The value of the last `key=value` among the overrides, else `default`."""
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return values[-1] if values else default


def run_seed(overrides: list[str], seed: int, run_dir: Path, quiet: bool) -> dict:
    command = [sys.executable, str(ROOT / "train.py"), *overrides, f"seed={seed}",
               f"hydra.run.dir={run_dir}", "train.progress=false"]
    print(f"seed {seed}: {shlex.join(command[1:])}", file=sys.stderr, flush=True)
    output = subprocess.DEVNULL if quiet else None
    result = subprocess.run(command, cwd=ROOT, stdout=output, stderr=output)
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        return {"status": f"failed (exit {result.returncode}, no summary.json)"}
    return json.loads(summary_path.read_text())


def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: list[tuple[int, dict]], target: float | None) -> str:
    lines = ["| seed | final eval return | best eval return | solved at step | wall time (s) | steps/s | status |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for seed, s in rows:
        solved = s.get("solved_at_step")
        lines.append(f"| {seed} | {fmt(s.get('eval_return_mean'))} | {fmt(s.get('best_eval_return_mean'))} | "
                     f"{'-' if solved is None else f'{solved:,}'} | "
                     f"{fmt(s.get('wall_time_s'))} | {fmt(s.get('steps_per_second'), 0)} | {s.get('status')} |")

    def median(key: str):
        values = [s[key] for _, s in rows if s.get(key) is not None]
        return statistics.median(values) if values else None

    lines.append(f"| median | {fmt(median('eval_return_mean'))} | {fmt(median('best_eval_return_mean'))} | "
                 f"| {fmt(median('wall_time_s'))} | {fmt(median('steps_per_second'), 0)} | |")
    if target is not None:
        hits = sum(1 for _, s in rows if (s.get("eval_return_mean") or float("-inf")) >= target)
        lines.append(f"\nfinal eval return >= {target:g} on {hits} of {len(rows)} seeds")
    return "\n".join(lines)


def seeds_apart(argv: list[str]) -> list[str]:
    """argv with what follows `--seeds 0 1 2` moved before it: argparse's nargs="+" would also
    take the overrides after the seeds (`algo=iqn`) for seeds."""
    if "--seeds" not in argv:
        return argv
    end = argv.index("--seeds") + 1
    while end < len(argv) and argv[end].isdigit():
        end += 1
    return argv[end:] + argv[:end]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # the seeds are the integers right after --seeds; the overrides (key=value) may follow them
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4], metavar="SEED")
    parser.add_argument("--out", type=Path, default=None, help="parent folder of the per-seed run directories")
    parser.add_argument("--target", type=float, default=None, help="also count seeds whose final return reaches this")
    parser.add_argument("--quiet", action="store_true", help="hide each run's own log output")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default: one after another)")
    args, overrides = parser.parse_known_args(seeds_apart(sys.argv[1:]))
    if any(o.startswith("seed=") for o in overrides):
        parser.error("pass seeds with --seeds, not seed=")
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    tag = f"{option(overrides, 'algo', 'dqn')}_{option(overrides, 'env', 'cartpole')}"
    out = args.out or ROOT / "outputs" / "seeds" / f"{stamp}_{tag}"
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        summaries = pool.map(lambda seed: run_seed(overrides, seed, out / f"seed_{seed}", args.quiet), args.seeds)
        rows = list(zip(args.seeds, summaries))
    print(f"python scripts/seeds_table.py {shlex.join(sys.argv[1:])}\n")
    print(table(rows, args.target))
    print(f"\nrun directories: {out}")


if __name__ == "__main__":
    main()
