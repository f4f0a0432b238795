"""A learning record's fingerprint: what its preset's first few hundred updates give at a fixed seed.

A record in results/ says what a config learns (returns over seeds). It describes today's code only
while today's code still trains that config the same way. So a record made by
scripts/seeds_table.py --record stores `fingerprint(overrides)`: the run's losses at each logged step
and a digest of its weights and optimizer state after about `UPDATES` updates, at seed 0, on the CPU,
with the keys that say how the record's runs were measured (`protocol`: budget, evaluations, early
stop), which the first updates do not show. `matches` compares a stored fingerprint with one
computed now; a record whose fingerprint moved is stale, and scripts/render_results.py renders it so
until it is made again (tests/runs/test_fingerprints.py recomputes every one). The numbers also
depend on torch, numpy and gymnasium, so a fingerprint says which versions made it, and one made
with others is not compared (`comparable`).

The comparison allows float rounding (`RTOL`): a change that reorders a sum, or a fast path that is
its plain path up to rounding, leaves the math and so the record's distribution of returns as it was,
while any change to what is computed (a loss, a schedule, a default, which random numbers are drawn)
moves the numbers far past it within a few hundred updates.
"""

from __future__ import annotations

import csv
import math
import tempfile
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

UPDATES = 300  # about this many updates: enough for any change in the math to show, cheap for every preset
RTOL = 1e-4  # float rounding, not a change in the math: see the module's docstring
DIGITS = 7  # significant digits kept of each figure
PROJECTIONS = 4  # random projections of the flat state: the weight digest


def fingerprint(overrides: list[str], updates: int = UPDATES) -> dict[str, Any]:
    """The fingerprint of `python train.py <overrides> seed=0 device=cpu` over its first `updates`
    updates (rounded up to a whole training phase): {overrides, protocol, steps, losses, weights, versions}."""
    from rl_hydra.commands.api import compose_train_config
    from rl_hydra.config import validate_run_config
    from rl_hydra.training import run

    cfg = compose_train_config(*overrides, "seed=0", "device=cpu", "logger=[]", "train.progress=false")
    validate_run_config(cfg)
    first, steps = prefix(cfg, updates)
    phases = (steps - first) // int(cfg.algo.train_every) + 1
    # a row of losses every few training phases, at most about 10 (when a row is written changes no number)
    cfg.train.log_every = int(cfg.algo.train_every) * -(-phases // 10)
    with tempfile.TemporaryDirectory(prefix="rl-hydra-fingerprint-") as folder:
        run(cfg, folder, stop_after=steps)
        return {
            "overrides": list(overrides),
            "protocol": protocol(cfg),
            "steps": steps,
            "losses": logged_losses(Path(folder) / "metrics.csv"),
            "weights": digest(torch.load(Path(folder) / "checkpoints" / "last.pt", weights_only=True)["agent"]),
            "versions": versions(),
        }


def versions() -> dict[str, str]:
    """The libraries whose numbers a fingerprint also holds: where they differ from a stored
    fingerprint's, the two do not compare (`comparable`)."""
    from importlib.metadata import version

    return {**{name: version(name) for name in ("torch", "numpy", "gymnasium")}, "cpu": cpu_kind()}


def cpu_kind() -> str:
    """The CPU's vendor and the instruction set torch's kernels use here (`AuthenticAMD AVX2`): the same
    code rounds differently on another, and a long run's figures drift past RTOL."""
    vendor = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            vendor = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("vendor_id")), "")
    except OSError:
        pass
    import platform

    return f"{vendor or platform.machine()} {torch.backends.cpu.get_cpu_capability()}"


def comparable(stored: dict[str, Any]) -> str | None:
    """None where `stored` was made with the libraries installed here, else what differs."""
    here = versions()
    differ = [
        f"{name} {made} (here {here[name]})"
        for name, made in stored.get("versions", {}).items()
        if here.get(name) != made
    ]
    return ", ".join(differ) or None


def protocol(cfg: DictConfig) -> dict[str, Any]:
    """How the record's runs were measured, which the prefix's numbers do not show: the budget, when
    and how they were evaluated, and the early stop."""
    keys = ("total_steps", "eval_every", "eval_episodes", "stop_at_return")
    return {key: cfg.train[key] for key in keys}


def prefix(cfg: DictConfig, updates: int) -> tuple[int, int]:
    """(the env step of the run's first update, the step after which it has made at least `updates`):
    the first multiple of train_every from learning_starts, and as many training phases as the updates need."""
    from rl_hydra.training import first_update_step

    first, every = first_update_step(cfg.algo), int(cfg.algo.train_every)
    phases = -(-updates // int(cfg.algo.gradient_steps))
    return first, first + (phases - 1) * every + int(cfg.env.num_envs)


def logged_losses(metrics: Path) -> list[float]:
    """Each logged row's train/ losses, in column order, rounded to DIGITS."""
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    return [rounded(float(r[k])) for r in rows for k in r if k.startswith("train/") and "loss" in k and r[k]]


def digest(state: Any) -> list[float]:
    """PROJECTIONS numbers that move with any float tensor of `state` (the agent's checkpoint: networks,
    optimizer moments): the flat concatenation, by key, projected onto fixed random directions."""
    flat = torch.cat([t.detach().double().flatten() for t in float_tensors(state)])
    directions = torch.randn(PROJECTIONS, flat.numel(), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return [rounded(float(value)) for value in directions @ flat]


def float_tensors(state: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a nested checkpoint, in a fixed order (dict keys sorted)."""
    if isinstance(state, torch.Tensor):
        return [state] if state.is_floating_point() else []
    if isinstance(state, dict):
        return [t for key in sorted(state, key=str) for t in float_tensors(state[key])]
    if isinstance(state, (list, tuple)):
        return [t for item in state for t in float_tensors(item)]
    return []


def rounded(value: float) -> float:
    return value if value == 0 or not math.isfinite(value) else float(f"{value:.{DIGITS - 1}e}")


def matches(stored: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether `now` is `stored` up to float rounding: the same protocol and steps, and every figure within RTOL.
    A fingerprint that also holds the same code's figures on other CPUs (`on_other_cpus`: each with its `cpu`)
    is compared, on such a CPU, with that CPU's figures."""
    here = now.get("versions", {}).get("cpu")
    same_cpu = [other for other in stored.get("on_other_cpus", []) if other["cpu"] == here]
    if same_cpu:
        stored = {**stored, "losses": same_cpu[0]["losses"], "weights": same_cpu[0]["weights"]}
    figures = [(a, b) for key in ("losses", "weights") for a, b in zip(stored[key], now[key], strict=False)]
    return (
        stored.get("protocol") == now.get("protocol")
        and stored["steps"] == now["steps"]
        and all(len(stored[key]) == len(now[key]) for key in ("losses", "weights"))
        and all(math.isclose(a, b, rel_tol=RTOL, abs_tol=RTOL * 1e-3) for a, b in figures)
    )
