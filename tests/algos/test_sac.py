"""SAC is REDQ's code at N = M = 2, G = 1 with the actor on the min of both critics."""

from __future__ import annotations

import pytest
import torch

from rl_hydra.algos.sac import actor_q_value
from rl_hydra.errors import ConfigError
from tests.algos.continuous import SMALL_NET, agent_from, random_batch
from tests.conftest import TINY, compose_config, run_training


def make(algo: str, *overrides: str):
    cfg = compose_config(f"algo={algo}", "env=pendulum", "~algo_env", *SMALL_NET, *overrides)
    return agent_from(cfg)


def test_sac_config_is_redq_with_two_critics_one_update_and_the_min_for_the_actor():
    sac, redq = compose_config("algo=sac").algo, compose_config("algo=redq").algo
    assert (sac.ensemble_size, sac.subset_size, sac.gradient_steps, sac.policy_delay, sac.actor_q) == (
        2,
        2,
        1,
        1,
        "min",
    )
    assert redq.actor_q == "mean"
    shared = set(sac) - {"_target_", "ensemble_size", "subset_size", "gradient_steps", "policy_delay", "actor_q"}
    assert all(sac[key] == redq[key] for key in shared), "SAC's other keys come from algo/redq.yaml"


def test_actor_q_value_is_the_mean_or_the_min_over_critics():
    q = torch.tensor([[1.0, 3.0], [-2.0, 0.0]])  # (B=2, N=2)
    assert torch.equal(actor_q_value(q, "mean"), torch.tensor([2.0, -1.0]))
    assert torch.equal(actor_q_value(q, "min"), torch.tensor([1.0, -2.0]))


def test_sac_actor_loss_ascends_the_min_of_both_critics():
    agent = make("sac")
    obs, noise = torch.randn(8, 3), torch.randn(8, 2)
    loss, log_prob = agent.actor_loss(obs, noise, torch.tensor(0.2))
    actions, _ = agent.actor.sample(obs, noise=noise)
    q_min = agent.critic(obs, actions).min(dim=1).values
    assert torch.allclose(loss, (0.2 * log_prob - q_min).mean())


def test_sac_updates_exactly_as_redq_configured_as_sac():
    sac = make("sac")
    redq = make(
        "redq",
        "algo.ensemble_size=2",
        "algo.subset_size=2",
        "algo.gradient_steps=1",
        "algo.policy_delay=1",
        "algo.actor_q=min",
    )
    assert isinstance(redq, type(sac)) and (sac.name, redq.name) == ("sac", "redq")
    for seed in range(3):
        sac.update(random_batch(seed=seed))
        redq.update(random_batch(seed=seed))
    for a, b in zip(
        [*sac.actor.parameters(), *sac.critic.parameters(), sac.log_alpha],
        [*redq.actor.parameters(), *redq.critic.parameters(), redq.log_alpha],
    ):
        assert torch.equal(a, b)


def test_bad_actor_q_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="algo.actor_q='max' is not allowed; choose one of: mean, min"):
        run_training(tmp_path, "algo=sac", "env=pendulum", *TINY, "algo.actor_q=max")


def test_sac_on_a_discrete_env_names_the_algo(tmp_path):
    with pytest.raises(ConfigError, match="algo=sac needs a continuous"):
        run_training(tmp_path, "algo=sac", "env=cartpole", *TINY)


@pytest.mark.slow
def test_sac_learns_pendulum(tmp_path):
    """The Pendulum preset cut to 6,000 steps (about a minute): an untrained policy scores about
    -1,200 to -1,500, SAC about -150 by then (docs/suite.md)."""
    summary = run_training(
        tmp_path,
        "algo=sac",
        "env=pendulum",
        "train.progress=false",
        "device=cpu",
        "train.total_steps=6000",
        "train.eval_every=6000",
        "checkpoint.save_buffer=false",
    )
    assert summary["eval_return_mean"] > -500
