"""The Atari presets (conf/algo_env/{dqn,qr_dqn,iqn,rainbow}_atari.yaml) carry the values of
Dopamine's JAX gin configs (dqn.gin, quantile.gin, implicit_quantile.gin, rainbow.gin), counted
in this project's units, and each one trains."""

from __future__ import annotations

import pytest

from tests.conftest import compose_config, run_training, skip_without_env_extra

# Dopamine's values, in env steps; its target_update_period (8,000 agent steps) is 2,000 updates here
SHARED = {
    "algo.gamma": 0.99,
    "algo.batch_size": 32,
    "algo.learning_starts": 20_000,
    "algo.train_every": 4,
    "algo.gradient_steps": 1,
    "algo.target_update_every": 2_000,
    "algo.exploration.end": 0.01,
    "buffer.capacity": 1_000_000,
    "env.eval_epsilon": 0.001,
    "algo.max_grad_norm": None,
    "network.encoder": "nature_cnn",
    "network.hidden_sizes": [512],
}
DOPAMINE = {
    "dqn": {"algo.n_step": 1, "algo.optimizer.lr": 6.25e-5, "algo.optimizer.eps": 1.5e-4, "algo.loss": "huber"},
    "qr_dqn": {
        "algo.n_step": 3,
        "algo.num_quantiles": 200,
        "algo.kappa": 1.0,
        "algo.optimizer.lr": 5e-5,
        "algo.optimizer.eps": 3.125e-4,
    },
    "iqn": {
        "algo.n_step": 3,
        "algo.num_tau_samples": 64,
        "algo.num_tau_prime_samples": 64,
        "algo.num_quantile_samples": 32,
        "algo.kappa": 1.0,
        "algo.optimizer.lr": 5e-5,
        "algo.optimizer.eps": 3.125e-4,
    },
    "rainbow": {
        "algo.n_step": 3,
        "algo.num_atoms": 51,
        "algo.v_min": -10.0,
        "algo.v_max": 10.0,
        "algo.optimizer.lr": 6.25e-5,
        "algo.optimizer.eps": 1.5e-4,
        "buffer.alpha": 0.5,
        "buffer.beta": 0.4,
    },
}


@pytest.mark.parametrize("algo", sorted(DOPAMINE))
def test_each_atari_preset_has_dopamines_values(algo):
    from omegaconf import OmegaConf

    cfg = compose_config(f"algo={algo}", "env=atari", "env.id=ALE/Breakout-v5")
    assert cfg.preset.name == f"{algo}_atari"
    got = {
        key: OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        for key in {**SHARED, **DOPAMINE[algo]}
        for value in [OmegaConf.select(cfg, key)]
    }
    assert got == {**SHARED, **DOPAMINE[algo]}
    # epsilon reaches 0.01 after Dopamine's 250k steps, whatever share of the budget that is
    assert cfg.algo.exploration.fraction * cfg.train.total_steps == 250_000


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(DOPAMINE))
def test_each_atari_preset_trains(algo, tmp_path):
    overrides = [f"algo={algo}", "env=atari", "env.id=ALE/Breakout-v5"]
    skip_without_env_extra(*overrides)
    summary = run_training(
        tmp_path / algo,
        *overrides,
        "train.total_steps=400",
        "algo.learning_starts=200",
        "buffer.capacity=1000",
        "train.eval_every=400",
        "train.eval_episodes=1",
        "env.kwargs.max_num_frames_per_episode=2000",
        "train.progress=false",
    )
    assert summary["updates"] == 51 and summary["global_step"] == 400  # steps 200, 204, ..., 400
