"""Evaluate a run or a whole sweep from its directory; tables, JSON and learning curves.

Every file an evaluation writes is named by what it measured, `<checkpoint>_<episodes>ep_seed<seed>`
(`last_20ep_seed0`), so that evaluations with other settings sit beside each other; the same
settings again replace their files, and the report says so."""

from __future__ import annotations

import difflib
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rl_hydra.commands.run import load_run
from rl_hydra.config import integral, resolve_device
from rl_hydra.errors import BadArgument, ConfigError
from rl_hydra.runs import provenance
from rl_hydra.runs.aggregate import (
    aggregate,
    cell,
    configuration_of,
    csv_text,
    curves_csv_text,
    distinguishing_labels,
    eval_curve,
    final_returns,
    improvement_csv_text,
    markdown_table,
    performance_profiles,
    plot_learning_curves,
    plot_performance_profiles,
    profiles_csv_text,
    run_dirs,
    shown,
    shown_return,
    tracker_store_in,
)
from rl_hydra.runs.comparison import Protocol, mismatch
from rl_hydra.runs.run_dir import RunDirectory, RunError, WriteFailed, atomic_write_bytes
from rl_hydra.runs.trust import read_config
from rl_hydra.schema import type_refusal
from rl_hydra.schema.evaluate import EvaluateKeys
from rl_hydra.schema.keys import fields, validate

USAGE = """usage: rl-hydra-eval run_dir=<run or sweep directory> [key=value ...]
       (python scripts/evaluate.py in a checkout: the same)

Evaluates a run, or every run under a sweep directory, from its directory alone. Writes
<run>/eval/<checkpoint>_<episodes>ep_seed<seed>.json; for a sweep also
<sweep>/eval/results_<checkpoint>_<episodes>ep_seed<seed>.csv and .md, improvement_<...>.csv (P(X > Y)),
profiles_<...>.csv and plots, and learning_curves.csv, .png, .pdf and .svg.

keys (conf/evaluate.yaml sets them; rl_hydra/schema/evaluate.py declares them):"""


def usage(defaults: Path) -> str:
    """USAGE and each key: its value in conf/evaluate.yaml, its help and what it allows."""
    values = OmegaConf.to_container(OmegaConf.load(defaults))
    assert isinstance(values, dict)  # conf/evaluate.yaml is a mapping
    lines = []
    for name, rule, help in fields(EvaluateKeys):
        value = str(values.get(name)).lower() if isinstance(values.get(name), bool) else values.get(name)
        allowed = f"; {rule.allowed(brief=True)}" if rule and rule.kind != "any" else ""
        lines.append(f"  {name}: {value}  # {help}{allowed}")
    return "\n".join([USAGE, *lines])


def check_keys(argv: list[str], allowed: list[str]) -> None:
    """Every argument is key=value with a key of conf/evaluate.yaml; a typo gets the closest key."""
    for arg in argv:
        key, equals, _ = arg.partition("=")
        if arg.startswith("-"):
            raise BadArgument(f"unknown option {arg}; arguments are key=value (--help lists the keys)")
        if not equals:
            raise BadArgument(f"{arg!r} is not key=value; e.g. run_dir=outputs/... (--help lists the keys)")
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            raise BadArgument(f"{key} is not a key of evaluate; {hint}(keys: {', '.join(allowed)})")


def parse_args(argv: list[str], defaults: Path) -> DictConfig:
    """The evaluate config, every value checked before anything is read or written."""
    check_keys(argv, [name for name, _, _ in fields(EvaluateKeys)])
    # episodes=1e3 is 1000, as a run's integer keys read it (config.integral_overrides)
    integers = {name for name, rule, _ in fields(EvaluateKeys) if rule is not None and rule.kind == "integer"}
    argv = [
        f"{key}={integral(value)}" if key in integers else arg for arg in argv for key, _, value in [arg.partition("=")]
    ]
    try:  # onto the schema, as a run's groups are: a wrong type is refused here
        cfg = OmegaConf.merge(OmegaConf.structured(EvaluateKeys), OmegaConf.load(defaults))
        assert isinstance(cfg, DictConfig)  # the schema is a mapping
        cfg.merge_with(OmegaConf.from_dotlist(argv))
    except OmegaConfBaseException as error:
        raise BadArgument(type_refusal(error) or str(error).splitlines()[0]) from None
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise BadArgument("run_dir is required: scripts/evaluate.py run_dir=<run or multirun directory>")
    validate(cfg, EvaluateKeys, "")
    resolve_device(cfg.device)  # a bad device would otherwise fail every run of a sweep one by one
    return cfg


