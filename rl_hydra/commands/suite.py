"""A benchmark suite: named (algo, env, budget) rows, each trained over N seeds, then one table.

    python scripts/suite.py discrete                 # conf/suite/discrete.yaml, 5 seeds per row
    python scripts/suite.py discrete --seeds 3 --jobs 2 --out outputs/suites/discrete
    python scripts/suite.py discrete --rows iqn_lunar_lander --only-seeds 3 4   # some seeds of one row

Each row is one Hydra multirun, `train.py -m algo=A env=E seed=0,..,N-1`, into
`<out>/<algo>_<env>/`; its jobs are named from their overrides, so running the suite again skips
the finished runs and resumes interrupted ones (as any re-launched sweep does, docs/sweeps.md).
The tables are read back from each run's summary.json: the final evaluation return of every
seed, their median and interquartile mean (IQM) with a 95% percentile-bootstrap interval, and
the row's reference value beside them. They are written to `<out>/suite.md` and printed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rl_hydra.config import CONF_DIR
from rl_hydra.errors import BadArgument, ConfigError
from rl_hydra.runs.aggregate import bootstrap_ci, interquartile_mean
from rl_hydra.schema.keys import LARGEST_INT, Range, check

SUITE_DIR = CONF_DIR / "suite"
TRAIN = [sys.executable, "-m", "rl_hydra.commands.cli"]  # what train.py runs, also where the package is installed

COUNT = Range("integer", minimum=1, maximum=LARGEST_INT)  # a suite's seeds, a row's steps


@dataclass
class Row:
    algo: str
    env: str
    steps: int | None = None  # None: the preset's train.total_steps
    overrides: list[str] = field(default_factory=list)
    reference: float | None = None
    reference_source: str = ""

    @property
    def name(self) -> str:
        return f"{self.algo}_{self.env}"

    def train_overrides(self) -> list[str]:
        steps = [f"train.total_steps={self.steps}"] if self.steps is not None else []
        return [f"algo={self.algo}", f"env={self.env}", *steps, *self.overrides]


@dataclass
class Suite:
    name: str
    seeds: int
    rows: list[Row]


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def load_suite(name: str) -> Suite:
    """conf/suite/<name>.yaml, checked: every row names an algo and env option that exists."""
    path = SUITE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise BadArgument(f"suite {name!r} does not exist; choose one of: {', '.join(suite_names())}")
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    assert isinstance(raw, dict)  # a suite file is a mapping: rows, seeds
    rows = []
    for i, entry in enumerate(raw.get("rows") or []):
        unknown = set(entry) - set(Row.__dataclass_fields__)
        if unknown:
            raise BadArgument(
                f"suite {name}: row {i} has unknown keys {sorted(unknown)}; "
                f"allowed: {', '.join(Row.__dataclass_fields__)}"
            )
        row = Row(**entry)
        for group, choice in (("algo", row.algo), ("env", row.env)):
            if not (CONF_DIR / group / f"{choice}.yaml").is_file():
                raise BadArgument(f"suite {name}: row {i} has {group}={choice}, which is not a config option")
        if row.steps is not None:
            check(row.steps, f"suite {name} row {i} steps", COUNT)
        rows.append(row)
    if not rows:
        raise BadArgument(f"suite {name} has no rows")
    seeds = raw.get("seeds", 5)  # a suite file is not a run's config: its two counts are checked here
    check(seeds, f"suite {name} seeds", COUNT)
    return Suite(name, seeds, rows)


def sweep_command(row: Row, seeds: int | Sequence[int], out: Path, jobs: int, packed: bool = False) -> list[str]:
    """`train.py -m` over the row's seeds (an int N: 0, .., N-1; or the seeds themselves) into
    `<out>/<row name>` (jobs > 1: the joblib launcher; packed: the row's seeds in one process,
    hydra/launcher=packed). Each seed's job directory has the same name whichever seeds one command runs."""
    launcher = ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={jobs}"] if jobs > 1 else []
    if packed:
        launcher = ["hydra/launcher=packed"]
    seed_list = range(seeds) if isinstance(seeds, int) else seeds
    return [
        *TRAIN,
        "-m",
        *row.train_overrides(),
        f"seed={','.join(map(str, seed_list))}",
        f"hydra.sweep.dir={out / row.name}",
        *launcher,
    ]


