"""Where a training run's wall time goes: a timer around each piece of the loop.

    python scripts/benchmarks/loop_timers.py --algo dqn --regime zoo          # 50k steps, the zoo preset
    python scripts/benchmarks/loop_timers.py --algo qr_dqn --regime per_step  # 20k steps, 1 update per step

Runs one benchmark setting (scripts/benchmarks/benchmark_match.py, as `scripts/benchmarks/benchmark.py` does) through
`rl_hydra.training.run` with every piece wrapped in a timer, and prints each piece's total
seconds, calls and microseconds per call. The timers cost about 1 us a call, so the wall time
here is a few hundred ms over a plain run's. Pieces nest: `run_due_updates` holds `update`,
`sample_batches` and `record_update`; `loop` holds everything but `runner.start`'s setup.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmark_match import BUDGETS, ZOO, our_overrides, setting_for  # noqa: E402


def wrap(owner, name: str, label: str, totals: collections.Counter, calls: collections.Counter) -> None:
    """Replace owner.name with the same callable timed into totals[label]."""
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start
            calls[label] += 1

    setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(ZOO), default="dqn")
    parser.add_argument("--regime", choices=sorted(BUDGETS), default="zoo")
    parser.add_argument("--steps", type=int, help="env steps (default: the benchmark's budget)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from rl_hydra import training
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.api import compose_train_config
    from rl_hydra.buffers.replay import ReplayBuffer
    from rl_hydra.speed.vector_env import LeanSyncVectorEnv
    from rl_hydra.loops import off_policy, rollout
    from rl_hydra.loops.evaluate import Evaluator
    from rl_hydra.loops.runner import Runner

    steps = args.steps or BUDGETS[args.regime]
    setting = setting_for(args.algo, args.regime, steps)
    cfg = compose_train_config(*our_overrides(setting, args.seed, argparse.Namespace(device="cpu", eval_episodes=10)))
    totals, calls = collections.Counter(), collections.Counter()
    for owner, name, label in [
            (training, "build_components", "build"), (off_policy, "loop", "loop"),
            (Runner, "start", "runner.start"), (Runner, "run_due_updates", "run_due_updates"),
            (Runner, "record_update", "record_update"), (Runner, "record_step", "record_step"),
            (Evaluator, "run", "evaluate"), (Runner, "write_row", "write_row"),
            (Runner, "save_checkpoint", "save_checkpoint"), (DQN, "act", "act"), (DQN, "update", "update"),
            (ReplayBuffer, "add", "buffer.add"), (ReplayBuffer, "sample", "buffer.sample"),
            (LeanSyncVectorEnv, "step", "env.step"), (rollout, "final_observations", "final_observations")]:
        wrap(owner, name, label, totals, calls)

    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        summary = training.run(cfg, run_dir)
        wall = time.perf_counter() - start
    print(f"{setting.title}: wall {wall:.2f} s, {summary['updates']:,} updates, "
          f"final eval {summary['eval_return_mean']:.1f}")
    print(f"{'piece':20s} {'total (s)':>10s} {'calls':>8s} {'us/call':>9s} {'of wall':>8s}")
    for label, total in totals.most_common():
        print(f"{label:20s} {total:10.3f} {calls[label]:8,d} {1e6 * total / calls[label]:9.1f} {total / wall:8.1%}")


if __name__ == "__main__":
    main()