def setting(cfg) -> str:
    """What an evaluation measured, as it names its files: last_20ep_seed0."""
    return f"{cfg.checkpoint}_{cfg.episodes}ep_seed{cfg.seed}"


def evaluate_one(run_dir: Path, cfg, writes: list | None = None) -> dict[str, Any]:
    """Evaluate one run; its eval/ file is written at once, or appended to `writes` (a sweep writes
    nothing until every run in it has been read)."""
    run = load_run(run_dir, checkpoint=cfg.checkpoint, device=cfg.device)
    result = run.evaluate(episodes=cfg.episodes, seed=cfg.seed)
    result.update(checkpoint=cfg.checkpoint, step=run.step, run=str(run_dir))
    video = None
    if cfg.video:  # before the JSON: a run whose video fails is reported failed, with nothing written
        from rl_hydra.commands.video import gif_bytes

        video = (run_dir / "eval" / "videos" / f"{cfg.checkpoint}_seed{cfg.seed}.gif", gif_bytes(run, seed=cfg.seed))
    out = run_dir / "eval" / f"{setting(cfg)}.json"
    replaced = out.is_file()
    text = (json.dumps(result, indent=2) + "\n").encode()

    def write() -> None:  # by the run's handle: a link at or above these names is replaced, never followed
        run.directory.write_bytes(out, lambda f: f.write(text))  # the result first, its picture after
        if video is not None:
            run.directory.write_bytes(video[0], lambda f: f.write(video[1]))

    if writes is None:
        write()
    else:
        writes.append(write)
    result.update(eval_file=str(out), replaced=replaced)
    return result


def find_runs(root: Path) -> list[Path]:
    """The runs to evaluate, refusing (before anything is written) a folder that holds none and
    a folder inside a tracker store, whose run copies evaluate must never write into."""
    if not root.is_dir():
        raise RunError(f"run_dir={root} does not exist")
    store = tracker_store_in(root.resolve())
    if store:
        raise RunError(
            f"run_dir={root} is inside {store}/, a tracker's copy of runs that evaluate never writes "
            f"into; give the run directory it was copied from"
        )
    runs = run_dirs(root)
    if not runs:
        raise RunError(
            f"run_dir={root} holds no run (a run has .hydra/config.yaml and checkpoints/, "
            f"metrics.csv or summary.json; mlartifacts/, mlruns/ and wandb/ are skipped)"
        )
    return runs


