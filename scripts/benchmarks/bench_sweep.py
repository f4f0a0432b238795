"""Wall time of one sweep with Hydra's basic launcher (jobs one after another) against
the joblib launcher (N jobs at once), alternating the two so both see the same load.

    python scripts/benchmarks/bench_sweep.py                          # 4 DQN runs of 5,000 steps, 3 repeats
    python scripts/benchmarks/bench_sweep.py --repeats 5 --n-jobs 2 train.total_steps=10000

Each sweep is `python train.py -m seed=0,1,2,3 <overrides>` into a fresh directory (a
re-used one would skip its finished runs); every job trains with one torch thread
(`torch_threads: 1`). Prints each pair's wall times, the joblib/basic ratio, the median
ratio over repeats, the load average before each pair (other processes inflate both) and
the CPU seconds each sweep's processes used.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OVERRIDES = ["algo=dqn", "env=cartpole", "train.total_steps=5000", "train.progress=false"]


def cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_sweep(command: list[str], sweep_dir: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all its processes) of one sweep."""
    start, cpu_start = time.perf_counter(), cpu_seconds_of_children()
    result = subprocess.run([*command, f"hydra.sweep.dir={sweep_dir}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed, cpu = time.perf_counter() - start, cpu_seconds_of_children() - cpu_start
    statuses = [json.loads(p.read_text())["status"] for p in sweep_dir.glob("*/summary.json")]
    if result.returncode != 0 or not statuses or set(statuses) != {"completed"}:
        sys.exit(f"sweep failed (exit {result.returncode}, statuses {statuses}):\n{result.stderr[-2000:]}")
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("overrides", nargs="*", help="train.py overrides (default: %(default)s)",
                        default=DEFAULT_OVERRIDES)
    args = parser.parse_args()
    sweep = [sys.executable, str(ROOT / "train.py"), "-m", f"seed={args.seeds}", *args.overrides]
    launchers = {"basic": [], "joblib": ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.n_jobs}"]}
    print(f"sweep: {shlex.join(sweep[1:])}  (+ the launcher's overrides)\n", flush=True)
    print(f"| repeat | load avg (1 min) | basic (s) | joblib n_jobs={args.n_jobs} (s) | joblib / basic "
          f"| basic CPU (s) | joblib CPU (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        for repeat in range(args.repeats):
            load = os.getloadavg()[0]
            # alternate which launcher goes first, so a load trend hits both alike
            order = list(launchers) if repeat % 2 == 0 else list(reversed(launchers))
            measured = {name: time_sweep(sweep + launchers[name], Path(tmp) / f"{name}_{repeat}")
                        for name in order}
            (basic, basic_cpu), (joblib, joblib_cpu) = measured["basic"], measured["joblib"]
            ratios.append(joblib / basic)
            print(f"| {repeat} | {load:.2f} | {basic:.1f} | {joblib:.1f} | {ratios[-1]:.2f} "
                  f"| {basic_cpu:.1f} | {joblib_cpu:.1f} |", flush=True)
    print(f"\nmedian joblib / basic over {args.repeats} repeats: {statistics.median(ratios):.2f} "
          f"({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
