"""Render the docs' result tables and plots from the records in results/.

    python scripts/render_results.py                 # rewrite the marked blocks of README.md, docs/*.md; draw docs/img/
    python scripts/render_results.py --check         # write nothing; list the blocks that differ (exit 1)
    python scripts/render_results.py --fingerprints  # first recompute each record's fingerprint, mark moved ones stale

A record is results/<name>.json, or results/tried/<name>.json for one that was not adopted (its
fields: results/README.md). A docs page marks where one goes, between `<!-- results:SPEC -->` and
`<!-- /results:SPEC -->` (the kinds of SPEC: rl_hydra/runs/results.py). A block whose record does
not exist yet is left as it is. The tables come only from the records: a doc that disagrees with
its data fails tests/runs/test_results.py.

--fingerprints trains each fingerprinted record's config for its first few hundred updates
(rl_hydra/verify/fingerprint.py, seconds each): a record whose fingerprint moved gets `stale` (today's
date) and renders as stale; one that matches again loses it. tests/runs/test_fingerprints.py fails
while a record's mark is not what its fingerprint says.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import textwrap
from pathlib import Path

from rl_hydra.runs.results import (
    blocks,
    differences,
    dump,
    fingerprints,
    load_claims,
    load_records,
    median_problems,
    read_pages,
    record_path,
    render_pages,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


# --- fingerprints --------------------------------------------------------------------------------
def mark_stale(records: dict) -> None:
    """Each fingerprinted record's `stale` mark set (today) where its fingerprint moved, dropped where it
    matches, and the record's file rewritten where its mark changed."""
    from rl_hydra.verify.fingerprint import comparable, fingerprint, matches  # torch: only for --fingerprints

    for name, record in records.items():
        stored = fingerprints(record)
        if not stored:
            continue
        elsewhere = [why for why in map(comparable, stored) if why is not None]
        if elsewhere:  # made with other library versions: these numbers do not compare
            print(f"{name}: not compared, made with {elsewhere[0]}")
            continue
        moved = not all(matches(each, fingerprint(each["overrides"])) for each in stored)
        if moved == ("stale" in record):
            continue
        path = ROOT / record_path(record)
        on_disk = json.loads(path.read_text())  # as written: without the rows' `from` filled in
        if moved:
            on_disk["stale"] = record["stale"] = datetime.date.today().isoformat()
        else:
            on_disk.pop("stale"), record.pop("stale")
        path.write_text(dump(on_disk))
        print(f"{'marked' if moved else 'unmarked'} {name} stale")


