"""The dueling head (Wang et al. 2016, "Dueling Network Architectures for Deep RL", eq. 9):

    Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a'),

from a value stream and an advantage stream over the same features. Subtracting the mean
makes the split identifiable (the mean over actions of Q is V).

For a distributional output with K values per action (quantiles, taus, atom logits) the
combination is made for each of the K separately, as Rainbow (Hessel et al. 2018) does on
the atom logits.
"""

from __future__ import annotations

import torch
from torch import nn


class DuelingHead(nn.Module):
    """features (..., F) -> Q (..., num_actions * K), laid out as a plain output layer's would be
    (action-major), so that it can stand in for one.

    `value`: (..., F) -> (..., K); `advantage`: (..., F) -> (..., num_actions * K).
    """

    def __init__(self, value: nn.Module, advantage: nn.Module, num_actions: int, outputs_per_action: int = 1):
        super().__init__()
        self.value, self.advantage = value, advantage
        self.num_actions, self.outputs_per_action = num_actions, outputs_per_action

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        A, K = self.num_actions, self.outputs_per_action
        value = self.value(features).unflatten(-1, (1, K))  # (..., 1, K)
        advantage = self.advantage(features).unflatten(-1, (A, K))  # (..., A, K)
        q = value + advantage - advantage.mean(dim=-2, keepdim=True)  # (..., A, K)
        return q.flatten(-2)  # (..., A * K)
