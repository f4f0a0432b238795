"""A seed sweep's wall: packed (`hydra/launcher=packed`) against the same jobs one after another, and
against joblib n_jobs=2.

    python scripts/benchmarks/packed_sweep.py [--presets dqn_cartpole sac_pendulum ...] [--seeds 5 10]
        [--steps 20000] [--repeats 3] [--record results/packed_sweep.json]
    python scripts/benchmarks/packed_sweep.py [overrides ...] --updates [--presets dqn_cartpole] [--seeds 2 5 10 20]
    python scripts/benchmarks/packed_sweep.py --returns [--presets dqn_cartpole ...] [--seeds 5] [--record ...]
    python scripts/benchmarks/packed_sweep.py --peer sbx [--presets dqn_cartpole sac_pendulum ...] [--seeds 5]

For each preset and seed count it runs `python train.py -m <preset> seed=0,...,K-1` with the preset's
own budget cut to `--steps` (default: each preset's in STEPS, SBX_STEPS with --peer; no early stop,
the preset's evaluation schedule), as:

- packed: `hydra/launcher=packed`, one pack of K members, pinned to one core (taskset -c 0);
- solo: the basic launcher, the K jobs one after another in one process, pinned to the same core;
- joblib: `hydra/launcher=joblib hydra.launcher.n_jobs=2`, on both cores.

`--updates` times the update alone instead: K members' round of updates, each agent's own one after
another against the pack's batched update (rl_hydra/loops/pack_updates.py), on batches sampled before
the clock starts, one thread; the ratio is batched / alone, the median over rounds.

`--returns` asks whether a member learns what the same seed learns alone: each preset as it is (its own
budget and early stop), K seeds packed on one core and the same K seeds as solo jobs on the other, at the
same time; each seed's final evaluation, each side's median with its 95% bootstrap interval over seeds, and
"level" where each side's median lies inside the other's interval (or the packed one is higher).

`--peer sbx` sets the sweep against SBX (JAX) on this 2-core machine: both sides on SBX's run of the
preset (scripts/benchmarks/zoo.py SBX: the same values, checked key by key) cut to the same steps, only the
final evaluation (10 episodes); ours as two packs on the two cores (pack_size ceil(K/2), n_jobs=2), SBX's
K seeds two at a time, each seed a process of its own (benchmark.py's peer worker, one thread each, as
its records run SBX). The ratio is ours / SBX.

The sides alternate within a repeat, their order rotating. Each prints its wall (s), its peak memory
(the largest process's maximum RSS) and the median over its seeds of the final evaluation's return; a
ratio is packed (or joblib) / solo in the same repeat, and a figure the median over the repeats.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PRESETS = {
    "dqn_cartpole": ["algo=dqn", "env=cartpole"],
    "qr_dqn_cartpole": ["algo=qr_dqn", "env=cartpole"],
    "iqn_cartpole": ["algo=iqn", "env=cartpole"],
    "sac_pendulum": ["algo=sac", "env=pendulum"],
    "tqc_pendulum": ["algo=tqc", "env=pendulum"],
    "td3_pendulum": ["algo=td3", "env=pendulum"],
    "crossq_pendulum": ["algo=crossq", "env=pendulum"],
    "droq_pendulum": ["algo=droq", "env=pendulum"],
}
# the wall sweeps' default budgets: a couple of thousand updates past each preset's learning_starts
# (TD3's is 10k steps), as each preset's own budget would take most of an hour a side
STEPS = {
    "dqn_cartpole": 20_000,
    "qr_dqn_cartpole": 20_000,
    "iqn_cartpole": 20_000,
    "sac_pendulum": 2_000,
    "tqc_pendulum": 2_000,
    "td3_pendulum": 11_000,
    "crossq_pendulum": 2_000,
    "droq_pendulum": 600,
}
# --peer sbx's: longer, so that JAX's compile (a few seconds a run, in SBX's wall) is a small part of it
SBX_STEPS = {**STEPS, "sac_pendulum": 5_000, "tqc_pendulum": 5_000, "td3_pendulum": 15_000, "crossq_pendulum": 5_000}
SBX_STEPS["droq_pendulum"] = 1_000
SIDES = {
    "packed": (["taskset", "-c", "0"], ["hydra/launcher=packed"]),
    "solo": (["taskset", "-c", "0"], []),
    "joblib": ([], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]),
}


def sweep(side: str, preset: str, seeds: int, steps: int, folder: Path) -> dict:
    """One side's sweep in a fresh process: {wall, rss_mb, return}."""
    pin, launcher = SIDES[side]
    overrides = [*PRESETS[preset], *launcher, f"train.total_steps={steps}", "train.stop_at_return=null"]
    return timed_sweep(pin, overrides, seeds, folder / f"{side}_{preset}_{seeds}")