def run_suite(
    suite: Suite, out: Path, jobs: int = 1, only_seeds: Sequence[int] | None = None, packed: bool = False
) -> list[str]:
    """Train every row (skipping finished runs), on all the suite's seeds or `only_seeds`;
    returns the rows whose sweep exited non-zero."""
    failed = []
    for row in suite.rows:
        command = sweep_command(row, suite.seeds if only_seeds is None else only_seeds, out, jobs, packed)
        print(f"suite {suite.name}: {row.name}: {shlex.join(command[2:])}", file=sys.stderr, flush=True)
        if subprocess.run(command).returncode != 0:
            failed.append(row.name)
    return failed


def row_results(row: Row, out: Path) -> list[dict[str, Any]]:
    """The summary.json of each finished seed of the row, by seed."""
    summaries = []
    for path in sorted((out / row.name).glob("*/summary.json")):
        summary = json.loads(path.read_text())
        if summary.get("status") == "completed":
            summaries.append(summary)
    return sorted(summaries, key=lambda s: s["seed"])


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def row_statistics(returns: list[float]) -> dict[str, float]:
    if not returns:
        return {}
    low, high = bootstrap_ci(returns, statistic=interquartile_mean, samples=10_000)
    return {"median": statistics.median(returns), "iqm": interquartile_mean(returns), "iqm_low": low, "iqm_high": high}


def tables(suite: Suite, out: Path) -> str:
    """The suite's markdown: one line per row, then each row's seeds."""
    head = [
        "| algo | env | steps | seeds | median | IQM [95% CI] | reference | median wall (s) |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    details = []
    for row in suite.rows:
        results = row_results(row, out)
        returns = [r["eval_return_mean"] for r in results]
        stats = row_statistics(returns)
        steps = results[0]["global_step"] if results else row.steps
        iqm = f"{fmt(stats['iqm'])} [{fmt(stats['iqm_low'])}, {fmt(stats['iqm_high'])}]" if stats else "-"
        wall = statistics.median(r["wall_time_s"] for r in results) if results else None
        head.append(
            f"| {row.algo} | {row.env} | {fmt(steps, 0)} | {len(results)}/{suite.seeds} | "
            f"{fmt(stats.get('median'))} | {iqm} | {fmt(row.reference)} | {fmt(wall, 0)} |"
        )
        per_seed = ", ".join(f"seed {r['seed']}: {fmt(r['eval_return_mean'])}" for r in results) or "no finished run"
        source = f" (reference: {row.reference_source})" if row.reference_source else ""
        details.append(f"- `{row.name}`: {per_seed}{source}")
    return "\n".join([f"## Suite `{suite.name}`", "", *head, "", *details]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", help=f"a conf/suite/ name: {', '.join(suite_names())}")
    parser.add_argument("--seeds", type=int, help="seeds per row (default: the suite's own)")
    parser.add_argument("--out", type=Path, help="where the runs go (default: outputs/suites/<suite>)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time within a row (joblib launcher)")
    parser.add_argument("--packed", action="store_true", help="a row's seeds in one process (docs/packed.md)")
    parser.add_argument("--rows", nargs="+", help="only these rows (<algo>_<env>)")
    parser.add_argument(
        "--only-seeds",
        type=int,
        nargs="+",
        metavar="SEED",
        help="train only these of the suite's seeds (0 to seeds - 1), e.g. to share a suite "
        "between machines; the table reports every finished run",
    )
    parser.add_argument("--table-only", action="store_true", help="write the table from the runs there, train nothing")
    args = parser.parse_args(argv)
    try:
        suite = load_suite(args.suite)
        if args.seeds is not None:
            check(args.seeds, "--seeds", COUNT)
            suite.seeds = args.seeds
        if args.rows:
            unknown = sorted(set(args.rows) - {r.name for r in suite.rows})
            if unknown:
                raise BadArgument(
                    f"--rows {' '.join(unknown)}: not rows of suite {suite.name}; "
                    f"choose among: {', '.join(r.name for r in suite.rows)}"
                )
            suite.rows = [r for r in suite.rows if r.name in args.rows]
        only_seeds = sorted(set(args.only_seeds)) if args.only_seeds else None
        outside = [seed for seed in only_seeds or [] if seed not in range(suite.seeds)]
        if outside:
            raise BadArgument(
                f"--only-seeds {' '.join(map(str, outside))}: suite {suite.name} has seeds "
                f"0 to {suite.seeds - 1} (--seeds sets how many)"
            )
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    out = args.out or Path("outputs") / "suites" / suite.name
    failed = [] if args.table_only else run_suite(suite, out, args.jobs, only_seeds, args.packed)
    out.mkdir(parents=True, exist_ok=True)
    text = tables(suite, out)
    (out / "suite.md").write_text(text)
    print(text)
    if failed:
        print(
            f"error: rows with failed runs: {', '.join(failed)} (see their sweep directories under {out})",
            file=sys.stderr,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
