"""CrossQ: batch renormalization against a numpy computation, the joint batch, no target network,
the delayed actor, inference mode while acting, checkpoints, the fit check and runs."""

from __future__ import annotations

import copy
import csv
import io

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_hydra.algos.crossq import CrossQ
from rl_hydra.build import build_components
from rl_hydra.errors import ConfigError
from rl_hydra.networks.batch_renorm import BatchRenorm, batch_statistics, renorm_layers
from rl_hydra.networks.crossq import BatchRenormActor, BatchRenormCriticEnsemble
from tests.algos.continuous import ACTION_SPACE, agent_from, assert_the_pendulum_preset_reaches_minus_200, random_batch
from tests.conftest import TINY, compose_config, network_keys, run_training

SMALL_NET = ["network.actor.hidden_sizes=[16,16]", "network.critic.hidden_sizes=[32,32]"]
EPS = 0.001


def make_agent(*overrides: str) -> CrossQ:
    cfg = compose_config("algo=crossq", "env=pendulum", "~algo_env", *SMALL_NET, *overrides)
    return agent_from(cfg)


# --- batch renormalization against numpy -------------------------------------------------------
def renorm_numpy(x, running_mean, running_var, scale, bias, warm, r_max=3.0, d_max=5.0):
    """Ioffe (2017), Algorithm 1, in float64 numpy over axis -2: the output, and the running
    statistics after the step (momentum 0.01)."""
    mu_b = x.mean(axis=-2, keepdims=True)
    var_b = ((x - mu_b) ** 2).mean(axis=-2, keepdims=True)
    sigma_b = np.sqrt(var_b + EPS)
    sigma = np.sqrt(running_var + EPS)[..., None, :]
    r = np.clip(sigma_b / sigma, 1 / r_max, r_max) if warm else 1.0
    d = np.clip((mu_b - running_mean[..., None, :]) / sigma, -d_max, d_max) if warm else 0.0
    y = scale[..., None, :] * ((x - mu_b) / sigma_b * r + d) + bias[..., None, :]
    return y, 0.99 * running_mean + 0.01 * mu_b[..., 0, :], 0.99 * running_var + 0.01 * var_b[..., 0, :]


