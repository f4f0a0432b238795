"""The suite command: rows from conf/suite/, one sweep per row, resumable, one table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rl_hydra.commands import suite
from rl_hydra.errors import ConfigError
from tests.conftest import ROOT


@pytest.mark.parametrize("name", suite.suite_names())
def test_every_shipped_suite_loads_and_names_options_that_exist(name):
    loaded = suite.load_suite(name)
    assert loaded.rows and loaded.seeds >= 1


def test_a_bad_suite_is_one_line(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="suite 'nope' does not exist; choose one of: .*discrete"):
        suite.load_suite("nope")
    monkeypatch.setattr(suite, "SUITE_DIR", tmp_path)
    (tmp_path / "bad.yaml").write_text("rows:\n  - {algo: dqn, env: cartpol}\n")
    with pytest.raises(ConfigError, match="row 0 has env=cartpol, which is not a config option"):
        suite.load_suite("bad")
    (tmp_path / "typo.yaml").write_text("rows:\n  - {algo: dqn, env: cartpole, step: 10}\n")
    with pytest.raises(ConfigError, match=r"row 0 has unknown keys \['step'\]"):
        suite.load_suite("typo")


def test_statistics_by_hand():
    stats = suite.row_statistics([1.0, 2.0, 3.0, 4.0, 100.0])
    assert stats["median"] == 3.0 and stats["iqm"] == 3.0  # IQM of 5 drops one at each end
    assert stats["iqm_low"] <= stats["iqm"] <= stats["iqm_high"]


def run_suite(out, *args):
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "suite.py"),
            "smoke",
            "--rows",
            "dqn_acrobot",
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


@pytest.mark.slow  # three subprocess runs of the suite command: about 20 s on a quiet machine
def test_the_smoke_suite_trains_its_seeds_writes_the_table_and_skips_them_when_run_again(tmp_path):
    first = run_suite(tmp_path, "--only-seeds", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    assert [json.loads(p.read_text())["seed"] for p in (tmp_path / "dqn_acrobot").glob("*/summary.json")] == [1]
    assert "| dqn | acrobot | 300 | 1/2 |" in (tmp_path / "suite.md").read_text()
    seed_1 = next((tmp_path / "dqn_acrobot").glob("*/summary.json")).stat().st_mtime_ns

    result = run_suite(tmp_path)  # seed 0 trains; seed 1 is finished
    assert result.returncode == 0, result.stderr[-2000:]
    assert (result.stdout + result.stderr).count("already holds a finished run") == 1
    summaries = sorted((tmp_path / "dqn_acrobot").glob("*/summary.json"))
    assert len(summaries) == 2 and seed_1 in [p.stat().st_mtime_ns for p in summaries]
    returns = sorted(json.loads(p.read_text())["eval_return_mean"] for p in summaries)
    table = (tmp_path / "suite.md").read_text()
    line = next(row for row in table.splitlines() if row.startswith("| dqn | acrobot |"))
    median = (returns[0] + returns[1]) / 2
    assert f"| 300 | 2/2 | {median:,.1f} |" in line and line.count("-76.6") == 1  # the reference
    stamps = [p.stat().st_mtime_ns for p in summaries]

    again = run_suite(tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (again.stdout + again.stderr).count("already holds a finished run") == 2
    assert [p.stat().st_mtime_ns for p in summaries] == stamps
    assert (tmp_path / "suite.md").read_text() == table


@pytest.mark.slow  # a suite's subprocess run: about 20 s
def test_a_packed_suite_trains_a_rows_seeds_in_one_process(tmp_path):
    result = run_suite(tmp_path, "--packed")
    assert result.returncode == 0, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert "hydra/launcher=packed" in output and "as 1 pack(s) of 2 member(s)" in output
    assert "| dqn | acrobot | 300 | 2/2 |" in (tmp_path / "suite.md").read_text()


def test_unknown_rows_are_refused(tmp_path):
    result = run_suite(tmp_path, "--rows", "dqn_pong")
    assert result.returncode == 2 and "error: --rows dqn_pong: not rows of suite smoke" in result.stderr


def test_seeds_outside_the_suite_are_refused(tmp_path):
    result = run_suite(tmp_path, "--only-seeds", "1", "2", "5")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --only-seeds 2 5: suite smoke has seeds 0 to 1 (--seeds sets how many)"
    assert not (tmp_path / "dqn_acrobot").exists()
