"""results/: every published figure is a record (adopted ones in results/, the others in
results/tried/), and every docs table is rendered from one (rl_hydra/runs/results.py, through
scripts/render_results.py). Re-rendering in memory must give the docs as they are."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from rl_hydra.runs import results
from tests.conftest import ROOT

RESULTS = ROOT / "results"
RECORDS = results.load_records(RESULTS)  # raises, naming the file, on a record not well formed or misplaced
PAGES = results.read_pages(ROOT)  # README.md and docs/*.md
CLAIMS = results.load_claims(RESULTS)


def test_every_docs_table_is_what_its_record_renders():
    found = results.differences(RECORDS, PAGES, CLAIMS)
    assert not found, "docs disagree with results/ (python scripts/render_results.py rewrites them): " + ", ".join(
        found
    )


def test_render_results_check_says_every_block_matches():
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_results.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0 and check.stdout == "every block matches its record\n", check.stdout + check.stderr


def test_tried_records_live_in_results_tried_and_adopted_ones_in_results():
    for folder, status in ((RESULTS, "adopted"), (RESULTS / "tried", "not adopted")):
        statuses = {path.name: json.loads(path.read_text())["status"] for path in folder.glob("*.json")}
        assert statuses and set(statuses.values()) == {status}, {n: s for n, s in statuses.items() if s != status}
    assert len(RECORDS) == len([*RESULTS.glob("*.json"), *RESULTS.glob("tried/*.json")])


def test_every_summary_is_what_its_seeds_give():
    found = [problem for record in RECORDS.values() for problem in results.median_problems(record)]
    assert not found, found


def test_a_row_label_that_counts_critics_quantiles_or_widths_says_what_its_config_has():
    """A label is written by hand; where it names the critics, quantiles or the critics' widths of a
    row with the overrides it ran (`TQC (2 critics x 25 quantiles, 256-256)`), the composed config has them."""
    from tests.conftest import compose_config

    patterns = {"critics": r"\b(\d+|twin) critics", "quantiles": r"\b(\d+) quantiles", "widths": r"\b(\d+(?:-\d+)+)\b"}
    checked = []
    for name, record in RECORDS.items():
        for row in record["rows"]:
            label, overrides = str(row.get("label", "")), row.get("overrides")
            claims = {what: re.search(pattern, label) for what, pattern in patterns.items()}
            if overrides is None or not any(claims.values()):
                continue
            cfg = compose_config(*overrides)
            critic = cfg.network.get("critic")
            has = {
                "critics": cfg.algo.get("ensemble_size"),
                "quantiles": cfg.algo.get("num_quantiles"),
                "widths": "-".join(map(str, critic.hidden_sizes)) if critic is not None else None,
            }
            for what, claim in claims.items():
                if claim is None or has[what] is None:
                    continue
                said = {"twin": "2"}.get(claim.group(1), claim.group(1))
                assert said == str(has[what]), f"{name} row {row['id']}: {label!r} says {said} {what}; has {has[what]}"
                checked.append((name, row["id"], what))
    assert ("step_cost_mujoco_cpu", "tqc", "critics") in checked


def test_every_block_names_a_record_or_topic_that_exists():
    topics = {record["topic"] for record in RECORDS.values()}
    for text in PAGES.values():
        for spec, _ in results.blocks(text):
            kind, _, name = spec.rpartition(":")
            if kind in ("tried", "index"):
                assert name in topics, spec
            elif kind == "claims":
                assert name in CLAIMS, f"<!-- results:{spec} --> names no results/claims/{name}.json"
            else:
                name = name.split("/")[0]
                assert name in RECORDS, f"<!-- results:{spec} --> names no record"
                row = spec.rpartition(":")[2].partition("/")[2]
                assert not row or row in [r["id"] for r in RECORDS[name]["rows"]], spec


def test_every_record_is_shown_or_listed_in_the_docs():
    shown = results.shown_records(PAGES)
    listed = {spec for text in PAGES.values() for spec, _ in results.blocks(text)}
    unseen = [
        name
        for name, record in RECORDS.items()
        if name not in shown
        and f"{'tried' if record['status'] == 'not adopted' else 'index'}:{record['topic']}" not in listed
    ]
    assert not unseen, f"records that no docs page shows or lists: {unseen}"


def test_every_plot_block_has_its_image():
    for text in PAGES.values():
        for spec, _ in results.blocks(text):
            if spec.startswith("plot:"):
                assert (ROOT / "docs" / "img" / f"{spec[5:]}.png").is_file(), f"{spec}: run scripts/render_results.py"


# --- the renderer on a record made here ---------------------------------------------------------
RECORD = {
    "name": "toy",
    "title": "A toy",
    "topic": "toys",
    "status": "adopted",
    "reason": None,
    "command": "python train.py algo=dqn",
    "overrides": ["algo=dqn"],
    "seeds": [0, 1, 2],
    "commit": "abc1234",
    "date": None,
    "machine": {"cpu": "x", "cores": 2, "load": "1"},
    "peer": None,
    "columns": [
        {"header": "row", "format": "{label}", "align": "left"},
        {"header": "median", "format": "{return:.1f}"},
        {"header": "per seed", "format": "{return*:.0f}"},
    ],
    "seed_columns": [{"header": "return", "format": "{return:.1f}"}],
    "rows": [
        {"id": "a", "label": "first", "per_seed": {"return": [1.0, 2.0, 4.0]}, "summary": {"return": 2.0}},
        {"id": "b", "label": "second", "summary": {}},
    ],
}
PAGE = (
    "intro\n<!-- results:toy -->\nstale\n<!-- /results:toy -->\n<!-- results:toy/a -->\n<!-- /results:toy/a -->\n"
    "<!-- results:later -->\nto come\n<!-- /results:later -->\n"
)


def test_a_long_title_wraps_inside_a_one_panel_figure(tmp_path, monkeypatch):
    import matplotlib.figure

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import render_results

    saved, save = [], matplotlib.figure.Figure.savefig

    def save_and_measure(figure, *args, **kwargs):
        save(figure, *args, **kwargs)
        (title,) = figure.texts  # the suptitle, the figure's only text of its own
        saved.append((title.get_text(), title.get_window_extent(), figure.bbox))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save_and_measure)
    record = {
        **RECORD,
        "rows": RECORD["rows"][:1],
        "plot": {"keys": ["return"], "names": ["ours"], "ylabel": "return"},
        "title": "A record title much longer than the sixty characters that fit across one panel",
    }
    render_results.draw(record, tmp_path / "toy.png")
    ((title, box, figure),) = saved
    assert "\n" in title and title.replace("\n", " ") == record["title"]
    assert 0 <= box.x0 and box.x1 <= figure.x1


def test_a_plots_lines_are_drawn_across_its_points_with_their_names(tmp_path, monkeypatch):
    import matplotlib.axes

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import render_results

    levels, draw_line = [], matplotlib.axes.Axes.axhline

    def kept(axes, y=0, *args, **kwargs):
        levels.append((y, kwargs.get("label")))
        return draw_line(axes, y, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "axhline", kept)
    plot = {"keys": ["return"], "names": ["ours"], "ylabel": "ratio", "lines": [[1.0, "the floor"], [1.5, "target"]]}
    render_results.draw({**RECORD, "plot": plot}, tmp_path / "toy.png")
    assert levels == [(1.0, "the floor"), (1.5, "target")] and (tmp_path / "toy.png").stat().st_size > 0


def test_a_page_links_a_record_where_its_status_puts_it(tmp_path):
    (tmp_path / "tried").mkdir()
    (tmp_path / "toy.json").write_text(json.dumps(RECORD))
    dropped = {**RECORD, "name": "dropped", "title": "A dropped toy", "status": "not adopted", "reason": "it did worse"}
    (tmp_path / "tried" / "dropped.json").write_text(json.dumps(dropped))
    records = results.load_records(tmp_path)
    page = tmp_path / "page.md"
    text = (
        "<!-- results:dropped -->\n<!-- /results:dropped -->\n"
        "<!-- results:tried:toys -->\n<!-- /results:tried:toys -->\n"
    )
    rendered = results.render_pages(records, {page: text})[page]
    assert "([record](../results/tried/dropped.json))" in rendered  # its table's footer
    assert "| [A dropped toy](../results/tried/dropped.json) |" in rendered  # its line in the tried table
    assert results.footer(records["toy"]).endswith("([record](../results/toy.json))")


@pytest.mark.parametrize(
    "folder, status, where", [("", "not adopted", "results/tried/toy.json"), ("tried", "adopted", "results/toy.json")]
)
def test_a_record_in_the_wrong_folder_for_its_status_is_refused(tmp_path, folder, status, where):
    (tmp_path / "tried").mkdir()
    reason = "it did worse" if status == "not adopted" else None
    (tmp_path / folder / "toy.json").write_text(json.dumps({**RECORD, "status": status, "reason": reason}))
    with pytest.raises(ValueError, match=f"toy.json: a record whose status is '{status}' lives in {where}"):
        results.load_records(tmp_path)


def test_blocks_are_filled_from_the_record_and_a_missing_record_leaves_its_block(tmp_path):
    (tmp_path / "toy.json").write_text(json.dumps(RECORD))
    records = results.load_records(tmp_path)
    page = tmp_path / "page.md"
    rendered = results.render_pages(records, {page: PAGE})[page]
    assert "| first | 2.0 | 1, 2, 4 |\n| second | - | - |" in rendered
    assert "| 2 | 4.0 |\n| median | 2.0 |" in rendered
    assert "<!-- results:later -->\nto come\n" in rendered
    assert results.differences(records, {page: rendered}) == []
    assert results.differences(records, {page: rendered.replace("| 2.0 |", "| 2.1 |", 1)}) == [
        "page.md: <!-- results:toy -->"
    ]


def test_a_record_the_current_scripts_no_longer_make_is_linked_without_its_gone_command(tmp_path):
    gone = {**RECORD, "name": "gone", "command": "python scripts/benchmarks/bench_gone.py", "rerun": None}
    (tmp_path / "gone.json").write_text(json.dumps(gone))
    records = results.load_records(tmp_path)
    page = tmp_path / "page.md"
    for text in (
        "<!-- results:gone -->\n<!-- /results:gone -->\n",
        "<!-- results:index:toys -->\n<!-- /results:index:toys -->\n",
    ):
        rendered = results.render_pages(records, {page: text})[page]
        assert "gone.json" in rendered and "made by a script since changed or removed" in rendered.lower()
        assert "bench_gone" not in rendered


def test_a_summary_that_is_not_the_median_of_its_seeds_is_named():
    wrong = {**RECORD, "rows": [{**RECORD["rows"][0], "summary": {"return": 2.5}}]}
    assert results.median_problems(wrong) == ["toy/a: the median of return is 2, the summary says 2.5"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"status": "not adopted"}, "one-line reason"),
        ({"status": "dropped"}, "status 'dropped'"),
        ({"machine": {"cpu": "x"}}, "machine needs cpu, cores and load"),
        ({"rows": [{"id": "a", "per_seed": {"return": [1.0]}}]}, "per_seed return has not one value per seed (3)"),
    ],
)
def test_a_record_that_is_not_well_formed_is_refused_naming_its_file(tmp_path, change, message):
    (tmp_path / "toy.json").write_text(json.dumps({**RECORD, **change}))
    with pytest.raises(ValueError, match=re.escape(message)):
        results.load_records(tmp_path)


def test_every_link_to_a_record_names_one_that_exists_where_it_lives():
    where = {results.record_path(record) for record in RECORDS.values()}
    for path, text in PAGES.items():
        for linked in re.findall(r"\]\(\.\./(results/[^)]+\.json)\)", text):
            assert linked in where, f"{path.name} links {linked}, which is no record's file"