def timed_sweep(pin: list[str], overrides: list[str], seeds: int, sweep_dir: Path) -> dict:
    """`train.py -m <overrides> seed=0,...,K-1` in a fresh process (pinned by `pin`): its wall, its largest
    process's peak RSS and the median over its jobs of the final evaluation's return."""
    import json

    command = [*pin, sys.executable, str(ROOT / "train.py"), "-m", *overrides]
    command += [f"seed={','.join(map(str, range(seeds)))}", "train.progress=false", "logger=[]"]
    command += [f"hydra.sweep.dir={sweep_dir}"]
    measure = "import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); " + (
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
    )
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", measure, *command],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(overrides)} x{seeds} failed:\n{done.stderr[-3000:]}")
    returns = [json.loads(p.read_text())["eval_return_mean"] for p in sweep_dir.glob("*/summary.json")]
    assert len(returns) == seeds, (overrides, len(returns))
    rss = int(done.stderr.strip().splitlines()[-1]) / 1024
    shutil.rmtree(sweep_dir)
    return {"wall": wall, "rss_mb": rss, "return": statistics.median(returns)}


def update_ratio(preset: str, members: int, overrides: list[str], rounds: int = 5, updates: int = 40) -> dict:
    """{alone, batched} ms for one round of `members` updates, and their ratio (medians over rounds)."""
    import copy

    import torch

    from rl_hydra.build import ProcessSettings, build_components, pack_updates, process_settings
    from rl_hydra.commands.api import compose_train_config
    from rl_hydra.loops.pack import each_alone
    from rl_hydra.loops.steps import UpdateWanted

    agents, batches = [], []
    for seed in range(members):
        cfg = compose_train_config(*PRESETS[preset], f"seed={seed}", *overrides)
        with process_settings(cfg):
            agent, env, buffer = build_components(cfg, torch.device("cpu"))
            obs, _ = env.reset(seed=seed)
            for _ in range(max(300, agent.batch_size)):
                actions = env.action_space.sample()
                next_obs, rewards, terminated, truncated, _ = env.step(actions)
                buffer.add(obs, actions, rewards, next_obs, terminated, truncated)
                obs = next_obs
            env.close()
        agents.append(agent)
        batches.append(next(iter(buffer.sample_batches(agent.batch_size, 1))))
    sides = {
        "alone": (each_alone, [copy.deepcopy(a) for a in agents]),
        "batched": (pack_updates(fast_paths=True, min_members=2), agents),
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    with process_settings(ProcessSettings(seed=0, torch_threads=1)):  # one thread, denormals flushed; put back
        for round_ in range(rounds):
            for side in list(sides)[round_ % 2 :] + list(sides)[: round_ % 2]:
                update, own = sides[side]
                wanted = [UpdateWanted(agent, batch) for agent, batch in zip(own, batches)]
                for _ in range(5):
                    update(wanted)
                start = time.perf_counter()
                for _ in range(updates):
                    update(wanted)
                times[side].append((time.perf_counter() - start) / updates * 1e3)
    alone, batched = statistics.median(times["alone"]), statistics.median(times["batched"])
    return {
        "alone": alone,
        "batched": batched,
        "ratio": statistics.median(b / a for a, b in zip(times["alone"], times["batched"])),
    }


def returns_sweeps(preset: str, seeds: int, folder: Path) -> dict[str, list[float]]:
    """The preset's K seeds packed (core 0) and solo (core 1) at once: each side's final returns by seed."""
    import json

    running = {}
    for side, core in (("packed", "0"), ("solo", "1")):
        sweep_dir = folder / f"returns_{side}_{preset}"
        command = ["taskset", "-c", core, sys.executable, str(ROOT / "train.py"), "-m", *PRESETS[preset]]
        command += [*SIDES[side][1], f"seed={','.join(map(str, range(seeds)))}", "train.progress=false", "logger=[]"]
        command += [f"hydra.sweep.dir={sweep_dir}", "hydra.sweep.subdir=${seed}"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        running[side] = (
            subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
            sweep_dir,
        )
    returns = {}
    for side, (process, sweep_dir) in running.items():
        _, stderr = process.communicate()
        if process.returncode != 0:
            raise SystemExit(f"{side} {preset} x{seeds} failed:\n{stderr.decode()[-3000:]}")
        summaries = {int(p.parent.name): json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}
        returns[side] = [round(summaries[seed]["eval_return_mean"], 1) for seed in range(seeds)]
        returns[f"{side}_steps"] = [summaries[seed]["global_step"] for seed in range(seeds)]
    return returns


def returns_row(preset: str, seeds: int, returns: dict[str, list[float]]) -> dict:
    from rl_hydra.runs.aggregate import median_interval

    summary: dict = {}
    for side in ("packed", "solo"):
        low, high = median_interval(returns[side])
        summary.update({side: statistics.median(returns[side]), f"{side}_low": low, f"{side}_high": high})
        summary[f"{side}_steps"] = statistics.median(returns[f"{side}_steps"])
    packed, solo = summary["packed"], summary["solo"]
    inside = (
        summary["solo_low"] <= packed <= summary["solo_high"]
        and summary["packed_low"] <= solo <= summary["packed_high"]
    )
    summary["verdict"] = "level" if inside else "packed higher" if packed > solo else "packed lower"
    return {"id": f"{preset}_{seeds}", "label": f"{preset}, {seeds} seeds", "per_seed": returns, "summary": summary}


def sbx_overrides(preset: str, steps: int) -> tuple[list[str], dict]:
    """Our sweep's overrides on SBX's run of `preset` (refused where any value differs) and SBX's worker job."""
    import benchmark
    import zoo

    from rl_hydra.commands.api import compose_train_config

    run = zoo.SBX[preset]
    ours = [*PRESETS[preset], "~algo_env", *zoo.overrides(run), *benchmark.budget(steps)]
    ours += [f"train.eval_episodes={zoo.EVAL_EPISODES}"]
    wrong = zoo.mismatches(compose_train_config(*ours), run)
    if wrong:
        raise SystemExit(f"{preset}: our config is not SBX's run: {wrong[0]}")
    cfg = compose_train_config(*ours)
    job = {"spec": zoo.sb3_spec(run, cfg.env.id, steps), "eval_episodes": zoo.EVAL_EPISODES, "device": "cpu"}
    return ours, job


def sbx_sides(preset: str, seeds: int, steps: int, folder: Path) -> dict:
    """Ours (two packs, n_jobs=2) and SBX (K seeds, two processes at a time): {side: {wall, return}}, and
    SBX's compile seconds (the median over its seeds)."""
    import json
    import math

    import benchmark

    ours, job = sbx_overrides(preset, steps)
    ours += ["hydra/launcher=packed", f"hydra.launcher.pack_size={math.ceil(seeds / 2)}", "hydra.launcher.n_jobs=2"]
    got = {"ours": timed_sweep([], ours, seeds, folder / f"sbx_ours_{preset}_{seeds}")}

    env = {**os.environ, **benchmark.ONE_CORE, "PYTHONPATH": str(ROOT)}
    worker = [sys.executable, str(Path(benchmark.__file__)), "--worker", "peer"]
    waiting, running, results = list(range(seeds)), [], []
    start = time.perf_counter()
    while waiting or running:
        while waiting and len(running) < 2:
            seed = waiting.pop(0)
            command = [*worker, json.dumps({**job, "seed": seed})]
            running.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        process = running.pop(0)
        stdout, stderr = process.communicate()
        lines = [line for line in stdout.decode().splitlines() if line.startswith(benchmark.RESULT)]
        if process.returncode or not lines:
            raise SystemExit(f"SBX {preset} failed:\n{stderr.decode()[-3000:]}")
        results.append(json.loads(lines[-1][len(benchmark.RESULT) :]))
    got["sbx"] = {
        "wall": time.perf_counter() - start,
        "return": statistics.median(r["eval_return"] for r in results),
        "compile": statistics.median(r["compile_s"] for r in results),
    }
    return got


def sbx_row(preset: str, seeds: int, steps: int, repeats: list[dict]) -> dict:
    per_seed = {
        "ours": [round(r["ours"]["wall"], 1) for r in repeats],
        "sbx": [round(r["sbx"]["wall"], 1) for r in repeats],
        "ratio": [round(r["ours"]["wall"] / r["sbx"]["wall"], 2) for r in repeats],
        "ours_return": [round(r["ours"]["return"], 1) for r in repeats],
        "sbx_return": [round(r["sbx"]["return"], 1) for r in repeats],
        "sbx_compile": [round(r["sbx"]["compile"], 1) for r in repeats],
    }
    summary = {key: statistics.median(values) for key, values in per_seed.items()}
    label = f"{preset}, {seeds} seeds, {steps:,} steps"
    return {"id": f"{preset}_{seeds}", "label": label, "per_seed": per_seed, "summary": summary}


def write_sbx_record(args, rows: list[dict], load_before: float, argv: list[str]) -> None:
    import zoo

    record = {
        **record_head(args, load_before, argv, seeds=list(range(args.repeats))),
        "title": "A seed sweep packed on this 2-core machine, against SBX's seeds two at a time",
        "peer": {"name": "SBX", "version": sbx_version()},
        "notes": [
            "Both sides run SBX's values for the preset (scripts/benchmarks/zoo.py SBX, checked key by key), no "
            "early stop, one final evaluation of 10 episodes. Ours: hydra/launcher=packed, two packs "
            "(pack_size ceil(K/2), n_jobs=2), one torch thread each. SBX: the K seeds two at a time, each in a "
            "process of its own on one thread; its wall includes JAX's compile (the compile column, the median "
            "over seeds of one run's). The return is the median over seeds of the final evaluation.",
            *zoo.SBX_NOTES,
        ],
        "per": "repeat",
        "columns": [
            {"header": "sweep", "format": "{label}", "align": "left"},
            {"header": "ours packed, 2 packs (s)", "format": "{ours:.1f}"},
            {"header": "SBX, 2 at a time (s)", "format": "{sbx:.1f}"},
            {"header": "ours / SBX", "format": "{ratio:.2f}"},
            {"header": "SBX compile a run (s)", "format": "{sbx_compile:.1f}"},
            {"header": "return ours / SBX (median of seeds)", "format": "{ours_return:.1f} / {sbx_return:.1f}"},
        ],
        "seed_columns": [
            {"header": "ours (s)", "format": "{ours:.1f}"},
            {"header": "SBX (s)", "format": "{sbx:.1f}"},
            {"header": "ours / SBX", "format": "{ratio:.2f}"},
        ],
        "rows": rows,
    }
    write(args.record, record)


def sbx_version() -> str:
    from importlib.metadata import version

    return f"{version('sbx-rl')} (jax {version('jax')})"


def record_head(args, load_before: float, argv: list[str], seeds: list[int]) -> dict:
    """The fields every record of this script has: its name, command, seeds, commit, date and machine."""
    import datetime

    from rl_hydra.runs.results import commit, machine

    return {
        "name": args.record.stem,
        "topic": "sweeps",
        "status": "adopted",
        "reason": None,
        "command": "python scripts/benchmarks/packed_sweep.py " + " ".join(argv),
        "overrides": [],
        "seeds": seeds,
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "machine": machine(load_before, "cpu"),
        "peer": None,
    }


def write(path: Path, record: dict) -> None:
    from rl_hydra.runs.results import dump

    path.write_text(dump(record))
    print(f"wrote {path}")


def write_returns_record(args, rows: list[dict], load_before: float, argv: list[str]) -> None:
    record = {
        **record_head(args, load_before, argv, seeds=list(range(max(args.seeds)))),
        "title": "A pack's members learn what the same seeds learn alone: each preset's own budget, packed and solo",
        "notes": [
            "Each preset as it is (its budget, evaluation schedule and early stop). Packed: hydra/launcher=packed, "
            "one pack of all seeds on core 0 (the DQN family's batched update from 4 members on); solo: the same "
            "seeds one after another on core 1, at the same time. The return is each run's final evaluation; the "
            "interval the 95% percentile bootstrap of the median over seeds."
        ],
        "per": "seed",
        "columns": [
            {"header": "sweep", "format": "{label}", "align": "left"},
            {
                "header": "packed: median return [95% interval]",
                "format": "{packed:.1f} [{packed_low:.1f}, {packed_high:.1f}]",
            },
            {"header": "solo: median return [95% interval]", "format": "{solo:.1f} [{solo_low:.1f}, {solo_high:.1f}]"},
            {"header": "steps packed / solo (median)", "format": "{packed_steps:,.0f} / {solo_steps:,.0f}"},
            {"header": "returns", "format": "{verdict}"},
        ],
        "seed_columns": [
            {"header": "packed", "format": "{packed:.1f}"},
            {"header": "solo", "format": "{solo:.1f}"},
        ],
        "rows": rows,
    }
    write(args.record, record)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["dqn_cartpole"], choices=sorted(PRESETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[5])
    parser.add_argument("--steps", type=int, help="env steps a job (default: the preset's in STEPS)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=list(SIDES))
    parser.add_argument("--record", type=Path, help="write the figures as a results record (JSON)")
    parser.add_argument("--updates", action="store_true", help="time a round of updates alone against batched")
    parser.add_argument("--returns", action="store_true", help="each preset's own budget, packed and solo: returns")
    parser.add_argument("--peer", choices=["sbx"], help="the sweep packed on two cores against SBX's seeds")
    parser.add_argument(
        "overrides", nargs="*", help="with --updates: overrides of the preset (network.hidden_sizes=...)"
    )
    args = parser.parse_args(argv)
    if args.updates:
        for preset in args.presets:
            for members in args.seeds:
                got = update_ratio(preset, members, args.overrides)
                print(
                    f"{preset} {' '.join(args.overrides)} x{members}: alone {got['alone']:.2f} ms, "
                    f"batched {got['batched']:.2f} ms a round; batched / alone {got['ratio']:.2f}",
                    flush=True,
                )
        return 0
    load_before = os.getloadavg()[0]
    rows = []
    if args.returns:
        with tempfile.TemporaryDirectory(prefix="packed_returns_") as tmp:
            for preset in args.presets:
                for seeds in args.seeds:
                    rows.append(returns_row(preset, seeds, returns_sweeps(preset, seeds, Path(tmp))))
                    s = rows[-1]["summary"]
                    print(
                        f"{rows[-1]['label']}: packed {s['packed']:.1f} "
                        f"[{s['packed_low']:.1f}, {s['packed_high']:.1f}], "
                        f"solo {s['solo']:.1f} [{s['solo_low']:.1f}, {s['solo_high']:.1f}]: {s['verdict']}",
                        flush=True,
                    )
        if args.record:
            write_returns_record(args, rows, load_before, argv if argv is not None else sys.argv[1:])
        return 0
    if args.peer:
        sys.path.insert(0, str(Path(__file__).parent))  # benchmark.py and zoo.py, beside this script
        with tempfile.TemporaryDirectory(prefix="packed_sbx_") as tmp:
            for preset in args.presets:
                steps = args.steps or SBX_STEPS[preset]
                for seeds in args.seeds:
                    repeats = []
                    for repeat in range(args.repeats):
                        repeats.append(sbx_sides(preset, seeds, steps, Path(tmp)))
                        got = repeats[-1]
                        print(
                            f"{preset} x{seeds} repeat {repeat}: ours {got['ours']['wall']:.1f} s "
                            f"(return {got['ours']['return']:.1f}), SBX {got['sbx']['wall']:.1f} s "
                            f"(return {got['sbx']['return']:.1f}, compile {got['sbx']['compile']:.1f} s)",
                            flush=True,
                        )
                    rows.append(sbx_row(preset, seeds, steps, repeats))
        if args.record:
            write_sbx_record(args, rows, load_before, argv if argv is not None else sys.argv[1:])
        return 0
    with tempfile.TemporaryDirectory(prefix="packed_sweep_") as tmp:
        for preset in args.presets:
            for seeds in args.seeds:
                runs: dict[str, list[dict]] = {side: [] for side in args.sides}
                for repeat in range(args.repeats):
                    order = args.sides[repeat % len(args.sides) :] + args.sides[: repeat % len(args.sides)]
                    for side in order:
                        runs[side].append(sweep(side, preset, seeds, args.steps or STEPS[preset], Path(tmp)))
                        got = runs[side][-1]
                        print(
                            f"{preset} x{seeds} repeat {repeat}: {side} {got['wall']:.1f} s, "
                            f"{got['rss_mb']:.0f} MB, return {got['return']:.1f}",
                            flush=True,
                        )
                rows.append(row(preset, seeds, args.steps or STEPS[preset], runs))
                print(summary_line(rows[-1]), flush=True)
    if args.record:
        write_record(args, rows, load_before, argv if argv is not None else sys.argv[1:])
    return 0


def row(preset: str, seeds: int, steps: int, runs: dict[str, list[dict]]) -> dict:
    per_seed: dict[str, list] = {}
    for side, results in runs.items():
        per_seed[side] = [round(r["wall"], 1) for r in results]
        per_seed[f"{side}_return"] = [round(r["return"], 1) for r in results]
        per_seed[f"{side}_mb"] = [round(r["rss_mb"]) for r in results]
    for side in runs:
        if side != "solo" and "solo" in runs:
            per_seed[f"{side}_ratio"] = [round(a["wall"] / b["wall"], 2) for a, b in zip(runs[side], runs["solo"])]
    if "packed" in runs:  # env steps a second each member makes
        per_seed["packed_sps"] = [round(steps / r["wall"], 1) for r in runs["packed"]]
    if "packed" in runs and "solo" in runs and seeds > 1:  # what each member past the first adds to the process
        per_seed["packed_mb_member"] = [
            round((a["rss_mb"] - b["rss_mb"]) / (seeds - 1), 1) for a, b in zip(runs["packed"], runs["solo"])
        ]
    summary = {key: statistics.median(values) for key, values in per_seed.items()}
    label = f"{preset}, {seeds} seeds, {steps:,} steps"
    return {"id": f"{preset}_{seeds}", "label": label, "per_seed": per_seed, "summary": summary}


def summary_line(row: dict) -> str:
    s = row["summary"]
    parts = [f"{row['label']}:"]
    for side in ("packed", "solo", "joblib"):
        if side in s:
            parts.append(f"{side} {s[side]:.1f} s ({s[f'{side}_mb']:.0f} MB, return {s[f'{side}_return']:.1f})")
    parts += [f"{k} {v:.2f}" for k, v in s.items() if k.endswith("_ratio")]
    return "  ".join(parts)


def write_record(args, rows: list[dict], load_before: float, argv: list[str]) -> None:
    record = {
        **record_head(args, load_before, argv, seeds=list(range(args.repeats))),
        "title": "A seed sweep packed into one process, against its jobs one after another and joblib n_jobs=2",
        "notes": [
            "Each row's env steps a job, no early stop; packed and solo pinned to one core, joblib on two. "
            "Memory: the largest process's peak RSS (packed: the pack's one process; solo: the sweep's; "
            "joblib: its largest worker); what each member adds: (packed - solo) / (K - 1), solo's process "
            "holding one run at a time."
        ],
        "per": "repeat",
        "columns": [
            {"header": "sweep", "format": "{label}", "align": "left"},
            {"header": "packed (s)", "format": "{packed:.1f}"},
            {"header": "solo, one after another (s)", "format": "{solo:.1f}"},
            {"header": "joblib n_jobs=2 (s)", "format": ["{joblib:.1f}", "-"]},
            {"header": "packed / solo", "format": "{packed_ratio:.2f}"},
            {"header": "joblib / solo", "format": ["{joblib_ratio:.2f}", "-"]},
            {"header": "return packed / solo (median of seeds)", "format": "{packed_return:.1f} / {solo_return:.1f}"},
            {"header": "peak MB packed / solo", "format": "{packed_mb:.0f} / {solo_mb:.0f}"},
            {"header": "packed: steps/s a member", "format": ["{packed_sps:.1f}", "-"]},
            {"header": "packed: MB each member adds", "format": ["{packed_mb_member:.1f}", "-"]},
        ],
        "seed_columns": [
            {"header": "packed (s)", "format": "{packed:.1f}"},
            {"header": "solo (s)", "format": "{solo:.1f}"},
            {"header": "packed / solo", "format": "{packed_ratio:.2f}"},
        ],
        "rows": rows,
    }
    write(args.record, record)


if __name__ == "__main__":
    raise SystemExit(main())