def brn_with_state(shape, warmup_steps, steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    members = shape[0] if len(shape) == 2 else None
    layer = BatchRenorm(shape[-1], members, momentum=0.01, eps=EPS, warmup_steps=warmup_steps, r_max=3.0, d_max=5.0)
    with torch.no_grad():  # running statistics far from a standard batch's, so r and d clip in places
        layer.running_mean.copy_(3.0 * torch.randn(shape, generator=g))
        layer.running_var.copy_(torch.rand(shape, generator=g) * 4.0 + 0.01)
        layer.scale.copy_(torch.rand(shape, generator=g) + 0.5)
        layer.bias.copy_(torch.randn(shape, generator=g))
        layer.steps.fill_(steps)
    return layer


@pytest.mark.parametrize("shape", [(5,), (3, 5)])  # one network, an ensemble of 3
@pytest.mark.parametrize("warm", [False, True])
def test_training_mode_is_ioffe_s_algorithm_with_r_and_d_clipped_after_warmup(shape, warm):
    layer = brn_with_state(shape, warmup_steps=10, steps=10 if warm else 9)
    layer.train(True)
    x = torch.randn(*shape[:-1], 64, shape[-1], generator=torch.Generator().manual_seed(1)) * 2 + 1
    before = {k: v.double().numpy() for k, v in layer.state_dict().items()}
    expected, mean, var = renorm_numpy(
        x.double().numpy(), before["running_mean"], before["running_var"], before["scale"], before["bias"], warm
    )
    y = layer(x)
    np.testing.assert_allclose(y.detach().numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.running_var.numpy(), var, rtol=1e-5, atol=1e-6)
    assert int(layer.steps) == (11 if warm else 10)
    if warm:  # the case is one where clipping matters: r and d as computed unclipped would differ
        sigma = np.sqrt(before["running_var"] + EPS)
        x64 = x.double().numpy()
        r = x64.std(axis=-2) / sigma
        d = (x64.mean(axis=-2) - before["running_mean"]) / sigma
        assert (r > 3).any() or (r < 1 / 3).any()
        assert (np.abs(d) > 5).any()
        assert (np.abs(d) < 5).any()


def test_r_and_d_carry_no_gradient():
    """With r and d constants, d/dx of sum_b x_hat_b is 0 (the centred x sums to 0 over the batch);
    were d's dependence on the batch mean differentiated it would not be."""
    layer = brn_with_state((4,), warmup_steps=0, steps=0)
    with torch.no_grad():
        layer.running_mean.zero_()
        layer.running_var.fill_(4.0)  # |d| < d_max and 1/3 < r < 3 below: neither clipped
        layer.scale.fill_(1.0)
        layer.bias.zero_()
    layer.train(True)
    x = (0.5 + torch.randn(128, 4, generator=torch.Generator().manual_seed(2))).requires_grad_(True)
    layer(x).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.zeros_like(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [(5,), (3, 5)])
def test_inference_mode_uses_the_running_statistics_and_changes_nothing(shape):
    layer = brn_with_state(shape, warmup_steps=10, steps=4)
    layer.eval()
    state = copy.deepcopy(layer.state_dict())
    x = torch.randn(*shape[:-1], 7, shape[-1], generator=torch.Generator().manual_seed(3))
    s = {k: v.double().numpy()[..., None, :] for k, v in state.items() if k != "steps"}
    expected = s["scale"] * (x.double().numpy() - s["running_mean"]) / np.sqrt(s["running_var"] + EPS) + s["bias"]
    np.testing.assert_allclose(layer(x).detach().numpy(), expected, rtol=1e-5, atol=1e-5)
    assert all(torch.equal(v, layer.state_dict()[k]) for k, v in state.items())
    # one row is normalized the same alone or in a batch (no batch statistics)
    torch.testing.assert_close(layer(x[..., :1, :]), layer(x)[..., :1, :])


def test_batch_statistics_switches_only_inside_the_block_and_networks_rest_in_inference_mode():
    actor = BatchRenormActor(
        3, ACTION_SPACE.low, ACTION_SPACE.high, **network_keys("crossq.actor", hidden_sizes=(8, 8))
    )
    critic = BatchRenormCriticEnsemble(5, 2, **network_keys("crossq.critic", hidden_sizes=(8, 8)))
    layers = renorm_layers(actor, critic)
    assert len(layers) == 6 and not any(layer.training for layer in layers)
    with batch_statistics(critic):
        assert [layer.training for layer in layers] == [False] * 3 + [True] * 3
    assert not any(layer.training for layer in layers)
    assert {k for k in critic.state_dict() if k.startswith("norms.0.")} == {
        "norms.0.scale",
        "norms.0.bias",
        "norms.0.running_mean",
        "norms.0.running_var",
        "norms.0.steps",
    }


def test_the_critic_ensemble_member_is_brn_linear_relu_brn_linear():
    critic = BatchRenormCriticEnsemble(3, 2, **network_keys("crossq.critic", hidden_sizes=(4,)))
    x = torch.randn(6, 3)
    norm0, norm1 = critic.norms
    with torch.no_grad():
        for norm in critic.norms:
            norm.running_mean.normal_()
            norm.running_var.uniform_(0.5, 2.0)
            norm.scale.uniform_(0.5, 1.5)
    member = 1

    def brn(norm, h):  # inference mode for member 1, by hand
        return (
            norm.scale[member] * (h - norm.running_mean[member]) / (norm.running_var[member] + EPS).sqrt()
            + norm.bias[member]
        )

    w0, w1 = critic.ensemble.weights[0][member], critic.ensemble.weights[1][member]
    b0, b1 = critic.ensemble.biases[0][member], critic.ensemble.biases[1][member]
    expected = brn(norm1, torch.relu(brn(norm0, x) @ w0 + b0)) @ w1 + b1  # (6, 1)
    torch.testing.assert_close(critic(x[:, :2], x[:, 2:])[:, member], expected[:, 0])


# --- the update ------------------------------------------------------------------------------------
def test_one_joint_pass_of_the_live_critic_gives_both_halves_and_their_shared_statistics():
    agent = make_agent()
    assert not hasattr(agent, "critic_target") and "critic_target" not in agent.state_dict()
    batch = random_batch()
    critic, actor = copy.deepcopy(agent.critic), copy.deepcopy(agent.actor)
    noise = torch.randn((32, 2), generator=copy.deepcopy(agent.generator))  # the update's draw for a'
    calls = []
    agent.critic.register_forward_hook(lambda module, args, out: calls.append((len(args[0]), module.norms[0].training)))
    metrics = agent.update(batch).metrics
    assert calls == [(64, True)]  # one training-mode pass of 2B rows; no actor update at update 1 of 3
    # by hand: a' from the actor's running statistics, both halves through a copy of the critic at once
    with torch.no_grad():
        next_actions, next_log_prob = actor.sample(batch.next_obs, noise=noise)
        joint = torch.cat(
            [torch.cat([batch.obs, actor.from_env(batch.actions)], 1), torch.cat([batch.next_obs, next_actions], 1)]
        )  # (2B, 5)
        with batch_statistics(critic):
            q = critic(joint[:, :3], joint[:, 3:])  # (2B, 2)
    targets = batch.rewards + 0.99 * (1 - batch.terminated) * (q[32:].min(1).values - next_log_prob)  # alpha = 1
    loss = (q[:32] - targets[:, None]).pow(2).mean(0).sum()
    torch.testing.assert_close(metrics["critic_loss"], loss)
    # the first layer's running statistics moved toward those of the 2B rows (per member, same input)
    stats = agent.critic.norms[0]
    mean, var = joint.mean(0), joint.var(0, unbiased=False)
    torch.testing.assert_close(stats.running_mean, (0.01 * mean).expand(2, 5))
    torch.testing.assert_close(stats.running_var, (0.99 + 0.01 * var).expand(2, 5))
    assert int(stats.steps) == 1
    # halves normalized apart would have given another loss: the joint batch is what is computed
    with batch_statistics(critic):
        apart = torch.cat([critic(joint[:32, :3], joint[:32, 3:]), critic(joint[32:, :3], joint[32:, 3:])])
    assert not torch.allclose(apart, q, atol=1e-3)


def test_the_actor_and_alpha_update_on_every_dth_update_and_only_the_actor_pass_updates_its_statistics():
    agent = make_agent("algo.policy_delay=3")
    moved, alphas = [], []
    for i in range(7):
        before, alpha = copy.deepcopy(agent.actor.state_dict()), agent.log_alpha.item()
        metrics = agent.update(random_batch(seed=i)).metrics
        moved.append(not torch.equal(agent.actor.state_dict()["head.weight"], before["head.weight"]))
        alphas.append(agent.log_alpha.item() != alpha)
        assert ("actor_loss" in metrics) == (i >= 2)
    assert moved == alphas == [False, False, True, False, False, True, False]
    assert {int(layer.steps) for layer in renorm_layers(agent.actor)} == {2}  # the actor's own passes
    assert {int(layer.steps) for layer in renorm_layers(agent.critic)} == {7}  # one joint pass per update
    assert not any(layer.training for layer in renorm_layers(agent.actor, agent.critic))


def test_acting_uses_the_running_statistics_and_leaves_them_alone():
    agent = make_agent()
    for i in range(3):
        agent.update(random_batch(seed=i))
    state = copy.deepcopy(agent.state_dict())
    obs = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    explored = agent.act(obs, explore=True)[0]
    greedy = agent.act(obs, explore=False)[0]
    for key in ("actor", "critic"):
        assert all(torch.equal(v, agent.state_dict()[key][k]) for k, v in state[key].items())
    with torch.no_grad():  # tanh of the mean with inference-mode layers, row by row as in a batch
        mean, _ = agent.actor(torch.as_tensor(obs[:1]))
        np.testing.assert_allclose(greedy[:1], agent.actor.to_env(torch.tanh(mean)).numpy(), rtol=1e-6)
    assert np.all((explored >= ACTION_SPACE.low) & (explored <= ACTION_SPACE.high))
    np.testing.assert_allclose(agent.act(obs[:1], explore=False)[0], greedy[:1], rtol=1e-5, atol=1e-6)  # one row alone


def test_state_dict_keeps_the_running_statistics_and_round_trips_through_a_weights_only_checkpoint():
    agent = make_agent()
    for i in range(4):
        agent.update(random_batch(seed=i))
    state = agent.state_dict()
    assert int(state["critic"]["norms.1.steps"]) == 4 and state["critic"]["norms.1.running_mean"].abs().sum() > 0
    assert int(state["actor"]["body.0.steps"]) == 1
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    clone = make_agent("seed=1")
    clone.update(random_batch(seed=9))  # diverge before loading
    clone.load_state_dict(torch.load(buffer, weights_only=True))
    for i in range(4, 7):
        expected, got = agent.update(random_batch(seed=i)).metrics, clone.update(random_batch(seed=i)).metrics
        assert set(expected) == set(got) and all(torch.equal(got[k], expected[k]) for k in expected)
    obs = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(agent.act(obs, explore=True)[0], clone.act(obs, explore=True)[0])


# --- what fits, and bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["algo=crossq", "env=cartpole"],
            "algo=crossq needs a continuous (Box) action space but the env has Discrete(2)",
        ),
        (
            ["algo=crossq", "env=pendulum", "network=redq"],
            "builds actor: rl_hydra.networks.actor_critic.SquashedGaussianActor, critic: "
            "rl_hydra.networks.actor_critic.CriticEnsemble, but algo=crossq builds on actor: "
            "rl_hydra.networks.crossq.BatchRenormActor, critic: rl_hydra.networks.crossq.BatchRenormCriticEnsemble",
        ),
        (
            ["algo=sac", "env=pendulum", "network=crossq"],  # SAC's target critics know no renormalization
            "builds actor: rl_hydra.networks.crossq.BatchRenormActor, critic: rl_hydra.networks.crossq."
            "BatchRenormCriticEnsemble, but algo=sac builds on actor: ",
        ),
        (["algo=crossq", "env=pendulum", "algo.n_step=3"], "algo.n_step=3 is not supported by algo=crossq"),
        (["algo=crossq", "env=pendulum", "buffer=prioritized"], "needs an algo whose update returns per-sample"),
    ],
)
def test_groups_that_do_not_fit_are_refused_in_one_line(args, message):
    with pytest.raises(ConfigError) as error:
        build_components(compose_config(*args, "device=cpu"), torch.device("cpu"))
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algo.batch_size=1"], "algo.batch_size=1 is out of range; expected an integer >= 2"),
        (["algo.policy_delay=0"], "algo.policy_delay=0 is out of range"),
        (["network.critic.momentum=0"], "network.critic.momentum=0.0 is out of range; expected a number > 0.0"),
        (["network.actor.r_max=0.5"], "network.actor.r_max=0.5 is out of range; expected a number >= 1.0"),
        (["network.critic.warmup_steps=-1"], "network.critic.warmup_steps=-1 is out of range"),
        (["network.critic.activation=swish"], "network.critic.activation='swish' is not allowed"),
    ],
)
def test_bad_config_fails_before_training(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")) as error:
        run_training(tmp_path, "algo=crossq", "env=pendulum", *TINY, *overrides)
    assert "\n" not in str(error.value)
    assert not (tmp_path / "metrics.csv").exists()


# --- runs ---------------------------------------------------------------------------------------------------
def test_tiny_training_run(tmp_path):
    from rl_hydra import load_run, train

    summary = train(
        "algo=crossq",
        "env=pendulum",
        *TINY,
        *SMALL_NET,
        "algo.learning_starts=100",
        "algo.batch_size=32",
        "algo.policy_delay=3",
        run_dir=tmp_path,
    ).summary
    assert summary["status"] == "completed" and summary["global_step"] == 300 and summary["updates"] == 201
    with open(tmp_path / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert all(f"train/{name}" in rows[0] for name in CrossQ.metric_names)
    assert rows[-1]["train/actor_loss"] != "" and rows[-1]["eval/return_mean"] != ""
    # the run loads back and predicts with the checkpoint's running statistics, deterministically
    run = load_run(tmp_path, checkpoint="last")
    obs = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, -2.0]], np.float32)
    steps = [int(layer.steps) for layer in renorm_layers(run.agent.actor, run.agent.critic)]
    assert steps == [67] * 3 + [201] * 3  # the actor every 3rd of 201 updates
    np.testing.assert_array_equal(run.predict(obs), run.predict(obs))
    np.testing.assert_allclose(run.predict(obs[1]), run.predict(obs)[1], rtol=1e-5, atol=1e-6)  # no batch statistics


