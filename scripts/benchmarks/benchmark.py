"""Ours against a peer (Stable-Baselines3 / sb3-contrib, or SBX with --peer sbx) on the same
hyperparameters: one runner for every comparison.

    python scripts/benchmarks/benchmark.py cartpole --seeds 4             # DQN, QR-DQN: Zoo, one update per step, solve
    python scripts/benchmarks/benchmark.py suite discrete_zoo --seeds 3   # a suite's rows against their Zoo entries
    python scripts/benchmarks/benchmark.py suite continuous --algos tqc td3 --rows tqc_pendulum td3_pendulum
    python scripts/benchmarks/benchmark.py suite continuous --peer sbx --rows sac_pendulum droq_pendulum redq_pendulum
    python scripts/benchmarks/benchmark.py cartpole --peer sbx --algos dqn   # SBX has no QR-DQN
    python scripts/benchmarks/benchmark.py cartpole --algos qr_dqn --rows qr_dqn_curves --seeds 5   # read at 500 too
    python scripts/benchmarks/benchmark.py suite continuous --rows tqc_hopper crossq_hopper --device cuda \
        --seeds 1 --steps 14001 --window 12000 14000   # steps/s on a GPU, after both sides' warm-up
    python scripts/benchmarks/benchmark.py minatar --games Breakout SpaceInvaders --seeds 3
    python scripts/benchmarks/benchmark.py minatar --algos qr_dqn iqn rainbow --quantiles 50 --sides ours
    python scripts/benchmarks/benchmark.py atari --seeds 2                # Pong: training steps/s over 20k steps
    python scripts/benchmarks/benchmark.py atari --game ALE/Breakout-v5 --device cuda --num-envs 8 \
        --vectorization async --algos dqn iqn rainbow                   # the GPU path (docs/parallel.md)
    ... [--only-seeds 1 2] [--steps 300] [--out DIR] [--record results/NAME.json] [--table-only]
        [--title "one line"] [--topic continuous]

Every run is a fresh process of this script with one torch thread: ours through rl_hydra.commands.api.train
(the path of train.py) into a run directory under --out, the peer through scripts/benchmarks/sb3_peer.py.
For each seed, for each case, the two sides run back to back, the peer first on odd seeds, so that
drifting load falls on both alike. Returns are the final greedy evaluation (10 episodes, on seeds
from seed + 1,000,000 on both sides). Wall time is the whole run: build, training with our periodic
evaluations and checkpoints, the final evaluation. A suite row whose preset evaluates during training
(train.eval_every below the budget) has the peer evaluate at the same steps too, inside its wall time,
and the record keeps each seed's curve on both sides, which scripts/render_results.py draws. A
finished run is kept as JSON under --out and skipped when the command runs again, so commands that
share one --out may run at once on different rows or --only-seeds (a core each), and --table-only
then makes the whole record from what they left. Before anything runs, each case's composed config
is checked against its SB3 hyperparameters key by key (scripts/benchmarks/zoo.py).

--peer sbx sets SBX (JAX, CPU) beside ours where zoo.SBX has the row (suite rows, cartpole's DQN): each
peer run on one core (XLA_FLAGS below, torch one thread), its JAX compile seconds reported apart from (and
included in) its wall time. A row named in --rows that the peer lacks runs ours alone.

The result is a record in results/' format (results/README.md): printed as tables, written to
<out>/record.json and, with --record, to that file (each row with the fingerprint of our config,
rl_hydra/verify/fingerprint.py), from which scripts/render_results.py renders the docs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# this folder's modules: Python puts a script's own folder first on sys.path
from minatar_sb3 import HP
from minatar_sb3 import our_overrides as minatar_overrides
from minatar_sb3 import peer_spec as minatar_peer
from zoo import EVAL_EPISODES, PEER_LABELS, PEERS, expected_config, mismatches, overrides, per_step, sb3_spec

from rl_hydra.runs.aggregate import eval_curve as logged_curve
from rl_hydra.runs.aggregate import interquartile_mean, median_interval
from rl_hydra.runs.metrics import read_metrics
from rl_hydra.runs.results import commit, dump, machine, rows_table, seeds_table
from rl_hydra.runs.run_dir import RunDirectory

ROOT = Path(__file__).resolve().parents[2]

RESULT = "BENCHMARK_RESULT "
# what the peer side imports (scripts/benchmarks/sb3_peer.py), installed by the bench extra
PEER_PACKAGES = {
    "sb3": {"stable_baselines3": "stable-baselines3", "sb3_contrib": "sb3-contrib"},
    "sbx": {"sbx": "sbx-rl", "jax": "jax[cpu]"},
}
PEER_NAMES = PEER_LABELS
PEER_DISTRIBUTIONS = {"sb3": ("stable-baselines3 / sb3-contrib", "stable-baselines3"), "sbx": ("SBX", "sbx-rl")}
# JAX on one core: XLA's CPU backend without its Eigen thread pool, one intra-op thread
ONE_CORE = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "JAX_PLATFORMS": "cpu",
}
TOPIC = {"cartpole": "benchmark", "suite": "suite", "minatar": "pixels", "atari": "pixels"}


@dataclass
class Case:
    id: str
    label: str
    ours: list[str]  # train.py overrides, without the seed
    peer: dict | None  # scripts/benchmarks/sb3_peer.py's spec; None: ours only
    steps: int
    zoo: object = None  # zoo.Zoo: what the composed config is checked against
    window: list[int] | None = None
    reference: float | None = None
    stop_at: float | None = None  # ours stops at the first evaluation averaging this; the peer's curve is read alike


# --- the sets of cases ---------------------------------------------------------------------------
def budget(steps: int) -> list[str]:
    return [
        f"train.total_steps={steps}",
        f"train.eval_every={steps}",
        f"train.checkpoint_every={steps}",
        "train.stop_at_return=null",
    ]


def cartpole_cases(args) -> list[Case]:
    from rl_hydra.errors import ConfigError

    table, name = PEERS[args.peer], PEER_NAMES[args.peer]
    lacking = [algo for algo in args.algos if f"{algo}_cartpole" not in table]
    if lacking:
        allowed = [algo for algo in ("dqn", "qr_dqn") if f"{algo}_cartpole" in table]
        raise ConfigError(
            f"--algos {' '.join(lacking)}: {name} has no CartPole run of it; "
            f"with --peer {args.peer} choose among: {', '.join(allowed)}"
        )
    cases = []
    for algo in args.algos:
        for regime, zoo in (("zoo", table[f"{algo}_cartpole"]), ("per_step", per_step(table[f"{algo}_cartpole"]))):
            steps = args.steps or zoo.steps
            cases.append(
                Case(
                    f"{algo}_{regime}",
                    f"{algo}, {zoo.source}, {steps:,} steps",
                    [f"algo={algo}", "env=cartpole", "~algo_env", *overrides(zoo), *budget(steps)],
                    sb3_spec(zoo, "CartPole-v1", steps),
                    steps,
                    zoo,
                )
            )
    # only by name (--rows qr_dqn_curves): both sides on the Zoo's values, evaluated every 2,500 steps, read at 500
    if "qr_dqn" in args.algos and "qr_dqn_curves" in (args.rows or []):
        zoo = table["qr_dqn_cartpole"]
        steps = args.steps or zoo.steps
        cases.append(
            Case(
                "qr_dqn_curves",
                f"qr_dqn, {zoo.source}, {steps:,} steps, evaluated every 2,500",
                ["algo=qr_dqn", "env=cartpole", "~algo_env", *overrides(zoo), *budget(steps), "train.eval_every=2500"],
                {**sb3_spec(zoo, "CartPole-v1", steps), "curve": {"every": 2500, "episodes": EVAL_EPISODES}},
                steps,
                zoo,
                stop_at=500.0,
            )
        )
    if "dqn" in args.algos:  # our preset stops at the first evaluation averaging 500; the peer runs its zoo budget
        steps = args.steps or table["dqn_cartpole"].steps
        cases.append(
            Case(
                "dqn_solve",
                f"time to solve: our DQN preset against {name}'s zoo run",
                ["algo=dqn", "env=cartpole", f"train.total_steps={steps}"],
                sb3_spec(table["dqn_cartpole"], "CartPole-v1", steps),
                steps,
            )
        )
    unknown = sorted(set(args.rows or []) - {case.id for case in cases})
    if unknown:
        known = dict.fromkeys([*(case.id for case in cases), *(["qr_dqn_curves"] if "qr_dqn" in args.algos else [])])
        raise ConfigError(f"--rows {' '.join(unknown)}: not cases of cartpole; choose among: {', '.join(known)}")
    return [case for case in cases if not args.rows or case.id in args.rows]


def suite_cases(args) -> list[Case]:
    from rl_hydra.commands.api import compose_train_config
    from rl_hydra.commands.suite import load_suite
    from rl_hydra.errors import ConfigError

    suite = load_suite(args.name)
    unknown = sorted(set(args.rows or []) - {r.name for r in suite.rows})
    if unknown:
        raise ConfigError(
            f"--rows {' '.join(unknown)}: not rows of suite {suite.name}; "
            f"choose among: {', '.join(r.name for r in suite.rows)}"
        )
    algos = sorted({r.algo for r in suite.rows})
    if set(args.algos) - set(algos):
        raise ConfigError(
            f"--algos {' '.join(sorted(set(args.algos) - set(algos)))}: no rows of suite {suite.name}; "
            f"choose among: {', '.join(algos)}"
        )
    rows = [
        r for r in suite.rows if (not args.rows or r.name in args.rows) and (not args.algos or r.algo in args.algos)
    ]
    table, name = PEERS[args.peer], PEER_NAMES[args.peer]
    alone = [r.name for r in rows if r.name not in table and r.name in (args.rows or [])]
    skipped = [r.name for r in rows if r.name not in table and r.name not in alone]
    if skipped:  # said once nothing refuses the command
        args.notices.append(f"no {name} counterpart, skipped: {', '.join(skipped)}")
    if alone:
        args.notices.append(f"no {name} counterpart, ours alone: {', '.join(alone)}")
    args.seeds = args.seeds or suite.seeds
    cases = []
    for row in (r for r in rows if r.name in table or r.name in alone):
        row.steps = args.steps or row.steps
        cfg = compose_train_config(*row.train_overrides())
        steps = cfg.train.total_steps
        zoo = table.get(row.name)
        ours, peer = row.train_overrides(), zoo and sb3_spec(zoo, cfg.env.id, steps)
        if args.window:  # steps/s between two env steps: our log rows must fall on both
            start, end = args.window
            if not cfg.algo.learning_starts <= start < end < steps:
                raise ConfigError(
                    f"--window {start} {end}: must lie after {row.name}'s learning_starts "
                    f"({cfg.algo.learning_starts}) and before its last step ({steps})"
                )
            ours = [*ours, f"train.log_every={math.gcd(start, end)}"]
            peer = peer and {**peer, "window": args.window}
        if peer and cfg.train.eval_every < steps:  # learning curves: the peer evaluates when our run does
            peer = {**peer, "curve": {"every": cfg.train.eval_every, "episodes": cfg.train.eval_episodes}}
        cases.append(Case(row.name, row.name, ours, peer, steps, zoo, window=args.window, reference=row.reference))
    return cases


def minatar_cases(args) -> list[Case]:
    cases = []
    for game in args.games:
        for algo in args.algos:
            job = {
                "algo": algo,
                "game": game,
                "steps": args.steps or 300_000,
                "warmup": args.learning_starts,
                "quantiles": args.quantiles,
                "eval_episodes": EVAL_EPISODES,
                "seed": 0,
            }
            name = f"{algo}{args.quantiles}" if algo == "qr_dqn" and args.quantiles != HP["quantiles"] else algo
            ours = [o for o in minatar_overrides(job) if not o.startswith("seed=")]
            cases.append(Case(f"{name}_{game}", f"{name}, {game}", ours, minatar_peer(job), job["steps"]))
    return cases


def atari_cases(args) -> list[Case]:
    """Batch 32 and one update every 4 env steps with the Nature CNN: --learning-starts random
    steps, then --steps timed ones (window: steps/s over those) with --num-envs envs stepped as
    --vectorization says. DQN against SB3's on the same preprocessing, ours without the dqn_atari
    preset (~algo_env), whose Dopamine values (no gradient clipping, Adam eps 1.5e-4) are not
    SB3's: the general-purpose DQN clips at 10, as SB3 does. IQN and Rainbow (ours only: SB3 has
    neither) run their Atari presets on the same budget."""
    from rl_hydra.errors import ConfigError

    warmup, steps, n = args.learning_starts, args.steps or 20_000, args.num_envs
    if warmup % n or steps % n or (n % 4 and 4 % n):
        raise ConfigError(
            f"--num-envs {n}: --learning-starts and --steps must be multiples of it, and it of 4 "
            "(or it a divisor of 4), so that the window's ends are vector steps at one update a 4 steps"
        )
    total = warmup + steps + 1  # the final evaluation falls after the window
    budget_keys = [
        f"algo.learning_starts={warmup}",
        f"buffer.capacity={args.capacity}",
        f"env.num_envs={n}",
        f"env.vectorization={args.vectorization}",
        f"train.total_steps={total}",
        f"train.eval_every={total}",
        "train.eval_episodes=1",
        f"train.checkpoint_every={total}",
        f"train.log_every={math.gcd(warmup, steps)}",
        "logger=[csv]",
        "checkpoint.save_buffer=false",
    ]
    dqn = [
        "algo=dqn",
        "env=atari",
        f"env.id={args.game}",
        "~algo_env",
        "network.encoder=nature_cnn",
        "network.hidden_sizes=[512]",
        "algo.batch_size=32",
        "algo.train_every=4",
        "algo.gradient_steps=1",
        "algo.optimizer.lr=1e-4",
        "algo.gamma=0.99",
        "algo.target_update_every=250",
        "algo.exploration.start=1.0",
        "algo.exploration.end=0.01",
        "algo.exploration.fraction=0.1",
        *budget_keys,
    ]
    # SB3 counts train_freq in vector steps and runs gradient_steps per phase: one update per 4 env steps
    train_freq, gradient_steps = (4 // n, 1) if n <= 4 else (1, n // 4)
    kwargs = dict(
        learning_rate=1e-4,
        buffer_size=args.capacity,
        learning_starts=warmup,
        batch_size=32,
        tau=1.0,
        gamma=0.99,
        train_freq=train_freq,
        gradient_steps=gradient_steps,
        target_update_interval=1000,
        exploration_fraction=0.1,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.01,
        max_grad_norm=10,
        optimize_memory_usage=True,
        replay_buffer_kwargs={"handle_timeout_termination": False},
    )
    window = [warmup, warmup + steps]
    peer = {
        "algo": "dqn",
        "policy": "CnnPolicy",
        "kwargs": kwargs,
        "steps": total,
        "window": window,
        "env": {"atari": args.game, "num_envs": n, "subprocesses": args.vectorization != "sync"},
    }
    game, envs = args.game.split("/")[-1], "" if n == 1 else f", {n} envs ({args.vectorization})"
    cases = []
    for algo in args.algos:
        ours = (
            dqn
            if algo == "dqn"
            else [f"algo={algo}", "env=atari", f"env.id={args.game}", f"algo_env={algo}_atari", *budget_keys]
        )
        suffix = "" if n == 1 else f"_{n}envs_{args.vectorization}"
        cases.append(
            Case(
                f"{algo}_{game}{suffix}",
                f"{algo}, {args.game}, {steps:,} timed steps{envs}",
                ours,
                peer if algo == "dqn" else None,
                total,
                window=window,
            )
        )
    return cases


CASES = {"cartpole": cartpole_cases, "suite": suite_cases, "minatar": minatar_cases, "atari": atari_cases}


def check(cases: list[Case]) -> list[str]:
    """'case: key ...' for each key where a case's composed config is not its SB3 hyperparameters."""
    from rl_hydra.commands.api import compose_train_config

    return [
        f"{case.id}: {line}"
        for case in cases
        if case.zoo is not None and case.peer is not None
        for line in mismatches(compose_train_config(*case.ours), case.zoo)
    ]


