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

from rl_hydra.runs.comparison import checkpoint_label, shown_protocols
from rl_hydra.runs.provenance import code_version
from rl_hydra.runs.run_dir import TRACKER_STORES, atomic_write_bytes

# fewer seeds than this and the IQM (floor(n/4) cut at each end) is the mean
IQM_MIN_SEEDS = 4


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
    from rl_hydra.runs.run_dir import RunDirectory, read_overrides

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


def aggregate(
    results: list[dict[str, Any]], provenance: bool = False, checkpoint: str = "last"
) -> list[dict[str, Any]]:
    """Group per-run results by configuration; failed runs are counted and listed, not averaged.
    Each row names the policy its returns come from (`checkpoint` at the steps its runs reached) and
    the protocol its runs were trained under. With `provenance`, also the code and torch versions."""
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
            "policy": checkpoint_label(
                checkpoint, [r["step"] for r in ok if "step" in r], [len(r["curve"][0]) for r in ok if "curve" in r]
            ),
            "protocol": shown_protocols(r["protocol"] for r in runs if "protocol" in r),
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


COLUMNS = [
    "configuration",
    "runs",
    "seeds",
    "mean",
    "std",
    "iqm",
    "iqm_ci_low",
    "iqm_ci_high",
    "failed",
    "policy",
    "protocol",
]
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


def seed_count(row: dict[str, Any]) -> int:
    """How many runs a row's statistics are over (its seeds that did not fail)."""
    return len(row["seeds"].split())


def markdown_table(rows: list[dict[str, Any]], provenance: bool = False) -> str:
    """The sweep's table. The IQM column is left out when no configuration has 4 seeds or more (there
    the IQM is the mean, and the interval is the mean's), and says "= mean" in a row where it is; a
    line under the table says so once."""
    extra = PROVENANCE_COLUMNS if provenance else []
    counted = [seed_count(r) for r in rows if "mean" in r]
    with_iqm = any(n >= IQM_MIN_SEEDS for n in counted)
    interval = "IQM [95% CI]" if with_iqm else "95% CI of the mean"
    lines = [
        f"| configuration | policy | protocol | runs | mean | std | {interval} | "
        + "".join(f"{c} | " for c in extra)
        + "failed |",
        "|---|---|---|---|---|---|---|" + "---|" * len(extra) + "---|",
    ]
    for r in rows:
        if "mean" in r:
            iqm = shown_return(r["iqm"]) + " " if seed_count(r) >= IQM_MIN_SEEDS else "= mean " if with_iqm else ""
            stats = (
                f"{shown_return(r['mean'])} | {shown_return(r['std'])} | {iqm}"
                f"[{shown_return(r['iqm_ci_low'])}, {shown_return(r['iqm_ci_high'])}]"
            )
        else:
            stats = "- | - | -"
        versions = "".join(f" {cell(r[c])} |" for c in extra)
        named = f"{cell(r['configuration'])} | {cell(r.get('policy', ''))} | {cell(r.get('protocol', ''))}"
        lines.append(f"| {named} | {r['runs']} | {stats} |{versions} {cell(r['failed'] or '')} |")
    note = iqm_note(counted)
    return "\n".join(lines) + (f"\n\n{note}" if note else "")


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


def interquartile_means(grid: np.ndarray) -> np.ndarray:
    """interquartile_mean of each column of `grid` (seeds, steps), all columns at once."""
    ordered = np.sort(grid, axis=0)
    cut = len(grid) // 4
    return ordered[cut : len(grid) - cut].mean(axis=0)


def aggregated_curves(curves: dict[str, list[tuple[np.ndarray, np.ndarray]]]) -> dict[str, dict[str, Any]]:
    """Per configuration, what the learning-curve plot draws and learning_curves.csv holds: the
    steps (thinned to MAX_CURVE_POINTS), and at each the mean, the IQM and the 95% bootstrap band
    of the mean over its seeds, each seed's curve carried onto the common steps by interpolation."""
    aggregated = {}
    for name, runs in sorted(curves.items()):
        runs = [(s, r) for s, r in runs if len(s)]
        if not runs:
            continue
        steps = thinned(np.unique(np.concatenate([s for s, _ in runs])))
        grid = np.stack([np.interp(steps, s, r) for s, r in runs])  # (seeds, steps)
        band = curve_band(grid)
        aggregated[name] = {
            "steps": steps,
            "mean": grid.mean(axis=0),
            "iqm": interquartile_means(grid),
            "low": band[:, 0],
            "high": band[:, 1],
            "seeds": len(runs),
        }
    return aggregated


