"""Critic-ensemble updates per second: the batched ensemble against a per-critic loop.

One update = the Q-values of all N critics on a batch, the summed MSE to a fixed
target, backward and a fused Adam step, as REDQ's critic update does (without
computing the target). The looped variant holds the same N MLPs as separate
nn.Linear stacks and calls them one after another.
Each of --repeats rounds times --iters updates of both variants, one after the other;
the script prints the median updates/s of each and the median of the per-round ratios.

    python scripts/benchmarks/bench_ensemble.py                    # CPU, N=10, batch 256, 2x256
    python scripts/benchmarks/bench_ensemble.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rl_hydra.networks.actor_critic import CriticEnsemble  # noqa: E402
from rl_hydra.networks.mlp import mlp  # noqa: E402


class LoopedCritics(nn.Module):
    """The same N critics as separate MLPs, evaluated by a Python loop: (B, in) -> (B, N)."""

    def __init__(self, input_dim: int, ensemble_size: int, hidden_sizes: list[int]):
        super().__init__()
        self.critics = nn.ModuleList(mlp(input_dim, 1, hidden_sizes) for _ in range(ensemble_size))

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = torch.cat([obs, actions], dim=-1)
        return torch.cat([critic(x) for critic in self.critics], dim=1)


def make_update(critics: nn.Module, args: argparse.Namespace, device: torch.device):
    """A function running `iters` critic updates on a fixed random batch."""
    optimizer = torch.optim.Adam(critics.parameters(), lr=3e-4, fused=device.type in ("cpu", "cuda"))
    obs = torch.randn(args.batch_size, args.obs_dim, device=device)
    actions = torch.rand(args.batch_size, args.action_dim, device=device) * 2 - 1
    targets = torch.randn(args.batch_size, device=device)

    def run(iters: int) -> None:
        for _ in range(iters):
            q_values = critics(obs, actions)                                  # (B, N)
            loss = (q_values - targets[:, None]).pow(2).mean(dim=0).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return run


def measure(runs: dict, args: argparse.Namespace, device: torch.device) -> dict[str, list[float]]:
    """updates/s of each variant per repeat; the variants alternate within a repeat so
    that load from other processes falls on both alike."""
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for run in runs.values():
        run(args.warmup)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            sync()
            start = clock()
            run(args.iters)
            sync()
            rates[name].append(args.iters / (clock() - start))
    return rates


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--ensemble-size", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden-sizes", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--obs-dim", type=int, default=3, help="3 = Pendulum-v1")
    parser.add_argument("--action-dim", type=int, default=1)
    parser.add_argument("--iters", type=int, default=100, help="updates per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--clock", choices=["auto", "wall", "cpu"], default="auto",
                        help="cpu = this process's CPU time, which other processes on a shared machine "
                             "inflate less than wall time; auto = cpu for a 1-thread CPU run, else wall")
    return parser


def compare(args: argparse.Namespace) -> dict[str, float | str]:
    """Median updates/s of the batched and the looped ensemble and the median per-repeat ratio."""
    if args.clock == "auto":
        args.clock = "cpu" if args.device == "cpu" and args.threads == 1 else "wall"
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available (torch {torch.__version__})")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    input_dim = args.obs_dim + args.action_dim
    batched = CriticEnsemble(input_dim, args.ensemble_size, args.hidden_sizes).to(device)
    looped = LoopedCritics(input_dim, args.ensemble_size, args.hidden_sizes).to(device)
    rates = measure({"batched": make_update(batched, args, device), "looped": make_update(looped, args, device)},
                    args, device)
    ratios = [b / l for b, l in zip(rates["batched"], rates["looped"])]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {args.threads} thread(s)"
    return {"device": name, "batched": statistics.median(rates["batched"]),
            "looped": statistics.median(rates["looped"]), "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios)}


def main() -> None:
    args = build_parser().parse_args()
    result = compare(args)
    print(f"device: {result['device']}; N={args.ensemble_size}, batch {args.batch_size}, "
          f"hidden {args.hidden_sizes}, input {args.obs_dim + args.action_dim}; "
          f"median of {args.repeats} x {args.iters} updates; {args.clock} clock")
    print(f"batched ensemble : {result['batched']:8.1f} updates/s")
    print(f"per-critic loop  : {result['looped']:8.1f} updates/s")
    print(f"batched / looped : {result['ratio']:8.2f}x  (median of per-repeat ratios; "
          f"range {result['ratio_min']:.2f}-{result['ratio_max']:.2f})")


if __name__ == "__main__":
    main()
