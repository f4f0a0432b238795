"""Train one config on several seeds, one after another, and print its table.

    python scripts/seeds_table.py algo=qr_dqn env=cartpole
    python scripts/seeds_table.py --seeds 0 1 2 algo=iqn env=cartpole algo.num_tau_samples=16
    python scripts/seeds_table.py --at-steps 1000 2000 3000 algo=redq env=pendulum   # returns at those steps too
    python scripts/seeds_table.py --runs outputs/seeds/<stamp>/seed_*                # finished runs, train nothing
    python scripts/seeds_table.py --record results/iqn_cartpole.json --topic distributional algo=iqn env=cartpole

Each seed runs `python train.py <overrides> seed=S` in its own run directory
(outputs/seeds/<time>_<algo>_<env>/seed_S unless --out is given); the table is read back from each
run's summary.json (the last evaluation's return, the best one, the step it first reached
train.stop_at_return, updates, wall time, steps per second) and, with --at-steps, metrics.csv's
eval/return_mean at those steps, then the medians. Seeds run one after another so that wall times
compare; `--jobs 2` runs two at a time (each wall time then includes the other's contention).
The table is a record in results/' format (results/README.md); --record writes it there, with the
code's fingerprint (rl_hydra/verify/fingerprint.py: the config's first few hundred updates at seed 0),
so that a later change to what the config computes shows the record as stale. A --record that
exists is re-made: its title, topic, notes and row keep what they say, the measured parts are new.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rl_hydra.runs.aggregate import eval_curve
from rl_hydra.runs.results import commit, dump, reached, seeds_table
from rl_hydra.verify.fingerprint import fingerprint

ROOT = Path(__file__).resolve().parent.parent

KEYS = {
    "return": "eval_return_mean",
    "best": "best_eval_return_mean",
    "solved_at": "solved_at_step",
    "updates": "updates",
    "wall": "wall_time_s",
    "sps": "steps_per_second",
}
COLUMNS = [
    ("final eval return", "{return:,.1f}"),
    ("best eval return", "{best:,.1f}"),
    ("solved at step", "{solved_at:,.0f}"),
    ("updates", "{updates:,.0f}"),
    ("wall time (s)", "{wall:,.1f}"),
    ("steps/s", "{sps:,.0f}"),
]


def option(overrides: list[str], key: str, default: str) -> str:
    """The value of the last `key=value` among the overrides, else `default`."""
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return values[-1] if values else default


def run_seed(overrides: list[str], seed: int, run_dir: Path, quiet: bool) -> Path:
    command = [
        sys.executable,
        str(ROOT / "train.py"),
        *overrides,
        f"seed={seed}",
        f"hydra.run.dir={run_dir}",
        "train.progress=false",
    ]
    print(f"seed {seed}: {shlex.join(command[1:])}", file=sys.stderr, flush=True)
    output = subprocess.DEVNULL if quiet else None
    subprocess.run(command, cwd=ROOT, stdout=output, stderr=output)
    return run_dir


def read_run(run_dir: Path, at_steps: list[int]) -> dict:
    """The run's figures by record key (None where it has none)."""
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}
    values = {key: summary.get(name) for key, name in KEYS.items()}
    by_step = {}
    if at_steps and (run_dir / "metrics.csv").is_file():
        steps, returns = eval_curve(run_dir)  # streamed and checked as a record is read
        by_step = dict(zip(steps.tolist(), returns.tolist()))
    values.update({f"return_{step}": by_step.get(step) for step in at_steps})
    values["seed"] = summary.get("seed", run_dir.name)
    return values


def median(values: list[float]) -> float:
    """The median, an int where the values are ints and it is one (a step, a count)."""
    middle = statistics.median(values)
    return int(middle) if all(isinstance(v, int) for v in values) and middle == int(middle) else middle