# --- plots ---------------------------------------------------------------------------------------
def draw(record: dict, path: Path) -> None:
    """One panel per `plot.panels` entry (default: all rows): each row's per-seed values of
    `plot.keys` as points with a bar at their median (and its `plot.reference` as a red bar); or,
    with `plot.x`, one curve per seed through the keys' values at those x; or, with `plot.curves`
    ([per-seed key, name] pairs), each side's per-seed curves at the row's `curve_steps`, thin, and
    their median, thick. `plot.lines` ([y, name] pairs): dashed levels across the points' panels;
    `plot.log`: a log y axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = record["plot"]
    every_row = [{"title": "", "rows": [r["id"] for r in record["rows"]]}]
    if "curves" in spec:  # a panel per row
        every_row = [{"title": r.get("plot_label", r["id"]), "rows": [r["id"]]} for r in record["rows"]]
    panels = spec.get("panels", every_row)
    figure, axes_list = plt.subplots(
        1, len(panels), figsize=(min(3.2 * len(panels) + 1.6, 11), 3.2), dpi=100, squeeze=False
    )
    for axes, panel in zip(axes_list[0], panels):
        rows = [next(r for r in record["rows"] if r["id"] == row_id) for row_id in panel["rows"]]
        if "curves" in spec:
            for (key, name), color in zip(spec["curves"], ("tab:blue", "tab:orange")):
                for row in rows:
                    curves = [c for c in (row.get("per_seed") or {}).get(key) or [] if c is not None]
                    for curve in curves:
                        axes.plot(row["curve_steps"], curve, color=color, alpha=0.3, linewidth=0.8)
                    if curves:
                        medians = [statistics.median(values) for values in zip(*curves)]
                        axes.plot(
                            row["curve_steps"],
                            medians,
                            color=color,
                            linewidth=2,
                            label=f"{name} ({len(curves)} seed{'s' * (len(curves) > 1)})",
                        )
            axes.xaxis.set_major_formatter(lambda value, _: f"{value / 1000:g}k")
            axes.set_xlabel(spec["xlabel"])
            axes.legend(fontsize=7)
        elif "x" in spec:
            for row in rows:
                for i, seed in enumerate(row.get("seeds", record["seeds"])):
                    axes.plot(
                        spec["x"], [row["per_seed"][k][i] for k in spec["keys"]], marker="o", label=f"seed {seed}"
                    )
            axes.set_xlabel(spec["xlabel"])
        else:
            for offset, (key, name) in enumerate(zip(spec["keys"], spec["names"])):
                points, medians = [], []
                for i, row in enumerate(rows):
                    values = [v for v in (row.get("per_seed") or {}).get(key) or [] if v is not None]
                    points += [(i + 0.25 * offset, v) for v in values]
                    if values:
                        medians.append((i + 0.25 * offset, statistics.median(values)))
                if points:
                    axes.scatter(*zip(*points), s=18, label=name, zorder=3)
                if medians:
                    axes.scatter(*zip(*medians), marker="_", s=300, color="black", zorder=4)
            references = [(i, r[spec["reference"]]) for i, r in enumerate(rows) if r.get(spec.get("reference"))]
            if references:
                axes.scatter(*zip(*references), marker="_", s=300, color="red", zorder=4)
            middle = 0.125 * (len(spec["keys"]) - 1)  # under the middle of a row's points
            axes.set_xticks(
                [i + middle for i in range(len(rows))], [r.get("plot_label", r["id"]) for r in rows], fontsize=8
            )
            axes.set_xlim(-0.5, len(rows) - 0.5 + 0.25 * (len(spec["keys"]) - 1))
            if spec.get("log"):
                axes.set_yscale("log")
            for value, name in spec.get("lines", []):  # levels to read the points against (a floor, a target)
                axes.axhline(value, color="gray", linestyle="--", linewidth=1, label=name, zorder=1)
        axes.set_title(panel["title"], fontsize=9)
        axes.grid(alpha=0.3)
    axes_list[0][0].set_ylabel(spec["ylabel"])
    if "x" in spec or len(spec.get("keys", [])) > 1:
        axes_list[0][-1].legend(fontsize=7)
    # about 12.5 characters of a 10-point title to the inch: a long title wraps rather than running off a narrow figure
    figure.suptitle(textwrap.fill(record["title"], width=int(figure.get_figwidth() * 12.5)), fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a block differs")
    parser.add_argument("--fingerprints", action="store_true", help="first mark the records whose code moved stale")
    args = parser.parse_args(argv)
    records, pages, claims = load_records(RESULTS), read_pages(ROOT), load_claims(RESULTS)
    if args.fingerprints and not args.check:
        mark_stale(records)
    medians = [problem for record in records.values() for problem in median_problems(record)]
    found = differences(records, pages, claims) + medians
    if args.check:
        print("\n".join(found) or "every block matches its record")
        sys.exit(1 if found else 0)
    for path, text in render_pages(records, pages, claims).items():
        if text != pages[path]:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    plots = {spec[len("plot:") :] for text in pages.values() for spec, _ in blocks(text) if spec.startswith("plot:")}
    for name in sorted(plots & set(records)):
        draw(records[name], ROOT / "docs" / "img" / f"{name}.png")
    for problem in medians:
        print(f"warning: {problem}", file=sys.stderr)


if __name__ == "__main__":
    main()
