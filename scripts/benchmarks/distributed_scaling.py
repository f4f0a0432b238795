"""Throughput of distributed=apex against the single-process loop: env steps/s and updates/s with
1, 2, ... actors beside distributed=none, the same algorithm and budget, measured from metrics.csv
once the run is going (rows past --warmup steps, before the final evaluation).

    python scripts/benchmarks/distributed_scaling.py --actors 1 2 --repeats 2 --record
    python scripts/benchmarks/distributed_scaling.py --actors 1 2 4 8 16 --env minatar --record   # a 16-core machine

Each configuration runs as `python train.py ...` in a fresh process, the configurations interleaved
repeat by repeat; --record writes results/distributed_scaling.json (rendered into docs/distributed.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ENVS = {   # DQN with prioritized replay and each env's preset (0.5 updates per env step on CartPole)
    "cartpole": ["algo=dqn", "env=cartpole", "buffer=prioritized", "train.stop_at_return=null"],
    "minatar": ["algo=dqn", "env=minatar", "buffer=prioritized"],
}


def overrides(env: str, steps: int) -> list[str]:
    return [*ENVS[env], f"train.total_steps={steps}", f"train.eval_every={steps}", "train.eval_episodes=5",
            f"train.log_every={max(steps // 10, 1)}", f"train.checkpoint_every={steps}", "train.progress=false",
            "checkpoint.save_buffer=false", "device=cpu"]


def setup(actors: int) -> list[str]:
    return ["distributed=none"] if actors == 0 else ["distributed=apex", f"distributed.actors={actors}"]


def measure(args: argparse.Namespace, actors: int) -> dict[str, float]:
    """One run; env steps/s, updates/s and updates per env step over its steady rows."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        command = [sys.executable, str(ROOT / "train.py"), *overrides(args.env, args.steps), *setup(actors),
                   f"hydra.run.dir={run_dir}"]
        if args.nice:
            command = ["nice", "-n", str(args.nice), *command]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        rows = [row for row in csv.DictReader(open(run_dir / "metrics.csv"))
                if args.warmup <= int(row["step"]) < args.steps]
        cfg = yaml.safe_load(open(run_dir / ".hydra" / "config.yaml"))
    if len(rows) < 2:
        raise SystemExit(f"too few rows past --warmup {args.warmup} for {setup(actors)}: raise --steps")
    first, last = rows[0], rows[-1]
    seconds = float(last["time/elapsed_s"]) - float(first["time/elapsed_s"])
    steps = int(last["step"]) - int(first["step"])
    if actors:
        updates = int(last["distributed/updates"]) - int(first["distributed/updates"])
    else:   # the single-process schedule: gradient_steps updates every train_every steps after learning_starts
        algo = cfg["algo"]
        phases = lambda step: max(0, (step - algo["learning_starts"]) // algo["train_every"] + 1)  # noqa: E731
        updates = (phases(int(last["step"])) - phases(int(first["step"]))) * algo["gradient_steps"]
    return {"env_sps": round(steps / seconds, 1), "updates_per_s": round(updates / seconds, 1),
            "replay_ratio": round(updates / steps, 3)}


def load_average() -> float:
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--env", choices=sorted(ENVS), default="cartpole")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--warmup", type=int, default=4000, help="rows before this step are not measured")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--record", action="store_true", help="write results/distributed_scaling.json")
    args = parser.parse_args()
    setups = [0, *args.actors]
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in setups}
    loads = [load_average()]
    started = time.time()
    for repeat in range(args.repeats):
        for n in setups:
            runs[n].append(measure(args, n))
            loads.append(load_average())
            print(f"repeat {repeat}: {' '.join(setup(n))}: {runs[n][-1]}", flush=True)
    rows = []
    for n in setups:
        per = {key: [run[key] for run in runs[n]] for key in runs[n][0]}
        label = "one process (distributed=none)" if n == 0 else f"distributed=apex, {n} actor{'s' * (n > 1)}"
        summary = {key: round(statistics.median(v), 3 if key == "replay_ratio" else 1) for key, v in per.items()}
        rows.append({"id": "none" if n == 0 else f"apex_{n}", "label": label, "actors": n, "per_seed": per,
                     "summary": summary})
    print(json.dumps(rows, indent=1))
    if args.record:
        write_record(args, rows, loads, time.time() - started)


def write_record(args: argparse.Namespace, rows: list[dict], loads: list[float], seconds: float) -> None:
    from rl_hydra.runs.provenance import git_state

    commit, dirty = git_state()
    command = " ".join(["python scripts/benchmarks/distributed_scaling.py", "--actors", *map(str, args.actors),
                        "--env", args.env, "--steps", str(args.steps), "--repeats", str(args.repeats), "--record"])
    record = {
        "name": "distributed_scaling", "title": f"distributed=apex throughput against one process ({args.env}, DQN)",
        "topic": "distributed", "status": "adopted", "reason": None, "command": command, "rerun": command,
        "overrides": overrides(args.env, args.steps), "seeds": list(range(args.repeats)), "per": "repeats",
        "commit": (commit[:7] + ("-dirty" if dirty else "")) if commit else None, "date": time.strftime("%Y-%m-%d"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "device": "cpu",
                    "torch_threads": 1, "load": f"{min(loads):.1f} to {max(loads):.1f} (1-minute load average)"},
        "peer": None, "source": None,
        "notes": [f"Rates over the rows from step {args.warmup} to the last before the final evaluation, medians of "
                  f"{args.repeats} interleaved repeats ({seconds / 60:.0f} minutes in all), run at nice {args.nice}. "
                  "The learner updates at most 0.5 times per env step (the preset's gradient_steps / train_every): "
                  "a replay ratio below that is the learner falling behind its actors, whose acting it never waits "
                  "for. On a machine with fewer cores than actors + learner + replay, processes share cores."],
        "columns": [{"header": "", "format": "{label}", "align": "left"},
                    {"header": "env steps/s", "format": "{env_sps:,.0f} ({env_sps*:,.0f})"},
                    {"header": "updates/s", "format": "{updates_per_s:,.0f} ({updates_per_s*:,.0f})"},
                    {"header": "updates per env step", "format": "{replay_ratio:.2f}"}],
        "rows": rows,
    }
    from rl_hydra.runs.results import dump

    path = ROOT / "results" / "distributed_scaling.json"
    path.write_text(dump(record))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
