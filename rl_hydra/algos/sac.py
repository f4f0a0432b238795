"""SAC (Haarnoja et al. 2018) over an ensemble of critics, which makes it REDQ (Chen et al. 2021) too.

Each critic update regresses all N critics onto one target built from the min over a fresh
random subset of M target critics minus alpha * log pi; the actor ascends the mean (REDQ) or the
min (SAC's clipped double Q) over all N critics; the temperature alpha is learned toward a
target entropy (default -action_dim). SAC is the case N = M = 2, one update per env step, actor
on the min (conf/algo/sac.yaml); REDQ is N = 10, M = 2, many updates per env step, actor on the
mean (conf/algo/redq.yaml, algos/redq.py); DroQ is N = M = 2 with dropout and layer norm in the
critics (conf/algo/droq.yaml). The set-up, acting, the temperature and the state are the
family's (algos/actor_critic.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from rl_hydra.algos.actor_critic import SoftActorCritic
from rl_hydra.losses import bellman_target, ensemble_mse, soft_actor_loss, soft_value
from rl_hydra.protocols import Batch, Capabilities


# --- the math -------------------------------------------------------------------------
def sample_subset(
    ensemble_size: int, subset_size: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """M distinct critic indices in [0, N), drawn without replacement: (M,) int64."""
    return torch.randperm(ensemble_size, generator=generator, device=device)[:subset_size]


def actor_q_value(q_values: torch.Tensor, reduction: str) -> torch.Tensor:
    """What the actor ascends: the mean over the critics (REDQ) or their min (SAC's clipped double Q)."""
    # q_values: (B, N)
    return q_values.mean(dim=1) if reduction == "mean" else q_values.min(dim=1).values  # (B,)


# --- the agent ----------------------------------------------------------------------------
class SAC(SoftActorCritic):
    name: ClassVar[str] = "sac"
    # one-step targets, uniform replay
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="continuous",
        network={
            "actor": "rl_hydra.networks.actor_critic.SquashedGaussianActor",
            "critic": "rl_hydra.networks.actor_critic.CriticEnsemble",
        },
    )
    compiled_methods: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss")  # what `compile=true` wraps
    critic_target: nn.Module

    def __init__(self, *args: Any, ensemble_size: int, subset_size: int, tau: float, actor_q: str, **keys: Any):
        """`*args`, `**keys`: the family's (algos/actor_critic.py); the keys' ranges: rl_hydra/schema/algos.py."""
        self.subset_size, self.tau, self.actor_q = subset_size, tau, actor_q
        super().__init__(*args, critic_shape=(ensemble_size,), **keys)

    def critic_draws(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """The next actions' noise, then the M target critics of this update (M,)."""
        next_noise = self.standard_normal(batch_size)  # (B, A) or gSDE's (F, A)
        return next_noise, sample_subset(self.ensemble_size, self.subset_size, self.generator, self.device)

    def critic_loss(
        self, batch: Batch, next_noise: torch.Tensor, subset: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ensemble's summed MSE to the REDQ target, and the critics' Q-values (B, N)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, noise=next_noise)  # (B, A), (B,)
            # SAC, DroQ: the min over all N, in any order (the subset is still drawn: the generator's
            # stream, and so a seed's run, stay as they were)
            every = self.subset_size == self.ensemble_size
            next_q = self.critic_target(next_obs, next_actions, members=None if every else subset)  # (B, M)
            next_values = soft_value(next_q, next_log_prob, alpha)  # (B,)
            targets = bellman_target(batch.rewards, batch.terminated, next_values, batch.discounts)  # (B,)
        q_values = self.critic(obs, self.actor.from_env(batch.actions))  # (B, N)
        return ensemble_mse(q_values, targets), q_values

    def actor_loss(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a | s) - Q(s, a)] with a = tanh(mean + std * noise) and Q the mean (or min)
        over the critics, and log pi (B,)."""
        actions, log_prob = self.actor.sample(obs, noise=noise)  # (B, A), (B,)
        q_value = actor_q_value(self.critic(obs, actions, frozen=True), self.actor_q)  # (B,)
        return soft_actor_loss(log_prob, q_value, alpha), log_prob
