"""Across-seed statistics and learning curves for a sweep directory."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import yaml


def interquartile_mean(values: Iterable[float]) -> float:
    """Mean of the middle 50%: drop floor(n/4) values at each end (all kept below 4 values)."""
    x = np.sort(np.asarray(list(values), dtype=float))
    cut = len(x) // 4
    return float(x[cut: len(x) - cut].mean())


def bootstrap_ci(values: Iterable[float], statistic=interquartile_mean, samples: int = 2000,
                 confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap over seeds: resample runs with replacement."""
    x = np.asarray(list(values), dtype=float)
    rng = np.random.default_rng(seed)
    stats = [statistic(x[rng.integers(len(x), size=len(x))]) for _ in range(samples)]
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(stats, tail)), float(np.percentile(stats, 100 - tail))


def run_dirs(root: Path) -> list[Path]:
    """Every run directory at or under root (a run, or a sweep's job directories)."""
    if (root / ".hydra" / "config.yaml").is_file():
        return [root]
    return sorted(p.parent.parent for p in root.rglob(".hydra/config.yaml"))


def configuration_of(run_dir: Path) -> str:
    """The run's overrides other than seed: what distinguishes configurations in a sweep."""
    overrides_file = run_dir / ".hydra" / "overrides.yaml"
    overrides = yaml.safe_load(overrides_file.read_text()) if overrides_file.is_file() else []
    kept = sorted(o for o in overrides or [] if o.split("=", 1)[0].lstrip("+~") != "seed")
    return " ".join(kept) or "(defaults)"


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Group per-run results by configuration; failed runs are counted and listed, not averaged."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        groups[result["configuration"]].append(result)
    rows = []
    for configuration, runs in sorted(groups.items()):
        ok = [r for r in runs if r["status"] == "ok"]
        means = [r["return_mean"] for r in ok]
        row = {"configuration": configuration, "runs": len(runs), "seeds": " ".join(str(r["seed"]) for r in ok),
               "failed": " ".join(r["run"] for r in runs if r["status"] != "ok")}
        if means:
            low, high = bootstrap_ci(means)
            row.update(mean=float(np.mean(means)), std=float(np.std(means)), iqm=interquartile_mean(means),
                       iqm_ci_low=low, iqm_ci_high=high)
        rows.append(row)
    return rows


COLUMNS = ["configuration", "runs", "seeds", "mean", "std", "iqm", "iqm_ci_low", "iqm_ci_high", "failed"]


def write_tables(rows: list[dict[str, Any]], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    (out_dir / "results.md").write_text(markdown_table(rows) + "\n")


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| configuration | runs | mean | std | IQM [95% CI] | failed |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "mean" in r:
            stats = (f"{r['mean']:.1f} | {r['std']:.1f} | "
                     f"{r['iqm']:.1f} [{r['iqm_ci_low']:.1f}, {r['iqm_ci_high']:.1f}]")
        else:
            stats = "- | - | -"
        lines.append(f"| {r['configuration']} | {r['runs']} | {stats} | {r['failed'] or ''} |")
    return "\n".join(lines)


def eval_curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(steps, eval/return_mean) from a run's metrics.csv."""
    steps, returns = [], []
    metrics = run_dir / "metrics.csv"
    if metrics.is_file():
        with open(metrics, newline="") as f:
            for row in csv.DictReader(f):
                if row.get("eval/return_mean"):
                    steps.append(int(row["step"]))
                    returns.append(float(row["eval/return_mean"]))
    return np.asarray(steps), np.asarray(returns)


def plot_learning_curves(curves: dict[str, list[tuple[np.ndarray, np.ndarray]]], path: Path) -> None:
    """Mean evaluation return per configuration with a 95% bootstrap band across seeds.

    Drawn on a bare matplotlib Figure (no pyplot, no backend switch: nothing process-wide
    changes). A configuration evaluated at one step only is a point with an error bar; the
    legend sits under the plot, so that many configurations do not cover the curves."""
    from matplotlib.figure import Figure

    drawn = {name: [(s, r) for s, r in runs if len(s)] for name, runs in sorted(curves.items())}
    drawn = {name: runs for name, runs in drawn.items() if runs}
    fig = Figure(figsize=(7, 4.5 + 0.22 * len(drawn)))
    ax = fig.subplots()
    for configuration, runs in drawn.items():
        steps = np.unique(np.concatenate([s for s, _ in runs]))
        # each seed's curve on the common step grid (carried forward where a seed logged less)
        grid = np.stack([np.interp(steps, s, r) for s, r in runs])          # (seeds, steps)
        mean = grid.mean(axis=0)
        bands = np.array([bootstrap_ci(column, np.mean, samples=500) for column in grid.T])
        label = f"{configuration} (n={len(runs)})"
        if len(steps) == 1:
            ax.errorbar(steps, mean, yerr=[mean - bands[:, 0], bands[:, 1] - mean], fmt="o", capsize=4, label=label)
        else:
            line, = ax.plot(steps, mean, label=label)
            ax.fill_between(steps, bands[:, 0], bands[:, 1], alpha=0.2, color=line.get_color())
    ax.set_title("Evaluation return: mean over seeds, band = 95% bootstrap CI of the mean", fontsize=10)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
