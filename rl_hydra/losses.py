"""Pure loss functions shared by the algorithms. No modules, no state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

TD_LOSSES = ("huber", "mse")


def q_learning_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_q_target: torch.Tensor,
                       gamma: float, next_q_online: torch.Tensor | None = None) -> torch.Tensor:
    """One-step Q-learning targets r + gamma * (1 - terminated) * Q_target(s', a*).

    a* = argmax_a Q_target(s', a), or argmax_a Q_online(s', a) when `next_q_online`
    is given (double Q-learning: select with the online net, evaluate with the target).
    """
    # rewards, terminated: (B,); next_q_target, next_q_online: (B, A)
    selector = next_q_target if next_q_online is None else next_q_online
    next_actions = selector.argmax(dim=1, keepdim=True)                 # (B, 1)
    next_values = next_q_target.gather(1, next_actions).squeeze(1)      # (B,)
    return rewards + gamma * (1.0 - terminated) * next_values           # (B,)


def td_loss(q_values: torch.Tensor, targets: torch.Tensor, kind: str = "huber") -> torch.Tensor:
    """Mean TD loss between Q(s, a) (B,) and fixed targets (B,); Huber uses delta = 1."""
    if kind == "huber":
        return F.smooth_l1_loss(q_values, targets)
    if kind == "mse":
        return F.mse_loss(q_values, targets)
    raise ValueError(f"unknown TD loss {kind!r}; choose one of: {', '.join(TD_LOSSES)}")
