"""A record chooses the math, nothing else (issue #74, part 2): loggers that write or connect
elsewhere, rendering, torch.compile, worker processes and verify's window come from the command
line and the machine; a checkpoint cannot set an optimizer's hyperparameters, and each restored
value is checked before a resume takes the directory (a refused resume changes no byte)."""

from __future__ import annotations

import hashlib
import sys

import pytest
import torch
from omegaconf import OmegaConf

from rl_hydra.commands.cli import main as cli_main
from rl_hydra.runs.run_dir import RunDirectory, RunError
from tests.runs.test_trust import plant


def alter_checkpoint(run_dir, change) -> None:
    """Rewrite checkpoints/last.pt with `change(checkpoint)` applied (a record someone altered)."""
    path = run_dir / "checkpoints" / "last.pt"
    checkpoint = torch.load(path, weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, path)


def fingerprint(run_dir) -> dict:
    return {
        str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in run_dir.rglob("*")
        if p.is_file()
    }


def resume(run_dir, monkeypatch, *overrides: str) -> int:
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume={run_dir}", *overrides])
    try:
        cli_main()
    except SystemExit as stopped:
        return int(stopped.code or 0)
    return 0


def refused(run_dir, monkeypatch, capsys, *overrides: str) -> str:
    """Resume, expecting exit 2, one error line and every file of the run as it was."""
    before = fingerprint(run_dir)
    assert resume(run_dir, monkeypatch, *overrides) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert fingerprint(run_dir) == before
    return lines[0]


def built_loggers(monkeypatch) -> list[str]:
    """The logger names build_loggers builds from here on (MLflow and W&B stand-ins write nothing)."""
    import rl_hydra.loggers as loggers

    built: list[str] = []

    def build(name, spec):
        built.append(name)
        return loggers.CSVLogger() if name not in ("csv", "tensorboard") else original(name, spec)

    original = loggers._build
    monkeypatch.setattr(loggers, "_build", build)
    return built


MLFLOW = {"_target_": "rl_hydra.loggers.mlflow.MLflowLogger", "tracking_uri": None, "experiment": "x"}
WANDB = {
    "_target_": "rl_hydra.loggers.wandb.WandbLogger",
    "mode": "offline",
    "project": "p",
    "entity": None,
    "tags": [],
}


