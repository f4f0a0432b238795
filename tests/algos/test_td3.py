"""TD3: the smoothed target by hand, the delayed actor and target updates, exploration noise, refusals, runs."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from rl_hydra import load_run, train
from rl_hydra.algos.td3 import TD3, ornstein_uhlenbeck_step, smoothed_target_action
from rl_hydra.errors import ConfigError
from rl_hydra.networks.actor_critic import DeterministicActor
from tests.algos.continuous import (
    ACTION_SPACE,
    SMALL_NET,
    agent_from,
    assert_the_pendulum_preset_reaches_minus_200,
    random_batch,
)
from tests.conftest import TINY, compose_config, metric_rows, network_keys, run_training
from tests.peer_updates import (
    BATCH,
    assert_critics_equal,
    assert_layers_equal,
    copy_critics,
    copy_layers,
    made_up_batches,
    serve,
)


def make_agent(*overrides: str) -> TD3:
    cfg = compose_config("algo=td3", "env=pendulum", "~algo_env", *SMALL_NET, *overrides)
    return agent_from(cfg)


def snapshot(agent: TD3) -> dict[str, dict[str, torch.Tensor]]:
    return {
        name: copy.deepcopy(getattr(agent, name).state_dict())
        for name in ("actor", "actor_target", "critic", "critic_target")
    }


def moved(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[key], after[key]) for key in before if not key.startswith("action_"))


# --- pure functions, by hand -------------------------------------------------------------
def test_smoothed_target_action_clips_the_noise_then_the_action():
    next_actions = torch.tensor([[0.0, 0.9], [-0.95, 0.2]])
    noise = torch.tensor([[1.0, 1.0], [-4.0, -0.5]])  # standard normal draws
    got = smoothed_target_action(next_actions, noise, noise_std=0.2, noise_clip=0.5)
    # 0.2 * noise = [0.2, 0.2], [-0.8 -> -0.5 (clip), -0.1]; sums 0.2, 1.1 -> 1.0 (box), -1.45 -> -1.0 (box), 0.1
    torch.testing.assert_close(got, torch.tensor([[0.2, 1.0], [-1.0, 0.1]]))


def test_ornstein_uhlenbeck_step_by_hand():
    previous, noise = torch.tensor([[1.0, -2.0]]), torch.tensor([[0.5, 1.0]])
    got = ornstein_uhlenbeck_step(previous, noise, std=0.3, theta=0.15, dt=0.01)
    expected = previous - 0.15 * previous * 0.01 + 0.3 * 0.1 * noise
    torch.testing.assert_close(got, expected)


# --- the update -----------------------------------------------------------------------------
def test_critic_loss_against_an_independent_computation():
    agent = make_agent()
    batch, smoothing = random_batch(16, seed=2), torch.randn(16, 2, generator=torch.Generator().manual_seed(5))
    loss, q_values = agent.critic_loss(batch, smoothing)
    with torch.no_grad():  # the network outputs; the smoothing, min, target and loss in numpy
        mu_next = agent.actor_target(batch.next_obs).numpy()
        action = np.clip(mu_next + np.clip(0.2 * smoothing.numpy(), -0.5, 0.5), -1, 1)
        next_q = agent.critic_target(batch.next_obs, torch.as_tensor(action)).numpy()
        q = agent.critic(batch.obs, agent.actor.from_env(batch.actions)).numpy()
    y = batch.rewards.numpy() + 0.99 * (1 - batch.terminated.numpy()) * next_q.min(axis=1)
    np.testing.assert_allclose(q_values.detach().numpy(), q)
    np.testing.assert_allclose(float(loss.detach()), ((q - y[:, None]) ** 2).mean(axis=0).sum(), rtol=1e-5)


def test_actor_loss_is_minus_the_first_critic_at_mu():
    agent = make_agent()
    obs = torch.randn(8, 3)
    torch.testing.assert_close(agent.actor_loss(obs), -agent.critic(obs, agent.actor(obs))[:, 0].mean())
    agent.actor_loss(obs).backward()
    assert all(p.grad is None for p in agent.critic.parameters())  # the critics stay out of the actor's step


def test_actor_and_targets_update_only_every_policy_delay_critic_updates():
    agent = make_agent("algo.policy_delay=3", "algo.tau=0.1")
    history = []
    for i in range(7):
        before = snapshot(agent)
        metrics = agent.update(random_batch(seed=i)).metrics
        after = snapshot(agent)
        history.append(tuple(moved(before[name], after[name]) for name in before))
        if (i + 1) % 3 == 0:  # the targets moved by polyak toward the networks as they are after this update
            for name in ("actor", "critic"):
                for key, online in after[name].items():
                    expected = 0.9 * before[f"{name}_target"][key] + 0.1 * online
                    torch.testing.assert_close(after[f"{name}_target"][key], expected)
        assert ("actor_loss" in metrics) == (i >= 2)
    #                 actor  actor_target critic critic_target
    assert history == [(False, False, True, False), (False, False, True, False), (True, True, True, True)] * 2 + [
        (False, False, True, False)
    ]
    assert agent.updates == 7


def test_gaussian_exploration_is_mu_plus_noise_clipped_and_greedy_is_mu():
    agent = make_agent("algo.action_noise.std=0.3")
    obs = np.random.default_rng(0).normal(size=(4000, 3)).astype(np.float32)
    greedy, _ = agent.act(obs[:5], explore=False)
    with torch.no_grad():
        mu = agent.actor(torch.as_tensor(obs[:5]))
    np.testing.assert_allclose(greedy, agent.actor.to_env(mu).numpy(), rtol=1e-6)
    same = np.repeat(obs[:1], 4000, axis=0)
    explored = agent.actor.from_env(torch.as_tensor(agent.act(same, explore=True)[0])).numpy()
    with torch.no_grad():
        center = agent.actor(torch.as_tensor(obs[:1])).numpy()[0]
    inside = np.abs(center) < 0.3  # no clipping near the middle: the unit-box spread is the noise's
    np.testing.assert_allclose(explored.std(axis=0)[inside], 0.3, rtol=0.1)
    assert np.all(np.abs(explored) <= 1.0 + 1e-6)


def test_ornstein_uhlenbeck_noise_is_one_process_per_env_carried_as_the_acting_state():
    agent = make_agent("algo.action_noise.kind=ornstein_uhlenbeck", "algo.action_noise.std=0.5")
    obs = np.zeros((3, 3), np.float32)
    _, state = agent.act(obs, explore=True)
    (first,) = state
    actions, state = agent.act(obs, state, explore=True)
    assert first.shape == (3, 2) and not torch.equal(first, state[0])
    # the next value follows the previous one: the same draw from a process at rest differs
    clone = make_agent("algo.action_noise.kind=ornstein_uhlenbeck", "algo.action_noise.std=0.5")
    clone.act(obs, explore=True)
    assert not np.array_equal(clone.act(obs, explore=True)[0], clone_at_rest(agent, obs, first))
    # an env whose episode ended starts at rest; the others go on
    reset = agent.reset_state(state, np.array([False, True, False]))
    assert torch.equal(reset[0][1], torch.zeros(2)) and torch.equal(reset[0][[0, 2]], state[0][[0, 2]])
    assert agent.act(obs, explore=False)[1] is None and agent.act(obs, explore=True)[1] is not None
    gaussian = make_agent()
    assert gaussian.act(obs, explore=True)[1] is None  # nothing to carry


def clone_at_rest(agent, obs, first):
    """The actions of a TD3 with `agent`'s weights and generator whose processes are all at rest."""
    twin = make_agent("algo.action_noise.kind=ornstein_uhlenbeck", "algo.action_noise.std=0.5")
    twin.load_state_dict(agent.state_dict())
    twin.generator.set_state(agent.generator.get_state())
    return twin.act(obs, None, explore=True)[0]


