"""Where a training vector step's time goes: stepping the envs, acting, adding to replay, updating.

    python scripts/benchmarks/step_cost.py algo=dqn env=atari env.id=ALE/Breakout-v5 env.num_envs=8 \\
        env.vectorization=async device=cuda [--updates 200] [--json FILE]

Builds the run of those overrides (train.py's config), fills its buffer with random play, then
times each part on its own: a vector step of random actions, one greedy batched act, one
`buffer.add`, one update on a sampled batch (the GPU synchronized around each timed block). Each
is the median of --rounds blocks. The predicted rate is what a training loop of these parts
would reach at one training phase per `algo.train_every` env steps:

    env steps/s = num_envs / (step + act + add + updates per vector step x update)

A benchmark for finding what to speed up, not a measurement of a run: benchmark.py's `atari`
set times whole runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path


def timed(block, repeat: int, rounds: int, sync) -> float:
    """Median over `rounds` of the mean seconds of `repeat` calls of `block`."""
    times = []
    for _ in range(rounds):
        sync()
        start = time.perf_counter()
        for _ in range(repeat):
            block()
        sync()
        times.append((time.perf_counter() - start) / repeat)
    return statistics.median(times)


def measure(overrides: list[str], updates: int, rounds: int) -> dict:
    import numpy as np
    import torch

    from rl_hydra.build import build_components, process_settings
    from rl_hydra.commands.api import compose_train_config
    from rl_hydra.config import resolve_device, validate_run_config

    cfg = compose_train_config(*overrides)
    validate_run_config(cfg)
    device = resolve_device(cfg.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with process_settings(cfg):
        agent, env, buffer = build_components(cfg, device)  # compiled with compile=true
        n = env.num_envs
        obs, _ = env.reset(seed=[cfg.seed + i for i in range(n)])
        state = {"obs": obs}

        def env_step():
            actions = env.action_space.sample()
            next_obs, rewards, terminated, truncated, _ = env.step(actions)
            state.update(transition=(state["obs"], actions, rewards, next_obs, terminated, truncated), obs=next_obs)

        while len(buffer) < max(4 * agent.batch_size, 2_000):  # random play, as the warm-up
            env_step()
            buffer.add(*state["transition"])
        step_s = timed(env_step, 20, rounds, sync)
        add_s = timed(lambda: buffer.add(*state["transition"]), 20, rounds, sync)
        act_s = timed(lambda: agent.act(state["obs"], explore=False), 20, rounds, sync)
        batches = iter(())

        def update():
            nonlocal batches
            batch = next(batches, None)
            if batch is None:
                batches = iter(buffer.sample_batches(agent.batch_size, updates))
                batch = next(batches)
            metrics = agent.update(batch)
            if hasattr(buffer, "update_priorities"):
                buffer.update_priorities(batch.indices, metrics["priorities"])

        for _ in range(20):  # lazy optimizer state, cuBLAS handles, compilation
            update()
        update_s = timed(update, updates, rounds, sync)
        env.close()
    per_vector_step = agent.gradient_steps * n / agent.train_every
    total = step_s + act_s + add_s + per_vector_step * update_s
    return {
        "overrides": overrides,
        "num_envs": n,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "ms": {"env step": step_s * 1e3, "act": act_s * 1e3, "buffer.add": add_s * 1e3, "update": update_s * 1e3},
        "updates_per_vector_step": per_vector_step,
        "predicted_env_steps_per_s": n / total,
        "update_share": per_vector_step * update_s / total,
        "numpy": np.__version__,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="+", help="train.py overrides")
    parser.add_argument("--updates", type=int, default=100, help="updates per timed block")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="append the result as one JSON line to this file")
    args = parser.parse_intermixed_args(argv)  # overrides on either side of the options
    result = measure(args.overrides, args.updates, args.rounds)
    print(" ".join(args.overrides))
    for part, ms in result["ms"].items():
        print(f"  {part:<11} {ms:8.3f} ms")
    print(
        f"  {result['updates_per_vector_step']:g} updates per vector step of {result['num_envs']} envs: "
        f"{result['predicted_env_steps_per_s']:,.0f} env steps/s predicted, "
        f"{result['update_share']:.0%} of it in updates"
    )
    if args.json:
        with args.json.open("a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
