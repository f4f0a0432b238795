"""Comparisons fair by default: a sweep's evaluation reports the final policy, each row names its
policy and protocol, one line says when the runs were not trained under one protocol, and
`protocol=shared` gives every algorithm one (docs/comparisons.md)."""

import csv
import shutil

import pytest

from rl_hydra import train
from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.runs.comparison import Protocol, checkpoint_label, mismatch
from tests.conftest import TINY, compose_config

QUICK = [*TINY, "algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2"]
PROTOCOL_KEYS = ("total_steps", "eval_every", "eval_episodes", "stop_at_return")


def protocol(cfg) -> tuple:
    return tuple(cfg.train[key] for key in PROTOCOL_KEYS)


def test_presets_differ_in_protocol_and_protocol_shared_gives_them_one():
    """The issue's finding: DQN, QR-DQN and IQN's CartPole presets each bring their own budget; with
    protocol=shared they train under one, with their learning values kept."""
    presets = {algo: compose_config(f"algo={algo}") for algo in ("dqn", "qr_dqn", "iqn")}
    assert len({protocol(cfg) for cfg in presets.values()}) > 1
    assert all(cfg.train.stop_at_return == 500 for cfg in presets.values())
    shared = {algo: compose_config(f"algo={algo}", "protocol=shared") for algo in presets}
    assert {protocol(cfg) for cfg in shared.values()} == {(100_000, 2_500, 10, None)}
    # conf/protocol/shared.yaml's budget is the longest CartPole preset's (docs/comparisons.md)
    assert max(cfg.train.total_steps for cfg in presets.values()) == 100_000 == presets["iqn"].train.total_steps
    for algo, cfg in shared.items():  # the presets' learning values are kept, and their names
        assert cfg.algo == presets[algo].algo and cfg.network == presets[algo].network, algo
        assert cfg.preset == presets[algo].preset, algo
    # the command line still wins over the shared protocol
    assert compose_config("algo=iqn", "protocol=shared", "train.total_steps=7000").train.total_steps == 7000


def test_a_row_names_its_policy_and_best_is_labelled_the_maximum():
    assert checkpoint_label("last", [50_000, 50_000]) == "last @ 50,000"
    assert checkpoint_label("last", [25_000, 50_000]) == "last @ 25,000-50,000"
    assert checkpoint_label("best", [10_000, 27_500], [20, 11]) == "best = max of 11-20 evals @ 10,000-27,500"
    assert str(Protocol(50_000, 2_500, 10, 500.0)) == "50,000 steps, eval every 2,500 (10 ep), stop at 500"


@pytest.mark.parametrize(
    "protocols, steps, says",
    [
        ([Protocol(50_000, 2_500, 10, None)] * 2, [50_000], None),
        ([Protocol(50_000, 2_500, 10, 500.0), Protocol(50_000, 5_000, 10, None)], [25_000, 50_000], "schedule"),
        ([Protocol(50_000, 2_500, 10, 500.0), Protocol(100_000, 2_500, 10, 500.0)], [50_000], "budget"),
        ([Protocol(50_000, 2_500, 10, 500.0), Protocol(50_000, 2_500, 10, None)], [50_000], "early stop"),
        ([Protocol(50_000, 2_500, 10, 500.0)] * 2, [25_000, 50_000], "different steps"),
    ],
)
def test_one_line_says_what_the_runs_differ_in(protocols, steps, says):
    line = mismatch(protocols, steps)
    if says is None:
        assert line is None
    else:
        assert says in line and "protocol=shared" in line and "\n" not in line
        assert ("from steps 25,000 to 50,000" in line) == (len(steps) > 1)


@pytest.fixture(scope="module")
def two_protocols(tmp_path_factory):
    """A sweep of two configurations trained under different evaluation schedules, two seeds each."""
    sweep = tmp_path_factory.mktemp("fair") / "sweep"
    for every in ("100", "150"):
        for seed in ("0", "1"):
            run_dir = sweep / f"eval_every={every},seed={seed}"
            train(*QUICK, f"train.eval_every={every}", f"seed={seed}", run_dir=run_dir)
    return sweep


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_sweeps_evaluation_is_the_final_policy_and_says_the_protocols_differ(two_protocols, tmp_path, capsys):
    sweep = shutil.copytree(two_protocols, tmp_path / "sweep")
    assert evaluate_main([f"run_dir={sweep}", "episodes=2"]) == 0  # no checkpoint given: the final policy
    out = capsys.readouterr().out
    rows = read_csv(sweep / "eval" / "results_last_2ep_seed0.csv")
    assert {row["policy"] for row in rows} == {"last @ 300"}
    assert sorted(row["protocol"] for row in rows) == [
        "300 steps, eval every 100 (2 ep), stop at 500",  # the DQN preset's early stop
        "300 steps, eval every 150 (2 ep), stop at 500",
    ]
    line = "Not one protocol: the runs differ in evaluation schedule (eval every 100 (2 ep) / eval every 150 (2 ep))"
    assert out.count(line) == 1
    markdown = (sweep / "eval" / "results_last_2ep_seed0.md").read_text()
    assert line in markdown and "| configuration | policy | protocol |" in markdown
    assert "checkpoint last (the final policy)" in markdown
    # best stays, labelled as the maximum over each run's evaluations (2 or 3 of them here)
    assert evaluate_main([f"run_dir={sweep}", "episodes=2", "checkpoint=best"]) == 0
    best = {row["configuration"]: row["policy"] for row in read_csv(sweep / "eval" / "results_best_2ep_seed0.csv")}
    assert best["train.eval_every=100"].startswith("best = max of 3 evals @ ")
    assert best["train.eval_every=150"].startswith("best = max of 2 evals @ ")
    header = (sweep / "eval" / "results_best_2ep_seed0.md").read_text()
    assert "the maximum over training's evaluations, an optimistic figure" in header


def test_a_sweep_under_one_protocol_gets_no_such_line(two_protocols, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for seed in ("0", "1"):
        shutil.copytree(two_protocols / f"eval_every=150,seed={seed}", sweep / f"eval_every=150,seed={seed}")
    assert evaluate_main([f"run_dir={sweep}", "episodes=2"]) == 0
    assert "Not one protocol" not in capsys.readouterr().out
    assert "Not one protocol" not in (sweep / "eval" / "results_last_2ep_seed0.md").read_text()
