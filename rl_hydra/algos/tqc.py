"""TQC (Kuznetsov et al. 2020): Truncated Quantile Critics for continuous actions.

N critics each predict M quantiles of the return distribution Z(s, a) at the fractions
tau_m = (2m + 1) / 2M. The target pools all critics' next-state atoms, sorts them and drops
the d largest per critic (N * d atoms): what remains, shifted by -alpha * log pi(a'|s') and
Bellman-backed, is the target distribution every critic regresses onto with the quantile
Huber loss. Dropping the top atoms controls overestimation at a finer grain than a min over
critics. The actor ascends the mean over all critics' atoms; the temperature alpha, the
squashed-Gaussian actor, gSDE and everything else are SAC's (algos/redq.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

import torch
from torch import nn

from rl_hydra.algos.qr_dqn import midpoint_taus
from rl_hydra.algos.redq import REDQ
from rl_hydra.config import check_int
from rl_hydra.losses import quantile_huber_loss
from rl_hydra.networks.actor_critic import QuantileCriticEnsemble, SquashedGaussianActor
from rl_hydra.networks.updates import optimizer_step, update_target
from rl_hydra.protocols import Batch, Capabilities


# --- the math -------------------------------------------------------------------------
def truncated_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_quantiles: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    discounts: torch.Tensor | float,
    drop_per_critic: int,
) -> torch.Tensor:
    """The kN target atoms y_i = r + gamma * (1 - terminated) * (z_(i) - alpha * log pi(a' | s')), z_(i) the
    i-th smallest of the N * M pooled next-state atoms, i < N * (M - d): the top d per critic dropped."""
    # rewards, terminated, next_log_prob: (B,); next_quantiles: (B, N, M); discounts: (B,) or ()
    batch, critics, quantiles = next_quantiles.shape
    pooled = next_quantiles.reshape(batch, critics * quantiles).sort(dim=1).values  # (B, N*M) ascending
    kept = pooled[:, : critics * (quantiles - drop_per_critic)]  # (B, kN) the smallest
    next_value = kept - alpha * next_log_prob[:, None]  # (B, kN)
    bootstrap = torch.as_tensor(discounts, dtype=kept.dtype) * (1.0 - terminated)  # (B,)
    return rewards[:, None] + bootstrap[:, None] * next_value  # (B, kN)


def ensemble_quantile_loss(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> torch.Tensor:
    """Sum over critics of each critic's quantile Huber loss to the shared target atoms, averaged over the
    batch, its M quantiles and the kN targets (the paper's 1 / (kNM) sum over pairs)."""
    # quantiles: (B, N, M); targets: (B, kN); taus: (M,)
    batch, critics, num_quantiles = quantiles.shape
    per_row = quantile_huber_loss(
        quantiles.reshape(batch * critics, num_quantiles),  # (B*N, M)
        targets.repeat_interleave(critics, dim=0),  # (B*N, kN)
        taus,
        kappa,
        reduction="none",
    )  # (B*N,) sum_m mean_i
    return per_row.view(batch, critics).mean(dim=0).sum() / num_quantiles  # ()


# --- the agent ----------------------------------------------------------------------------
class TQC(REDQ):
    name: ClassVar[str] = "tqc"
    capabilities: ClassVar[Capabilities] = replace(
        REDQ.capabilities,
        network={
            "actor": "rl_hydra.networks.actor_critic.SquashedGaussianActor",
            "critic": "rl_hydra.networks.actor_critic.QuantileCriticEnsemble",
        },
    )
    actor: SquashedGaussianActor
    critic: QuantileCriticEnsemble
    critic_target: QuantileCriticEnsemble

    def __init__(
        self,
        *args,
        ensemble_size: int = 5,
        num_quantiles: int = 25,
        top_quantiles_to_drop_per_critic: int = 2,
        kappa: float = 1.0,
        gradient_steps: int = 1,
        policy_delay: int = 1,
        **kwargs,
    ):
        self.num_quantiles = num_quantiles
        self.drop_per_critic = check_int(
            "algo.top_quantiles_to_drop_per_critic",
            top_quantiles_to_drop_per_critic,
            minimum=0,
            maximum=self.num_quantiles - 1,
        )
        self.kappa = kappa
        # every critic's atoms enter the target (no subset), and the actor reads all of them
        super().__init__(
            *args,
            ensemble_size=ensemble_size,
            subset_size=ensemble_size,
            gradient_steps=gradient_steps,
            policy_delay=policy_delay,
            actor_q="mean",
            **kwargs,
        )
        self.taus = midpoint_taus(self.num_quantiles, self.device)  # (M,)

    def make_critic(self, factory: Callable[..., nn.Module]) -> nn.Module:
        return factory(self.observation_dim + self.action_dim, self.ensemble_size, self.num_quantiles)

    def update_critics(self, batch: Batch) -> dict[str, torch.Tensor]:
        next_noise = self.standard_normal(batch.rewards.shape[0])  # (B, A) or gSDE's (F, A)
        critic_loss, quantiles = self.critic_loss(batch, next_noise, None, self.alpha)  # (), (B, N, M)
        optimizer_step(self.critic_optimizer, critic_loss, self.critic_params, self.max_grad_norm)
        update_target(self.critic_target, self.critic, self.tau)
        return {"critic_loss": critic_loss.detach(), "q_mean": quantiles.detach().mean()}

    def critic_loss(
        self, batch: Batch, next_noise: torch.Tensor, subset: torch.Tensor | None, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critics' summed quantile Huber loss to the truncated target, and their quantiles (B, N, M);
        `subset`: the critics whose atoms are pooled (None: all, as TQC does)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, noise=next_noise)  # (B, A), (B,)
            next_quantiles = self.critic_target(next_obs, next_actions, members=subset)  # (B, N, M)
            targets = truncated_target(
                batch.rewards,
                batch.terminated,
                next_quantiles,
                next_log_prob,
                alpha,
                batch.discounts,
                self.drop_per_critic,
            )  # (B, kN)
        quantiles = self.critic(obs, self.actor.from_env(batch.actions))  # (B, N, M)
        return ensemble_quantile_loss(quantiles, targets, self.taus, self.kappa), quantiles

    def actor_loss(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a | s) - mean over all critics' atoms of Z(s, a)], and log pi (B,)."""
        actions, log_prob = self.actor.sample(obs, noise=noise)  # (B, A), (B,)
        q_value = self.critic(obs, actions, frozen=True).mean(dim=(1, 2))  # (B,)
        return (alpha * log_prob - q_value).mean(), log_prob