def evaluate_path(cfg) -> list[dict[str, Any]]:
    root = Path(cfg.run_dir)
    runs = find_runs(root)
    # every run's config is read as data, and refused whole for code it names, before anything is built
    configs = {run_dir: read_config(RunDirectory(run_dir)) for run_dir in runs}
    RunDirectory(root).check_links()  # the runs' eval/ and the sweep's are written in place
    configurations = {run_dir: configuration_of(run_dir) for run_dir in runs}
    labels, _ = distinguishing_labels(configurations.values())
    results: list[dict[str, Any]] = []
    writes: list[Callable[[], None]] = []
    for run_dir in runs:
        # a single run is named by its directory, a sweep's runs by their path inside the sweep
        name = run_dir.relative_to(root).as_posix() if run_dir != root else root.resolve().name
        base = {
            "run": name,
            "configuration": labels[configurations[run_dir]],
            "overrides": configurations[run_dir],
            "seed": configs[run_dir].seed,
            "protocol": Protocol.of(configs[run_dir]),
            "provenance": provenance.latest(RunDirectory(run_dir)),
        }
        try:
            summary = RunDirectory(run_dir).read_summary() or {}
            if summary.get("status") == "failed":
                raise RunError(summary.get("reason") or "failed")
            result = evaluate_one(run_dir, cfg, writes)
            results.append(
                {
                    **base,
                    "status": "ok",
                    "return_mean": result["return_mean"],
                    "return_std": result["return_std"],
                    "step": result["step"],
                    "eval_file": result["eval_file"],
                    "replaced": result["replaced"],
                }
            )
        except (RunError, ConfigError) as error:
            if len(runs) == 1:
                raise
            results.append({**base, "status": "failed", "reason": str(error)})
    if len(runs) > 1:  # the sweep's curves are read before anything is written, too
        for result in results:
            result["curve"] = eval_curve(root / result["run"])
    for write in writes:
        write()
    return results


BEST_MEANS = "the maximum over training's evaluations, an optimistic figure"


def measured(cfg) -> str:
    checkpoint = f"best: {BEST_MEANS}" if cfg.checkpoint == "best" else cfg.checkpoint
    return f"{checkpoint}, {cfg.episodes} episodes, seed {cfg.seed}"


def protocol_line(results: list[dict[str, Any]]) -> str | None:
    """The line a sweep's table gets when its runs were not trained under one protocol."""
    ok = [r for r in results if r["status"] == "ok"]
    return mismatch([r["protocol"] for r in results], [r["step"] for r in ok])


def report(results: list[dict[str, Any]], cfg) -> str:
    lines = [f"| run | seed | step | return ({measured(cfg)}) |", "|---|---|---|---|"]
    # every mean and std of the table to one number of decimals: the most any mean shows with the
    # precision it has (shown_return: CartPole's 212.5, POPGym's -0.4825), so that rows line up
    means = [shown_return(r["return_mean"]) for r in results if r["status"] == "ok"]
    decimals = max((len(mean.partition(".")[2]) for mean in means if mean[-1:].isdigit()), default=0)
    for r in results:
        value = (
            f"{r['return_mean']:.{decimals}f} +- {r['return_std']:.{decimals}f}"
            if r["status"] == "ok"
            else f"failed: {cell(r['reason'])}"
        )
        lines.append(f"| {cell(r['run'])} | {r['seed']} | {r.get('step', '-')} | {value} |")
    text = "\n".join(lines)
    written = [r for r in results if r["status"] == "ok"]
    replaced = sum(r["replaced"] for r in written)
    if len(written) == 1:
        text += f"\n\nwrote {shown(written[0]['eval_file'])}" + (
            " (replacing the earlier result of the same settings)" if replaced else ""
        )
    elif written:
        text += f"\n\nwrote eval/{setting(cfg)}.json in {len(written)} run directories" + (
            f" ({replaced} replacing earlier results of the same settings)" if replaced else ""
        )
    if len(results) > 1:
        text += "\n\n" + sweep_report(results, cfg)
    return text


