"""The quantile Huber loss and its backward, each way the package computes it, on one CPU thread.

    python scripts/benchmarks/quantile_loss.py [--shape B N N'] [--rounds 9] [--calls 200]

The ways: losses.py's formula through autograd (`fast_paths=false`), the closed form in torch ops
(CUDA and torch.compile take it) and the closed form as one numba pass over the pairs (the CPU with
the `numba` extra). The default shape is TQC's Pendulum preset: batch 256 x 2 critics, 25
quantiles, 46 target atoms. Rounds alternate the ways; each figure is the median over rounds of
the mean microseconds a call, and the ratios are the medians of each round's ratios.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rl_hydra import speed
from rl_hydra.losses import midpoint_taus, quantile_huber_per_sample
from rl_hydra.speed import quantile_huber


def ways() -> dict:
    plain = quantile_huber_per_sample.__wrapped__  # losses.py's formula, under the fast-twin decorator

    def closed_form(q, t, taus, kappa):
        return quantile_huber.ClosedFormQuantileHuber.apply(q, t, taus, kappa, False)

    def compiled_pass(q, t, taus, kappa):
        return quantile_huber.ClosedFormQuantileHuber.apply(q, t, taus, kappa, True)

    return {"formula": plain, "torch ops": closed_form, "numba pass": compiled_pass}


def per_call_us(loss, quantiles, targets, taus, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        quantiles.grad = None
        loss(quantiles, targets, taus, 1.0).sum().backward()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[512, 25, 46], metavar=("B", "N", "N'"))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if quantile_huber.compiled_pairs() is None:
        raise SystemExit('error: the numba pass is not at hand: pip install -e ".[numba]"')
    batch, n, n_prime = args.shape
    generator = torch.Generator().manual_seed(0)
    quantiles = torch.randn(batch, n, generator=generator).requires_grad_()
    targets, taus = torch.randn(batch, n_prime, generator=generator), midpoint_taus(n)
    found: dict[str, list[float]] = {name: [] for name in ways()}
    with speed.enabled(True):
        for loss in ways().values():  # warm-up: the numba pass compiles (or loads its cache)
            per_call_us(loss, quantiles, targets, taus, 5)
        for _ in range(args.rounds):
            for name, loss in ways().items():
                found[name].append(per_call_us(loss, quantiles, targets, taus, args.calls))
    print(f"loss and backward at B={batch}, N={n}, N'={n_prime}: us a call, median of {args.rounds} rounds")
    for name, values in found.items():
        print(f"  {name:<11} {statistics.median(values):9,.0f}")
    for name in ("torch ops", "numba pass"):
        ratios = [a / b for a, b in zip(found[name], found["formula"])]
        print(f"  {name} / formula: {statistics.median(ratios):.2f}")
    ratios = [a / b for a, b in zip(found["numba pass"], found["torch ops"])]
    print(f"  numba pass / torch ops: {statistics.median(ratios):.2f} ({min(ratios):.2f} to {max(ratios):.2f})")


if __name__ == "__main__":
    main()
