"""Evaluate a run or a whole sweep from its directory; tables, JSON and learning curves."""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rl_hydra.config import ConfigError, check_choice, check_int
from rl_hydra.runs.aggregate import (aggregate, configuration_of, eval_curve, markdown_table,
                                     plot_learning_curves, run_dirs, write_tables)
from rl_hydra.runs.loading import CHECKPOINTS, load_run
from rl_hydra.runs.run_dir import RunError, atomic_write_bytes


def parse_args(argv: list[str], defaults: Path):
    cfg = OmegaConf.load(defaults)
    OmegaConf.set_struct(cfg, True)
    try:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(argv))
    except OmegaConfBaseException as error:
        allowed = ", ".join(OmegaConf.to_container(OmegaConf.load(defaults)))
        raise ConfigError(f"{str(error).splitlines()[0]}; allowed keys: {allowed}") from None
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise ConfigError("run_dir is required: scripts/evaluate.py run_dir=<run or multirun directory>")
    cfg.episodes = check_int("episodes", cfg.episodes, minimum=1)
    cfg.seed = check_int("seed", cfg.seed, minimum=0)
    check_choice("checkpoint", cfg.checkpoint, CHECKPOINTS)
    return cfg


def evaluate_one(run_dir: Path, cfg) -> dict[str, Any]:
    run = load_run(run_dir, checkpoint=cfg.checkpoint, device=cfg.device)
    result = run.evaluate(episodes=cfg.episodes, seed=cfg.seed)
    result.update(checkpoint=cfg.checkpoint, step=run.step, run=str(run_dir))
    out = run_dir / "eval" / f"{cfg.checkpoint}.json"
    replaced = out.is_file()
    atomic_write_bytes(out, lambda f: f.write((json.dumps(result, indent=2) + "\n").encode()))
    result.update(eval_file=str(out), replaced=replaced)
    if cfg.video:
        from rl_hydra.runs.video import record_gif

        record_gif(run, run_dir / "eval" / "videos" / f"{cfg.checkpoint}.gif", seed=cfg.seed)
    return result


def evaluate_path(cfg) -> list[dict[str, Any]]:
    root = Path(cfg.run_dir)
    if not root.is_dir():
        raise RunError(f"run_dir={root} does not exist")
    runs = run_dirs(root)
    if not runs:
        raise RunError(f"run_dir={root} holds no run (no .hydra/config.yaml under it)")
    results = []
    for run_dir in runs:
        # a single run is named by its directory, a sweep's runs by their path inside the sweep
        name = run_dir.relative_to(root).as_posix() if run_dir != root else root.resolve().name
        base = {"run": name, "configuration": configuration_of(run_dir),
                "seed": OmegaConf.load(run_dir / ".hydra" / "config.yaml").get("seed")}
        summary = _summary(run_dir)
        try:
            if summary.get("status") == "failed":
                raise RunError(summary.get("reason") or "failed")
            result = evaluate_one(run_dir, cfg)
            results.append({**base, "status": "ok", "return_mean": result["return_mean"],
                            "return_std": result["return_std"], "step": result["step"],
                            "eval_file": result["eval_file"], "replaced": result["replaced"]})
        except (RunError, ConfigError) as error:
            if len(runs) == 1:
                raise
            results.append({**base, "status": "failed", "reason": str(error)})
    return results


def _summary(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def report(results: list[dict[str, Any]], cfg) -> str:
    root = Path(cfg.run_dir)
    lines = [f"| run | seed | step | return ({cfg.checkpoint}, {cfg.episodes} episodes) |", "|---|---|---|---|"]
    for r in results:
        value = f"{r['return_mean']:.1f} +- {r['return_std']:.1f}" if r["status"] == "ok" else f"failed: {r['reason']}"
        lines.append(f"| {r['run']} | {r['seed']} | {r.get('step', '-')} | {value} |")
    text = "\n".join(lines)
    written = [r for r in results if r["status"] == "ok"]
    replaced = sum(r["replaced"] for r in written)
    if len(written) == 1:
        text += f"\n\nwrote {written[0]['eval_file']}" + (" (replacing the earlier result)" if replaced else "")
    elif written:
        text += (f"\n\nwrote eval/{cfg.checkpoint}.json in {len(written)} run directories"
                 + (f" ({replaced} replacing earlier results)" if replaced else ""))
    if len(results) > 1:
        rows = aggregate(results)
        out = root / "eval"
        write_tables(rows, out)
        curves = defaultdict(list)
        for r in results:
            curves[r["configuration"]].append(eval_curve(root / r["run"]))
        plot_learning_curves(curves, out / "learning_curves.png")
        text += "\n\n" + markdown_table(rows) + f"\n\nwrote {out}/results.csv, results.md, learning_curves.png"
    return text


def main(argv: list[str] | None = None, defaults: Path | None = None) -> int:
    from rl_hydra.config import CONF_DIR

    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv, defaults or CONF_DIR / "evaluate.yaml")
        print(report(evaluate_path(cfg), cfg))
    except (ConfigError, RunError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
