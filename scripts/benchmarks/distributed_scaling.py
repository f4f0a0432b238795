"""Throughput of distributed=apex against the single-process loop: env steps/s and updates/s with
1, 2, ... actors beside distributed=none, the same algorithm and budget, measured from metrics.csv
once the run is going (rows past --warmup steps, before the final evaluation).

    python scripts/benchmarks/distributed_scaling.py --actors 1 2 --repeats 2 --record
    python scripts/benchmarks/distributed_scaling.py --actors 1 2 4 8 16 --env minatar --device cuda \
        --steps-per-actor 8000 --record   # a 16-core machine with a GPU for the learner

Each configuration runs as `python train.py ...` in a fresh process, the configurations interleaved
repeat by repeat; --record writes results/distributed_scaling[_<env>_<device>].json (rendered into
docs/distributed_results.md). --steps-per-actor lengthens the runs with many actors, whose fixed budget would
otherwise pass in a second or two.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ENVS = {  # DQN with prioritized replay and each env's preset (0.5 updates per env step on CartPole)
    "cartpole": ["algo=dqn", "env=cartpole", "buffer=prioritized", "train.stop_at_return=null"],
    "minatar": ["algo=dqn", "env=minatar", "buffer=prioritized"],  # Breakout; the preset's one update per step
    # Breakout on the DQN Atari preset (one update per 4 steps) with a shorter warm-up and a smaller replay;
    # one evaluation episode of at most 2,500 steps, where an untrained policy could play 27,000
    "atari": [
        "algo=dqn",
        "env=atari",
        "env.id=ALE/Breakout-v5",
        "buffer=prioritized",
        "algo.learning_starts=2000",
        "buffer.capacity=50000",
        "env.kwargs.max_num_frames_per_episode=10000",
    ],
}
EVAL_EPISODES = {"atari": 1}
WARMUP = {"cartpole": 4000, "minatar": 6000, "atari": 4000}  # past each preset's learning_starts


def overrides(env: str, steps: int, device: str = "cpu") -> list[str]:
    return [
        *ENVS[env],
        f"train.total_steps={steps}",
        f"train.eval_every={steps}",
        f"train.eval_episodes={EVAL_EPISODES.get(env, 5)}",
        f"train.log_every={max(steps // 10, 1)}",
        f"train.checkpoint_every={steps}",
        "train.progress=false",
        "checkpoint.save_buffer=false",
        f"device={device}",
    ]


def budget(args: argparse.Namespace, actors: int) -> int:
    return max(args.steps, args.steps_per_actor * actors)


def setup(actors: int) -> list[str]:
    # actors never wait for the learner (min_replay_ratio=null): what acting and learning reach side by side
    apex = ["distributed=apex", f"distributed.actors={actors}", "distributed.min_replay_ratio=null"]
    return ["distributed=none"] if actors == 0 else apex


def measure(args: argparse.Namespace, actors: int) -> dict[str, float]:
    """One run; env steps/s, updates/s and updates per env step over its steady rows."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        steps = budget(args, actors)
        command = [
            sys.executable,
            str(ROOT / "train.py"),
            *overrides(args.env, steps, args.device),
            *setup(actors),
            f"hydra.run.dir={run_dir}",
        ]
        if args.nice:
            command = ["nice", "-n", str(args.nice), *command]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        rows = [row for row in csv.DictReader(open(run_dir / "metrics.csv")) if args.warmup <= int(row["step"]) < steps]
        cfg = yaml.safe_load(open(run_dir / ".hydra" / "config.yaml"))
    if len(rows) < 2:
        raise SystemExit(f"too few rows past --warmup {args.warmup} for {setup(actors)}: raise --steps")
    first, last = rows[0], rows[-1]
    seconds = float(last["time/elapsed_s"]) - float(first["time/elapsed_s"])
    steps = int(last["step"]) - int(first["step"])
    if actors:
        updates = int(last["distributed/updates"]) - int(first["distributed/updates"])
    else:  # the single-process schedule: gradient_steps updates every train_every steps after learning_starts
        algo = cfg["algo"]
        phases = lambda step: max(0, (step - algo["learning_starts"]) // algo["train_every"] + 1)  # noqa: E731
        updates = (phases(int(last["step"])) - phases(int(first["step"]))) * algo["gradient_steps"]
    return {
        "env_sps": round(steps / seconds, 1),
        "updates_per_s": round(updates / seconds, 1),
        "replay_ratio": round(updates / steps, 3),
    }


def load_average() -> float:
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--env", choices=sorted(ENVS), default="cartpole")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--steps-per-actor", type=int, default=0, help="a run's budget: at least this times its actors")
    parser.add_argument(
        "--warmup", type=int, help="rows before this step are not measured (default: past the preset's learning_starts)"
    )
    parser.add_argument("--device", default="cpu", help="the learner's (and the single process's) device")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--record", action="store_true", help="write the record to results/ (its name: record_name)")
    args = parser.parse_args()
    args.warmup = WARMUP[args.env] if args.warmup is None else args.warmup
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
        rows.append(
            {"id": "none" if n == 0 else f"apex_{n}", "label": label, "actors": n, "per_seed": per, "summary": summary}
        )
    print(json.dumps(rows, indent=1))
    if args.record:
        write_record(args, rows, loads, time.time() - started)