def iqm_note(seeds: Iterable[int]) -> str:
    """The one line that says the IQM is the mean where it is, instead of a column repeating it."""
    seeds = list(seeds)
    if seeds and all(n < IQM_MIN_SEEDS for n in seeds):
        return f"No IQM: with fewer than {IQM_MIN_SEEDS} seeds per configuration the IQM is the mean."
    if any(n < IQM_MIN_SEEDS for n in seeds):
        return f"IQM shown only for configurations with {IQM_MIN_SEEDS} seeds or more: with fewer it is the mean."
    return ""


def curves_csv_text(aggregated: dict[str, dict[str, Any]]) -> str:
    """learning_curves.csv: a row per configuration and step (step, mean, IQM, the band, seeds). The
    iqm column is there only when some configuration has 4 seeds or more, and blank where it is
    the mean."""
    with_iqm = any(a["seeds"] >= IQM_MIN_SEEDS for a in aggregated.values())
    columns = ["configuration", "step", "mean"] + (["iqm"] if with_iqm else []) + ["ci_low", "ci_high", "seeds"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for name, a in aggregated.items():
        for i, step in enumerate(a["steps"]):
            row = {"configuration": name, "step": int(step), "mean": rounded(a["mean"][i]), "seeds": a["seeds"]}
            row.update(ci_low=rounded(a["low"][i]), ci_high=rounded(a["high"][i]))
            if with_iqm:
                row["iqm"] = rounded(a["iqm"][i]) if a["seeds"] >= IQM_MIN_SEEDS else ""
            writer.writerow(row)
    return out.getvalue()


FIGURE_FORMATS = ("png", "pdf", "svg")
PNG_DPI = 200  # a 7-inch figure 1,400 pixels wide: sharp in a slide; a paper takes the PDF


def save_figure(fig: Any, png: Path) -> list[Path]:
    """`fig` as `png` (PNG_DPI) and as vector PDF and SVG beside it, each written atomically
    (no creation date in the vector files)."""
    written = []
    for fmt in FIGURE_FORMATS:
        path = png.with_suffix(f".{fmt}")
        metadata = {"png": None, "pdf": {"CreationDate": None}, "svg": {"Date": None}}[fmt]
        atomic_write_bytes(
            path,
            lambda f, fmt=fmt, metadata=metadata: fig.savefig(
                f, format=fmt, dpi=PNG_DPI, bbox_inches="tight", metadata=metadata
            ),
        )
        written.append(path)
    return written


def plot_learning_curves(
    curves: dict[str, list[tuple[np.ndarray, np.ndarray]]], path: Path
) -> dict[str, dict[str, Any]]:
    """Mean evaluation return per configuration with a 95% bootstrap band across seeds, as `path`
    (PNG) and PDF and SVG beside it; returns what it drew (aggregated_curves), for the CSV.

    Drawn on a bare matplotlib Figure (no pyplot, no backend switch: nothing process-wide
    changes). A configuration evaluated at one step only is a point with an error bar; the
    legend sits under the plot, so that many configurations do not cover the curves."""
    from matplotlib.figure import Figure

    drawn = aggregated_curves(curves)
    labels = [legend_label(name, a["seeds"]) for name, a in drawn.items()]
    columns = 2 if len(labels) > 6 and max(len(label) for label in labels) <= 40 else 1
    fig = Figure(figsize=(7, 4.5))  # the legend below adds to the saved image (bbox_inches="tight"), not the axes
    ax = fig.subplots()
    for a, label, (color, style, marker) in zip(drawn.values(), labels, line_styles(len(drawn))):
        steps, mean = a["steps"], a["mean"]
        if len(steps) == 1:
            # yerr as one (2, n) array: given a list of arrays, matplotlib 3.10 takes math.isfinite of
            # a 1-element array, a DeprecationWarning from NumPy 1.25 on
            yerr = np.stack([mean - a["low"], a["high"] - mean])
            ax.errorbar(steps, mean, yerr=yerr, fmt=marker, color=color, capsize=4, label=label)
        else:
            ax.plot(steps, mean, color=color, linestyle=style, label=label)
            ax.fill_between(steps, a["low"], a["high"], alpha=0.15, color=color)
    ax.set_title("Evaluation return: mean over seeds, band = 95% bootstrap CI of the mean", fontsize=10)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=columns, frameon=False)
    save_figure(fig, path)
    return drawn


