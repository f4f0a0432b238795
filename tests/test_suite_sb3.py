"""scripts/benchmarks/suite_sb3.py: our presets against their SB3 hyperparameters, the suite's run
layout, and (slow) a tiny side-by-side run."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from rl_hydra.config import CONF_DIR
from rl_hydra.suite import Row, load_suite
from tests.conftest import ROOT, compose_config

sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))
import suite_sb3  # noqa: E402
from benchmark_match import target_update_every  # noqa: E402



SB3_SUITES = ("discrete_zoo", "continuous")   # the suites the side-by-side runs (docs/suite.md)
SB3_ROWS = {row.name: row for suite in SB3_SUITES for row in load_suite(suite).rows}


def preset(name: str, *extra: str):
    algo, env = next((a, name[len(a) + 1:]) for a in ("qr_dqn", "dqn", "sac") if name.startswith(a + "_"))
    return compose_config(f"algo={algo}", f"env={env}", *extra)


@pytest.mark.parametrize("name", list(suite_sb3.ZOO))
def test_every_sb3_row_runs_its_sb3_hyperparameters(name):
    # the config the script itself composes and checks for the row (its overrides and budget included)
    assert suite_sb3.mismatches(suite_sb3.compose_row(SB3_ROWS[name], 0), suite_sb3.ZOO[name]) == []


def test_presets_beyond_the_zoo_are_named_and_turned_back_in_the_zoo_suite():
    # dqn_mountain_car's preset learns from 3-step returns with a decaying learning rate (docs/suite.md);
    # SB3's DQN has no n-step returns and the Zoo's rate there is constant
    found = suite_sb3.mismatches(preset("dqn_mountain_car"), suite_sb3.ZOO["dqn_mountain_car"])
    assert [line.split(" ", 1)[0] for line in found] == ["algo.n_step", "algo.final_lr_fraction"]
    assert "algo.n_step is 3 in our config; SB3's run means 1" in found
    assert {"algo.n_step=1", "algo.final_lr_fraction=1.0"} <= set(SB3_ROWS["dqn_mountain_car"].overrides)
    # both Acrobot presets add double Q-learning and a dueling network
    for name in ("dqn_acrobot", "qr_dqn_acrobot"):
        found = suite_sb3.mismatches(preset(name), suite_sb3.ZOO[name])
        assert [line.split(" ", 1)[0] for line in found] == ["algo.double_q", "network.dueling"], name


def test_a_changed_key_is_named():
    found = suite_sb3.mismatches(preset("dqn_acrobot", *SB3_ROWS["dqn_acrobot"].overrides, "algo.gamma=0.98",
                                        "network.hidden_sizes=[64,64]", "algo.target_update_every=100"),
                                 suite_sb3.ZOO["dqn_acrobot"])
    assert [line.split(" ", 1)[0] for line in found] == ["algo.gamma", "algo.target_update_every",
                                                         "network.hidden_sizes"]
    assert "algo.gamma is 0.98 in our config; SB3's run means 0.99" in found[0]
    found = suite_sb3.mismatches(preset("qr_dqn_mountain_car", *SB3_ROWS["qr_dqn_mountain_car"].overrides,
                                        "algo.num_quantiles=50"),
                                 suite_sb3.ZOO["qr_dqn_mountain_car"])
    assert found == ["algo.num_quantiles is 50 in our config; SB3's run means 25"]
    found = suite_sb3.mismatches(preset("sac_hopper", "algo.learn_alpha=false"), suite_sb3.ZOO["sac_hopper"])
    assert found == ["algo.learn_alpha is False in our config; SB3's run means True"]
    found = suite_sb3.mismatches(preset("dqn_mountain_car", "algo.final_lr_fraction=1.0", "buffer=prioritized",
                                        "network.dueling=true", "network.noisy=true"),
                                 suite_sb3.ZOO["dqn_mountain_car"])   # parts SB3's DQN does not have
    assert [line.split(" ", 1)[0] for line in found] == ["algo.n_step", "buffer._target_", "network.dueling",
                                                         "network.noisy"]


def test_translation_of_the_zoos_own_forms():
    expected, notes = suite_sb3.expected_config(suite_sb3.ZOO["qr_dqn_lunar_lander"])
    assert expected["algo.optimizer.lr"] == 1.5e-3 and expected["algo.final_lr_fraction"] == 0.0  # lin_1.5e-3
    assert expected["algo.gradient_steps"] == 256 and expected["algo.target_update_every"] == 256  # -1; every step
    expected, notes = suite_sb3.expected_config(suite_sb3.ZOO["sac_mountain_car_continuous"])
    assert (expected["algo.learn_alpha"], expected["algo.initial_alpha"]) == (False, 0.1)        # ent_coef: 0.1
    assert expected["network.actor.gsde"] and expected["network.actor.gsde_log_std_init"] == -3.67  # use_sde
    assert expected["algo.gsde_resample_every"] == -1                                            # sde_sample_freq
    expected, _ = suite_sb3.expected_config(suite_sb3.ZOO["sac_hopper"])                         # SB3's defaults
    assert (expected["algo.batch_size"], expected["algo.tau"], expected["algo.learn_alpha"]) == (256, 0.005, True)


def test_target_sync_on_average_when_train_freq_does_not_divide_it():
    acrobot = {"target_update_interval": 250, "train_freq": 4, "gradient_steps": 4}
    mountain_car = {"target_update_interval": 600, "train_freq": 16, "gradient_steps": 8}
    for hp in (acrobot, mountain_car):
        with pytest.raises(ValueError, match="not a multiple"):
            target_update_every(hp)                       # benchmark.py's exact translation refuses them
    assert target_update_every(acrobot, exact=False) == 250
    assert target_update_every(mountain_car, exact=False) == 300
    with pytest.raises(ValueError, match="not a multiple"):   # a mean of 250 / 3 updates: no whole number
        target_update_every({**acrobot, "train_freq": 3, "gradient_steps": 1}, exact=False)


def test_sb3_defaults_are_the_installed_ones():
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import QRDQN
    from stable_baselines3 import DQN, SAC

    for algo, cls in (("dqn", DQN), ("qr_dqn", QRDQN), ("sac", SAC)):
        signature = inspect.signature(cls.__init__).parameters
        assert {k: signature[k].default for k in suite_sb3.SB3_DEFAULTS[algo]} == suite_sb3.SB3_DEFAULTS[algo]
    from stable_baselines3.sac.policies import SACPolicy
    assert inspect.signature(SACPolicy.__init__).parameters["log_std_init"].default == suite_sb3.SB3_LOG_STD_INIT


@pytest.mark.parametrize("steps", [None, 2000])
def test_our_runs_go_where_the_suite_puts_them(tmp_path, steps):
    row = Row("dqn", "acrobot", steps=steps)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[*row.train_overrides(), "seed=2"], return_hydra_config=True)
    assert suite_sb3.job_dir(row, 2, tmp_path) == tmp_path / "dqn_acrobot" / cfg.hydra.job.override_dirname


def test_a_rows_boolean_overrides_are_named_as_hydras_sweeper_writes_them(tmp_path):
    # the sweeper hands each job `network.dueling=False` for the `false` typed on the command line
    row = Row("dqn", "acrobot", steps=300, overrides=["network.dueling=false", "algo.final_lr_fraction=1.0"])
    assert suite_sb3.job_dir(row, 0, tmp_path).name == (
        "algo.final_lr_fraction=1.0,algo=dqn,env=acrobot,network.dueling=False,seed=0,train.total_steps=300")


def test_a_suite_whose_presets_go_beyond_sb3_is_refused_before_anything_runs(tmp_path, capsys):
    # the discrete suite runs the tuned presets (dqn_acrobot: double Q and dueling); SB3 has neither
    with pytest.raises(SystemExit) as exit_info:
        suite_sb3.main(["discrete", "--seeds", "1", "--steps", "300", "--rows", "dqn_acrobot", "iqn_acrobot",
                        "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no SB3 counterpart, skipped: iqn_acrobot" in err
    assert "error: dqn_acrobot: algo.double_q is True in our config; SB3's run means False" in err
    assert err.strip().endswith("nothing was run") and not any(tmp_path.iterdir())


@pytest.mark.slow  # ~30 s: one seed of dqn_acrobot on each side, then the same command again
def test_a_tiny_side_by_side_run_writes_the_table_and_resumes(tmp_path):
    pytest.importorskip("sb3_contrib")
    command = [sys.executable, str(ROOT / "scripts" / "benchmarks" / "suite_sb3.py"), "discrete_zoo", "--seeds", "1",
               "--steps", "300", "--rows", "dqn_acrobot", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    sb3 = json.loads((tmp_path / "sb3" / "dqn_acrobot" / "seed_0.json").read_text())
    assert (sb3["steps"], sb3["eval_seed"], len(sb3["eval_returns"])) == (300, 1_000_000, 10)
    zoo_row = Row("dqn", "acrobot", steps=300, overrides=SB3_ROWS["dqn_acrobot"].overrides)
    ours = json.loads((suite_sb3.job_dir(zoo_row, 0, tmp_path) / "summary.json").read_text())
    assert ours["status"] == "completed" and ours["global_step"] == 300
    assert (tmp_path / "sb3_comparison.md").read_text() == result.stdout
    assert "| dqn_acrobot | 300 | 1/1 | 1/1 |" in result.stdout
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0 and again.stderr.count("reused") == 2, again.stderr[-3000:]
    assert again.stdout == result.stdout
