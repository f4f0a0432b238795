"""Runs as objects: load_run, predict, evaluate (one run and a sweep), the Python API."""

import json
import os
import runpy
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from rl_hydra import load_run, train
from rl_hydra.runs.aggregate import bootstrap_ci, interquartile_mean
from rl_hydra.runs.report import main as evaluate_main
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
    with pytest.raises(RunError, match="does not fit its config"):
        load_run(foreign)


def test_evaluate_script_on_one_run_writes_json(dqn_run, capsys):
    assert evaluate_main([f"run_dir={dqn_run.path}", "episodes=3", "checkpoint=last"]) == 0
    result = json.loads((dqn_run.path / "eval" / "last.json").read_text())
    assert len(result["returns"]) == 3 and result["step"] == 300
    assert f"| {dqn_run.path.name} | 0 | 300 |" in capsys.readouterr().out  # named by its directory, not "."


def test_evaluate_script_bad_arguments_exit_2(tmp_path, capsys):
    assert evaluate_main([f"run_dir={tmp_path / 'nope'}"]) == 2
    assert evaluate_main(["episodez=3", f"run_dir={tmp_path}"]) == 2
    assert evaluate_main([f"run_dir={tmp_path}", "checkpoint=first"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 3 and all(line.startswith("error:") for line in errors)
    assert "checkpoint='first' is not allowed; choose one of: best, last" in errors[2]


def test_evaluate_script_aggregates_a_two_config_two_seed_sweep(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for gamma in ("0.9", "0.99"):
        for seed in ("0", "1"):
            train(*QUICK, f"algo.gamma={gamma}", f"seed={seed}", run_dir=sweep / f"algo.gamma={gamma},seed={seed}")
    # a failed job is listed, not averaged and not a crash
    failed = sweep / "algo.gamma=0.99,seed=2"
    shutil.copytree(sweep / "algo.gamma=0.99,seed=1", failed)
    (failed / "summary.json").write_text(json.dumps({"status": "failed", "reason": "non-finite loss"}))
    assert evaluate_main([f"run_dir={sweep}", "episodes=2"]) == 0
    out = capsys.readouterr().out
    assert "non-finite loss" in out
    csv_text = (sweep / "eval" / "results.csv").read_text().splitlines()
    assert csv_text[0].startswith("configuration,runs,seeds,mean,std,iqm,iqm_ci_low,iqm_ci_high,failed")
    assert len(csv_text) == 3 and any(line.startswith("algo.gamma=0.9 ") for line in csv_text)
    assert "algo.gamma=0.99,seed=2" in (sweep / "eval" / "results.md").read_text()
    png = (sweep / "eval" / "learning_curves.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_video_records_a_gif(dqn_run):
    pytest.importorskip("pygame")
    assert evaluate_main([f"run_dir={dqn_run.path}", "episodes=1", "video=true"]) == 0
    assert (dqn_run.path / "eval" / "videos" / "best.gif").read_bytes().startswith(b"GIF8")


def test_interquartile_mean_and_bootstrap_by_hand():
    assert interquartile_mean([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(4.5)  # drops 1, 2 and 7, 100
    assert interquartile_mean([3, 5]) == 4.0
    low, high = bootstrap_ci([10.0, 10.0, 10.0])
    assert low == high == 10.0
    low, high = bootstrap_ci([0.0, 100.0, 50.0, 25.0])
    assert 0.0 <= low < high <= 100.0


def test_example_script_runs_from_another_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train_and_predict.py", "1500"])
    runpy.run_path(str(ROOT / "examples" / "train_and_predict.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "trained into outputs" in out and "10 evaluation episodes" in out
    assert list((tmp_path / "outputs").rglob("summary.json"))


@pytest.mark.skipif(shutil.which("rl-hydra-train") is None, reason="package not installed")
def test_console_script_works_outside_the_checkout(tmp_path):
    result = subprocess.run(["rl-hydra-train", "--cfg", "job", "algo=dqn"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**os.environ})
    assert result.returncode == 0 and "_target_: rl_hydra.algos.dqn.DQN" in result.stdout


@pytest.mark.skipif(shutil.which("rl-hydra-eval") is None, reason="package not installed")
def test_installed_train_and_eval_commands_work_from_an_empty_directory(tmp_path):
    run = subprocess.run(["rl-hydra-train", *TINY, "hydra.run.dir=run"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ})
    assert run.returncode == 0, run.stderr
    result = subprocess.run(["rl-hydra-eval", "run_dir=run", "episodes=2"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "eval" / "best.json").is_file()
    bad = subprocess.run(["rl-hydra-eval", "run_dir=run", "episode=2"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, env={**os.environ})
    assert bad.returncode == 2 and bad.stderr.startswith("error:")


def test_evaluating_a_run_names_it_and_says_where_it_wrote(tmp_path, capsys):
    from rl_hydra import train

    run = train(*TINY, run_dir=tmp_path / "my_run")
    capsys.readouterr()
    for time in ("first", "again"):
        assert evaluate_main([f"run_dir={run.path}", "episodes=2"]) == 0
        out = capsys.readouterr().out
        assert "| my_run | 0 |" in out, out
        wrote = f"wrote {run.path / 'eval' / 'best.json'}"
        assert wrote in out and (("replacing the earlier result" in out) == (time == "again")), out


@pytest.mark.filterwarnings("error")
def test_learning_curves_draw_every_configuration_without_touching_matplotlibs_backend(tmp_path):
    import matplotlib

    from rl_hydra.runs.aggregate import plot_learning_curves

    backend = matplotlib.get_backend()
    steps = np.arange(1000, 10001, 1000)
    curves = {f"config={i}": [(steps, steps / 100.0 + i), (steps, steps / 90.0 + i)] for i in range(8)}
    curves["one_evaluation"] = [(np.array([5000]), np.array([10.0])), (np.array([5000]), np.array([20.0]))]
    plot_learning_curves(curves, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert matplotlib.get_backend() == backend