def sweep_report(results: list[dict[str, Any]], cfg) -> str:
    """The sweep's tables (named by what they measured), learning curves, probability of improvement
    and performance profiles, and what they replaced."""
    root = Path(cfg.run_dir)
    rows = aggregate(results, provenance=cfg.provenance, checkpoint=cfg.checkpoint)
    table = markdown_table(rows, provenance=cfg.provenance)
    warning = protocol_line(results)
    out = root / "eval"
    csv_file, md_file = out / f"results_{setting(cfg)}.csv", out / f"results_{setting(cfg)}.md"
    replaced = csv_file.is_file() or md_file.is_file()
    columns = {"checkpoint": cfg.checkpoint, "episodes": cfg.episodes, "eval_seed": cfg.seed}
    atomic_write_bytes(csv_file, lambda f: f.write(csv_text(rows, columns, cfg.provenance).encode()))
    atomic_write_bytes(md_file, lambda f: f.write((markdown_header(results, cfg) + table + "\n").encode()))
    curves = defaultdict(list)
    for r in results:
        curves[r["configuration"]].append(r["curve"])  # read by evaluate_path before anything was written
    drawn = plot_learning_curves(curves, out / "learning_curves.png")
    atomic_write_bytes(out / "learning_curves.csv", lambda f: f.write(curves_csv_text(drawn).encode()))
    lines = [
        table,
        *([] if warning is None else ["", warning]),
        "",
        f"wrote {csv_file} and {md_file.name}"
        + (" (replacing an earlier evaluation with the same settings)" if replaced else ""),
        f"wrote {out / 'learning_curves'}.png, .pdf, .svg and .csv (training's own evaluations, from each run's "
        "metrics.csv: mean, IQM, 95% band per step)",
    ]
    return "\n".join(lines + comparisons(results, cfg, columns))


def comparisons(results: list[dict[str, Any]], cfg, columns: dict[str, Any]) -> list[str]:
    """Probability of improvement between every two configurations and the performance profiles, over
    the evaluated returns of the runs (rliable's measures, by numpy); the lines saying what was written."""
    returns = final_returns(results)
    if not returns:
        return []
    out, lines = Path(cfg.run_dir) / "eval", []
    if len(returns) > 1:
        improvement = out / f"improvement_{setting(cfg)}.csv"
        atomic_write_bytes(improvement, lambda f: f.write(improvement_csv_text(returns, columns).encode()))
        lines.append(f"wrote {improvement} (P(X > Y) over runs' returns, 95% bootstrap CI, every two configurations)")
    thresholds, profiles = performance_profiles(returns)
    runs = {name: len(values) for name, values in returns.items()}
    stem = out / f"profiles_{setting(cfg)}"
    atomic_write_bytes(
        stem.with_suffix(".csv"), lambda f: f.write(profiles_csv_text(thresholds, profiles, runs, columns).encode())
    )
    title = f"Performance profiles ({measured(cfg)}): band = 95% bootstrap CI over runs"
    plot_performance_profiles(thresholds, profiles, runs, title, stem.with_suffix(".png"))
    lines.append(f"wrote {stem}.csv, .png, .pdf and .svg (fraction of runs above each return)")
    return lines


def markdown_header(results: list[dict[str, Any]], cfg) -> str:
    """What the table measured and the overrides every configuration shares, said once."""
    root = Path(cfg.run_dir)
    _, shared = distinguishing_labels(r["overrides"] for r in results)
    checkpoint = "best (" + BEST_MEANS + ")" if cfg.checkpoint == "best" else f"{cfg.checkpoint} (the final policy)"
    lines = [
        f"Evaluation of {shown(root.resolve().name)}: checkpoint {checkpoint}, {cfg.episodes} greedy episodes "
        f"per run with seeds {cfg.seed}..{cfg.seed + cfg.episodes - 1}; statistics across the runs (training "
        f"seeds) of each configuration.",
        "",
    ]
    warning = protocol_line(results)
    if warning is not None:
        lines += [warning, ""]
    if shared:
        lines += [f"Every configuration has: `{shown(' '.join(shared))}`", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, defaults: Path | None = None) -> int:
    from rl_hydra.config import CONF_DIR

    argv = sys.argv[1:] if argv is None else argv
    defaults = defaults or CONF_DIR / "evaluate.yaml"
    if {"-h", "--help"} & set(argv):
        print(usage(defaults))
        return 0
    try:
        cfg = parse_args(argv, defaults)
        print(report(evaluate_path(cfg), cfg))
    except WriteFailed as error:  # a full disk, a folder swapped for a link: a failure, not a refusal
        print(f"error: {shown(error)}", file=sys.stderr)
        return 1
    except (ConfigError, RunError) as error:
        print(f"error: {shown(error)}", file=sys.stderr)
        return 2
    return 0
