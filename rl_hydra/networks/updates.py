"""How the algorithms change their networks' weights: an optimizer step with optional gradient
clipping, and the target networks' syncs. The speed layer makes each per-tensor loop one call
where it is on (rl_hydra/speed/foreach.py); the numbers are the same."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rl_hydra import speed


def optimizer_step(
    optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: Sequence[torch.Tensor], max_grad_norm: float | None
) -> None:
    """One step of `optimizer` on the gradient of `loss`, clipped to `max_grad_norm` if given."""
    for param in params:  # what zero_grad(set_to_none=True) does, without its per-call profiler hooks
        param.grad = None
    loss.backward()
    if max_grad_norm is not None:
        clip_grad_norm(params, max_grad_norm)
    optimizer.step()


@torch.no_grad()
def clip_grad_norm(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Scale gradients so their global L2 norm is at most `max_norm`; returns the norm before.

    torch.nn.utils.clip_grad_norm_'s math, with half its per-call overhead (it matters at
    thousands of small updates), and no host sync.
    """
    grads = [p.grad for p in params if p.grad is not None]
    total_norm = torch.linalg.vector_norm(torch.stack(speed.norms(grads)))
    speed.mul_(grads, torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
    return total_norm


@torch.no_grad()
def update_target(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target; tau = 1 is a hard copy."""
    target_params: list[torch.Tensor] = list(target.parameters())
    online_params: list[torch.Tensor] = list(online.parameters())
    if tau >= 1.0:
        speed.copy_(target_params, online_params)
    else:
        speed.lerp_(target_params, online_params, tau)