def test_compile_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"^compile=true is not supported by algo=crossq; it works with algo="):
        run_training(tmp_path, "algo=crossq", "env=pendulum", *TINY, *SMALL_NET, "compile=true")


@pytest.mark.slow  # needs the bench extra (sb3-contrib); about 10 s
def test_updates_equal_sb3_contribs_crossq_on_the_same_weights_batches_and_noise(monkeypatch):
    """Six updates (two of them the delayed actor and temperature steps) from sb3-contrib's initial
    weights, on the same batches and standard normal draws, end where sb3-contrib's do: critics to 3e-4,
    the actor to 5e-5, the temperature to 1e-6, each moved by more. Three differences are set aside:
    SB3's tanh correction (put on ours here), its unbiased batch variance (ours is the paper's code's
    biased one: batches of 4,096 make the two nearly one) and its critic loss at half ours (Adam)."""
    from rl_hydra.networks import actor_critic
    from tests.peer_updates import (
        assert_critics_equal,
        assert_squashed_gaussian_actor_equal,
        copy_critics,
        copy_squashed_gaussian_actor,
        made_up_batches,
        sb3_squashed_gaussian_log_prob,
        serve,
    )

    sb3_contrib = pytest.importorskip("sb3_contrib")
    monkeypatch.setattr(actor_critic, "squashed_gaussian_log_prob", sb3_squashed_gaussian_log_prob)
    env, size = gym.make("MountainCarContinuous-v0"), 4096
    peer = sb3_contrib.CrossQ(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        batch_size=size,
        policy_delay=3,
        policy_kwargs={"net_arch": [16, 16]},
        seed=0,
        device="cpu",
    )
    cfg = compose_config(
        "algo=crossq",
        "env=mountain_car_continuous",
        "~algo_env",
        "network.actor.hidden_sizes=[16,16]",
        "network.critic.hidden_sizes=[16,16]",
        "algo.policy_delay=3",
        *(f"algo.{part}_optimizer.lr=1e-3" for part in ("actor", "critic", "alpha")),
    )
    agent = agent_from(cfg, env.observation_space, env.action_space)
    copy_squashed_gaussian_actor(agent.actor, peer.actor)  # the normalization layers start alike
    critics = [(agent.critic.ensemble, peer.critic)]  # no target critics
    copy_critics(critics)
    start = {"actor": copy.deepcopy(agent.actor.body[1].weight), "critic": agent.critic.ensemble.weights[1].clone()}
    batches = made_up_batches(6, size)
    serve(peer, batches)
    torch.manual_seed(7)  # both draw the next actions' noise, then (on actor steps) the current ones'
    peer.train(gradient_steps=6, batch_size=size)
    agent.generator.manual_seed(7)
    for batch in batches:
        agent.update(batch)
    assert agent.log_alpha.item() == pytest.approx(peer.log_ent_coef.item(), abs=1e-6) != 0.0
    assert_squashed_gaussian_actor_equal(agent.actor, peer.actor, atol=5e-5)
    assert_critics_equal(critics, atol=3e-4)
    assert (agent.actor.body[1].weight - start["actor"]).abs().max() > 1e-3
    assert (agent.critic.ensemble.weights[1] - start["critic"]).abs().max() > 3e-3


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0])
def test_pendulum_preset_reaches_minus_200(tmp_path, seed):
    """Seed 0's first evaluation at -200 comes at 4k of its 20k steps. The 5-seed figures at the full budget:
    docs/continuous_results.md."""
    assert_the_pendulum_preset_reaches_minus_200(tmp_path, "algo=crossq", f"seed={seed}")


