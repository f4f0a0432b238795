"""Issue #52's faults, each injected: budget keys past any sane range, damaged record files, a
double Ctrl-C, a session killed with kill -9, a half-written metrics row, a refused launch's folders."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.runs.trust import TRUST_VARIABLE
from tests.conftest import ROOT, TINY, run_cli

SLOW = "env.wrappers=[{_target_:tests.helpers.SlowDown,_partial_:true,seconds:0.002}]"


def files(run_dir) -> dict:
    return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"}


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


# --- every numeric key has a range -------------------------------------------------------------


@pytest.mark.parametrize(
    "override, named",
    [
        (
            "train.total_steps=1e100",
            "train.total_steps=<an integer of 101 digits> is out of range; expected an integer >= 1",
        ),
        (
            "train.eval_episodes=1e12",
            "train.eval_episodes=1000000000000 is out of range; expected an integer >= 1 and <= 1000",
        ),
        ("env.num_envs=100000", "env.num_envs=100000 is out of range"),
        ("seed=99999999999", "seed=99999999999 is out of range"),
        ("algo.batch_size=" + "9" * 400, "algo.batch_size=<an integer of 400 digits> is out of range"),
        ("algo.gamma=" + "9" * 400, "algo.gamma=<a number too large for a float> is not a finite number"),
        (
            "train.total_steps=" + "9" * 5000,
            "train.total_steps=999999999999... (5018 characters) holds a number out of range",
        ),
    ],
)
def test_a_launch_past_a_keys_range_is_one_line_and_leaves_no_folder(tmp_path, override, named):
    done = run_cli(override, cwd=tmp_path)
    assert done.returncode == 2
    assert named in one_error_line(done.stderr)
    assert list(tmp_path.iterdir()) == []  # not even outputs/<date>/


@pytest.mark.parametrize(
    "override", ["train.total_steps=1e100", "train.eval_episodes=1e12", "train.total_steps=" + "9" * 5000]
)
def test_a_resume_past_a_keys_range_changes_nothing(run_dir, override):
    before = files(run_dir)
    done = run_cli(f"resume={run_dir}", override)
    assert done.returncode == 2
    assert len(one_error_line(done.stderr)) < 300
    assert files(run_dir) == before
    assert run_cli(f"resume={run_dir}", "train.total_steps=400").returncode == 0  # the run still resumes


def test_evaluate_refuses_episodes_past_the_range(run_dir, capsys):
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1e12"]) == 2
    assert "episodes=1000000000000 is out of range" in capsys.readouterr().err  # 1e12 read as the integer it is


# --- damaged record files ----------------------------------------------------------------------


@pytest.mark.parametrize("text, why", [("{", "cannot be read"), ('{"sessions": 3}', "no list of sessions")])
def test_a_damaged_provenance_is_one_line_on_resume_and_changes_nothing(run_dir, text, why):
    (run_dir / "provenance.json").write_text(text)
    before = files(run_dir)
    done = run_cli(f"resume={run_dir}", "train.total_steps=400")
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert why in line and "provenance.json" in line
    assert files(run_dir) == before


# --- interrupted runs --------------------------------------------------------------------------


def start(tmp_path, *args):
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            *TINY,
            "train.total_steps=100000",
            "train.checkpoint_every=200",
            SLOW,
            f"hydra.run.dir={tmp_path / 'run'}",
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "run" / "checkpoints" / "last.pt").exists():
        time.sleep(0.1)
    return process


def test_a_second_ctrl_c_stops_at_once_and_still_writes_the_summary_and_the_resume_line(tmp_path):
    process = start(tmp_path)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith("stopped; the last checkpoint is in")
    assert f"resume with: python train.py resume={tmp_path / 'run'}" in stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    sessions = json.loads((tmp_path / "run" / "provenance.json").read_text())["sessions"]
    assert sessions[-1]["status"] == "interrupted"


def test_a_session_killed_with_kill_9_is_marked_killed_by_the_next(tmp_path, monkeypatch):
    monkeypatch.setenv(TRUST_VARIABLE, "tests.helpers.")  # the run's slowed env, built again on resume
    process = start(tmp_path)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    provenance = tmp_path / "run" / "provenance.json"
    assert json.loads(provenance.read_text())["sessions"][-1]["status"] == "running"
    done = run_cli(f"resume={tmp_path / 'run'}", "train.total_steps=600")
    assert done.returncode == 0, done.stderr
    statuses = [session["status"] for session in json.loads(provenance.read_text())["sessions"]]
    assert statuses == ["killed", "completed"]


def test_a_half_written_metrics_row_is_announced_when_the_resume_drops_it(run_dir):
    with open(run_dir / "metrics.csv", "a") as metrics:
        metrics.write("300,0.5,0.")  # what a process killed mid-write leaves
    done = run_cli(f"resume={run_dir}", "train.total_steps=400", "train.progress=false")
    assert done.returncode == 0, done.stderr
    assert "ended in a half-written row ('300,0.5,0.'" in done.stdout + done.stderr
    assert all(line.endswith("\n") for line in open(run_dir / "metrics.csv"))


# --- a killed sweep can be re-run at once ------------------------------------------------------


def lock_holders(sweep_dir) -> list[int]:
    """The pids recorded in the sweep's job locks."""
    return [json.loads(lock.read_text())["pid"] for lock in sweep_dir.glob("*/.lock") if lock.read_text().strip()]


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


@pytest.mark.slow  # a real joblib sweep, killed and re-run (about 40 s)
def test_a_sweep_killed_with_kill_9_leaves_no_worker_training_and_the_same_command_resumes_it(tmp_path, monkeypatch):
    monkeypatch.setenv(TRUST_VARIABLE, "tests.helpers.")
    args = [
        sys.executable,
        str(ROOT / "train.py"),
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "seed=0,1",
        *TINY,
        "train.total_steps=4000",
        "train.checkpoint_every=200",
        SLOW,
        f"hydra.sweep.dir={tmp_path}",
    ]
    sweep = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + 120
    while time.time() < deadline and len(list(tmp_path.glob("*/checkpoints/last.pt"))) < 2:
        time.sleep(0.2)
    workers = lock_holders(tmp_path)
    assert len(workers) == 2 and sweep.pid not in workers
    sweep.kill()
    sweep.wait()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)  # at once
    assert done.returncode == 0, done.stderr[-3000:]
    assert not any(running(pid) for pid in workers)
    jobs = [path.parent.parent for path in tmp_path.glob("*/.hydra/config.yaml")]
    assert len(jobs) == 2
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["global_step"] == 4000
        steps = [int(row["step"]) for row in csv_rows(job / "metrics.csv")]
        assert steps == list(range(50, 4001, 50))
        statuses = [s["status"] for s in json.loads((job / "provenance.json").read_text())["sessions"]]
        assert statuses[-1] == "completed" and "running" not in statuses


def csv_rows(path) -> list[dict[str, str]]:
    import csv

    with open(path, newline="") as f:
        return list(csv.DictReader(f))
