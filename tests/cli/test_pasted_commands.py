"""Commands the project prints work when pasted into a shell (issue #53): a sweep job's `resume
with: ...` line, whose directory is named from its overrides (`seed=0,train.total_steps=300`), and
the MLflow logger's line, which names what the UI needs."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest

from rl_hydra.loggers import mlflow as mlflow_logger
from tests.conftest import CONF_DIR, ROOT, TINY

SLOW_ENV = "env.wrappers=[{_target_:tests.helpers.SlowDown,_partial_:true,seconds:0.01}]"
# every override but the seed and the budget left out of the job's name: `seed=0,train.total_steps=300`
NAMED_BY = (
    "hydra.job.config.override_dirname.exclude_keys=[train.progress,device,train.eval_every,"
    "train.eval_episodes,train.checkpoint_every,train.log_every,env.wrappers]"
)


def shell(line: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`line` run by bash in the repository, as a user pastes it (`python` is this interpreter) who
    trusts the test's slow env wrapper (rl_hydra/runs/trust.py)."""
    env = {
        **os.environ,
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}",
        "HYDRA_FULL_ERROR": "0",
        "RL_HYDRA_TRUST": "tests.helpers.SlowDown",
    }
    return subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def summary_of(run_dir) -> dict:
    import json

    return json.loads((run_dir / "summary.json").read_text())


def test_a_sweep_jobs_printed_resume_line_resumes_it_when_pasted(tmp_path, capsys, monkeypatch):
    """A sweep job stopped by SIGTERM prints `resume with: ...`; that line, run by bash, resumes the
    job to its end; extended past its launch's budget, the name keeps the launch's value and
    evaluate shows the step the run has reached."""
    from rl_hydra.commands.report import main as evaluate_main

    job = tmp_path / "seed=0,train.total_steps=300"
    sweep = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "-m",
            "seed=0",
            *TINY,
            SLOW_ENV,
            NAMED_BY,
            f"hydra.sweep.dir={tmp_path}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HYDRA_FULL_ERROR": "0"},
    )
    try:
        deadline = time.monotonic() + 120
        while not (job / "checkpoints" / "last.pt").is_file():  # the job has trained 150 steps
            assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
            time.sleep(0.1)
        sweep.send_signal(signal.SIGTERM)
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 130, stderr[-3000:]
    printed = [line.split("resume with: ", 1)[1] for line in stderr.splitlines() if "resume with: " in line]
    assert printed == [f"python train.py {shlex.quote(f'resume={job}')}"], stderr[-3000:]
    assert summary_of(job)["status"] == "interrupted"

    resumed = shell(printed[0])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (summary_of(job)["status"], summary_of(job)["global_step"]) == ("completed", 300)

    # a resume that would not extend it names the budget only
    refused = shell(f"{printed[0]} train.total_steps=200 train.progress=true")
    assert refused.returncode == 2 and refused.stderr.splitlines() == [
        f"error: {job} ended at step 300; train.total_steps=200 would not train it further (to extend it, give "
        "a larger train.total_steps); nothing was changed"
    ], refused.stderr

    extended = shell(f"{printed[0]} train.total_steps=450")
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert summary_of(job)["global_step"] == 450
    capsys.readouterr()
    monkeypatch.setenv("RL_HYDRA_TRUST", "tests.helpers.SlowDown")
    assert evaluate_main([f"run_dir={tmp_path}", "episodes=1", "checkpoint=last"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| seed=0,")]
    assert rows and rows[0].startswith("| seed=0,train.total_steps=300 | 0 | 450 | "), rows  # the name is the launch's


@pytest.mark.parametrize(
    "installed, line",
    [
        (True, "mlflow ui --backend-store-uri sqlite:////runs/mlflow.db"),
        (
            False,
            "mlflow ui --backend-store-uri sqlite:////runs/mlflow.db (the UI needs the full package first: "
            "pip install mlflow)",
        ),
        (
            False,
            "mlflow ui --backend-store-uri 'sqlite:////my runs/mlflow.db' (the UI needs the full package first: "
            "pip install mlflow)",
        ),
    ],
)
def test_the_mlflow_line_names_what_the_ui_needs(monkeypatch, installed, line):
    """The mlflow extra installs mlflow-skinny, whose `mlflow ui` fails for want of flask."""
    monkeypatch.setattr(mlflow_logger, "ui_installed", lambda: installed)
    uri = "sqlite:////my runs/mlflow.db" if "my runs" in line else "sqlite:////runs/mlflow.db"
    assert mlflow_logger.how_to_see(uri) == line
    assert mlflow_logger.how_to_see("http://host:5000") == "open http://host:5000"


def test_ui_installed_tells_the_full_mlflow_package_from_the_skinny_one(monkeypatch):
    from importlib import metadata

    found = {"mlflow-skinny"}

    def distribution(name):
        if name not in found:
            raise metadata.PackageNotFoundError(name)
        return name

    monkeypatch.setattr(metadata, "distribution", distribution)
    assert not mlflow_logger.ui_installed()
    found.add("mlflow")
    assert mlflow_logger.ui_installed()


def test_the_tracking_page_says_what_the_mlflow_ui_needs():
    page = (CONF_DIR.parent / "docs" / "tracking.md").read_text()
    assert (
        "mlflow ui --backend-store-uri sqlite:///outputs/mlflow.db`, which needs the full MLflow\n  package: "
        "`pip install mlflow`" in page
    )
    assert "(the UI needs the full package first: pip install mlflow)" in page
