"""C51 (Bellemare et al. 2017, "A Distributional Perspective on Reinforcement Learning").

The network predicts, for each action, a categorical distribution over N fixed atoms
z_i = v_min + i * (v_max - v_min) / (N - 1); Q(s, a) is its mean. The target distribution
is the next state's distribution at the greedy next action, shifted by the (n-step) reward
and discount, projected back onto the atoms (`categorical_projection`); the loss is the
cross-entropy between it and the predicted distribution. Exploration, target syncs, the
optimiser step and checkpoints are DQN's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

import torch
from torch import nn

from rl_hydra.algos.dqn import DQN
from rl_hydra.losses import gather_actions, weighted_mean
from rl_hydra.protocols import Batch, Capabilities, ObservationTensor


def categorical_projection(
    next_probs: torch.Tensor,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    terminated: torch.Tensor,
    support: torch.Tensor,
) -> torch.Tensor:
    """Project the distribution of r + discount * (1 - terminated) * Z' onto the atoms `support`.

    Each shifted atom's probability is split between the two atoms around it, in proportion to
    its closeness to each (all of it to one atom it lands on exactly); atoms beyond the support's
    ends are clipped to them.
    """
    # next_probs: (B, N); rewards, discounts, terminated: (B,); support: (N,) evenly spaced, increasing
    v_min, v_max = support[0], support[-1]
    spacing = support[1] - support[0]
    shifted = rewards[:, None] + (discounts * (1.0 - terminated))[:, None] * support  # (B, N)
    position = (shifted.clamp(v_min, v_max) - v_min) / spacing  # (B, N) in [0, N - 1]
    lower, upper = position.floor(), position.ceil()  # (B, N)
    lower_share = (upper - position) + (lower == upper).to(position.dtype)  # (B, N)
    upper_share = position - lower  # (B, N)
    projected = torch.zeros_like(next_probs)  # (B, N)
    projected.scatter_add_(1, lower.long().clamp(0, len(support) - 1), next_probs * lower_share)
    projected.scatter_add_(1, upper.long().clamp(0, len(support) - 1), next_probs * upper_share)
    return projected  # (B, N), rows sum to 1


class C51(DQN):
    name: ClassVar[str] = "c51"
    capabilities: ClassVar[Capabilities] = replace(
        DQN.capabilities, network="rl_hydra.networks.categorical.CategoricalNetwork"
    )
    metric_names: ClassVar[tuple[str, ...]] = ("loss", "q_value_mean", "target_mean", "td_error_mean", "epsilon")

    def __init__(self, *args, num_atoms: int, v_min: float, v_max: float, **kwargs):
        self.num_atoms = num_atoms  # v_min < v_max: rl_hydra/schema/algos.py's rule
        super().__init__(*args, loss=None, **kwargs)  # its cross-entropy replaces DQN's TD loss
        self.support = torch.linspace(v_min, v_max, self.num_atoms, device=self.device)  # (N,)

    def make_network(self, network: Callable[..., nn.Module]) -> nn.Module:
        return network(self.observation, self.num_actions, self.num_atoms)

    def action_values(self, obs: ObservationTensor) -> torch.Tensor:
        """Q(s, a) = sum_i p_i(s, a) z_i: (B, obs_dim) -> (B, A)."""
        return self.expected_values(self.q_net(obs))

    def expected_values(self, logits: torch.Tensor) -> torch.Tensor:
        # logits: (B, A, N)
        return (logits.softmax(dim=2) * self.support).sum(dim=2)  # (B, A)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        with torch.no_grad():
            next_logits = self.target_net(batch.next_obs)  # (B, A, N)
            selector = self.q_net(batch.next_obs) if self.double_q else next_logits  # (B, A, N)
            next_actions = self.expected_values(selector).argmax(dim=1)  # (B,)
            next_probs = gather_actions(next_logits, next_actions).softmax(dim=1)  # (B, N)
            targets = categorical_projection(
                next_probs, batch.rewards, batch.discounts, batch.terminated, self.support
            )  # (B, N)
        log_probs = gather_actions(self.q_net(batch.obs), batch.actions).log_softmax(dim=1)  # (B, N)
        cross_entropy = -(targets * log_probs).sum(dim=1)  # (B,)
        q_values = (log_probs.detach().exp() * self.support).sum(dim=1)  # (B,)
        target_values = (targets * self.support).sum(dim=1)  # (B,)
        metrics = {
            "q_value_mean": q_values.mean(),
            "target_mean": target_values.mean(),
            "td_error_mean": (target_values - q_values).abs().mean(),
        }
        return weighted_mean(cross_entropy, batch.weights), cross_entropy.detach(), metrics