def record_name(args: argparse.Namespace) -> str:
    """distributed_scaling for the first record (CartPole, CPU); _<env>_<device> for the others."""
    if args.env == "cartpole" and args.device == "cpu":
        return "distributed_scaling"
    return f"distributed_scaling_{args.env}_{args.device.split(':')[0]}"


def write_record(args: argparse.Namespace, rows: list[dict], loads: list[float], seconds: float) -> None:
    from rl_hydra.runs.results import commit, dump, machine

    command = " ".join(
        [
            "python scripts/benchmarks/distributed_scaling.py",
            "--actors",
            *map(str, args.actors),
            "--env",
            args.env,
            "--steps",
            str(args.steps),
            "--repeats",
            str(args.repeats),
        ]
        + (["--steps-per-actor", str(args.steps_per_actor)] if args.steps_per_actor else [])
        + (["--device", args.device] if args.device != "cpu" else [])
        + ["--record"]
    )
    name = record_name(args)
    budgets = ", ".join(f"{n}: {budget(args, n):,}" for n in [0, *args.actors])
    record = {
        "name": name,
        "title": f"distributed=apex throughput against one process ({args.env}, DQN, learner on {args.device})",
        "topic": "distributed",
        "status": "adopted",
        "reason": None,
        "command": command,
        "rerun": command,
        "overrides": overrides(args.env, args.steps, args.device),
        "seeds": list(range(args.repeats)),
        "per": "repeats",
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            **machine(loads[0], args.device),
            "load": f"{min(loads):.1f} to {max(loads):.1f} (1-minute load average)",
        },
        "peer": None,
        "source": None,
        "notes": [
            f"Rates over the rows from step {args.warmup} to the last before the final evaluation, medians of "
            f"{args.repeats} interleaved repeat{'s' * (args.repeats > 1)} ({seconds / 60:.0f} minutes in all), "
            f"run at nice {args.nice}. Env steps per run, by actors (0: one process): {budgets}. "
            "The learner updates at most the preset's gradient_steps / train_every times per env step: "
            "a replay ratio below that is the learner falling behind its actors, whose acting it never waits "
            "for. On a machine with fewer cores than actors + learner + replay, processes share cores."
        ],
        "columns": [
            {"header": "", "format": "{label}", "align": "left"},
            {"header": "env steps/s", "format": "{env_sps:,.0f} ({env_sps*:,.0f})"},
            {"header": "updates/s", "format": "{updates_per_s:,.0f} ({updates_per_s*:,.0f})"},
            {"header": "updates per env step", "format": "{replay_ratio:.2f}"},
        ],
        "rows": rows,
    }
    path = ROOT / "results" / f"{name}.json"
    path.write_text(dump(record))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
