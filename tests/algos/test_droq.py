"""DroQ: REDQ's code with two critics regularised by dropout and layer norm (a preset, no class of its own)."""

from __future__ import annotations

import torch
from torch import nn

from rl_hydra.networks.actor_critic import CriticEnsemble
from tests.conftest import TINY, compose_config, network_keys, run_training


def test_droq_is_redq_with_two_critics_twenty_updates_and_dropout_layer_norm_critics():
    droq, redq = compose_config("algo=droq", "~algo_env"), compose_config("algo=redq", "~algo_env")
    assert droq.algo._target_ == "rl_hydra.algos.redq.REDQ"
    algo = droq.algo
    assert (algo.ensemble_size, algo.subset_size, algo.gradient_steps, algo.policy_delay, algo.actor_q) == (
        2,
        2,
        20,
        20,
        "mean",
    )
    shared = set(algo) - {"ensemble_size"}
    assert all(algo[key] == redq.algo[key] for key in shared), "DroQ's other keys are REDQ's"
    assert (droq.network.critic.dropout, droq.network.critic.layer_norm) == (0.01, True)
    assert (redq.network.critic.dropout, redq.network.critic.layer_norm) == (0.0, False)


def plain_member(critic: CriticEnsemble, k: int) -> nn.Sequential:
    """Member k as Linear -> Dropout -> LayerNorm -> ReLU (x2) -> Linear, its weights copied."""
    layers: list[nn.Module] = []
    for i, (w, b) in enumerate(zip(critic.weights, critic.biases)):
        linear = nn.Linear(*w.shape[1:])
        with torch.no_grad():
            linear.weight.copy_(w[k].T)
            linear.bias.copy_(b[k, 0])
        layers.append(linear)
        if i < len(critic.weights) - 1:
            norm = nn.LayerNorm(w.shape[2])
            with torch.no_grad():
                norm.weight.copy_(critic.norm_weights[i][k, 0])
                norm.bias.copy_(critic.norm_biases[i][k, 0])
            layers += [nn.Dropout(critic.dropout), norm, nn.ReLU()]
    return nn.Sequential(*layers)


def test_each_critic_is_linear_dropout_layer_norm_relu_and_dropout_acts_only_in_training():
    torch.manual_seed(0)
    critic = CriticEnsemble(5, 2, **network_keys("redq.critic", hidden_sizes=(64, 64), dropout=0.2, layer_norm=True))
    with torch.no_grad():  # gains and biases away from 1 and 0, different per member
        for p in (*critic.norm_weights, *critic.norm_biases):
            p.add_(torch.randn_like(p))
    obs, actions = torch.randn(32, 3), torch.randn(32, 2)
    critic.eval()
    q = critic(obs, actions)
    for k in range(2):
        member = plain_member(critic, k).eval()
        torch.testing.assert_close(q[:, k], member(torch.cat([obs, actions], 1)).squeeze(1))
    critic.train()
    first, second = critic(obs, actions), critic(obs, actions)
    assert not torch.equal(first, second) and not torch.equal(first, q)
    first.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (*critic.norm_weights, *critic.norm_biases))


def test_plain_critics_keep_their_checkpoint_keys():
    assert set(CriticEnsemble(5, 2, **network_keys("redq.critic", hidden_sizes=(8,))).state_dict()) == {
        "weights.0",
        "weights.1",
        "biases.0",
        "biases.1",
    }


def test_a_tiny_droq_run(tmp_path):
    summary = run_training(
        tmp_path,
        "algo=droq",
        "env=pendulum",
        *TINY,
        "algo.learning_starts=100",
        "algo.batch_size=32",
        "algo.gradient_steps=2",
        "algo.policy_delay=2",
    )
    assert summary["status"] == "completed" and summary["updates"] == 2 * 201
