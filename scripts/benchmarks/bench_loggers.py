"""Steps/s of a run that also logs to MLflow against the default loggers (CSV and TensorBoard),
alternating the two so both see the same load.

    python scripts/benchmarks/bench_loggers.py                   # DQN CartPole preset, 50k steps, 3 pairs
    python scripts/benchmarks/bench_loggers.py --pairs 5 train.total_steps=20000

Each run is `python train.py algo=dqn env=cartpole train.stop_at_return=null train.progress=false`
(the zoo preset, its full 50k-step budget) into a fresh directory, once as it is and once with
`logger=[csv,tensorboard,mlflow]`, MLflow writing to a sqlite store in a temporary directory that
all runs share (MLFLOW_TRACKING_URI; the first MLflow run of the benchmark creates it; MLflow's
usage telemetry off). Prints each pair's steps/s (summary.json: env steps over the training
session, logger start included) and process wall and CPU times (Python start-up, imports and
MLflow's end-of-run artifacts included), their ratios, the medians and the load average before
each pair (other processes slow both; CPU time is the least sensitive to them).
Needs the mlflow extra: pip install -e ".[mlflow]".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OVERRIDES = ["algo=dqn", "env=cartpole", "train.stop_at_return=null"]
LOGGERS = {"default": [], "mlflow": ["logger=[csv,tensorboard,mlflow]"]}


def cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_run(overrides: list[str], run_dir: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(steps/s from summary.json, wall seconds, CPU seconds of the whole process) of one run."""
    command = [sys.executable, str(ROOT / "train.py"), *overrides, "train.progress=false", f"hydra.run.dir={run_dir}"]
    start, cpu_start = time.perf_counter(), cpu_seconds_of_children()
    result = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall, cpu = time.perf_counter() - start, cpu_seconds_of_children() - cpu_start
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    if result.returncode != 0 or summary.get("status") != "completed":
        sys.exit(f"run failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    return summary["steps_per_second"], wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("overrides", nargs="*", default=DEFAULT_OVERRIDES,
                        help="train.py overrides (default: %(default)s)")
    args = parser.parse_args()
    print(f"run: train.py {' '.join(args.overrides)}  vs  + {LOGGERS['mlflow'][0]}\n", flush=True)
    print("| pair | load avg (1 min) | default steps/s | mlflow steps/s | ratio | default wall (s) "
          "| mlflow wall (s) | wall ratio | default CPU (s) | mlflow CPU (s) | CPU ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    sps, walls, cpus = ({name: [] for name in LOGGERS} for _ in range(3))
    with tempfile.TemporaryDirectory(prefix="bench_loggers_") as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db", "MLFLOW_DISABLE_TELEMETRY": "true"}
        for pair in range(args.pairs):
            load = os.getloadavg()[0]
            # alternate which goes first, so a load trend hits both alike
            order = list(LOGGERS) if pair % 2 == 0 else list(reversed(LOGGERS))
            for name in order:
                measured = time_run([*args.overrides, *LOGGERS[name]], Path(tmp) / f"{name}_{pair}", env)
                for series, value in zip((sps, walls, cpus), measured):
                    series[name].append(value)
            print(f"| {pair} | {load:.2f} | {sps['default'][-1]:.0f} | {sps['mlflow'][-1]:.0f} "
                  f"| {sps['mlflow'][-1] / sps['default'][-1]:.3f} | {walls['default'][-1]:.1f} "
                  f"| {walls['mlflow'][-1]:.1f} | {walls['mlflow'][-1] / walls['default'][-1]:.3f} "
                  f"| {cpus['default'][-1]:.1f} | {cpus['mlflow'][-1]:.1f} "
                  f"| {cpus['mlflow'][-1] / cpus['default'][-1]:.3f} |", flush=True)
    ratios = [m / d for m, d in zip(sps["mlflow"], sps["default"])]
    print(f"\nmedians over {args.pairs} pairs: default {statistics.median(sps['default']):.0f} steps/s, "
          f"mlflow {statistics.median(sps['mlflow']):.0f} steps/s; ratio of medians "
          f"{statistics.median(sps['mlflow']) / statistics.median(sps['default']):.3f}, median of pair ratios "
          f"{statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); wall time "
          f"{statistics.median(walls['default']):.1f} s vs {statistics.median(walls['mlflow']):.1f} s, CPU time "
          f"{statistics.median(cpus['default']):.1f} s vs {statistics.median(cpus['mlflow']):.1f} s "
          f"({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
