"""scripts/evaluate.py (rl-hydra-eval): one run, a sweep, a folder of runs; its tables and curves."""

import csv
import json
import runpy
import shutil
import sys

import numpy as np
import pytest
import yaml

from rl_hydra import train
from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.runs.aggregate import (
    bootstrap_ci,
    configuration_of,
    distinguishing_labels,
    interquartile_mean,
    legend_label,
    line_styles,
    run_dirs,
)
from tests.conftest import ROOT, TINY

QUICK = [*TINY, "algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2"]


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    return train(*QUICK, run_dir=tmp_path_factory.mktemp("runs") / "dqn")


@pytest.fixture(scope="module")
def trained_sweep(tmp_path_factory):
    """Two configurations x two seeds, trained once for the module; tests take a copy (`sweep`)."""
    sweep = tmp_path_factory.mktemp("sweeps") / "sweep"
    for gamma in ("0.9", "0.99"):
        for seed in ("0", "1"):
            train(*QUICK, f"algo.gamma={gamma}", f"seed={seed}", run_dir=sweep / f"algo.gamma={gamma},seed={seed}")
    return sweep


@pytest.fixture
def sweep(trained_sweep, tmp_path):
    return shutil.copytree(trained_sweep, tmp_path / "sweep")


def listing(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_evaluate_script_on_one_run_writes_json_named_by_its_settings(dqn_run, capsys):
    assert evaluate_main([f"run_dir={dqn_run.path}", "episodes=3", "checkpoint=last", "seed=4"]) == 0
    result = json.loads((dqn_run.path / "eval" / "last_3ep_seed4.json").read_text())
    assert len(result["returns"]) == 3 and result["step"] == 300
    assert (result["checkpoint"], result["episodes"], result["seed"]) == ("last", 3, 4)
    out = capsys.readouterr().out
    assert f"| {dqn_run.path.name} | 0 | 300 |" in out  # named by its directory, not "."
    assert "return (last, 3 episodes, seed 4)" in out


def test_evaluating_a_run_names_it_and_says_where_it_wrote(dqn_run, capsys):
    for time in ("first", "again"):
        assert evaluate_main([f"run_dir={dqn_run.path}", "episodes=2"]) == 0
        out = capsys.readouterr().out
        assert f"| {dqn_run.path.name} | 0 |" in out, out
        wrote = f"wrote {dqn_run.path / 'eval' / 'last_2ep_seed0.json'}"  # the final policy by default
        assert wrote in out and (("replacing the earlier result" in out) == (time == "again")), out


def test_evaluate_script_bad_arguments_exit_2(tmp_path, capsys):
    assert evaluate_main([f"run_dir={tmp_path / 'nope'}"]) == 2
    assert evaluate_main(["episodez=3", f"run_dir={tmp_path}"]) == 2
    assert evaluate_main([f"run_dir={tmp_path}", "checkpoint=first"]) == 2
    assert evaluate_main([f"run_dir={tmp_path}", "video=maybe"]) == 2
    assert evaluate_main([f"run_dir={tmp_path}", "episodes"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 5 and all(line.startswith("error:") for line in errors)
    assert "checkpoint='first' is not allowed; choose one of: best, last" in errors[2]
    assert "video='maybe' is not allowed; choose one of: true, false" in errors[3]


def test_a_write_that_fails_is_exit_1_not_a_refusal(dqn_run, monkeypatch, capsys):
    """A full disk (or a folder swapped for a link) as the result is written: the evaluation failed,
    exit 1 as docs/runs.md's table gives a failed write; 2 is for what was refused before any write."""
    from tests.runs.test_run_record import DiskFull

    DiskFull(monkeypatch, "best_2ep_seed77.json")  # settings no other test evaluates
    assert evaluate_main([f"run_dir={dqn_run.path}", "episodes=2", "checkpoint=best", "seed=77"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: writing ") and "the disk is full" in lines[0], lines
    assert not (dqn_run.path / "eval" / "best_2ep_seed77.json").exists()


def test_a_typo_gets_the_closest_key_in_its_one_line(tmp_path, capsys):
    assert evaluate_main([f"run_dir={tmp_path}", "episode=3"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: episode is not a key of evaluate; did you mean episodes?"), line


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_keys_with_their_comments_and_exits_0(flag, capsys):
    assert evaluate_main([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rl-hydra-eval run_dir=")
    for line in (ROOT / "conf" / "evaluate.yaml").read_text().splitlines():
        if line and not line.startswith("#"):
            assert line in out  # every key, its default and its comment


def test_help_from_the_script_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["scripts/evaluate.py", "--help"])
    with pytest.raises(SystemExit) as exit_status:
        runpy.run_path(str(ROOT / "scripts" / "evaluate.py"), run_name="__main__")
    assert exit_status.value.code == 0 and "episodes: 20" in capsys.readouterr().out


def test_a_folder_without_a_run_is_one_error_line_and_nothing_written(tmp_path, dqn_run, capsys):
    folder = tmp_path / "not_a_run"
    (folder / ".hydra").mkdir(parents=True)  # what Hydra leaves of a job that never ran
    shutil.copy(dqn_run.path / ".hydra" / "config.yaml", folder / ".hydra" / "config.yaml")
    (folder / "notes.txt").write_text("mine")
    before = listing(folder)
    assert evaluate_main([f"run_dir={folder}", "episodes=2"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"error: run_dir={folder} holds no run") and not captured.out
    assert listing(folder) == before


def test_a_folder_of_runs_skips_trackers_copies_and_never_writes_into_them(tmp_path, dqn_run, capsys):
    outputs = tmp_path / "outputs"
    shutil.copytree(dqn_run.path, outputs / "2026-11-25" / "dqn")
    shutil.copytree(dqn_run.path, outputs / "2026-11-25" / "dqn_again")
    shutil.rmtree(outputs / "2026-11-25" / "dqn" / "eval", ignore_errors=True)
    # MLflow's artifact copy of a run (.hydra/, summary.json, checkpoints/best.pt), and W&B's and mlruns' alike
    for store in ("mlartifacts/1/0123abcd/artifacts", "mlruns/1/0123abcd/artifacts", "wandb/run-x/files"):
        copy = outputs / store
        shutil.copytree(dqn_run.path / ".hydra", copy / ".hydra")
        shutil.copy(dqn_run.path / "summary.json", copy / "summary.json")
        shutil.copytree(dqn_run.path / "checkpoints", copy / "checkpoints")
    stores = {store: listing(outputs / store) for store in ("mlartifacts", "mlruns", "wandb")}
    assert run_dirs(outputs) == [outputs / "2026-11-25" / "dqn", outputs / "2026-11-25" / "dqn_again"]
    assert evaluate_main([f"run_dir={outputs}", "episodes=2"]) == 0
    assert "| 2026-11-25/dqn | 0 |" in capsys.readouterr().out
    assert {store: listing(outputs / store) for store in stores} == stores
    # pointing at the copy itself is refused, with nothing written
    assert evaluate_main([f"run_dir={outputs / 'mlartifacts/1/0123abcd/artifacts'}", "episodes=2"]) == 2
    assert "is inside mlartifacts/" in capsys.readouterr().err
    assert listing(outputs / "mlartifacts") == stores["mlartifacts"]


def test_evaluate_script_aggregates_a_two_config_two_seed_sweep(sweep, capsys):
    # a failed job is listed, not averaged and not a crash
    failed = sweep / "algo.gamma=0.99,seed=2"
    shutil.copytree(sweep / "algo.gamma=0.99,seed=1", failed)
    (failed / "summary.json").write_text(json.dumps({"status": "failed", "reason": "non-finite loss"}))
    assert evaluate_main([f"run_dir={sweep}", "episodes=2"]) == 0
    out = capsys.readouterr().out
    assert "non-finite loss" in out
    rows = read_csv(sweep / "eval" / "results_last_2ep_seed0.csv")
    assert list(rows[0])[:9] == [
        "configuration",
        "runs",
        "seeds",
        "mean",
        "std",
        "iqm",
        "iqm_ci_low",
        "iqm_ci_high",
        "failed",
    ]
    # only what differs between the configurations labels them; the shared overrides are said once
    assert [row["configuration"] for row in rows] == ["algo.gamma=0.9", "algo.gamma=0.99"]
    assert {(row["checkpoint"], row["episodes"], row["eval_seed"]) for row in rows} == {("last", "2", "0")}
    for row in rows:
        for column in ("mean", "std", "iqm", "iqm_ci_low", "iqm_ci_high"):
            assert len(row[column].lstrip("-").replace(".", "").lstrip("0")) <= 6, row[column]
    markdown = (sweep / "eval" / "results_last_2ep_seed0.md").read_text()
    assert "checkpoint last (the final policy), 2 greedy episodes per run with seeds 0..1" in markdown
    assert "Every configuration has: `algo.gradient_steps=2 algo.learning_starts=100" in markdown
    assert "algo.gamma=0.99,seed=2" in markdown and markdown.count("train.eval_every=150") == 1
    png = (sweep / "eval" / "learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_evaluations_with_other_settings_sit_beside_each_other(sweep, capsys):
    assert evaluate_main([f"run_dir={sweep}", "episodes=3"]) == 0
    first = (sweep / "eval" / "results_last_3ep_seed0.csv").read_text()
    assert evaluate_main([f"run_dir={sweep}", "episodes=2", "checkpoint=best"]) == 0
    out = capsys.readouterr().out
    assert "replacing" not in out
    assert (sweep / "eval" / "results_last_3ep_seed0.csv").read_text() == first
    by_setting = [
        f"{kind}_{setting}.{ext}"
        for setting in ("last_3ep_seed0", "best_2ep_seed0")
        for kind, ext in (
            ("improvement", "csv"),
            *(("profiles", ext) for ext in ("csv", "pdf", "png", "svg")),
            ("results", "csv"),
            ("results", "md"),
        )
    ]
    curves = [f"learning_curves.{ext}" for ext in ("csv", "pdf", "png", "svg")]
    assert sorted(p.name for p in (sweep / "eval").iterdir()) == sorted(curves + by_setting)
    assert sorted(p.name for p in (sweep / "algo.gamma=0.9,seed=0" / "eval").iterdir()) == [
        "best_2ep_seed0.json",
        "last_3ep_seed0.json",
    ]
    # the same settings again replace their files, and say so
    assert evaluate_main([f"run_dir={sweep}", "episodes=3"]) == 0
    out = capsys.readouterr().out
    assert "wrote eval/last_3ep_seed0.json in 4 run directories (4 replacing earlier results" in out
    assert "results_last_3ep_seed0.csv and results_last_3ep_seed0.md (replacing an earlier evaluation" in out
    assert (sweep / "eval" / "results_last_3ep_seed0.csv").read_text() == first  # the same seeds, the same figures


def provenance(commit, dirty=False, version="0.1.0", torch="2.13.0") -> dict:
    session = {
        "started": "2026-11-25T20:40:01+00:00",
        "status": "completed",
        "rl_hydra": version,
        "git_commit": commit,
        "git_dirty": dirty if commit else None,
        "torch": torch,
    }
    return {"sessions": [{**session, "git_commit": "f" * 40, "torch": "2.4.0"}, session]}  # the last one counts


def test_provenance_columns_name_each_configurations_code_and_torch(sweep):
    (sweep / "algo.gamma=0.9,seed=0" / "provenance.json").write_text(json.dumps(provenance("0123abcd" * 5, True)))
    (sweep / "algo.gamma=0.9,seed=1" / "provenance.json").write_text(json.dumps(provenance("0123abcd" * 5, True)))
    (sweep / "algo.gamma=0.99,seed=0" / "provenance.json").write_text(json.dumps(provenance(None)))
    (sweep / "algo.gamma=0.99,seed=1" / "provenance.json").write_text("{not json")  # tolerated as unknown
    assert evaluate_main([f"run_dir={sweep}", "episodes=2"]) == 0
    assert "code" not in read_csv(sweep / "eval" / "results_last_2ep_seed0.csv")[0]  # off by default
    assert evaluate_main([f"run_dir={sweep}", "episodes=2", "provenance=true"]) == 0
    rows = read_csv(sweep / "eval" / "results_last_2ep_seed0.csv")
    assert [(row["code"], row["torch"]) for row in rows] == [
        ("0123abcd-dirty", "2.13.0"),
        ("0.1.0 unknown", "2.13.0 unknown"),
    ]
    markdown = (sweep / "eval" / "results_last_2ep_seed0.md").read_text()
    assert "| code | torch | failed |" in markdown and "| 0123abcd-dirty | 2.13.0 |" in markdown


def overrides_dir(tmp_path, name: str, overrides: list[str]):
    run = tmp_path / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    return run


def test_a_resumed_runs_configuration_has_each_key_once_with_its_last_value(tmp_path):
    resumed = overrides_dir(
        tmp_path, "resumed", ["algo=dqn", "seed=3", "train.total_steps=20000", "train.total_steps=25000"]
    )
    assert configuration_of(resumed) == ("algo=dqn", "train.total_steps=25000")


def test_labels_show_only_what_differs_between_configurations():
    shared = ("train.eval_episodes=3", "train.eval_every=500")
    labels, common = distinguishing_labels([("algo=dqn", *shared), ("algo=iqn", *shared), shared])
    assert labels == {
        ("algo=dqn", *shared): "algo=dqn",
        ("algo=iqn", *shared): "algo=iqn",
        shared: "(only the shared overrides)",
    }
    assert common == list(shared)
    alone, common = distinguishing_labels([("algo=dqn", *shared)])
    assert alone == {("algo=dqn", *shared): "algo=dqn train.eval_episodes=3 train.eval_every=500"} and common == []


def test_every_configuration_gets_its_own_line_style_and_long_labels_wrap():
    for n in (3, 12, 40, 45):
        styles = line_styles(n)
        assert len(styles) == n and len({(tuple(color), style) for color, style, _ in styles}) == n
    assert line_styles(12)[0][1] == "-" and line_styles(12)[10][1] == "--"  # tab10's colors again, dashed
    label = legend_label(" ".join(f"algo.key_{i}=value_{i}" for i in range(8)), runs=3)
    assert all(len(line) <= 60 for line in label.splitlines()) and label.endswith("(n=3)")


@pytest.mark.filterwarnings("error")
def test_learning_curves_draw_every_configuration_without_touching_matplotlibs_backend(tmp_path):
    import matplotlib

    from rl_hydra.runs.aggregate import plot_learning_curves

    backend = matplotlib.get_backend()
    steps = np.arange(1000, 10001, 1000)
    curves = {f"config={i}": [(steps, steps / 100.0 + i), (steps, steps / 90.0 + i)] for i in range(12)}
    curves["one_evaluation"] = [(np.array([5000]), np.array([10.0])), (np.array([5000]), np.array([20.0]))]
    plot_learning_curves(curves, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert matplotlib.get_backend() == backend


def test_video_records_a_gif(dqn_run):
    pytest.importorskip("pygame")
    assert evaluate_main([f"run_dir={dqn_run.path}", "episodes=1", "video=true", "seed=2"]) == 0
    assert (dqn_run.path / "eval" / "videos" / "last_seed2.gif").read_bytes().startswith(b"GIF8")


def test_interquartile_mean_and_bootstrap_by_hand():
    assert interquartile_mean([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(4.5)  # drops 1, 2 and 7, 100
    assert interquartile_mean([3, 5]) == 4.0
    low, high = bootstrap_ci([10.0, 10.0, 10.0])
    assert low == high == 10.0
    low, high = bootstrap_ci([0.0, 100.0, 50.0, 25.0])
    assert 0.0 <= low < high <= 100.0


@pytest.mark.parametrize(
    "value, shown",
    [
        (-0.4825, "-0.4825"),
        (0.21, "0.21"),
        (500.0, "500"),
        (212.53, "212.5"),
        (12345.67, "12346"),
        (63.900000000000006, "63.9"),
        (0.0, "0"),
    ],
)
def test_returns_print_with_the_precision_they_have(value, shown):
    """POPGym's and MiniGrid's returns are fractions: one decimal printed -0.4825 as -0.5."""
    from rl_hydra.runs.aggregate import shown_return

    assert shown_return(value) == shown


def test_the_console_table_shows_a_fractional_return_as_it_is():
    from rl_hydra.commands.report import report

    cfg = type("Cfg", (), {"checkpoint": "best", "episodes": 20, "seed": 0})()
    row = {
        "run": "r",
        "seed": 0,
        "step": 10,
        "status": "ok",
        "return_mean": -0.4825,
        "return_std": 0.21,
        "eval_file": "r/eval/x.json",
        "replaced": False,
    }
    assert "| r | 0 | 10 | -0.4825 +- 0.2100 |" in report([row], cfg)


def test_the_console_table_rounds_every_return_of_a_sweep_to_the_same_decimals(monkeypatch):
    from rl_hydra.commands import report as report_module
    from rl_hydra.commands.report import report

    monkeypatch.setattr(report_module, "sweep_report", lambda results, cfg: "")  # the table alone, nothing written
    cfg = type("Cfg", (), {"checkpoint": "best", "episodes": 20, "seed": 0})()
    rows = [
        {
            "run": name,
            "seed": 0,
            "step": 10,
            "status": "ok",
            "return_mean": mean,
            "return_std": std,
            "eval_file": f"{name}/eval/x.json",
            "replaced": False,
        }
        for name, mean, std in (("a", 9.4, 1.02), ("b", 11.8, 1.939), ("c", 500.0, 0.0))
    ]
    table = report([*rows, {"run": "d", "seed": 0, "status": "failed", "reason": "no checkpoint"}], cfg)
    for line in (
        "| a | 0 | 10 | 9.4 +- 1.0 |",
        "| b | 0 | 10 | 11.8 +- 1.9 |",
        "| c | 0 | 10 | 500.0 +- 0.0 |",
        "| d | 0 | - | failed: no checkpoint |",
    ):
        assert line in table, table
    assert "| c | 0 | 10 | 500 +- 0 |" in report(rows[2:], cfg)  # alone, as it is
