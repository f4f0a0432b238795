"""Pure loss functions shared by the algorithms. No modules, no state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

TD_LOSSES = ("huber", "mse")


def q_learning_targets(rewards: torch.Tensor, terminated: torch.Tensor, next_q_target: torch.Tensor,
                       discounts: torch.Tensor | float, next_q_online: torch.Tensor | None = None) -> torch.Tensor:
    """Q-learning targets r + discount * (1 - terminated) * Q_target(s', a*).

    `rewards` may be n-step sums, with `discounts` gamma^k for the k rewards summed (gamma
    for one-step returns). a* = argmax_a Q_target(s', a), or argmax_a Q_online(s', a) when
    `next_q_online` is given (double Q-learning: select with the online net, evaluate with the target).
    """
    # rewards, terminated, discounts: (B,); next_q_target, next_q_online: (B, A)
    selector = next_q_target if next_q_online is None else next_q_online
    next_actions = selector.argmax(dim=1, keepdim=True)                 # (B, 1)
    next_values = next_q_target.gather(1, next_actions).squeeze(1)      # (B,)
    return rewards + discounts * (1.0 - terminated) * next_values       # (B,)


def td_loss(q_values: torch.Tensor, targets: torch.Tensor, kind: str = "huber",
            reduction: str = "mean") -> torch.Tensor:
    """TD loss between Q(s, a) (B,) and fixed targets (B,); Huber uses delta = 1.
    reduction="mean": the batch mean (); "none": per sample (B,)."""
    if kind == "huber":
        return F.smooth_l1_loss(q_values, targets, reduction=reduction)
    if kind == "mse":
        return F.mse_loss(q_values, targets, reduction=reduction)
    raise ValueError(f"unknown TD loss {kind!r}; choose one of: {', '.join(TD_LOSSES)}")


def weighted_mean(per_sample: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The batch loss under importance weights (B,): mean_b w_b * loss_b (prioritized replay's
    correction; uniform replay's weights are all 1)."""
    return (weights * per_sample).mean()


def quantile_huber_loss(quantiles: torch.Tensor, target_quantiles: torch.Tensor, taus: torch.Tensor,
                        kappa: float = 1.0, reduction: str = "mean") -> torch.Tensor:
    """Quantile regression Huber loss of QR-DQN (Dabney et al. 2018) and IQN.

    For u_ij = target_j - quantile_i: sum over i of the mean over j of
    |tau_i - 1{u_ij < 0}| * Huber_kappa(u_ij) / kappa, averaged over the batch.
    `target_quantiles` are treated as fixed samples (no gradient flows into them, nor into `taus`).
    reduction="mean": the batch mean (); "none": each sample's sum_i mean_j (B,).
    """
    if kappa <= 0:
        raise ValueError(f"kappa={kappa!r} must be > 0")
    per_sample = _QuantileHuberLoss.apply(quantiles, target_quantiles.detach(), taus.detach(), float(kappa))  # (B,)
    return per_sample if reduction == "none" else per_sample.mean()


class _QuantileHuberLoss(torch.autograd.Function):
    """The loss per sample with its gradient computed alongside, in closed form.

    With c = clamp(u, -kappa, kappa) (Huber's derivative) and g = |tau - 1{u < 0}| * c, which is
    0.5 c + (tau - 0.5) |c| because c has u's sign:
        |tau - 1{u < 0}| * Huber_kappa(u) = (u - c / 2) * g,   so   loss_b = sum_ij (u_ij - c_ij / 2) g_ij / (kappa N')
        and   d loss_b / d quantile_i = -sum_j g_ij / (kappa N').
    Autograd through the (B, N, N') pairwise terms costs about twice as much (tests/test_distributional.py
    checks both against the definition, values and gradients).
    """

    @staticmethod
    def forward(ctx, quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float) -> torch.Tensor:
        # quantiles: (B, N); targets: (B, N'); taus: (N,) or (B, N)
        u = targets[:, None, :] - quantiles[:, :, None]                    # (B, N, N')
        c = u.clamp(-kappa, kappa)                                         # (B, N, N')
        tau = taus.expand_as(quantiles)[:, :, None]                        # (B, N, 1)
        g = c.abs().mul_(tau - 0.5).add_(c, alpha=0.5)                     # d loss_ij / d u_ij  (B, N, N')
        scale = 1.0 / (kappa * u.shape[2])                                 # the mean over j, the 1 / kappa
        per_sample = u.sub_(c, alpha=0.5).mul_(g).sum(dim=(1, 2)).mul_(scale)   # (B,)
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(g.sum(dim=2).mul_(-scale))              # d loss_b / d quantiles_b (B, N)
        return per_sample

    @staticmethod
    def backward(ctx, grad_per_sample: torch.Tensor):
        (grad_quantiles,) = ctx.saved_tensors                              # (B, N)
        return grad_per_sample[:, None] * grad_quantiles, None, None, None


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over the entries where `mask` is 1 (0 if there are none)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def masked_td_loss(q_values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                   kind: str = "huber") -> torch.Tensor:
    """Mean TD loss over the steps of a sequence batch where `mask` is 1 (DRQN).

    Padding after an episode's end and burn-in steps carry mask 0: they add nothing
    to the loss or its gradient, and the mean is over the counted steps only.
    """
    # q_values, targets, mask: (T, B)
    if kind == "huber":
        per_step = F.smooth_l1_loss(q_values, targets, reduction="none")   # (T, B)
    elif kind == "mse":
        per_step = F.mse_loss(q_values, targets, reduction="none")         # (T, B)
    else:
        raise ValueError(f"unknown TD loss {kind!r}; choose one of: {', '.join(TD_LOSSES)}")
    return masked_mean(per_step, mask)                                      # ()
