"""Runs as objects: load_run, predict, evaluate, the Python API (the evaluate script: test_evaluate.py)."""

import os
import runpy
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from rl_hydra import load_run, train
from rl_hydra.runs.run_dir import RunError
from tests.conftest import CONF_DIR, ROOT, TINY

QUICK = [*TINY, "algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2"]


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    return train(*QUICK, run_dir=tmp_path_factory.mktemp("runs") / "dqn")


def test_train_api_composes_like_the_cli_and_returns_the_run(dqn_run):
    assert (dqn_run.path / ".hydra" / "config.yaml").is_file()
    assert dqn_run.cfg.train.total_steps == 300 and dqn_run.cfg.algo._target_.endswith("DQN")
    assert dqn_run.summary["status"] == "completed" and dqn_run.summary["global_step"] == 300
    assert (dqn_run.path / "train.log").read_text()


def test_predict_takes_one_observation_or_a_batch(dqn_run):
    single = dqn_run.predict(np.zeros(4))
    assert np.ndim(single) == 0 and single in (0, 1)
    batch = dqn_run.predict(np.zeros((5, 4)))
    assert batch.shape == (5,) and set(batch.tolist()) <= {0, 1}
    # predict is the greedy action of the loaded network
    with torch.no_grad():
        q = dqn_run.agent.q_net(torch.ones(1, 4))
    assert dqn_run.predict(np.ones(4)) == int(q.argmax())


def test_evaluate_is_reproducible_for_a_seed(dqn_run):
    first, again = dqn_run.evaluate(episodes=3, seed=5), dqn_run.evaluate(episodes=3, seed=5)
    assert first["returns"] == again["returns"] and len(first["returns"]) == 3


@pytest.mark.skipif(not (CONF_DIR / "algo" / "drqn.yaml").is_file(), reason="no recurrent algorithm yet")
def test_predict_threads_the_state_of_a_recurrent_agent(tmp_path):
    run = train("algo=drqn", *TINY, run_dir=tmp_path / "drqn")
    actions, state = run.predict(np.zeros(4))
    assert np.ndim(actions) == 0 and state is not None
    _, next_state = run.predict(np.zeros(4), state)
    assert next_state is not None


def test_load_run_errors_are_one_clear_line(tmp_path, dqn_run):
    with pytest.raises(RunError, match="does not exist"):
        load_run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match="is not a run directory"):
        load_run(tmp_path / "empty")
    broken = tmp_path / "broken"
    shutil.copytree(dqn_run.path, broken)
    (broken / "checkpoints" / "best.pt").write_bytes(b"\x00" * 64)
    with pytest.raises(RunError, match="cannot be read") as error:
        load_run(broken)
    assert "\n" not in str(error.value)
    foreign = tmp_path / "foreign"
    shutil.copytree(dqn_run.path, foreign)
    config = foreign / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("- 256\n  - 256", "- 32"))
    with pytest.raises(
        RunError,
        match=r"does not fit the run's config: agent.q_net holds 'net.4.weight', which "
        r"the run's parts do not have",
    ) as error:  # what differs
        load_run(foreign)
    assert "\n" not in str(error.value)


def test_example_script_runs_from_another_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train_and_predict.py", "1500"])
    runpy.run_path(str(ROOT / "examples" / "train_and_predict.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "trained into outputs" in out and "10 evaluation episodes" in out
    assert list((tmp_path / "outputs").rglob("summary.json"))


@pytest.mark.skipif(shutil.which("rl-hydra-train") is None, reason="package not installed")
def test_console_script_works_outside_the_checkout(tmp_path):
    result = subprocess.run(
        ["rl-hydra-train", "--cfg", "job", "algo=dqn"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert result.returncode == 0 and "_target_: rl_hydra.algos.dqn.DQN" in result.stdout


@pytest.mark.skipif(shutil.which("rl-hydra-eval") is None, reason="package not installed")
def test_installed_train_and_eval_commands_work_from_an_empty_directory(tmp_path):
    run = subprocess.run(
        ["rl-hydra-train", *TINY, "hydra.run.dir=run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert run.returncode == 0, run.stderr
    result = subprocess.run(
        ["rl-hydra-eval", "run_dir=run", "episodes=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "eval" / "last_2ep_seed0.json").is_file()
    bad = subprocess.run(
        ["rl-hydra-eval", "run_dir=run", "episode=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error:")
