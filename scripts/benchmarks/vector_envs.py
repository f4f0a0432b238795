"""Env steps per second of each `env.vectorization` (sync, async, envpool), random actions, no agent.

    python scripts/benchmarks/vector_envs.py                               # Atari Pong, 2 envs, 3 rounds
    python scripts/benchmarks/vector_envs.py --env minatar --envs 4 --modes sync async
    python scripts/benchmarks/vector_envs.py --record results/vector_envs_pong.json

Each round steps every mode for --steps vector steps in turn (the order rotates from round to
round, so that drifting load falls on all alike), each in a fresh vector env made by
rl_hydra.envs.make_env from the composed config, as a run makes it. The table gives the median
env steps/s over rounds and each mode's median ratio to sync; the record (results/' format) keeps
every round.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from rl_hydra.runs.results import commit, dump, machine, rows_table


def steps_per_second(overrides: list[str], mode: str, steps: int, seed: int) -> float:
    from rl_hydra.commands.api import compose_train_config
    from rl_hydra.envs import make_env

    cfg = compose_train_config(*overrides, f"env.vectorization={mode}")
    env = make_env(cfg.env, seed=seed)
    rng = np.random.default_rng(seed)
    actions = [env.action_space.sample() for _ in range(64)]
    rng.shuffle(actions)
    start = time.perf_counter()
    for t in range(steps):
        env.step(actions[t % 64])
    elapsed = time.perf_counter() - start
    env.close()
    return steps * env.num_envs / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="atari", help="the env group (atari: ALE/Pong-v5)")
    parser.add_argument("--envs", type=int, default=2, help="env.num_envs (async: one worker process each)")
    parser.add_argument("--modes", nargs="+", default=["sync", "async", "envpool"])
    parser.add_argument("--steps", type=int, default=2000, help="vector steps per mode and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record", type=Path, help="also write the record to this file")
    args = parser.parse_args(argv)
    overrides = [f"env={args.env}", f"env.num_envs={args.envs}"]
    load_before = os.getloadavg()[0]
    rounds: dict[str, list[float]] = {mode: [] for mode in args.modes}
    for r in range(args.rounds):
        order = args.modes[r % len(args.modes) :] + args.modes[: r % len(args.modes)]
        for mode in order:
            rounds[mode].append(steps_per_second(overrides, mode, args.steps, seed=r))
            print(f"round {r + 1}: {mode} {rounds[mode][-1]:,.0f} env steps/s", flush=True)
    base = rounds.get("sync")
    rows = [
        {
            "id": mode,
            "mode": mode,
            "per_seed": {"steps_per_s": values, **({"ratio": [v / b for v, b in zip(values, base)]} if base else {})},
            "summary": {
                "steps_per_s": statistics.median(values),
                **({"ratio": statistics.median(v / b for v, b in zip(values, base))} if base else {}),
            },
        }
        for mode, values in rounds.items()
    ]
    record = {
        "name": args.record.stem if args.record else f"vector_envs_{args.env}",
        "topic": "pixels",
        "title": f"env steps/s of env.vectorization on env={args.env}, {args.envs} envs, random actions",
        "status": "adopted",
        "reason": None,
        "command": "python scripts/benchmarks/vector_envs.py " + shlex.join(argv or sys.argv[1:]),
        "overrides": overrides,
        "seeds": list(range(args.rounds)),
        "per": "rounds",
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "machine": machine(load_before, "cpu"),
        "peer": None,
        "source": "scripts/benchmarks/vector_envs.py",
        "notes": [],
        "columns": [
            {"header": "env.vectorization", "format": "{mode}", "align": "left"},
            {"header": "env steps/s (median)", "format": "{steps_per_s:,.0f}"},
            {"header": "/ sync (median of rounds)", "format": "{ratio:.2f}"},
        ],
        "rows": rows,
    }
    print(rows_table(record))
    if args.record:
        args.record.write_text(dump(record))


if __name__ == "__main__":
    main()