def test_the_benchmark_s_sb3_contrib_defaults_are_the_installed_ones():
    """scripts/benchmarks/zoo.py writes sb3-contrib's CrossQ defaults out, for the key-by-key check."""
    pytest.importorskip("sb3_contrib")
    import inspect
    import sys

    from sb3_contrib import CrossQ as PeerCrossQ
    from sb3_contrib.common.torch_layers import BatchRenorm as PeerRenorm
    from sb3_contrib.crossq.policies import CrossQPolicy

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))
    import zoo

    signature = inspect.signature(PeerCrossQ.__init__).parameters
    assert {k: signature[k].default for k in zoo.SB3_DEFAULTS["crossq"] if k != "tau"} == {
        k: v for k, v in zoo.SB3_DEFAULTS["crossq"].items() if k != "tau"
    }
    policy = inspect.signature(CrossQPolicy.__init__).parameters
    assert {k: policy[k].default for k in zoo.CROSSQ_POLICY if k != "net_arch"} == {
        k: v for k, v in zoo.CROSSQ_POLICY.items() if k != "net_arch"
    }
    model = PeerCrossQ("MlpPolicy", "Pendulum-v1", device="cpu")
    assert model.tau == zoo.SB3_DEFAULTS["crossq"]["tau"] and model.policy.net_arch == zoo.CROSSQ_POLICY["net_arch"]
    assert model.actor.optimizer.defaults["betas"] == zoo.CROSSQ_BETAS == model.critic.optimizer.defaults["betas"]
    renorm = next(m for m in model.critic.modules() if isinstance(m, PeerRenorm))
    assert (renorm.rmax, renorm.dmax) == (zoo.CROSSQ_R_MAX, zoo.CROSSQ_D_MAX)
