"""Speed of rl-hydra against Stable-Baselines3 and against this machine's floor (issue #8).

Every measurement runs in its own fresh Python process (scripts/benchmarks/benchmark_worker.py) with
one torch thread, so neither side warms caches for the other. Within each pair (one seed)
our run and SB3's alternate, and the side that goes first alternates from pair to pair.

  zoo       DQN and QR-DQN with the RL Baselines3 Zoo CartPole-v1 hyperparameters (50k steps,
            a training phase of 128 updates every 256 steps), ours against SB3 / sb3-contrib
  per_step  the same with one update of batch 128 after every env step (20k steps)
  solve     our default `algo=dqn env=cartpole` preset (stops at the first evaluation that
            averages 500) against SB3's whole zoo run
  floor     N pure updates of the same network, batch and optimizer (N = the run's updates) plus
            M random-action CartPole steps (M = the run's steps), each timed in isolation, in
            two processes of half the work each, one just before our run and one just after;
            our wall time over the floor of the same pair is the loop's overhead (the machine's
            speed drifts by tens of percent over minutes: a floor timed apart from the run it
            divides would measure the drift too)
  redq      REDQ critic-ensemble updates/s, batched against a per-critic loop
            (scripts/benchmarks/bench_ensemble.py), and env steps/s of a short REDQ run at the default
            G = 20; a CUDA column when torch.cuda.is_available()

Both sides get the same seeds and hyperparameters; the final evaluation is greedy, on the
same number of episodes, from the same initial states. Wall time is the whole run: building,
training, the final evaluation (and on our side its metrics and checkpoints).

    pip install -e ".[bench]"                         # pins stable-baselines3 and sb3-contrib
    python scripts/benchmarks/benchmark.py --out docs/benchmark_results.md     # all suites, 5 pairs
    python scripts/benchmarks/benchmark.py --suites zoo floor --algos dqn --pairs 3
    python scripts/benchmarks/benchmark.py --only ours           # without SB3 (also what happens if it is missing)
    python scripts/benchmarks/benchmark.py --compile             # adds our runs with compile=true (ours only)
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import shlex
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_match import (BUDGETS, ENV_ID, ZOO, Setting, expected_updates, our_overrides,  # noqa: E402
                             preset_overrides, redq_overrides, sb3_job, setting_for)

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parent / "benchmark_worker.py"
RESULT_MARK = "BENCHMARK_RESULT "
SUITES = ("zoo", "per_step", "solve", "floor", "redq")


# --- running jobs --------------------------------------------------------------------------
def run_job(job: dict, label: str) -> dict | None:
    """Run one job in a fresh process; None (and its stderr shown) if it failed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1"}
    print(f"  {label} ...", end="", file=sys.stderr, flush=True)
    proc = subprocess.run([sys.executable, str(WORKER), json.dumps(job)], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARK)]
    if proc.returncode or not lines:
        print(f" failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
        return None
    result = json.loads(lines[-1][len(RESULT_MARK):])
    seconds = result.get("wall_s", result.get("update_s", 0) + result.get("env_s", 0))  # a run or a floor
    print(f" {seconds:.1f} s" if seconds else " done", file=sys.stderr)
    return result


def floor_job(setting: Setting, seed: int, args: argparse.Namespace, half: int) -> dict:
    """Half of the floor (half 0: the first N // 2 updates and M // 2 env steps; half 1: the rest)."""
    updates, steps = expected_updates(setting.hp, setting.total_steps), setting.total_steps
    part = lambda total: total // 2 if half == 0 else total - total // 2  # noqa: E731
    return {"kind": "floor", "overrides": our_overrides(setting, seed, args), "device": args.device,
            "updates": part(updates), "env_id": ENV_ID, "env_steps": part(steps)}


def joined_floor(halves: list[dict | None]) -> dict | None:
    """One floor from its two halves: their seconds added; None if either failed."""
    if not all(halves):
        return None
    return {"update_s": sum(h["update_s"] for h in halves), "env_s": sum(h["env_s"] for h in halves),
            "optimizer": halves[0]["optimizer"]}


def side_job(setting: Setting, side: str, seed: int, args: argparse.Namespace) -> dict:
    if side == "sb3":
        return sb3_job(setting, seed, args)
    if side == "ours_preset":
        return {"kind": "ours", "overrides": preset_overrides(seed, args)}
    return {"kind": "ours", "overrides": our_overrides(setting, seed, args, compile_update=side == "ours_compiled")}


def pair_order(sides: list[str], pair: int) -> list[str]:
    """The runs of one pair: the sides in plan order in even pairs and in reverse order in odd
    ones (each goes first equally often), with the floor's two halves just before and just
    after our run, so that the floor is timed around the run it divides."""
    order = [side for side in (sides if pair % 2 == 0 else sides[::-1]) if side != "floor"]
    if "floor" in sides:
        at = order.index("ours")
        order[at:at + 1] = ["floor", "ours", "floor"]
    return order


def run_pairs(plan: list[tuple[Setting, list[str]]], args: argparse.Namespace) -> dict[str, dict[str, list]]:
    """results[setting name][side][pair]; a pair's floor is its two halves joined."""
    results = {setting.name: {side: [] for side in sides} for setting, sides in plan}
    for pair in range(args.pairs):
        seed = args.seed + pair
        for setting, sides in plan:
            halves = []
            for side in pair_order(sides, pair):
                label = f"pair {pair + 1}/{args.pairs}, seed {seed}: {side} {setting.name}"
                if side == "floor":
                    label += f" ({len(halves) + 1}/2)"
                    halves.append(run_job(floor_job(setting, seed, args, len(halves)), label))
                else:
                    results[setting.name][side].append(run_job(side_job(setting, side, seed, args), label))
            if "floor" in sides:
                results[setting.name]["floor"].append(joined_floor(halves))
    return results


# --- tables ----------------------------------------------------------------------------------
def fmt(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def pairs_table(left: list, right: list, names: tuple[str, str], seeds: list[int], extra=()) -> str:
    """One row per pair and a row of medians (the ratio's is the median of the per-pair ratios)."""
    a, b = names
    of = lambda key, run: run and (run[key] / run["wall_s"] if key == "steps" else run[key])  # noqa: E731
    columns = [  # (header, value of a pair (x, y), digits)
        (f"{a} wall (s)", lambda x, y: of("wall_s", x), 1), (f"{b} wall (s)", lambda x, y: of("wall_s", y), 1),
        (f"{a} / {b} wall", lambda x, y: x and y and x["wall_s"] / y["wall_s"], 2),
        (f"{a} steps/s", lambda x, y: of("steps", x), 0), (f"{b} steps/s", lambda x, y: of("steps", y), 0),
        (f"{a} final eval", lambda x, y: of("eval_return", x), 1),
        (f"{b} final eval", lambda x, y: of("eval_return", y), 1)]
    if not any(right):  # --only ours
        columns = [c for c in columns if c[0].startswith(f"{a} ") and not c[0].startswith(f"{a} / ")]
    columns += extra
    values = [[get(x, y) for _, get, _ in columns] for x, y in zip(left, right)]
    rows = [[str(i + 1), str(seeds[i]), *(fmt(v, d) for v, (_, _, d) in zip(row, columns))]
            for i, row in enumerate(values)]
    medians = [median(column) for column in zip(*values)]
    rows.append(["median", "", *(fmt(v, d) for v, (_, _, d) in zip(medians, columns))])
    return table(["pair", "seed", *(header for header, _, _ in columns)], rows)


# --- the floor and REDQ -----------------------------------------------------------------------
def floor_section(settings: list[Setting], results: dict, args: argparse.Namespace) -> str:
    """Per setting, medians over the pairs; each ratio is the median of the per-pair ratios
    (a run over the floor timed around it in the same pair). Also the split of our run into its
    own updates (timed inside the run) and the rest."""
    rows, inside = [], []
    for setting in settings:
        runs = results[setting.name]
        floors = runs["floor"]
        totals = [f and f["update_s"] + f["env_s"] for f in floors]

        def over_floor(side: str) -> tuple[float | None, list[float | None]]:
            """The median wall time, and each pair's run over its own floor (None where either is missing)."""
            walls = [r and r["wall_s"] for r in runs.get(side, [None] * len(floors))]
            return median(walls), [w and t and w / t for w, t in zip(walls, totals)]

        (ours, ours_ratios), (theirs, theirs_ratios) = over_floor("ours"), over_floor("sb3")
        rows.append([setting.name, f"{expected_updates(setting.hp, setting.total_steps):,}",
                     fmt(median(f and f["update_s"] for f in floors), 2), f"{setting.total_steps:,}",
                     fmt(median(f and f["env_s"] for f in floors), 2), fmt(median(totals), 2), fmt(ours),
                     fmt(median(ours_ratios), 2), ", ".join(fmt(ratio, 2) for ratio in ours_ratios),
                     fmt(theirs), fmt(median(theirs_ratios), 2)])
        timed = [r if r and "update_s" in r else None for r in runs["ours"]]
        inside.append([setting.name, fmt(ours), fmt(median(r and r["update_s"] for r in timed), 2),
                       fmt(median(r and r["wall_s"] - r["update_s"] for r in timed), 2),
                       fmt(median(r and f and r["wall_s"] / (r["update_s"] + f["env_s"])
                                  for r, f in zip(timed, floors)), 2)])
    optimizer = next((f["optimizer"] for s in settings for f in results[s.name]["floor"] if f), "?")
    headers = ["setting", "updates N", "N pure updates (s)", "env steps M", "M pure env steps (s)",
               "floor (s)", "ours wall (s)", "ours / floor", "ours / floor per pair", "SB3 wall (s)", "SB3 / floor"]
    return (f"## The floor\n\nN updates of the run's own network, loss and optimizer ({optimizer}, gradients "
            f"clipped as in the run) on one fixed batch, plus M {ENV_ID} steps with random actions "
            f"(gymnasium, one env), each timed in isolation in every pair: half of both in a fresh "
            f"process just before our run and the other half in one just after it; no sampling, acting, "
            f"logging, evaluation or target syncs. A wall time over the floor is the loop's overhead "
            f"factor. Times are medians of {args.pairs} pairs; each ratio is the median of the per-pair "
            f"ratios (one pair's run over the same pair's floor).\n\n"
            + table(headers, rows)
            + "\n\nInside our run: the seconds its own updates took (a timer around each), timed at the "
            "same moments as the rest of the run, so free of the drift between processes; the rest is "
            "everything else (acting, env steps, sampling, bookkeeping, setup, evaluation, checkpoints). "
            "The last column divides the wall time by the run's own updates plus the pair's M pure env "
            "steps.\n\n"
            + table(["setting", "ours wall (s)", "its updates (s)", "the rest (s)",
                     "ours / (its updates + M pure env steps)"], inside))


def run_redq(args: argparse.Namespace, devices: list[str]) -> dict[str, list]:
    """Per device: batched and looped ensemble updates/s, their ratio, then REDQ run steps/s."""
    columns = {}
    for device in devices:
        ensemble_args = ["--device", device, "--iters", str(args.ensemble_iters),
                         "--repeats", str(args.ensemble_repeats), "--warmup", str(max(1, args.ensemble_iters // 10))]
        ensemble = run_job({"kind": "ensemble", "args": ensemble_args}, f"REDQ ensemble on {device}")
        runs = [run_job({"kind": "ours", "overrides": redq_overrides(args, device, flag)},
                        f"REDQ run on {device}, compile={str(flag).lower()}")
                for flag in ([False, True] if args.compile else [False])]
        columns[device] = [ensemble and ensemble[key] for key in ("batched", "looped", "ratio")]
        columns[device] += [run and run["steps"] / run["wall_s"] for run in runs]
    return columns


def redq_section(columns: dict[str, list], args: argparse.Namespace) -> str:
    labels = [("batched ensemble, updates/s", 1), ("per-critic loop, updates/s", 1), ("batched / looped", 2),
              ("REDQ run, env steps/s", 1), ("REDQ run with compile=true, env steps/s", 1)]
    rows = [[label, *(fmt(values[i], digits) for values in columns.values())]
            for i, (label, digits) in enumerate(labels[: len(next(iter(columns.values())))])]
    return (f"## REDQ\n\nCritic-ensemble updates (N = 10 critics of 2x256, batch 256, Pendulum sizes: "
            f"scripts/benchmarks/bench_ensemble.py, median of {args.ensemble_repeats} x {args.ensemble_iters}) and a "
            f"{args.redq_steps:,}-step REDQ run on Pendulum-v1 with conf/algo/redq.yaml as it is (G = 20 "
            f"critic updates per env step), learning from step {args.redq_learning_starts}; its steps/s "
            f"include those random warm-up steps and the final evaluation.\n\n"
            + table(["", *columns], rows))


def build_plan(args: argparse.Namespace, with_sb3: bool) -> tuple[list[Setting], list[tuple[Setting, list[str]]]]:
    """The settings compared with SB3, and for each the sides that run in every pair."""
    budgets = {"zoo": args.zoo_steps, "per_step": args.per_step_steps}
    settings = [setting_for(algo, regime, budgets[regime])
                for regime in ("zoo", "per_step") if regime in args.suites for algo in args.algos]
    # the floor in every pair, timed around our run (pair_order), so drift touches both alike
    sides = ["ours", *(["floor"] if "floor" in args.suites else []), *(["sb3"] if with_sb3 else []),
             *(["ours_compiled"] if args.compile else [])]
    plan = [(setting, list(sides)) for setting in settings]
    if "solve" in args.suites:
        dqn_zoo = next((s for s, _ in plan if s.name == "dqn zoo"), None)
        if dqn_zoo is None:
            plan.append((setting_for("dqn", "zoo", args.zoo_steps), ["ours_preset", *(["sb3"] if with_sb3 else [])]))
        else:
            dict(plan)[dqn_zoo].append("ours_preset")
    return settings, plan


def report(args, info, settings, results, with_sb3: bool, redq: dict | None) -> str:
    seeds = [args.seed + i for i in range(args.pairs)]
    parts = [f"# rl-hydra speed benchmark\n\n`python scripts/benchmarks/benchmark.py {shlex.join(sys.argv[1:])}`  \n"
             f"{datetime.date.today()}; CPU {info.get('cpu')}; CUDA {info.get('cuda') or 'none'}; python "
             f"{info.get('python')}, torch {info.get('torch')}, gymnasium {info.get('gymnasium')}, "
             f"stable-baselines3 {info.get('stable_baselines3')}, sb3-contrib {info.get('sb3_contrib')}; "
             f"one torch thread per process; device {args.device}; final evaluation: {args.eval_episodes} "
             f"greedy episodes."]
    names = ("ours", "SB3") if with_sb3 else ("ours", "-")
    for setting in settings:
        runs = results[setting.name]
        updates = {side: fmt(median(r and r["updates"] for r in runs[side]), 0) for side in ("ours", "sb3") if side in runs}
        parts.append(f"## {setting.title}\n\nUpdates per run (median): "
                     + ", ".join(f"{side} {count}" for side, count in updates.items()) + "\n\n"
                     + pairs_table(runs["ours"], runs.get("sb3", [None] * args.pairs), names, seeds))
    if "solve" in args.suites:
        runs = results["dqn zoo"]
        solved = ("solved at step", lambda x, y: x and x.get("solved_at_step"), 0)
        parts.append("## Time to solve: our `algo=dqn env=cartpole` preset against SB3's zoo run\n\n"
                     "Ours stops at the first evaluation (every 2,500 steps, 10 episodes) that averages 500; "
                     "SB3 runs its whole zoo budget. `-` under solved: not within the budget.\n\n"
                     + pairs_table(runs["ours_preset"], runs.get("sb3", [None] * args.pairs),
                                   ("ours preset", "SB3 zoo"), seeds, extra=[solved]))
    if args.compile:
        for setting in settings:
            runs = results[setting.name]
            parts.append(f"## compile=true against compile=false (ours): {setting.title}\n\n"
                         + pairs_table(runs["ours_compiled"], runs["ours"], ("compile", "eager"), seeds))
    if "floor" in args.suites and settings:
        parts.append(floor_section(settings, results, args))
    if redq:
        parts.append(redq_section(redq, args))
    return "\n\n".join(parts) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", nargs="+", choices=SUITES, default=list(SUITES))
    parser.add_argument("--algos", nargs="+", choices=sorted(ZOO), default=sorted(ZOO))
    parser.add_argument("--pairs", type=int, default=5, help="pairs (seeds) per comparison")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first pair; pair i uses seed + i")
    parser.add_argument("--only", choices=["both", "ours"], default="both", help="ours: skip the SB3 side")
    parser.add_argument("--compile", action="store_true", help="also run ours with compile=true")
    parser.add_argument("--device", default="cpu", help="device of both sides' runs (cpu or cuda)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--zoo-steps", type=int, default=BUDGETS["zoo"])
    parser.add_argument("--per-step-steps", type=int, default=BUDGETS["per_step"])
    parser.add_argument("--solve-steps", type=int, default=None, help="budget of the preset run (default: its own)")
    parser.add_argument("--redq-steps", type=int, default=1000)
    parser.add_argument("--redq-learning-starts", type=int, default=256)
    parser.add_argument("--ensemble-iters", type=int, default=100)
    parser.add_argument("--ensemble-repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write the markdown report here")
    return parser


def main() -> None:
    args = build_parser().parse_args()

    with_sb3 = args.only == "both"
    if with_sb3 and not all(importlib.util.find_spec(p) for p in ("stable_baselines3", "sb3_contrib")):
        print("stable-baselines3 / sb3-contrib are not installed (pip install -e '.[bench]'); "
              "running our side only", file=sys.stderr)
        with_sb3 = False
    info = run_job({"kind": "probe"}, "versions") or {}
    settings, plan = build_plan(args, with_sb3)
    results = run_pairs(plan, args)
    redq = run_redq(args, ["cpu", "cuda"] if info.get("cuda") else ["cpu"]) if "redq" in args.suites else None
    text = report(args, info, settings, results, with_sb3, redq)
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
