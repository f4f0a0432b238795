"""IQN (Dabney et al. 2018, "Implicit Quantile Networks for Distributional RL").

Instead of N fixed fractions, IQN samples tau ~ U(0, 1) and the network maps (s, tau)
to the tau-quantile of Z(s, a). Each update draws N fractions for the online quantiles,
N' for the target samples and K for choosing the greedy next action; exploring actions
take the mean over K sampled quantiles, greedy ones (evaluation) over K evenly spaced ones.
The loss is the same quantile Huber loss as QR-DQN, with per-sample fractions. Exploration,
target syncs, the optimiser step and checkpoints are DQN's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from rl_hydra.algos.common import observation_tensor
from rl_hydra.algos.dqn import DQN
from rl_hydra.losses import (
    distribution_metrics,
    gather_actions,
    midpoint_taus,
    quantile_huber_loss,
    quantile_targets,
    weighted_mean,
)
from rl_hydra.protocols import Batch, Capabilities, Observation, ObservationTensor, restore_generator
from rl_hydra.spaces import num_rows


class IQN(DQN):
    name: ClassVar[str] = "iqn"
    capabilities: ClassVar[Capabilities] = replace(
        DQN.capabilities, network="rl_hydra.networks.quantile.ImplicitQuantileNetwork"
    )
    metric_names: ClassVar[tuple[str, ...]] = ("loss", "q_value_mean", "target_mean", "td_error_mean", "epsilon")
    compiled_methods: ClassVar[tuple[str, ...]] = ("quantile_loss",)
    pure_loss: ClassVar[str] = "quantile_loss"

    def __init__(
        self,
        *args,
        num_tau_samples: int,
        num_tau_prime_samples: int,
        num_quantile_samples: int,
        kappa: float,
        seed: int,
        **kwargs,
    ):
        self.num_tau_samples = num_tau_samples  # N
        self.num_tau_prime_samples = num_tau_prime_samples  # N'
        self.num_quantile_samples = num_quantile_samples  # K
        self.kappa = kappa
        super().__init__(*args, seed=seed, loss=None, **kwargs)  # its quantile loss replaces DQN's TD loss
        # its own stream, so sampling fractions neither disturbs nor depends on other torch draws
        self.tau_generator = torch.Generator(device=self.device)
        self.tau_generator.manual_seed(seed)
        self.greedy_taus = midpoint_taus(self.num_quantile_samples, self.device)[None]  # (1, K)

    def sample_taus(self, batch_size: int, num_samples: int) -> torch.Tensor:
        """tau ~ U(0, 1) for each row: (batch_size, num_samples)."""
        return torch.rand(batch_size, num_samples, generator=self.tau_generator, device=self.device)

    def greedy_actions(self, obs: Observation, explore: bool) -> np.ndarray:
        """Exploring actions average K sampled fractions, as the paper acts. Greedy actions
        (evaluation, predict) average K evenly spaced ones, the midpoints of K equal bins:
        the same mean over tau ~ U(0, 1), but the same action for the same observation."""
        if explore:
            return super().greedy_actions(obs, explore=True)
        with torch.no_grad():
            obs_t = observation_tensor(obs, self.device)  # (B, obs_dim)
            taus = self.greedy_taus.expand(num_rows(obs_t), -1)  # (B, K)
            return self.action_values(obs_t, taus=taus).argmax(dim=1).cpu().numpy()

    def action_values(
        self, obs: ObservationTensor, net: nn.Module | None = None, taus: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Q(s, a) estimated as the mean over K sampled quantiles: (B, obs_dim) -> (B, A)."""
        if taus is None:
            taus = self.sample_taus(num_rows(obs), self.num_quantile_samples)  # (B, K)
        net = self.q_net if net is None else net
        return net(obs, taus).mean(dim=2)  # (B, A)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        return self.quantile_loss(batch, *self.loss_draws(batch))

    def loss_draws(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # every fraction is drawn here, so that quantile_loss is a pure function (compile=true, a pack)
        batch_size = batch.rewards.shape[0]
        next_taus = self.sample_taus(batch_size, self.num_quantile_samples)  # (B, K)
        tau_primes = self.sample_taus(batch_size, self.num_tau_prime_samples)  # (B, N')
        taus = self.sample_taus(batch_size, self.num_tau_samples)  # (B, N)
        return next_taus, tau_primes, taus

    def quantile_loss(
        self, batch: Batch, next_taus: torch.Tensor, tau_primes: torch.Tensor, taus: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            selector = self.q_net if self.double_q else self.target_net
            next_actions = self.action_values(batch.next_obs, selector, next_taus).argmax(dim=1)  # (B,)
            next_quantiles = gather_actions(self.target_net(batch.next_obs, tau_primes), next_actions)  # (B, N')
            targets = quantile_targets(batch.rewards, batch.terminated, next_quantiles, batch.discounts)  # (B, N')
        quantiles = gather_actions(self.q_net(batch.obs, taus), batch.actions)  # (B, N)
        per_sample = quantile_huber_loss(quantiles, targets, taus, self.kappa, reduction="none")  # (B,)
        return weighted_mean(per_sample, batch.weights), per_sample.detach(), distribution_metrics(quantiles, targets)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "tau_generator": self.tau_generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        restore_generator(self.tau_generator, state["tau_generator"])
