"""Training steps per second of presets too slow to run to the end here (REDQ at G = 20 on MuJoCo).

    python scripts/benchmarks/bench_train_sps.py algo=redq env=hopper
    python scripts/benchmarks/bench_train_sps.py --steps 300 --repeats 3 algo=sac env=hopper device=cuda

Each repeat runs the preset (the overrides given) for `--warmup` random steps, with
`algo.learning_starts` set to that, then `--steps` training steps, logged every `--log-every`
steps; the figure is the median of metrics.csv's `time/sps` over the rows after the warm-up
(each row's steps/s since the row before it), and the script prints each repeat's median and
the median over repeats.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def training_sps(overrides: list[str], warmup: int, steps: int, log_every: int) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        total = warmup + steps
        command = [sys.executable, str(ROOT / "train.py"), *overrides, f"algo.learning_starts={warmup}",
                   f"train.total_steps={total}", f"train.log_every={log_every}", f"train.eval_every={total}",
                   "train.eval_episodes=1", f"train.checkpoint_every={total}", "checkpoint.save_buffer=false",
                   "train.stop_at_return=null", "train.progress=false", f"hydra.run.dir={run_dir}"]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        with open(Path(run_dir) / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if int(r["step"]) > warmup + log_every]
        return statistics.median(float(r["time/sps"]) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="+", help="train.py overrides, e.g. algo=redq env=hopper")
    parser.add_argument("--warmup", type=int, default=1000, help="random steps before training")
    parser.add_argument("--steps", type=int, default=200, help="training steps timed")
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    figures = []
    for repeat in range(args.repeats):
        figures.append(training_sps(args.overrides, args.warmup, args.steps, args.log_every))
        print(f"repeat {repeat}: {figures[-1]:.1f} training steps/s", flush=True)
    print(f"{' '.join(args.overrides)}: median {statistics.median(figures):.1f} training steps/s "
          f"over {args.repeats} repeats (min {min(figures):.1f}, max {max(figures):.1f})")


if __name__ == "__main__":
    main()