def probability_of_improvement(
    x: Iterable[float], y: Iterable[float], samples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """P(X > Y) as rliable defines it (one task): the chance that a run of X scores above a run of Y,
    ties counting half, over every pair of their runs; with the percentile interval of a bootstrap
    that resamples X's runs and Y's runs each with replacement (all resamples at once)."""
    x, y = np.asarray(list(x), dtype=float), np.asarray(list(y), dtype=float)

    def pairwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # (..., n), (..., m) -> (...)
        diff = a[..., :, None] - b[..., None, :]
        return ((diff > 0) + 0.5 * (diff == 0)).mean(axis=(-2, -1))

    rng = np.random.default_rng(seed)
    xs = x[rng.integers(len(x), size=(samples, len(x)))]
    ys = y[rng.integers(len(y), size=(samples, len(y)))]
    # 100 resamples at a time: the pairs of a resample are runs x runs
    stats = np.concatenate([pairwise(xs[i : i + 100], ys[i : i + 100]) for i in range(0, samples, 100)])
    tail = (1 - confidence) / 2 * 100
    return float(pairwise(x, y)), float(np.percentile(stats, tail)), float(np.percentile(stats, 100 - tail))


def final_returns(results: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each configuration's evaluated returns, one per run that did not fail."""
    returns: dict[str, list[float]] = defaultdict(list)
    for r in results:
        if r["status"] == "ok":
            returns[r["configuration"]].append(float(r["return_mean"]))
    return dict(sorted(returns.items()))


def improvement_csv_text(returns: dict[str, list[float]], measured: dict[str, Any]) -> str:
    """A row per ordered pair of configurations: P(X > Y) with its 95% bootstrap interval."""
    columns = ["x", "y", "p_x_above_y", "ci_low", "ci_high", "seeds_x", "seeds_y", *measured]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for x, x_returns in returns.items():
        for y, y_returns in returns.items():
            if x != y:
                p, low, high = probability_of_improvement(x_returns, y_returns)
                stats = {"p_x_above_y": rounded(p), "ci_low": rounded(low), "ci_high": rounded(high)}
                seeds = {"seeds_x": len(x_returns), "seeds_y": len(y_returns)}
                writer.writerow({"x": x, "y": y, **stats, **seeds, **measured})
    return out.getvalue()


def performance_profiles(
    returns: dict[str, list[float]], points: int = 101, samples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """rliable's performance profiles (score distributions): at each return threshold from the lowest
    return to the highest, the fraction of a configuration's runs scoring above it, with the 95%
    percentile-bootstrap interval over its runs. Returns (thresholds, {configuration: (3, points)
    of fraction, low, high})."""
    every = np.concatenate([np.asarray(v, dtype=float) for v in returns.values()])
    thresholds = np.linspace(every.min(), every.max(), points)
    tail = (1 - confidence) / 2 * 100
    rng = np.random.default_rng(seed)
    profiles = {}
    for name, values in returns.items():
        v = np.asarray(values, dtype=float)
        resampled = v[rng.integers(len(v), size=(samples, len(v)))]  # (samples, runs)
        fractions = (resampled[:, :, None] > thresholds).mean(axis=1)  # (samples, points)
        profiles[name] = np.stack(
            [
                (v[:, None] > thresholds).mean(axis=0),
                np.percentile(fractions, tail, axis=0),
                np.percentile(fractions, 100 - tail, axis=0),
            ]
        )
    return thresholds, profiles


def profiles_csv_text(thresholds: np.ndarray, profiles: dict[str, np.ndarray], runs: dict[str, int], measured) -> str:
    """A row per configuration and threshold: the fraction of its runs above it, and the interval."""
    columns = ["configuration", "threshold", "fraction_above", "ci_low", "ci_high", "runs", *measured]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for name, (fraction, low, high) in profiles.items():
        for i, threshold in enumerate(thresholds):
            stats = {"fraction_above": rounded(fraction[i]), "ci_low": rounded(low[i]), "ci_high": rounded(high[i])}
            writer.writerow(
                {"configuration": name, "threshold": rounded(threshold), **stats, "runs": runs[name], **measured}
            )
    return out.getvalue()


def plot_performance_profiles(
    thresholds: np.ndarray, profiles: dict[str, np.ndarray], runs: dict[str, int], title: str, png: Path
) -> None:
    """The profiles as steps with their bands, as `png` and PDF and SVG beside it (save_figure)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for (name, (fraction, low, high)), (color, style, _) in zip(profiles.items(), line_styles(len(profiles))):
        ax.step(thresholds, fraction, where="post", color=color, linestyle=style, label=legend_label(name, runs[name]))
        ax.fill_between(thresholds, low, high, step="post", alpha=0.15, color=color)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("evaluation return threshold")
    ax.set_ylabel("fraction of runs with a higher return")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if profiles:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    save_figure(fig, png)
