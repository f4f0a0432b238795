"""TQC: the truncated target and the quantile loss by hand, the quantile critics, the update, refusals, runs."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rl_hydra import load_run, train
from rl_hydra.algos.tqc import TQC, truncated_target
from rl_hydra.errors import ConfigError
from rl_hydra.losses import ensemble_quantile_loss, midpoint_taus
from rl_hydra.networks.actor_critic import QuantileCriticEnsemble
from tests.algos.continuous import SMALL_NET, agent_from, assert_the_pendulum_preset_reaches_minus_200, random_batch
from tests.conftest import TINY, compose_config, network_keys, run_training
from tests.peer_updates import (
    BATCH,
    assert_critics_equal,
    assert_squashed_gaussian_actor_equal,
    copy_critics,
    copy_squashed_gaussian_actor,
    made_up_batches,
    serve,
)


def make_agent(*overrides: str) -> TQC:
    cfg = compose_config(
        "algo=tqc",
        "env=pendulum",
        "~algo_env",
        *SMALL_NET,
        "algo.ensemble_size=3",
        "algo.num_quantiles=5",
        "algo.top_quantiles_to_drop_per_critic=1",
        *overrides,
    )
    return agent_from(cfg)


# --- pure functions, by hand -------------------------------------------------------------
def test_truncated_target_by_hand():
    # B = 2 rows, N = 2 critics, M = 3 quantiles, d = 1: keep the 2 * (3 - 1) = 4 smallest of 6 pooled atoms
    next_quantiles = torch.tensor([[[5.0, 1.0, 3.0], [2.0, 6.0, 4.0]], [[0.0, -1.0, 9.0], [8.0, 7.0, -2.0]]])
    rewards, terminated = torch.tensor([1.0, 0.5]), torch.tensor([0.0, 1.0])
    next_log_prob = torch.tensor([-1.0, 2.0])
    targets = truncated_target(
        rewards,
        terminated,
        next_quantiles,
        next_log_prob,
        alpha=0.5,
        discounts=torch.tensor([0.9, 0.9]),
        drop_per_critic=1,
    )
    # row 0: pooled sorted 1 2 3 4 | 5 6 dropped; each minus 0.5 * -1 = +0.5 -> 1.5 2.5 3.5 4.5; times 0.9, plus 1
    # row 1 is terminal: the reward alone, for every kept atom
    expected = torch.tensor([[1 + 0.9 * 1.5, 1 + 0.9 * 2.5, 1 + 0.9 * 3.5, 1 + 0.9 * 4.5], [0.5] * 4])
    torch.testing.assert_close(targets, expected)
    # d = 0 keeps every atom; d = M - 1 keeps the N smallest
    assert truncated_target(rewards, terminated, next_quantiles, next_log_prob, 0.0, 0.9, 0).shape == (2, 6)
    torch.testing.assert_close(
        truncated_target(rewards, terminated * 0, next_quantiles, next_log_prob * 0, 0.0, 1.0, 2)[1],
        torch.tensor([-1.5, -0.5]),
    )


def reference_quantile_loss(quantiles: np.ndarray, targets: np.ndarray, kappa: float = 1.0) -> float:
    """Sum over critics of mean over (batch, m, i) of |tau_m - 1{u < 0}| * Huber(u) / kappa, u = y_i - z_m: loops."""
    batch, critics, num_quantiles = quantiles.shape
    total = 0.0
    for n in range(critics):
        terms = []
        for b in range(batch):
            for m in range(num_quantiles):
                tau = (2 * m + 1) / (2 * num_quantiles)
                for y in targets[b]:
                    u = y - quantiles[b, n, m]
                    huber = 0.5 * u * u if abs(u) <= kappa else kappa * (abs(u) - 0.5 * kappa)
                    terms.append(abs(tau - (u < 0)) * huber / kappa)
        total += float(np.mean(terms))
    return total


def test_ensemble_quantile_loss_against_loops():
    g = torch.Generator().manual_seed(0)
    quantiles, targets = 2 * torch.randn(4, 3, 5, generator=g), 2 * torch.randn(4, 12, generator=g)
    loss = ensemble_quantile_loss(quantiles, targets, midpoint_taus(5), 1.0)
    assert loss.shape == ()
    np.testing.assert_allclose(float(loss), reference_quantile_loss(quantiles.numpy(), targets.numpy()), rtol=1e-5)
    np.testing.assert_allclose(
        float(ensemble_quantile_loss(quantiles, targets, midpoint_taus(5), 2.0)),
        reference_quantile_loss(quantiles.numpy(), targets.numpy(), 2.0),
        rtol=1e-5,
    )


# --- the quantile critics -------------------------------------------------------------
def test_quantile_critics_shape_and_each_member_is_a_plain_mlp():
    torch.manual_seed(0)
    critic = QuantileCriticEnsemble(
        input_dim=5, ensemble_size=3, num_quantiles=4, **network_keys("tqc.critic", hidden_sizes=(8,))
    )
    obs, actions = torch.randn(6, 3), torch.randn(6, 2)
    out = critic(obs, actions)
    assert out.shape == (6, 3, 4)
    x = torch.cat([obs, actions], dim=1)
    for k in range(3):
        h = torch.relu(x @ critic.weights[0][k] + critic.biases[0][k])
        torch.testing.assert_close(out[:, k], h @ critic.weights[1][k] + critic.biases[1][k])
    torch.testing.assert_close(critic(obs, actions, members=torch.tensor([2])), out[:, 2:3])


# --- the update -----------------------------------------------------------------------------
def test_critic_loss_is_the_truncated_target_regression_computed_independently():
    agent = make_agent()
    batch, noise = random_batch(16, seed=3), torch.randn(16, 2, generator=torch.Generator().manual_seed(4))
    alpha = torch.tensor(0.3)
    loss, quantiles = agent.critic_loss(batch, noise, alpha)
    with torch.no_grad():  # the ingredients from the networks; the target and the loss in numpy
        next_actions, next_log_prob = agent.actor.sample(batch.next_obs, noise=noise)
        next_z = agent.critic_target(batch.next_obs, next_actions).numpy().astype(np.float64)  # (B, 3, 5)
        z = agent.critic(batch.obs, agent.actor.from_env(batch.actions)).numpy()
    pooled = np.sort(next_z.reshape(16, 15), axis=1)[:, : 3 * (5 - 1)]  # top 1 per critic off
    y = batch.rewards.numpy()[:, None] + (0.99 * (1 - batch.terminated.numpy()))[:, None] * (
        pooled - 0.3 * next_log_prob.numpy()[:, None]
    )
    np.testing.assert_allclose(quantiles.detach().numpy(), z)
    np.testing.assert_allclose(float(loss.detach()), reference_quantile_loss(z, y), rtol=1e-4)


def test_actor_ascends_the_mean_over_every_critics_atoms():
    agent = make_agent()
    obs, noise = torch.randn(8, 3), torch.randn(8, 2)
    loss, log_prob = agent.actor_loss(obs, noise, torch.tensor(0.2))
    actions, _ = agent.actor.sample(obs, noise=noise)
    z = agent.critic(obs, actions)  # (8, 3, 5)
    torch.testing.assert_close(loss, (0.2 * log_prob - z.mean(dim=(1, 2))).mean())


def test_update_moves_critics_actor_alpha_and_the_target_by_polyak():
    agent = make_agent("algo.tau=0.1")
    critic, target, actor = (copy.deepcopy(m.state_dict()) for m in (agent.critic, agent.critic_target, agent.actor))
    log_alpha = float(agent.log_alpha.detach())
    metrics = agent.update(random_batch()).metrics
    assert set(metrics) == set(TQC.metric_names) and all(torch.isfinite(v) for v in metrics.values())
    for key, value in agent.critic.state_dict().items():
        assert not torch.equal(value, critic[key]), key
        torch.testing.assert_close(agent.critic_target.state_dict()[key], 0.9 * target[key] + 0.1 * value)
    assert not torch.equal(agent.actor.state_dict()["head.weight"], actor["head.weight"])
    assert float(agent.log_alpha.detach()) != log_alpha and agent.updates == 1


@pytest.mark.slow  # needs the bench extra (sb3-contrib); a few seconds
def test_updates_equal_sb3_contribs_tqc_on_the_same_weights_batches_and_noise(monkeypatch):
    """Six updates of critics, actor, temperature and target from sb3-contrib's initial weights, on the same
    batches and the same standard normal draws: every weight and the temperature end equal to
    sb3-contrib's up to float rounding. Its critic loss is the mean over critics of what ours sums (the
    paper's per-critic loss); Adam makes that a no-op but where a gradient is near its eps, so ours is
    put on its scale here."""
    import gymnasium as gym

    from rl_hydra.algos import tqc

    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = gym.make("MountainCarContinuous-v0")
    peer = sb3_contrib.TQC(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        batch_size=BATCH,
        top_quantiles_to_drop_per_net=2,
        policy_kwargs={"net_arch": [16, 16], "n_critics": 5, "n_quantiles": 25},
        seed=0,
        device="cpu",
    )
    cfg = compose_config(
        "algo=tqc",
        "env=mountain_car_continuous",
        "~algo_env",
        *SMALL_NET,
        *(f"algo.{part}_optimizer.lr=1e-3" for part in ("actor", "critic", "alpha")),
    )
    agent = agent_from(cfg, env.observation_space, env.action_space)
    copy_squashed_gaussian_actor(agent.actor, peer.actor)
    critics = [(agent.critic, peer.critic), (agent.critic_target, peer.critic_target)]
    copy_critics(critics)
    plain_loss = tqc.ensemble_quantile_loss
    monkeypatch.setattr(tqc, "ensemble_quantile_loss", lambda *args: plain_loss(*args) / 5)
    batches = made_up_batches(6)
    serve(peer, batches)
    torch.manual_seed(7)
    draws = []
    for _ in batches:  # sb3-contrib draws the current actions' noise, then the next ones'; we the other way round
        current, following = torch.randn(BATCH, 1), torch.randn(BATCH, 1)
        draws += [following, current]
    torch.manual_seed(7)
    peer.train(gradient_steps=6, batch_size=BATCH)
    monkeypatch.setattr(agent, "standard_normal", lambda _: draws.pop(0))
    for batch in batches:
        agent.update(batch)
    assert not draws and agent.log_alpha.item() == pytest.approx(peer.log_ent_coef.item(), abs=1e-6) != 0.0
    assert_squashed_gaussian_actor_equal(agent.actor, peer.actor, atol=1e-5)
    assert_critics_equal(critics, atol=1e-5)


def test_defaults_are_the_papers():
    algo, network = compose_config("algo=tqc", "~algo_env").algo, compose_config("algo=tqc", "~algo_env").network
    assert (algo.ensemble_size, algo.num_quantiles, algo.top_quantiles_to_drop_per_critic) == (5, 25, 2)
    assert list(network.critic.hidden_sizes) == [512, 512, 512] and list(network.actor.hidden_sizes) == [256, 256]


# --- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo=tqc", "env=cartpole"], "algo=tqc needs a continuous (Box) action space"),
        (
            ["algo=tqc", "env=pendulum", "network=redq"],
            "builds actor: rl_hydra.networks.actor_critic.SquashedGaussianActor, critic: "
            "rl_hydra.networks.actor_critic.CriticEnsemble, but algo=tqc builds on actor: "
            "rl_hydra.networks.actor_critic.SquashedGaussianActor, critic: "
            "rl_hydra.networks.actor_critic.QuantileCriticEnsemble",
        ),
        (
            ["algo=sac", "env=pendulum", "network=tqc"],  # the quantile critics are no subclass of the scalar ones
            "critic: rl_hydra.networks.actor_critic.QuantileCriticEnsemble, but algo=sac builds on",
        ),
        (
            ["algo=tqc", "env=pendulum", "algo.top_quantiles_to_drop_per_critic=25"],
            "algo.top_quantiles_to_drop_per_critic=25 is out of range",
        ),
        (["algo=tqc", "env=pendulum", "algo.num_quantiles=0"], "algo.num_quantiles=0 is out of range"),
        (["algo=tqc", "env=pendulum", "algo.kappa=0"], "algo.kappa=0"),
    ],
)
def test_what_does_not_fit_is_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as error:
        run_training(tmp_path, *TINY, *overrides)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "metrics.csv").exists()


# --- runs ---------------------------------------------------------------------------------------
def test_tiny_run_on_two_envs_then_load_run_predicts(tmp_path):
    run = train(
        "algo=tqc",
        "env=pendulum",
        *TINY,
        *SMALL_NET,
        "env.num_envs=2",
        "algo.learning_starts=100",
        "algo.batch_size=32",
        run_dir=tmp_path / "run",
    )
    # one update per env step: two per vector step, from step 100 to 300
    assert run.summary["status"] == "completed" and run.summary["updates"] == 201
    loaded = load_run(tmp_path / "run")
    action = loaded.predict(np.zeros(3, np.float32))
    assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0
    assert np.array_equal(loaded.predict(np.ones((4, 3), np.float32)), loaded.predict(np.ones((4, 3), np.float32)))


@pytest.mark.slow
def test_pendulum_preset_reaches_minus_200(tmp_path):
    """The RL Zoo's preset."""
    assert_the_pendulum_preset_reaches_minus_200(tmp_path, "algo=tqc")
