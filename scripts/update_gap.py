"""Do a run's updates cost what the floor's pure updates cost, across processes?

    python scripts/update_gap.py --algo dqn --pairs 8

scripts/benchmark.py divides our wall time by a floor of pure updates timed in other
processes, and finds the run's own updates (timed inside the run) slower than the floor's.
This checks whether running the loop leaves a process slower at updates. In alternating
pairs of fresh processes (scripts/benchmark_worker.py, one torch thread each):

  after the loop  a one-update-per-step run of --steps steps (the benchmark's per_step
                  setting) with its own updates timed, then --updates pure updates of the
                  run's agent on one fixed batch, as the floor times them
  fresh           the same --updates pure updates in a process that has only built the agent

and prints, per pair and as medians, the microseconds of an update each way and their
ratios to the fresh process's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import fmt, median, run_job, table  # noqa: E402
from benchmark_match import ZOO, our_overrides, setting_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algo", choices=sorted(ZOO), default="dqn")
    parser.add_argument("--steps", type=int, default=4000, help="env steps of the run (updates from step 1000)")
    parser.add_argument("--updates", type=int, default=2000, help="pure updates timed in each process")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    job_args = argparse.Namespace(device="cpu", eval_episodes=2)
    rows, ratios = [], []
    for pair in range(args.pairs):
        seed = args.seed + pair
        overrides = our_overrides(setting_for(args.algo, "per_step", args.steps), seed, job_args)
        results = {}
        for after_loop in ((False, True) if pair % 2 == 0 else (True, False)):  # each goes first equally often
            name = "after the loop" if after_loop else "fresh"
            job = {"kind": "update_gap", "overrides": overrides, "device": "cpu", "updates": args.updates,
                   "after_loop": after_loop}
            results[name] = run_job(job, f"pair {pair + 1}/{args.pairs}, seed {seed}: {name}")
        fresh, after = results["fresh"], results["after the loop"]
        if not (fresh and after):
            continue
        ratios.append((after["run_update_us"] / fresh["pure_update_us"],
                       after["pure_update_us"] / fresh["pure_update_us"]))
        rows.append([str(pair + 1), fmt(fresh["pure_update_us"], 0), fmt(after["run_update_us"], 0),
                     fmt(after["pure_update_us"], 0), fmt(ratios[-1][0], 3), fmt(ratios[-1][1], 3)])
    if not rows:
        sys.exit("update_gap: every pair failed (see the errors above)")
    rows.append(["median", "", "", "", fmt(median(r[0] for r in ratios), 3), fmt(median(r[1] for r in ratios), 3)])
    print(f"{args.algo}, one update of batch 128 per step: a {args.steps:,}-step run, then {args.updates:,} "
          f"pure updates; a fresh process: {args.updates:,} pure updates (us per update)\n")
    print(table(["pair", "fresh: pure", "run: its own", "after the run: pure", "run's own / fresh",
                 "pure after the run / fresh"], rows))


if __name__ == "__main__":
    main()
