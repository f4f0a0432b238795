"""QR-DQN (Dabney et al. 2018, "Distributional RL with Quantile Regression").

The network predicts N quantiles of the return distribution Z(s, a) at the fixed
midpoint fractions tau_i = (2i + 1) / (2N); Q(s, a) is their mean. Targets are the
Bellman-shifted quantiles of the target network at the greedy next action, and the
loss is the quantile Huber loss. Exploration, target syncs, the optimiser step and
checkpoints are DQN's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

import torch
from torch import nn

from rl_hydra.algos.dqn import DQN
from rl_hydra.losses import (
    distribution_metrics,
    gather_actions,
    midpoint_taus,
    quantile_huber_loss,
    quantile_targets,
    weighted_mean,
)
from rl_hydra.protocols import Batch, Capabilities, ObservationTensor


class QRDQN(DQN):
    name: ClassVar[str] = "qr_dqn"
    capabilities: ClassVar[Capabilities] = replace(
        DQN.capabilities, network="rl_hydra.networks.quantile.QuantileNetwork"
    )
    metric_names: ClassVar[tuple[str, ...]] = ("loss", "q_value_mean", "target_mean", "td_error_mean", "epsilon")

    def __init__(self, *args, num_quantiles: int, kappa: float, **kwargs):
        self.num_quantiles = num_quantiles
        self.kappa = kappa
        super().__init__(*args, loss=None, **kwargs)  # its quantile loss replaces DQN's TD loss
        self.taus = midpoint_taus(self.num_quantiles, self.device)  # (N,)

    def make_network(self, network: Callable[..., nn.Module]) -> nn.Module:
        return network(self.observation, self.num_actions, self.num_quantiles)

    def action_values(self, obs: ObservationTensor) -> torch.Tensor:
        """Q(s, a) = mean over quantiles: (B, obs_dim) -> (B, A)."""
        return self.q_net(obs).mean(dim=2)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            next_target = self.target_net(batch.next_obs)  # (B, A, N)
            selector = self.q_net(batch.next_obs) if self.double_q else next_target  # (B, A, N)
            next_actions = selector.mean(dim=2).argmax(dim=1)  # (B,)
            next_quantiles = gather_actions(next_target, next_actions)  # (B, N)
            targets = quantile_targets(batch.rewards, batch.terminated, next_quantiles, batch.discounts)  # (B, N)
        quantiles = gather_actions(self.q_net(batch.obs), batch.actions)  # (B, N)
        per_sample = quantile_huber_loss(quantiles, targets, self.taus, self.kappa, reduction="none")  # (B,)
        return weighted_mean(per_sample, batch.weights), per_sample.detach(), distribution_metrics(quantiles, targets)
