"""scripts/seeds_table.py reads its seeds and the overrides after them (as its docstring writes them),
and tabulates finished runs into a record that results/ would take."""

import json
import subprocess
import sys

from rl_hydra.runs.results import check_record, median_problems
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import seeds_table  # noqa: E402


def test_overrides_after_the_seeds_are_not_taken_for_seeds():
    argv = ["--seeds", "0", "1", "2", "algo=iqn", "env=cartpole", "--out", "runs"]
    reordered = seeds_table.seeds_apart(argv)
    assert reordered == ["algo=iqn", "env=cartpole", "--out", "runs", "--seeds", "0", "1", "2"]
    assert seeds_table.seeds_apart(["algo=dqn", "--jobs", "2"]) == ["algo=dqn", "--jobs", "2"]


def test_finished_runs_become_a_record_with_their_medians(tmp_path):
    runs = []
    for seed, final in enumerate([100.0, 300.0, 200.0]):
        run = tmp_path / f"seed_{seed}"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps({"seed": seed, "eval_return_mean": final, "updates": 50}))
        runs.append(str(run))
    out = tmp_path / "toy_seeds.json"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "seeds_table.py"),
            "--runs",
            *runs,
            "--record",
            str(out),
            "--topic",
            "dqn",
            "algo=dqn",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert check_record(record, out.stem) == [] and median_problems(record) == []
    assert record["seeds"] == [0, 1, 2] and record["rows"][0]["summary"] == {"return": 200.0, "updates": 50}
    assert "| median | 200.0 |" in done.stdout


def test_a_record_of_several_rows_is_not_remade_in_place_and_nothing_runs(tmp_path):
    out = tmp_path / "two_rows.json"
    out.write_text(json.dumps({"rows": [{"id": "a"}, {"id": "b"}]}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "seeds_table.py"), "--record", str(out), "algo=dqn"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "several rows" in done.stderr.splitlines()[-1]
    assert json.loads(out.read_text()) == {"rows": [{"id": "a"}, {"id": "b"}]}