def record(runs: list[dict], overrides: list[str], at_steps: list[int], args) -> dict:
    keys = [*KEYS, *(f"return_{step}" for step in at_steps)]
    per_seed = {key: [run[key] for run in runs] for key in keys if any(run[key] is not None for run in runs)}
    summary = {key: median([v for v in column if v is not None]) for key, column in per_seed.items()}
    columns = [*COLUMNS, *((f"return @ {step:,}", f"{{return_{step}:,.1f}}") for step in at_steps)]
    name = args.record.stem if args.record else "seeds_table"
    return {
        "name": name,
        "title": " ".join(overrides) or "python train.py",
        "topic": args.topic,
        "status": "adopted",
        "reason": None,
        "command": "python scripts/seeds_table.py " + shlex.join(sys.argv[1:]),
        "overrides": overrides,
        "seeds": [run["seed"] for run in runs],
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "machine": {"cpu": os.uname().machine, "cores": os.cpu_count(), "load": f"{os.getloadavg()[0]:.2f} (1 min)"},
        "peer": None,
        "source": "scripts/seeds_table.py",
        "notes": [],
        "columns": [
            {"header": "config", "format": "{label}", "align": "left"},
            {"header": "final eval return", "format": "{return:,.1f}"},
        ],
        "seed_columns": [{"header": h, "format": f} for h, f in columns if f[1:].split(":")[0] in per_seed],
        "rows": [{"id": "config", "label": " ".join(overrides), "per_seed": per_seed, "summary": summary}],
    }


def remade(new: dict, old: dict) -> dict:
    """`new` in place of the record `old`: old's name, title, topic, status, notes and plot, its row's id and label."""
    kept = {key: old[key] for key in ("name", "title", "topic", "status", "reason", "notes", "plot") if key in old}
    row = {**new["rows"][0], **{key: old["rows"][0][key] for key in ("id", "label") if key in old["rows"][0]}}
    return {**new, **kept, "rows": [row]}


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
    parser.add_argument("--at-steps", type=int, nargs="+", default=[], help="also eval/return_mean at these steps")
    parser.add_argument("--runs", type=Path, nargs="+", help="tabulate these finished run directories instead")
    parser.add_argument("--target", type=float, default=None, help="also count seeds whose final return reaches this")
    parser.add_argument("--quiet", action="store_true", help="hide each run's own log output")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default: one after another)")
    parser.add_argument("--record", type=Path, help="write the table's record here (results/<name>.json)")
    parser.add_argument("--topic", default="runs", help="the record's docs page (dqn, distributional, ...)")
    args, overrides = parser.parse_known_args(seeds_apart(sys.argv[1:]))
    if any(o.startswith("seed=") for o in overrides):
        parser.error("pass seeds with --seeds, not seed=")
    if args.record and args.record.is_file() and len(json.loads(args.record.read_text())["rows"]) > 1:
        parser.error(f"--record {args.record}: its record has several rows, and this command makes one")
    if args.runs:
        run_dirs = args.runs
    else:
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        tag = f"{option(overrides, 'algo', 'dqn')}_{option(overrides, 'env', 'cartpole')}"
        out = args.out or ROOT / "outputs" / "seeds" / f"{stamp}_{tag}"
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            run_dirs = list(
                pool.map(lambda seed: run_seed(overrides, seed, out / f"seed_{seed}", args.quiet), args.seeds)
            )
    result = record([read_run(d, args.at_steps) for d in run_dirs], overrides, args.at_steps, args)
    if args.record:
        result["fingerprint"] = fingerprint(overrides)
        if args.record.is_file():
            result = remade(result, json.loads(args.record.read_text()))
        args.record.write_text(dump(result))
    print(seeds_table(result, result["rows"][0]["id"]))
    if args.target is not None:
        finals = result["rows"][0]["per_seed"].get("return", [])
        print(f"\nfinal eval return >= {args.target:g} on {reached(finals, args.target)} seeds")
    print(f"\nrun directories: {', '.join(map(str, sorted({d.parent for d in run_dirs})))}")


if __name__ == "__main__":
    main()
