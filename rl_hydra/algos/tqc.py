"""TQC (Kuznetsov et al. 2020): Truncated Quantile Critics for continuous actions.

N critics each predict M quantiles of the return distribution Z(s, a) at the fractions
tau_m = (2m + 1) / 2M. The target pools all critics' next-state atoms, sorts them and drops
the d largest per critic (N * d atoms): what remains, shifted by -alpha * log pi(a'|s') and
Bellman-backed, is the target distribution every critic regresses onto with the quantile
Huber loss. Dropping the top atoms controls overestimation at a finer grain than a min over
critics. The actor ascends the mean over all critics' atoms; the temperature alpha, the
squashed-Gaussian actor, gSDE and the rest are the family's (algos/actor_critic.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from rl_hydra.algos.actor_critic import SoftActorCritic
from rl_hydra.losses import ensemble_quantile_loss, midpoint_taus, soft_actor_loss
from rl_hydra.networks.actor_critic import QuantileCriticEnsemble
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


# --- the agent ----------------------------------------------------------------------------
class TQC(SoftActorCritic):
    name: ClassVar[str] = "tqc"
    # one-step targets, uniform replay
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="continuous",
        network={
            "actor": "rl_hydra.networks.actor_critic.SquashedGaussianActor",
            "critic": "rl_hydra.networks.actor_critic.QuantileCriticEnsemble",
        },
    )
    compiled_methods: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss")  # what `compile=true` wraps
    critic: QuantileCriticEnsemble
    critic_target: QuantileCriticEnsemble

    def __init__(
        self,
        *args: Any,
        ensemble_size: int,
        num_quantiles: int,
        top_quantiles_to_drop_per_critic: int,
        kappa: float,
        tau: float,
        **keys: Any,
    ):
        """`*args`, `**keys`: the family's (algos/actor_critic.py); the keys' ranges: rl_hydra/schema/algos.py."""
        self.drop_per_critic, self.kappa, self.tau = top_quantiles_to_drop_per_critic, kappa, tau
        super().__init__(*args, critic_shape=(ensemble_size, num_quantiles), **keys)
        self.taus = midpoint_taus(num_quantiles, self.device)  # (M,)

    def critic_loss(
        self, batch: Batch, next_noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critics' summed quantile Huber loss to the truncated target, and their quantiles (B, N, M)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, noise=next_noise)  # (B, A), (B,)
            next_quantiles = self.critic_target(next_obs, next_actions)  # (B, N, M)
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
        return soft_actor_loss(log_prob, q_value, alpha), log_prob
