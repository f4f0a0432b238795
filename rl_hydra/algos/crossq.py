"""CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity"): SAC without target networks, with batch
renormalization in the critics and the actor.

Each critic update passes the current pairs (s, a) and the next pairs (s', a' ~ pi(s')) through
the critics as ONE batch of 2B rows, so that the normalization's statistics are those of both
distributions together (the paper's point: normalized apart, the next pairs would look
out-of-distribution to the layers). The first half's Q-values are regressed onto a target built
from the second half's, detached; no target critic, no Polyak averaging. Wide critics (2,048
units), Adam with beta1 = 0.5, one actor (and temperature) update every `policy_delay` = 3 critic
updates, one update per env step, SAC's learned temperature.

Which passes update the statistics follows the paper's code and sb3-contrib: the joint critic
pass and the actor's pass in its own update do (training mode, networks/batch_renorm.py); the
next actions, the critics' Q for the actor's loss, acting (exploring or not) and evaluation use
the running statistics (inference mode, where the networks rest).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from rl_hydra.algos.actor_critic import SoftActorCritic
from rl_hydra.losses import bellman_target, ensemble_mse, soft_actor_loss, soft_value
from rl_hydra.networks.batch_renorm import batch_statistics
from rl_hydra.protocols import Batch, Capabilities, Update


# --- the math -------------------------------------------------------------------------
def joint_pass(
    critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, next_actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q(s, a) and Q(s', a') (B, N) each from ONE training-mode pass over the 2B rows: the batch
    renormalization statistics (and their running update) are those of both halves together."""
    batch_size = obs.shape[0]
    with batch_statistics(critic):
        q_both = critic(torch.cat([obs, next_obs]), torch.cat([actions, next_actions]))  # (2B, N)
    q_values, next_q = q_both.split(batch_size)  # (B, N) each
    return q_values, next_q


# --- the agent ----------------------------------------------------------------------------
class CrossQ(SoftActorCritic):
    """The family's set-up without target networks (algos/actor_critic.py). Its networks rest in
    inference mode, so the family's `act` acts on the running statistics, exploring or not."""

    name: ClassVar[str] = "crossq"
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="continuous",
        network={
            "actor": "rl_hydra.networks.crossq.BatchRenormActor",
            "critic": "rl_hydra.networks.crossq.BatchRenormCriticEnsemble",
        },
    )
    compiled_methods: ClassVar[tuple[str, ...]] = ()  # its losses update the normalization statistics in place
    target_networks: ClassVar[tuple[str, ...]] = ()  # the joint pass replaces the target critics

    def __init__(self, *args: Any, ensemble_size: int, **keys: Any):
        """`*args`, `**keys`: the family's (algos/actor_critic.py); the keys' ranges: rl_hydra/schema/algos.py."""
        super().__init__(*args, critic_shape=(ensemble_size,), **keys)

    def update(self, batch: Batch) -> Update:
        self.exploration_noise = None  # gSDE: the next env step explores with a new matrix
        metrics = self.update_critics(batch)
        self.updates += 1
        if self.updates % self.policy_delay == 0:  # the d-th, 2d-th, ... update (as the paper's code, sb3-contrib)
            self.last_actor_metrics = self.update_actor_and_alpha(self.features(batch.obs))
        return Update({**metrics, **self.last_actor_metrics, "alpha": self.alpha})

    def critic_loss(
        self, batch: Batch, next_noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critics' summed MSE to r + gamma * (1 - terminated) * (min_i Q_i(s', a') - alpha * log pi(a' | s')),
        Q_i(s', a') the live critics' from the joint pass, detached; and their Q-values (B, N)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():  # a' from the actor's running statistics
            next_actions, next_log_prob = self.actor.sample(next_obs, noise=next_noise)  # (B, A), (B,)
        q_values, next_q = joint_pass(
            self.critic, obs, self.actor.from_env(batch.actions), next_obs, next_actions
        )  # (B, N) each
        next_values = soft_value(next_q.detach(), next_log_prob, alpha)  # (B,)
        targets = bellman_target(batch.rewards, batch.terminated, next_values, batch.discounts)  # (B,)
        return ensemble_mse(q_values, targets), q_values

    def actor_loss(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a | s) - min_i Q_i(s, a)], the actor's pass updating its statistics and the
        critics' on their running ones; and log pi (B,)."""
        with batch_statistics(self.actor):
            actions, log_prob = self.actor.sample(obs, noise=noise)  # (B, A), (B,)
        q_value = self.critic(obs, actions, frozen=True).min(dim=1).values  # (B,)
        return soft_actor_loss(log_prob, q_value, alpha), log_prob