def test_ornstein_uhlenbeck_noise_restarts_with_each_episode_in_a_run(tmp_path, monkeypatch):
    """In the loop: the state the agent returns is carried step to step and reset where an episode
    ended (Pendulum's 200-step episodes, two envs)."""
    seen = []
    act, reset = TD3.act, TD3.reset_state

    def spy_act(self, obs, state=None, *, explore):
        seen.append(("act", None if state is None else state[0].clone()))
        return act(self, obs, state, explore=explore)

    def spy_reset(self, state, episode_start):
        seen.append(("reset", episode_start.copy()))
        return reset(self, state, episode_start)

    monkeypatch.setattr(TD3, "act", spy_act)
    monkeypatch.setattr(TD3, "reset_state", spy_reset)
    run_training(
        tmp_path,
        "algo=td3",
        "env=pendulum",
        *SMALL_NET,
        *TINY,
        "train.total_steps=500",
        "env.num_envs=2",
        "algo.learning_starts=0",
        "algo.action_noise.kind=ornstein_uhlenbeck",
        "train.eval_episodes=1",
    )
    # the acts with a state: training's, after the first (evaluation acts greedily, with none)
    events = [(kind, value) for kind, value in seen if kind == "reset" or value is not None]
    resets = [i for i, (kind, _) in enumerate(events) if kind == "reset"]
    assert any(events[i][1].any() for i in resets), "no episode ended in the run"
    for i in resets[:-1]:  # the next act starts the ended envs at rest and carries the others on
        done, (kind, state) = events[i][1], events[i + 1]
        assert kind == "act" and torch.all(state[torch.as_tensor(done)] == 0)
        assert done.all() or torch.all(state[torch.as_tensor(~done)] != 0)


def test_deterministic_actor_stays_in_the_box():
    torch.manual_seed(0)
    actor = DeterministicActor(3, ACTION_SPACE.low, ACTION_SPACE.high, **network_keys("td3.actor", hidden_sizes=(8,)))
    env_actions = actor.to_env(actor(1e3 * torch.randn(64, 3)))
    assert torch.all(env_actions >= torch.as_tensor(ACTION_SPACE.low))
    assert torch.all(env_actions <= torch.as_tensor(ACTION_SPACE.high))


