"""Across-seed statistics and learning curves for a sweep directory."""

from __future__ import annotations

import csv
import io
import math
import os
import textwrap
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from rl_hydra.runs.provenance import code_version
from rl_hydra.runs.run_dir import TRACKER_STORES, atomic_write_bytes


def interquartile_mean(values: Iterable[float]) -> float:
    """Mean of the middle 50%: drop floor(n/4) values at each end (all kept below 4 values)."""
    x = np.sort(np.asarray(list(values), dtype=float))
    cut = len(x) // 4
    return float(x[cut : len(x) - cut].mean())


def bootstrap_ci(
    values: Iterable[float], statistic=interquartile_mean, samples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap over seeds: resample runs with replacement."""
    x = np.asarray(list(values), dtype=float)
    rng = np.random.default_rng(seed)
    stats = [statistic(x[rng.integers(len(x), size=len(x))]) for _ in range(samples)]
    tail = (1 - confidence) / 2 * 100
    return float(np.percentile(stats, tail)), float(np.percentile(stats, 100 - tail))


def median_interval(values: Iterable[float]) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of the median over seeds (what the records' `_low` and
    `_high` of a return hold)."""
    return bootstrap_ci(values, statistic=np.median)


# tracker stores: MLflow's artifact store (and its file store), W&B's directory. They keep copies
# of a run's .hydra/, summary.json and best.pt that are no second run, and nothing of ours goes in.
RUN_OUTPUTS = ("checkpoints", "metrics.csv", "summary.json")


def is_run_dir(path: Path) -> bool:
    """A run is .hydra/config.yaml plus something training wrote: Hydra leaves .hydra/ in any
    job directory, and a sweep job refused before its first step still writes summary.json."""
    return (path / ".hydra" / "config.yaml").is_file() and any((path / name).exists() for name in RUN_OUTPUTS)


def tracker_store_in(path: Path) -> str | None:
    """The tracker store (mlartifacts, mlruns, wandb) that `path` lies in, if any."""
    return next((part for part in path.parts if part in TRACKER_STORES), None)


def run_dirs(root: Path) -> list[Path]:
    """Every run directory at or under root (a run, or a sweep's job directories).

    Neither a run's own subdirectories (a run holds no other run) nor hidden directories nor
    tracker stores are searched, so that outputs/ holding outputs/mlartifacts/ counts each run once."""
    if is_run_dir(root):
        return [root]
    found = []
    for directory, subdirs, _ in os.walk(root):
        if is_run_dir(Path(directory)):
            found.append(Path(directory))
            subdirs.clear()
        subdirs[:] = [d for d in subdirs if d not in TRACKER_STORES and not d.startswith(".")]
    return sorted(found)


def overrides_of(run_dir: Path) -> dict[str, str]:
    """The run's overrides other than seed, by key. A resume appends its `key=value`s to
    overrides.yaml, so a key can come more than once: the last one is what the run ended with."""
    from rl_hydra.runs.run_dir import RunDirectory
    from rl_hydra.runs.trust import read_overrides

    by_key = {o.split("=", 1)[0].lstrip("+~"): o for o in read_overrides(RunDirectory(run_dir))}
    by_key.pop("seed", None)
    return by_key


def configuration_of(run_dir: Path) -> tuple[str, ...]:
    """What distinguishes configurations in a sweep: the run's overrides other than seed, sorted."""
    return tuple(sorted(overrides_of(run_dir).values()))


def distinguishing_labels(configurations: Iterable[tuple[str, ...]]) -> tuple[dict[tuple[str, ...], str], list[str]]:
    """A label per configuration with only the overrides that not every configuration shares,
    and the shared ones (said once, not on every row and legend entry). A lone configuration
    keeps all of its overrides: then there is nothing to tell apart."""
    configurations = set(configurations)
    shared = set.intersection(*map(set, configurations)) if len(configurations) > 1 else set()
    labels = {
        c: " ".join(o for o in c if o not in shared) or ("(only the shared overrides)" if c else "(defaults)")
        for c in configurations
    }
    return labels, sorted(shared)


def _versions(values: Iterable[str | None]) -> str:
    """The distinct versions of a configuration's runs; "unknown" for runs that recorded none."""
    values = list(values)
    known = sorted({str(v) for v in values if v})
    return " ".join(known + (["unknown"] if any(not v for v in values) else []))


def aggregate(results: list[dict[str, Any]], provenance: bool = False) -> list[dict[str, Any]]:
    """Group per-run results by configuration; failed runs are counted and listed, not averaged.
    With `provenance`, each row also gets the code and torch versions of its runs."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        groups[result["configuration"]].append(result)
    rows = []
    for configuration, runs in sorted(groups.items()):
        ok = [r for r in runs if r["status"] == "ok"]
        means = [r["return_mean"] for r in ok]
        row = {
            "configuration": configuration,
            "runs": len(runs),
            "seeds": " ".join(str(r["seed"]) for r in ok),
            "failed": " ".join(r["run"] for r in runs if r["status"] != "ok"),
        }
        if means:
            low, high = bootstrap_ci(means)
            row.update(
                mean=float(np.mean(means)),
                std=float(np.std(means)),
                iqm=interquartile_mean(means),
                iqm_ci_low=low,
                iqm_ci_high=high,
            )
        if provenance:
            row.update(
                code=_versions(code_version(r.get("provenance", {})) for r in runs),
                torch=_versions(r.get("provenance", {}).get("torch") for r in runs),
            )
        rows.append(row)
    return rows


COLUMNS = ["configuration", "runs", "seeds", "mean", "std", "iqm", "iqm_ci_low", "iqm_ci_high", "failed"]
PROVENANCE_COLUMNS = ["code", "torch"]
STATISTICS = ("mean", "std", "iqm", "iqm_ci_low", "iqm_ci_high")


def rounded(value: float) -> float:
    """Six significant digits: 63.9, not 63.900000000000006 (a mean of returns carries no more)."""
    return float(f"{value:.6g}")


def csv_text(rows: list[dict[str, Any]], measured: dict[str, Any], provenance: bool = False) -> str:
    """The table as CSV; every row also says what was measured (checkpoint, episodes, eval_seed),
    so that a row copied elsewhere still says it."""
    columns = COLUMNS + (PROVENANCE_COLUMNS if provenance else []) + list(measured)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**{k: rounded(v) if k in STATISTICS else v for k, v in row.items()}, **measured})
    return out.getvalue()


def shown_return(value: float, digits: int = 4) -> str:
    """A return for a table, with the precision it has: four significant digits, in plain notation
    (POPGym's -0.4825 and 0.21, CartPole's 500 and 212.5; an integer part is never cut)."""
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    decimals = max(digits - 1 - math.floor(math.log10(abs(value))), 0)
    return f"{value:.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{value:.0f}"


def shown(text: object) -> str:
    """`text` on one line as it is to be printed: a character that is not printable (a newline, a
    carriage return, a tab, U+2028 ...) written as its Python escape, so that a directory named
    with a newline cannot add a line, or a row, to what a command prints."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def cell(text: object) -> str:
    """`text` for one cell of a markdown table: `shown`, with a `|` escaped (it would start a cell)."""
    return shown(text).replace("|", "\\|")


def markdown_table(rows: list[dict[str, Any]], provenance: bool = False) -> str:
    extra = PROVENANCE_COLUMNS if provenance else []
    lines = [
        "| configuration | runs | mean | std | IQM [95% CI] | " + "".join(f"{c} | " for c in extra) + "failed |",
        "|---|---|---|---|---|" + "---|" * len(extra) + "---|",
    ]
    for r in rows:
        if "mean" in r:
            stats = (
                f"{shown_return(r['mean'])} | {shown_return(r['std'])} | {shown_return(r['iqm'])} "
                f"[{shown_return(r['iqm_ci_low'])}, {shown_return(r['iqm_ci_high'])}]"
            )
        else:
            stats = "- | - | -"
        versions = "".join(f" {cell(r[c])} |" for c in extra)
        lines.append(f"| {cell(r['configuration'])} | {r['runs']} | {stats} |{versions} {cell(r['failed'] or '')} |")
    return "\n".join(lines)


def eval_curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """(steps, eval/return_mean) from a run's metrics.csv, read as a record is (verify/record.py):
    one RunError line for a damaged file."""
    from rl_hydra.runs.metrics import Differs, read_metrics
    from rl_hydra.runs.run_dir import RunDirectory, RunError

    try:
        metrics = read_metrics(RunDirectory(run_dir))
    except Differs as error:
        raise RunError(f"{run_dir / 'metrics.csv'}: {error}") from None
    rows = [row for row in metrics.rows if row.get("eval/return_mean")]
    returns = np.asarray([float(row["eval/return_mean"]) for row in rows])
    if not np.isfinite(returns).all():
        bad = rows[int(np.flatnonzero(~np.isfinite(returns))[0])]
        raise RunError(
            f"{run_dir / 'metrics.csv'} has eval/return_mean={bad['eval/return_mean']} at step {bad['step']}: "
            "not a return an evaluation gives"
        )
    return np.asarray([int(row["step"]) for row in rows]), returns


LINE_STYLES, MARKERS = ("-", "--", ":", "-."), ("o", "s", "^", "D")


def line_styles(n: int) -> list[tuple[Any, str, str]]:
    """A (color, line style, marker) per configuration, no two alike: tab10's ten colors solid,
    then dashed, dotted and dash-dotted; beyond 40 configurations a color each from a colormap."""
    from matplotlib import colormaps

    if n <= 10 * len(LINE_STYLES):
        colors = colormaps["tab10"].colors  # type: ignore[attr-defined]  # tab10 is a ListedColormap
        return [(colors[i % 10], LINE_STYLES[i // 10], MARKERS[i // 10]) for i in range(n)]
    return [(colormaps["turbo"](i / (n - 1)), LINE_STYLES[i % 4], MARKERS[i % 4]) for i in range(n)]


def legend_label(configuration: str, runs: int, width: int = 60) -> str:
    """The legend entry, wrapped at `width` characters: a long one would widen the whole figure."""
    return textwrap.fill(f"{configuration} (n={runs})", width, break_on_hyphens=False)


# points drawn per curve: a figure 7 inches wide shows no more, and the band's bootstrap costs
# samples x seeds x points (two seeds of 20,000 evaluations each took 305 s a step at a time)
MAX_CURVE_POINTS = 1000


def thinned(steps: np.ndarray, limit: int = MAX_CURVE_POINTS) -> np.ndarray:
    """`steps` (ascending) as they are up to `limit` of them, else `limit` of them evenly spread,
    the first and the last kept."""
    if len(steps) <= limit:
        return steps
    return steps[np.unique(np.linspace(0, len(steps) - 1, limit).round().astype(int))]


def curve_band(grid: np.ndarray, samples: int = 500, confidence: float = 0.95, seed: int = 0) -> np.ndarray:
    """(steps, 2): the percentile-bootstrap interval of the mean over seeds at each step of `grid`
    (seeds, steps), all steps at once. Each resample of seeds is the one bootstrap_ci(column, np.mean,
    samples, seed=seed) draws for every column, so a band is the same as one computed step by step."""
    draws = np.random.default_rng(seed).integers(len(grid), size=(samples, len(grid)))  # (samples, seeds)
    means = grid[draws].mean(axis=1)  # (samples, steps)
    tail = (1 - confidence) / 2 * 100
    return np.stack([np.percentile(means, tail, axis=0), np.percentile(means, 100 - tail, axis=0)], axis=1)


def plot_learning_curves(curves: dict[str, list[tuple[np.ndarray, np.ndarray]]], path: Path) -> None:
    """Mean evaluation return per configuration with a 95% bootstrap band across seeds.

    Drawn on a bare matplotlib Figure (no pyplot, no backend switch: nothing process-wide
    changes). A configuration evaluated at one step only is a point with an error bar; the
    legend sits under the plot, so that many configurations do not cover the curves."""
    from matplotlib.figure import Figure

    drawn = {name: [(s, r) for s, r in runs if len(s)] for name, runs in sorted(curves.items())}
    drawn = {name: runs for name, runs in drawn.items() if runs}
    labels = [legend_label(name, len(runs)) for name, runs in drawn.items()]
    columns = 2 if len(labels) > 6 and max(len(label) for label in labels) <= 40 else 1
    fig = Figure(figsize=(7, 4.5))  # the legend below adds to the saved image (bbox_inches="tight"), not the axes
    ax = fig.subplots()
    for runs, label, (color, style, marker) in zip(drawn.values(), labels, line_styles(len(drawn))):
        steps = thinned(np.unique(np.concatenate([s for s, _ in runs])))
        # each seed's curve on the common step grid (carried forward where a seed logged less)
        grid = np.stack([np.interp(steps, s, r) for s, r in runs])  # (seeds, steps)
        mean = grid.mean(axis=0)
        bands = curve_band(grid)
        if len(steps) == 1:
            # yerr as one (2, n) array: given a list of arrays, matplotlib 3.10 takes math.isfinite of
            # a 1-element array, a DeprecationWarning from NumPy 1.25 on
            ax.errorbar(
                steps,
                mean,
                yerr=np.stack([mean - bands[:, 0], bands[:, 1] - mean]),
                fmt=marker,
                color=color,
                capsize=4,
                label=label,
            )
        else:
            ax.plot(steps, mean, color=color, linestyle=style, label=label)
            ax.fill_between(steps, bands[:, 0], bands[:, 1], alpha=0.15, color=color)
    ax.set_title("Evaluation return: mean over seeds, band = 95% bootstrap CI of the mean", fontsize=10)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=columns, frameon=False)
    atomic_write_bytes(path, lambda f: fig.savefig(f, format="png", dpi=120, bbox_inches="tight"))