# --- running -------------------------------------------------------------------------------------
def digest(value) -> str:
    return hashlib.sha1(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def job_for(case: Case, side: str, seed: int, args) -> tuple[dict, Path]:
    """The worker's job and where its result is kept (named by what it runs, so a changed case runs anew)."""
    if side == "ours":
        job = {
            "overrides": [
                *case.ours,
                f"seed={seed}",
                "torch_threads=1",
                "train.progress=false",
                f"device={args.device}",
            ],
            "window": case.window,
        }
        key = f"{case.id}_{digest(job)}_seed{seed}"
        job["run_dir"] = str(args.out / "runs" / key)
    else:  # the same peer run serves every case that asks for it (cartpole's solve and zoo cases)
        job = {"spec": case.peer, "seed": seed, "eval_episodes": EVAL_EPISODES, "device": args.device}
        key = f"{case.peer['algo']}_{digest(job)}_seed{seed}"
    return job, args.out / side / f"{key}.json"


def run_side(case: Case, side: str, seed: int, args) -> dict | None:
    """The side's result, run in a fresh process (its error output printed if it fails: None), or
    the one an earlier call kept (`reused`)."""
    job, path = job_for(case, side, seed, args)
    if path.is_file():
        return {**json.loads(path.read_text()), "reused": True}
    if side == "ours":
        shutil.rmtree(job["run_dir"], ignore_errors=True)  # an unfinished run of an earlier call
    env = {**os.environ, **ONE_CORE, "HYDRA_FULL_ERROR": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", side, json.dumps(job)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT)]
    if proc.returncode or not lines:
        print(
            f"seed {seed}: {side} {case.id} failed (exit status {proc.returncode}):\n{proc.stderr[-3000:]}",
            file=sys.stderr,
        )
        return None
    result = {
        **json.loads(lines[-1][len(RESULT) :]),
        "load": os.getloadavg()[0],
        "finished": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_all(cases: list[Case], seeds: list[int], args) -> list[str]:
    """For each seed, each case: ours and the peer back to back, the peer first on odd seeds; the runs that failed.
    A line says how many runs there are, and one more as each finishes."""
    plan = []
    for seed in seeds:
        for case in cases:
            sides = [s for s in ("ours", "peer") if s in args.sides and (s == "ours" or case.peer)]
            plan += [(seed, case, side) for side in (sides if seed % 2 == 0 else sides[::-1])]
    print(f"{len(plan)} runs, one after another; a line as each finishes", file=sys.stderr, flush=True)
    failed = []
    for done, (seed, case, side) in enumerate(plan, start=1):
        result = run_side(case, side, seed, args)
        if result is None:
            failed.append(f"seed {seed}: {side} {case.id}")
            how = "failed (above)"
        elif result.get("reused"):
            how = "found, reused"
        else:
            got = result.get("eval_return")
            how = f"{result['wall_s']:,.1f} s" + (f", return {got:,.1f}" if got is not None else "")
        print(f"  {done}/{len(plan)} seed {seed}: {side} {case.id}: {how}", file=sys.stderr, flush=True)
    return failed


def missing_peer(cases: list[Case], args) -> str | None:
    """One line naming the peer's packages that cannot be imported when a peer run is due, with the
    pip command that installs them; None when nothing is missing or no peer runs."""
    import importlib

    if args.table_only or "peer" not in args.sides or not any(case.peer for case in cases):
        return None
    missing = []
    for module, package in PEER_PACKAGES[args.peer].items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(package)
    if not missing:
        return None
    return (
        f"the {PEER_NAMES[args.peer]} side needs {' and '.join(missing)}, which cannot be imported: "
        'pip install -e ".[bench]" '
        f"(or --sides ours to run ours alone)"
    )


def worker(side: str, job: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    if side == "peer":
        import sb3_peer

        from rl_hydra.runs.rng import spawn_seeds

        evaluation = spawn_seeds(job["seed"]).evaluation  # our run's evaluation stream: the same initial states
        return sb3_peer.run(job["spec"], job["seed"], job["eval_episodes"], job["device"], evaluation)

    from rl_hydra.commands.api import train

    start = time.perf_counter()
    train(*job["overrides"], run_dir=job["run_dir"])
    wall = time.perf_counter() - start
    run_dir = Path(job["run_dir"])
    summary = json.loads((run_dir / "summary.json").read_text())
    result = {
        "wall_s": wall,
        "steps": summary["global_step"],
        "updates": summary.get("updates"),
        "eval_return": summary["eval_return_mean"],
        "solved_at_step": summary.get("solved_at_step"),
    }
    if job.get("window"):
        rows = read_metrics(RunDirectory(run_dir)).rows  # streamed and checked as a record is read
        elapsed = {int(r["step"]): float(r["time/elapsed_s"]) for r in rows if r.get("time/elapsed_s")}
        start_step, end_step = job["window"]
        result["window_sps"] = (end_step - start_step) / (elapsed[end_step] - elapsed[start_step])
    return result


# --- the record ----------------------------------------------------------------------------------
def per_seed_values(case: Case, seeds: list[int], args) -> dict[str, list]:
    found = {side: [] for side in ("ours", "peer")}
    for seed in seeds:
        for side in found:
            path = job_for(case, side, seed, args)[1] if side == "ours" or case.peer else None
            found[side].append(json.loads(path.read_text()) if path and path.is_file() else None)
    values = {}
    for side, results in found.items():
        values[f"{side}_return"] = [r and r.get("eval_return") for r in results]
        values[f"{side}_wall"] = [r and r["wall_s"] for r in results]
        values[f"{side}_sps"] = [r and r.get("window_sps", r["steps"] / r["wall_s"]) for r in results]
    values["peer_compile"] = [r and r.get("compile_s") for r in found["peer"]]  # SBX: JAX's compile seconds
    values["ratio"] = [o / p if o and p else None for o, p in zip(values["ours_wall"], values["peer_wall"])]
    values["solved_at"] = [r and r.get("solved_at_step") for r in found["ours"]]
    # the 1-minute load as the seed's later side finished: a side run under load reads slower
    pairs = zip(found["ours"], found["peer"])
    values["load"] = [max((r["load"] for r in pair if r and "load" in r), default=None) for pair in pairs]
    if case.peer and case.peer.get("curve"):  # each seed's evaluation returns at curve_steps(case)
        steps = curve_steps(case)
        runs = [Path(job_for(case, "ours", seed, args)[0]["run_dir"]) for seed in seeds]
        curves = {"ours": [eval_curve(run) for run in runs], "peer": [r and r.get("curve") for r in found["peer"]]}
        for side, side_curves in curves.items():
            values[f"{side}_curve"] = [
                c["returns"] if c and same_steps(c["steps"], steps) else None for c in side_curves
            ]
        for side in ("ours", "peer") if case.stop_at is not None else ():  # each side read as an early stop would
            solved = [
                next((step for step, r in zip(steps, curve) if r >= case.stop_at), None) if curve else None
                for curve in values[f"{side}_curve"]
            ]
            values[f"{side}_solved_at"] = solved
            values[f"{side}_stopped_return"] = [
                None if curve is None else case.stop_at if at is not None else curve[-1]
                for curve, at in zip(values[f"{side}_curve"], solved)
            ]
    return {key: column for key, column in values.items() if any(v is not None for v in column)}


def same_steps(found: list[int], expected: list[int]) -> bool:
    """Whether a curve was evaluated at the expected steps; the last may fall later (SB3 ends a run on a
    whole number of train_freq steps: 50,176 for 50,000 at train_freq 256)."""
    return found[:-1] == expected[:-1] and len(found) == len(expected) and found[-1] >= expected[-1]


def curve_steps(case: Case) -> list[int]:
    """The env steps at which both sides evaluate: every `curve.every`, and the last step."""
    every = case.peer["curve"]["every"]
    return [*range(every, case.steps, every), case.steps]


def eval_curve(run_dir: Path) -> dict | None:
    """{"steps", "returns"}: the evaluations our run logged (metrics.csv), None before it has any."""
    if not (run_dir / "summary.json").is_file():
        return None
    steps, returns = logged_curve(run_dir)  # streamed and checked as a record is read
    return {"steps": steps.tolist(), "returns": returns.tolist()}


def summary_of(per_seed: dict) -> dict:
    summary = {}
    for key, column in per_seed.items():
        values = [v for v in column if v is not None]
        if values and all(isinstance(v, (int, float)) for v in values):  # not a curve
            summary[key] = statistics.median(values)
    ratios = [v for v in per_seed.get("ratio", []) if v is not None]
    if ratios:
        summary.update(ratio_min=min(ratios), ratio_max=max(ratios))
    for side in ("ours", "peer"):
        values = [v for v in per_seed.get(f"{side}_return", []) if v is not None]
        if values:
            summary[f"{side}_iqm"] = interquartile_mean(values)
            if len(values) > 1:
                summary[f"{side}_return_low"], summary[f"{side}_return_high"] = median_interval(values)
    return summary


def seed_columns(peer: str = "SB3") -> list[tuple]:
    """Each seed's columns, the peer named; SBX's add its JAX compile seconds (inside its wall)."""
    return [
        ("ours return", "{ours_return:,.1f}"),
        (f"{peer} return", "{peer_return:,.1f}"),
        ("ours wall (s)", "{ours_wall:,.1f}"),
        (f"{peer} wall (s)", "{peer_wall:,.1f}"),
        *([(f"{peer} compile (s)", "{peer_compile:,.1f}")] if peer == "SBX" else []),
        (f"wall ours / {peer}", "{ratio:.2f}"),
        ("ours steps/s", "{ours_sps:,.1f}"),
        (f"{peer} steps/s", "{peer_sps:,.1f}"),
        ("load (1 min)", "{load:.1f}"),
    ]


def row_columns(peer: str = "SB3") -> list[tuple]:
    """The rows' table: each median return with its 95% bootstrap interval over the seeds (one seed: none)."""
    return [
        (
            "ours return (95% interval)",
            ["{ours_return:,.1f} ({ours_return_low:,.1f} to {ours_return_high:,.1f})", "{ours_return:,.1f}"],
        ),
        (
            f"{peer} return (95% interval)",
            ["{peer_return:,.1f} ({peer_return_low:,.1f} to {peer_return_high:,.1f})", "{peer_return:,.1f}"],
        ),
        *seed_columns(peer)[2:],
    ]


COLUMNS, ROW_COLUMNS = seed_columns(), row_columns()


def seeds_load(rows: list[dict]) -> dict:
    """The record's load: the range over its seeds, as each finished (a --table-only record's own
    moment says nothing of the runs'), where the results hold it."""
    loads = [v for row in rows for v in row["per_seed"].get("load", []) if v is not None]
    return {"load": f"{min(loads):.1f} to {max(loads):.1f} (1 min, as each seed finished)"} if loads else {}


def record(cases: list[Case], seeds: list[int], args, argv: list[str], load_before: float) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    label, distribution = PEER_DISTRIBUTIONS[args.peer]
    try:
        peer = {"name": label, "version": version(distribution)}
        if args.peer == "sbx":  # and the JAX it ran on
            peer["version"] += f" (jax {version('jax')})"
    except PackageNotFoundError:
        peer = None
    columns, row_cols = seed_columns(PEER_NAMES[args.peer]), row_columns(PEER_NAMES[args.peer])
    rows, notes = [], []
    for case in cases:
        per_seed = per_seed_values(case, seeds, args)
        done = sum(v is not None for v in per_seed.get("ours_return", []))
        rows.append(
            {
                "id": case.id,
                "label": case.label,
                "steps": case.steps,
                "seeds_done": f"{done}/{len(seeds)}",
                "reference": case.reference,
                "overrides": case.ours,
                "per_seed": per_seed,
                "summary": summary_of(per_seed),
            }
        )
        if "ours_curve" in per_seed or "peer_curve" in per_seed:
            rows[-1]["curve_steps"] = curve_steps(case)
        if "solved_at" in per_seed:
            rows[-1]["seed_columns"] = [
                *({"header": h, "format": f} for h, f in columns),
                {"header": "solved at step", "format": "{solved_at:,}"},
            ]
        if case.stop_at is not None:  # both sides as an early stop at case.stop_at would read them
            peer_name = PEER_NAMES[args.peer]
            rows[-1]["seed_columns"] = [
                *({"header": h, "format": f} for h, f in columns[:2]),
                {"header": "ours first at 500", "format": "{ours_solved_at:,}"},
                {"header": f"{peer_name} first at 500", "format": "{peer_solved_at:,}"},
                {"header": "ours, stopped there", "format": "{ours_stopped_return:,.1f}"},
                {"header": f"{peer_name}, stopped there", "format": "{peer_stopped_return:,.1f}"},
                *({"header": h, "format": f} for h, f in columns[2:]),
            ]
        if case.zoo is not None:
            notes += [f"{case.id}: {note}" for note in expected_config(case.zoo)[1]]
    name = args.record.stem if args.record else f"{args.set}_{args.out.name}"
    # without --table-only the command makes the same record (finished runs are skipped) and makes it anew
    remade = [arg for arg in argv if arg != "--table-only"]
    return {
        "name": name,
        "title": args.title or f"benchmark.py {args.set}: ours against {PEER_NAMES[args.peer]}",
        "topic": args.topic or TOPIC[args.set],
        "status": "adopted",
        "reason": None,
        "command": "python scripts/benchmarks/benchmark.py " + shlex.join(remade),
        "overrides": [],
        "seeds": seeds,
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "machine": {**machine(load_before, args.device), **seeds_load(rows)},
        "peer": peer if "peer" in args.sides else None,
        "source": "scripts/benchmarks/benchmark.py",
        "notes": notes,
        "columns": [
            {"header": "case", "format": "{label}", "align": "left"},
            {"header": "seeds", "format": "{seeds_done}"},
            *({"header": h, "format": f} for h, f in row_cols),
        ],
        "seed_columns": [{"header": h, "format": f} for h, f in columns],
        "rows": rows,
        **({"plot": curves(PEER_NAMES[args.peer], rows)} if any("curve_steps" in row for row in rows) else {}),
    }


def curves(peer: str = "SB3", rows: list[dict] = ()) -> dict:
    """The plot of the rows' curves: a panel for each row that has them (a row ours alone without
    evaluations during training has none)."""
    panels = [{"title": row["id"], "rows": [row["id"]]} for row in rows if "curve_steps" in row]
    return {
        **({"panels": panels} if panels else {}),
        "curves": [["ours_curve", "ours"], ["peer_curve", peer]],
        "xlabel": "env steps",
        "ylabel": "evaluation return",
        "caption": "Greedy evaluation return during training, both sides at the same steps: a thin line per "
        "seed, a thick one through the seeds' medians.",
    }


CURVES = curves()


# --- the command ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("set", choices=tuple(CASES))
    parser.add_argument("name", nargs="?", help="suite: a conf/suite/ name")
    parser.add_argument("--seeds", type=int, help="seeds 0..N-1 (default: 3; suite: the suite's own)")
    parser.add_argument("--only-seeds", type=int, nargs="+", help="run only these of the seeds; the table shows all")
    parser.add_argument("--sides", nargs="+", default=["ours", "peer"], choices=("ours", "peer"))
    parser.add_argument(
        "--peer",
        default="sb3",
        choices=tuple(PEER_NAMES),
        help="suite and cartpole: the peer side, SB3 / sb3-contrib or SBX (JAX; zoo.SBX's rows: no QR-DQN)",
    )
    parser.add_argument("--steps", type=int, help="every case's budget (atari: the timed steps)")
    parser.add_argument("--rows", nargs="+", help="suite: only these rows (<algo>_<env>); cartpole: these cases")
    parser.add_argument(
        "--window",
        type=int,
        nargs=2,
        metavar=("START", "END"),
        help="suite: also time the env steps from START to END (steps/s; ours logs there)",
    )
    parser.add_argument(
        "--algos",
        nargs="+",
        help="cartpole: dqn qr_dqn; minatar: dqn qr_dqn iqn rainbow; "
        "atari: dqn iqn rainbow; suite: only these algos' rows",
    )
    parser.add_argument("--games", nargs="+", default=["Breakout", "SpaceInvaders"], help="minatar games")
    parser.add_argument("--quantiles", type=int, default=HP["quantiles"], help="minatar: QR-DQN's, both sides")
    parser.add_argument("--learning-starts", type=int, help="minatar (5000) and atari (1000): random warm-up steps")
    parser.add_argument("--game", default="ALE/Pong-v5", help="atari")
    parser.add_argument("--capacity", type=int, default=50_000, help="atari: replay capacity, both sides")
    parser.add_argument("--num-envs", type=int, default=1, help="atari: envs stepped together, both sides")
    parser.add_argument(
        "--vectorization",
        default="sync",
        choices=("sync", "async", "envpool"),
        help="atari: ours as env.vectorization; SB3 steps its envs in subprocesses unless sync",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="where runs and results go (default: outputs/benchmarks/<set>)")
    parser.add_argument("--record", type=Path, help="also write the record here (results/<name>.json)")
    parser.add_argument("--table-only", action="store_true", help="the record from the results found; run nothing")
    parser.add_argument(
        "--no-fingerprint",
        dest="fingerprint",
        action="store_false",
        help="--record without our configs' fingerprints (rl_hydra/verify/fingerprint.py): runs made by other code",
    )
    parser.add_argument("--title", help="the record's title (default: the set's)")
    parser.add_argument("--topic", help="the record's docs page (results/README.md; default: the set's)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    return parser


def with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The options whose default depends on the set, filled in."""
    cartpole = [algo for algo in ("dqn", "qr_dqn") if f"{algo}_cartpole" in PEERS[args.peer]]  # the peer's
    args.algos = args.algos or {"cartpole": cartpole, "minatar": ["dqn"], "atari": ["dqn"]}.get(args.set, [])
    args.learning_starts = args.learning_starts or (HP["warmup"] if args.set == "minatar" else 1000)
    args.out = args.out or ROOT / "outputs" / "benchmarks" / (args.name or args.set)
    args.notices = []  # lines for stderr once the command is not refused
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        print(RESULT + json.dumps(worker(argv[1], json.loads(argv[2]))), flush=True)
        return
    parser = build_parser()
    args = with_defaults(parser.parse_args(argv))
    if args.set == "suite" and not args.name:
        parser.error("suite needs a suite's name, e.g. discrete_zoo")
    if args.peer != "sb3" and args.set not in ("suite", "cartpole"):
        parser.error(f"--peer {args.peer}: only suite and cartpole rows have its settings (scripts/benchmarks/zoo.py)")
    from rl_hydra.errors import ConfigError

    try:
        cases = CASES[args.set](args)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    seeds = list(range(args.seeds or 3))
    outside = sorted(set(args.only_seeds or []) - set(seeds))
    if outside:
        parser.error(
            f"--only-seeds {' '.join(map(str, outside))}: --seeds {len(seeds)} runs seeds 0 to {len(seeds) - 1}"
        )
    sideless = [case.id for case in cases if case.peer is None]
    if args.sides == ["peer"] and sideless:
        parser.error(f"{', '.join(sideless)}: no SB3 side to run; add --sides ours")
    found = check(cases) if "peer" in args.sides else []  # our configs against SB3's values: no SB3 needed
    missing = None if found else missing_peer(cases, args)
    if missing:  # one line
        print(f"error: {missing}", file=sys.stderr)
        sys.exit(2)
    for notice in args.notices:
        print(notice, file=sys.stderr)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if found:
        print(
            f"error: our config and {PEER_NAMES[args.peer]}'s hyperparameters differ (above); nothing was run",
            file=sys.stderr,
        )
        sys.exit(2)
    load_before = os.getloadavg()[0]
    chosen = [s for s in seeds if not args.only_seeds or s in args.only_seeds]
    failed = [] if args.table_only else run_all(cases, chosen, args)
    result = record(cases, seeds, args, argv, load_before)
    if args.record and "ours" in args.sides and args.fingerprint:  # our configs as today's code trains them
        from rl_hydra.verify.fingerprint import fingerprint  # torch: not in a peer's worker

        for row, case in zip(result["rows"], cases):
            row["fingerprint"] = fingerprint(case.ours)
    text = dump(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "record.json").write_text(text)
    if args.record:
        args.record.write_text(text)
    print(rows_table(result))
    for row in result["rows"]:
        print(f"\n{row['label']}\n\n{seeds_table(result, row['id'])}")
    if failed:
        print(f"error: runs that failed: {'; '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