# --- refusals ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env=cartpole"], "algo=td3 needs a continuous (Box) action space"),
        (
            ["network=redq"],
            "builds actor: rl_hydra.networks.actor_critic.SquashedGaussianActor, critic: "
            "rl_hydra.networks.actor_critic.CriticEnsemble, but algo=td3 builds on actor: "
            "rl_hydra.networks.actor_critic.DeterministicActor",
        ),
        (
            ["algo.action_noise.kind=pink"],
            "algo.action_noise.kind='pink' is not allowed; choose one of: gaussian, ornstein_uhlenbeck",
        ),
        (
            ["+algo.action_noise.sigma=0.2"],
            "algo.action_noise.sigma is not a key of algo.action_noise; its keys: kind, std, theta, dt",
        ),
        (["algo.policy_delay=0"], "algo.policy_delay=0 is out of range"),
        (["algo.target_noise_clip=-1"], "algo.target_noise_clip=-1"),
    ],
)
def test_what_does_not_fit_is_refused_in_one_line(tmp_path, overrides, message):
    with pytest.raises(ConfigError) as error:
        run_training(tmp_path, "algo=td3", "env=pendulum", *TINY, *overrides)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "metrics.csv").exists()


# --- runs ---------------------------------------------------------------------------------------
def test_runs_are_deterministic_given_the_seed_and_load_run_predicts_mu(tmp_path):
    args = [
        "algo=td3",
        "env=pendulum",
        *TINY,
        *SMALL_NET,
        "env.num_envs=2",
        "algo.learning_starts=100",
        "algo.batch_size=32",
        "algo.action_noise.kind=ornstein_uhlenbeck",
    ]
    first, second = (train(*args, run_dir=tmp_path / name) for name in ("a", "b"))
    assert first.summary["updates"] == 201 and first.summary["eval_return_mean"] == second.summary["eval_return_mean"]
    rows = metric_rows(tmp_path / "a")
    assert rows == metric_rows(tmp_path / "b") and rows[-1]["train/actor_loss"] != ""
    loaded = load_run(tmp_path / "a")
    obs = np.array([0.5, -0.5, 1.0], np.float32)
    with torch.no_grad():
        mu = loaded.agent.actor.to_env(loaded.agent.actor(torch.as_tensor(obs[None])))[0].numpy()
    np.testing.assert_allclose(loaded.predict(obs), mu, rtol=1e-6)


@pytest.mark.slow  # needs the bench extra (SB3); a few seconds
def test_updates_equal_sb3s_td3_on_the_same_weights_batches_and_noise():
    """Six updates (three of them delayed actor and target steps) from SB3's TD3 initial weights, on the
    same batches, with the target smoothing drawn from equally seeded generators: every weight of the
    four networks ends equal to SB3's, up to float rounding, and far from where it started."""
    import gymnasium as gym

    sb3 = pytest.importorskip("stable_baselines3")
    env = gym.make("MountainCarContinuous-v0")
    peer = sb3.TD3(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        batch_size=BATCH,
        policy_kwargs={"net_arch": [16, 16]},
        seed=0,
        device="cpu",
    )
    cfg = compose_config(
        "algo=td3",
        "env=mountain_car_continuous",
        "~algo_env",
        *SMALL_NET,
        "algo.actor_optimizer.lr=1e-3",
        "algo.critic_optimizer.lr=1e-3",
    )
    agent = agent_from(cfg, env.observation_space, env.action_space)
    actors = {"actor": peer.actor.mu, "actor_target": peer.actor_target.mu}
    for name, theirs in actors.items():  # SB3's initial weights into ours: its two critics are our ensemble's members
        copy_layers(getattr(agent, name), theirs)
    critics = [(agent.critic, peer.critic), (agent.critic_target, peer.critic_target)]
    copy_critics(critics)
    start = copy.deepcopy(agent.actor.state_dict())
    batches = made_up_batches(6)
    serve(peer, batches)
    torch.manual_seed(7)  # SB3 draws the smoothing noise from torch's global generator, we from the agent's
    peer.train(gradient_steps=6, batch_size=BATCH)
    agent.generator.manual_seed(7)
    for batch in batches:
        agent.update(batch)
    for name, theirs in actors.items():
        assert_layers_equal(getattr(agent, name), theirs, atol=1e-5)
    assert_critics_equal(critics, atol=1e-5)
    assert max((agent.actor.state_dict()[k] - start[k]).abs().max() for k in start if "body" in k) > 1e-3


@pytest.mark.slow
def test_pendulum_preset_reaches_minus_200(tmp_path):
    """The RL Zoo's preset: its first 10k steps act at random."""
    assert_the_pendulum_preset_reaches_minus_200(tmp_path, "algo=td3")
