"""What a new user hit (round 4), each with the behaviour they expected: a budget written 1e6 is that
integer; a list key given one number says a list is expected; predict given an observation of another
shape or dtype says what the run takes."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from rl_hydra.commands import cli as cli_module
from rl_hydra.errors import ConfigError
from tests.conftest import TINY
from tests.runs.test_run_record import cli


def test_an_integral_number_in_scientific_notation_is_that_integer_on_the_command_line(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    code, _, err = cli(
        monkeypatch,
        capsys,
        *TINY,
        "train.total_steps=3e2",
        "network.hidden_sizes=[1.6e1,1_6e0]",
        f"hydra.run.dir={run}",
    )
    assert code == 0, err
    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    assert cfg.train.total_steps == 300 and type(cfg.train.total_steps) is int
    assert list(cfg.network.hidden_sizes) == [16, 16] and all(type(size) is int for size in cfg.network.hidden_sizes)
    assert "train.total_steps=300" in OmegaConf.load(run / ".hydra" / "overrides.yaml")  # the command it ran


def test_a_sweep_over_budgets_in_scientific_notation_runs_each_as_its_integer(tmp_path, monkeypatch, capsys):
    budgets = []

    def launched(cfg, *args, **kwargs):
        budgets.append(cfg.train.total_steps)
        return {"eval_return_mean": 0.0}
        yield  # the launch's steps (loops/steps.py)

    monkeypatch.setattr(cli_module, "launching", launched)
    code, _, err = cli(monkeypatch, capsys, "-m", *TINY, "train.total_steps=1e3,2.5e3", f"hydra.sweep.dir={tmp_path}")
    assert code == 0 and budgets == [1000, 2500] and all(type(b) is int for b in budgets), (budgets, err)


def test_an_integral_number_in_scientific_notation_is_that_integer_in_the_python_api():
    from rl_hydra.commands.api import compose_train_config

    cfg = compose_train_config(
        "train.total_steps=1e3",
        "algo.batch_size=6.4E1",
        "seed=0e0",
        "algo=redq",
        "env=pendulum",
        "network.actor.hidden_sizes=[3.2e1]",
    )
    assert (cfg.train.total_steps, cfg.algo.batch_size, cfg.seed) == (1000, 64, 0)
    assert list(cfg.network.actor.hidden_sizes) == [32]
    assert compose_train_config("algo.optimizer.lr=1e0").algo.optimizer.lr == 1.0  # a float key keeps a float
    with pytest.raises(ConfigError, match=r"^train.total_steps=0.25 is not an integer; expected an integer >= 1"):
        compose_train_config("train.total_steps=2.5e-1")


@pytest.mark.parametrize(
    "given, message",
    [
        ("train.total_steps=1.5", "train.total_steps=1.5 is not an integer; expected an integer >= 1"),
        ("train.total_steps=1.25e0", "train.total_steps=1.25 is not an integer; expected an integer >= 1"),
        ("train.total_steps=1e13", "train.total_steps=10000000000000 is out of range; expected an integer >= 1"),
        (
            "network.hidden_sizes=64",
            "network.hidden_sizes=64 is not a list; expected a list, each item an integer >= 1 and <= 16384, "
            "e.g. network.hidden_sizes=[64,64] (the hidden layers' widths)",
        ),
    ],
)
def test_a_number_that_is_no_integer_or_not_a_list_is_one_line_naming_what_is_expected(
    tmp_path, monkeypatch, capsys, given, message
):
    code, out, err = cli(monkeypatch, capsys, *TINY, given, f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith(f"error: {message}"), err
    assert not (tmp_path / "run").exists()


def test_a_list_key_read_back_as_one_number_is_refused_as_not_a_list():
    from rl_hydra.schema import validate_config
    from tests.conftest import compose_config

    cfg = compose_config()
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))  # untyped, as a run directory's config is read back
    cfg.network.hidden_sizes = 64
    with pytest.raises(ConfigError, match=r"^network.hidden_sizes=64 is not a list; .*network.hidden_sizes=\[64,64\]"):
        validate_config(cfg)


@pytest.mark.parametrize(
    "obs, shape, dtype",
    [
        (np.zeros((1, 5)), r"\(1, 5\)", "float64"),
        (np.zeros(5), r"\(5,\)", "float64"),
        (np.zeros((2, 3, 4)), r"\(2, 3, 4\)", "float64"),
        (np.zeros(4, dtype=np.complex64), r"\(4,\)", "complex64"),
        (["a", "b", "c", "d"], r"\(4,\)", "<U1"),
    ],
)
def test_predict_given_another_shape_or_dtype_names_the_shape_and_dtype_the_run_takes(trained, obs, shape, dtype):
    from rl_hydra import load_run

    run = load_run(trained)
    expected = (
        rf"^predict: obs of shape {shape} and dtype {dtype} does not fit this run's observations "
        r"\(CartPole-v1\); expected shape \(4,\) for one observation or \(n, 4\) for a batch, "
        r"of dtype float32$"
    )
    with pytest.raises(ValueError, match=expected):
        run.predict(obs)


def test_predict_refuses_a_ragged_batch_in_one_line_and_takes_what_casts(trained):
    from rl_hydra import load_run

    run = load_run(trained)
    with pytest.raises(ValueError, match=r"^predict: obs is a ragged sequence, not an array; expected shape \(4,\)"):
        run.predict([[0.0, 0.0, 0.0, 0.0], [0.0]])
    assert run.predict(np.zeros(4, dtype=np.int64)) in (0, 1)  # numbers that cast to float32 are taken
    assert run.predict([[0.0] * 4] * 3).shape == (3,)


def test_a_stopped_run_s_progress_bar_ends_at_the_step_of_its_checkpoint(tmp_path, monkeypatch):
    import torch

    from rl_hydra.loops import reporting
    from rl_hydra.loops.runner import StopRequested
    from tests.conftest import run_training, stop_at

    ended_at = []  # where each shown bar stood when it closed

    class Bar(reporting.tqdm):
        def close(self):
            if not self.disable:
                ended_at.append(self.n)
            super().close()

    monkeypatch.setattr(reporting, "tqdm", Bar)
    stop_at(monkeypatch, 230)  # between rows (train.log_every=50)
    with pytest.raises(StopRequested):
        run_training(tmp_path, *TINY, "train.progress=true")
    step = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)["runner"]["global_step"]
    assert step == 230 and ended_at == [230]


def test_the_tests_mujoco_writes_its_warnings_log_outside_the_working_directory(tmp_path, monkeypatch):
    pytest.importorskip("mujoco")
    from rl_hydra.envs import make_env
    from tests.conftest import MUJOCO_LOG, compose_config

    monkeypatch.chdir(tmp_path)
    env = make_env(compose_config("algo=sac", "env=half_cheetah").env, seed=0, num_envs=1)  # MuJoCo warns on it
    env.close()
    assert not (tmp_path / MUJOCO_LOG).exists()


def test_predict_names_the_part_of_a_dict_observation_that_does_not_fit(tmp_path):
    from rl_hydra import train

    run = train(
        "env=gym", "env.id=Blackjack-v1", *TINY, "algo.learning_starts=100", run_dir=tmp_path / "run", checkpoint="last"
    )
    with pytest.raises(
        ValueError,
        match=r"^predict: obs\['1'\] of shape \(\) and dtype float64 does not fit this "
        r"run's observations \(Blackjack-v1\); expected shape \(\) for one "
        r"observation or \(n,\) for a batch, of dtype int64$",
    ):
        run.predict({"0": 14, "1": 5.5, "2": 0})  # a dealer's card of 5.5
    with pytest.raises(
        ValueError,
        match=r"^predict: the parts of obs \('0': \(2,\), '1': \(\), '2': \(2,\)\) are "
        r"not all one observation or one batch$",
    ):
        run.predict({"0": [14, 20], "1": 5, "2": [0, 1]})
    assert run.predict({"0": [14, 20], "1": [5, 3], "2": [0, 1]}).shape == (2,)
