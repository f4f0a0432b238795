"""The quantile Huber loss per sample with its gradient in closed form.

losses.py writes the loss as QR-DQN's paper does, and autograd differentiates it through the
(B, N, N') pairwise terms: about twice the cost of computing the gradient alongside the loss
(figures: docs/benchmark.md). With u = target_j - quantile_i, c = clamp(u, -kappa, kappa)
(Huber's derivative) and g = |tau - 1{u < 0}| * c, which is 0.5 c + (tau - 0.5) |c| because c has
u's sign:

    |tau - 1{u < 0}| * Huber_kappa(u) = (u - c / 2) * g,  so  loss_b = sum_ij (u_ij - c_ij / 2) g_ij / (kappa N')
    and  d loss_b / d quantile_i = -sum_j g_ij / (kappa N').

It uses public torch API only; it is a fast path because it is a second derivation of the same
numbers, equal to losses.py's formula up to float rounding (tests/algos/test_distributional.py checks
values and gradients), and `fast_paths=false` runs the formula.
"""

from __future__ import annotations

import torch


class ClosedFormQuantileHuber(torch.autograd.Function):
    """Each sample's sum_i mean_j of the quantile Huber terms (B,), its gradient saved as it is computed."""

    @staticmethod
    def forward(ctx, quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
        # quantiles: (B, N); targets: (B, N'); taus: (N,) or (B, N)
        u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N')
        c = u.clamp(-kappa, kappa)  # (B, N, N')
        tau = taus.expand_as(quantiles)[:, :, None]  # (B, N, 1)
        g = c.abs().mul_(tau - 0.5).add_(c, alpha=0.5)  # d loss_ij / d u_ij  (B, N, N')
        scale = 1.0 / (kappa * u.shape[2])  # the mean over j, the 1 / kappa
        per_sample = u.sub_(c, alpha=0.5).mul_(g).sum(dim=(1, 2)).mul_(scale)  # (B,)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(g.sum(dim=2).mul_(-scale))  # d loss_b / d quantiles_b (B, N)
        return per_sample

    @staticmethod
    def backward(ctx, grad_per_sample: torch.Tensor):
        (grad_quantiles,) = ctx.saved_tensors  # (B, N)
        return grad_per_sample[:, None] * grad_quantiles, None, None, None


def per_sample(quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
    """losses.quantile_huber_per_sample's numbers, its gradient into `quantiles` only."""
    return ClosedFormQuantileHuber.apply(quantiles, targets.detach(), taus.detach(), float(kappa))


def probe() -> None:
    """Raises unless the closed-form gradient is autograd's gradient of the same forward, on a
    small batch in float64 with terms on both sides of kappa and a tau per row."""
    generator = torch.Generator().manual_seed(0)
    quantiles = torch.randn(3, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    targets = 2 * torch.randn(3, 5, generator=generator, dtype=torch.float64)
    taus = torch.rand(3, 4, generator=generator, dtype=torch.float64)
    kappa = 0.7
    closed_form = torch.autograd.grad(per_sample(quantiles, targets, taus, kappa).sum(), quantiles)[0]
    u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N'), autograd through it
    c = u.clamp(-kappa, kappa)
    g = c.abs() * (taus[:, :, None] - 0.5) + 0.5 * c
    autograd = torch.autograd.grad(((u - 0.5 * c) * g).sum() / (kappa * u.shape[2]), quantiles)[0]
    if not torch.allclose(closed_form, autograd, rtol=1e-10, atol=1e-12):
        raise ArithmeticError("the closed-form gradient differs from autograd's")