@pytest.mark.parametrize(("name", "node"), [("mlflow", MLFLOW), ("wandb", WANDB)])
def test_a_recorded_tracker_is_not_started_by_a_resume(run_dir, monkeypatch, tmp_path, name, node):
    plant(run_dir, f"logger.{name}", node)
    built = built_loggers(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 0
    assert name not in built and "csv" in built
    assert not (tmp_path / "outputs").exists()


def test_a_resume_that_repeats_a_logger_key_starts_it(run_dir, monkeypatch, tmp_path):
    plant(run_dir, "logger.mlflow", MLFLOW)
    built = built_loggers(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert resume(run_dir, monkeypatch, "train.total_steps=450", "logger.mlflow.tracking_uri=null") == 0
    assert "mlflow" in built


def test_compile_in_a_record_is_not_run_by_resume_unless_given(run_dir, monkeypatch):
    import rl_hydra.build as build

    plant(run_dir, "compile", True)
    compiled: list[object] = []
    monkeypatch.setattr(build, "compile_agent", compiled.append)
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 0
    assert compiled == []
    assert resume(run_dir, monkeypatch, "train.total_steps=600", "compile=true") == 0
    assert len(compiled) == 1


def test_verify_reruns_without_compile_async_workers_or_more_threads_than_cpus(run_dir):
    import os

    from rl_hydra.runs.trust import read_config
    from rl_hydra.verify import rerun_config

    plant(run_dir, "compile", True)
    plant(run_dir, "env.vectorization", "async")
    plant(run_dir, "torch_threads", 512)
    cfg = rerun_config(read_config(RunDirectory(run_dir)), "cpu")
    assert (cfg.compile, cfg.env.vectorization) == (False, "sync")
    assert cfg.torch_threads <= (os.cpu_count() or 1)


def test_async_workers_past_the_cpus_are_refused_before_any_env_is_made(run_dir, monkeypatch, capsys):
    plant(run_dir, "env.num_envs", 64)
    plant(run_dir, "env.vectorization", "async")
    line = refused(run_dir, monkeypatch, capsys, "train.total_steps=450")
    assert "env.vectorization=async" in line and "env.vectorization=sync" in line


def test_a_checkpoint_of_other_envs_than_the_config_is_refused_before_they_are_made(run_dir, monkeypatch, capsys):
    plant(run_dir, "env.num_envs", 3)
    line = refused(run_dir, monkeypatch, capsys, "train.total_steps=450")
    assert "1 envs" in line and "env.num_envs=3" in line


def set_group(key, value):
    def change(checkpoint):
        checkpoint["agent"]["optimizer"]["param_groups"][0][key] = value

    return change


def set_state(key, value):
    def change(checkpoint):
        checkpoint["agent"]["optimizer"]["state"][0][key] = value

    return change


def set_env(change_state):
    def change(checkpoint):
        change_state(checkpoint["env"]["state"][0])

    return change


ALTERED = {
    "lr 1e30": (set_group("lr", 1e30), "lr"),
    "betas (5, -3)": (set_group("betas", (5.0, -3.0)), "betas"),
    "eps": (set_group("eps", 1.0), "eps"),
    "weight_decay": (set_group("weight_decay", 0.5), "weight_decay"),
    "exp_avg_sq of 0 dims": (set_state("exp_avg_sq", torch.tensor(1.0)), "exp_avg_sq"),
    "negative exp_avg_sq": (set_state("exp_avg_sq", -torch.ones(256, 4)), "exp_avg_sq"),
    "step of -3": (set_state("step", torch.tensor(-3.0)), "step"),
    "env state of 7 values": (
        set_env(lambda s: s["attributes"].update(state=torch.zeros(7, dtype=torch.float64))),
        "state",
    ),
    "elapsed_steps a string": (set_env(lambda s: s.update(elapsed_steps=["49", None, None])), "elapsed_steps"),
    "render_mode human": (set_env(lambda s: s["attributes"].update(render_mode="human")), "render_mode"),
    "gravity": (set_env(lambda s: s["attributes"].update(gravity=-100.0)), "gravity"),
}


@pytest.mark.parametrize("case", ALTERED)
def test_a_checkpoint_value_that_does_not_fit_is_refused_before_the_directory_is_taken(
    run_dir, monkeypatch, capsys, case
):
    change, key = ALTERED[case]
    alter_checkpoint(run_dir, change)
    line = refused(run_dir, monkeypatch, capsys, "train.total_steps=450")
    assert key in line


def test_a_checkpoint_never_chooses_rendering(run_dir, tmp_path):
    """The env's own render_mode stays (None), and pygame is never imported: in a fresh process."""
    import subprocess

    from tests.conftest import ROOT

    alter_checkpoint(run_dir, set_env(lambda s: s["attributes"].update(render_mode="human")))
    script = (
        "import sys\n"
        "from rl_hydra.commands.resume import resume_main\n"
        f"try:\n    resume_main({str(run_dir)!r}, ['train.total_steps=450'])\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print('pygame' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-3:] == ["exit", "2", "False"], done.stdout + done.stderr


def test_a_resume_that_meets_the_record_mid_write_says_in_use(run_dir, monkeypatch, capsys):
    """A second resume checked the lock a moment before the first took it: the record it then reads
    may be in flux, so it says the run is in use, not that the record does not hold together."""
    import subprocess

    import rl_hydra.commands.resume as resume_module
    from tests.conftest import ROOT

    held: list[subprocess.Popen] = []
    pipes = {"cwd": ROOT, "stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}

    def first_resume_takes_the_run(directory):
        """Another process takes the lock while this one reads a record it is rewriting."""
        take = f"from rl_hydra.runs.run_dir import *; RunLock(RunDirectory({str(directory.path)!r})).__enter__()"
        first = subprocess.Popen([sys.executable, "-c", f"{take}; print('held', flush=True); input()"], **pipes)
        held.append(first)
        assert first.stdout.readline().strip() == "held"
        raise RunError(f"{directory.path}: the record does not hold together")

    monkeypatch.setattr(resume_module, "check_record", first_resume_takes_the_run)
    try:
        assert resume(run_dir, monkeypatch, "train.total_steps=450") == 2
    finally:
        for first in held:
            first.communicate("\n", timeout=30)
    err = capsys.readouterr().err
    assert "in use" in err and "does not hold together" not in err


def test_verify_default_window_is_bounded_by_what_the_files_hold():
    from types import SimpleNamespace

    from rl_hydra.verify import MAX_DEFAULT_STEPS, window

    cfg = OmegaConf.create(
        {
            "algo": {"learning_starts": 100, "train_every": 1},
            "env": {"num_envs": 1},
            "train": {"checkpoint_every": 10**9},
        }
    )
    rows = SimpleNamespace(steps=lambda: [50, 100, 150, 10**9])
    assert window(cfg, rows, {}, None, None) <= MAX_DEFAULT_STEPS
    with pytest.raises(RunError, match="--steps"):
        window(cfg, SimpleNamespace(steps=lambda: [10**9]), {}, None, None)


def test_evaluate_steps_its_episodes_in_this_process_whatever_the_record_says(run_dir, monkeypatch):
    """A record's env.vectorization=async made evaluate start a worker process per episode."""
    import gymnasium as gym

    from rl_hydra import load_run

    plant(run_dir, "env.vectorization", "async")
    made = []
    original = gym.vector.AsyncVectorEnv.__init__
    monkeypatch.setattr(
        gym.vector.AsyncVectorEnv, "__init__", lambda self, *a, **k: made.append(1) or original(self, *a, **k)
    )
    assert load_run(run_dir).evaluate(episodes=3)["episodes"] == 3
    assert made == []


def test_verify_refuses_widths_its_checkpoint_cannot_hold_before_building_them(run_dir, capsys):
    from rl_hydra.verify import main as verify_main

    plant(run_dir, "network.hidden_sizes", [16384, 16384])
    assert verify_main([str(run_dir)]) == 1
    assert "fewer than the" in capsys.readouterr().err
