"""Dropout's forward and backward, F.dropout against the mask drawn from its gaps, on one CPU thread.

    python scripts/benchmarks/dropout.py [--shapes 2x128x64 2x256x256] [--p 0.01 0.1 0.25] [--rounds 7]

The default shapes are DroQ's critic activations: the Pendulum preset's (2 critics x batch 128 x
64 units) and the paper's MuJoCo networks' (2 x 256 x 256). Rounds alternate the two ways; each
figure is the median over rounds of the mean microseconds a call, and the ratio the median of
each round's ratios (gaps / F.dropout).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from rl_hydra.networks.layers import dropout


def per_call_us(way, x: torch.Tensor, p: float, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        x.grad = None
        way(x, p).sum().backward()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["2x128x64", "2x256x256"])
    parser.add_argument("--p", type=float, nargs="+", default=[0.01, 0.1, 0.25])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ways = {"F.dropout": lambda x, p: F.dropout(x, p, training=True), "gaps": dropout}
    print(f"{'shape':>12} {'p':>5} {'F.dropout (us)':>15} {'gaps (us)':>10} {'gaps / F.dropout':>17}")
    for shape in args.shapes:
        x = torch.randn(*(int(size) for size in shape.split("x")), requires_grad=True)
        for p in args.p:
            times: dict[str, list[float]] = {name: [] for name in ways}
            for round_ in range(args.rounds):
                for name in list(ways)[:: 1 if round_ % 2 == 0 else -1]:
                    times[name].append(per_call_us(ways[name], x, p, args.calls))
            ratio = statistics.median(g / d for g, d in zip(times["gaps"], times["F.dropout"]))
            plain, gaps = statistics.median(times["F.dropout"]), statistics.median(times["gaps"])
            print(f"{shape:>12} {p:>5} {plain:>15,.0f} {gaps:>10,.0f} {ratio:>17.2f}")


if __name__ == "__main__":
    main()
