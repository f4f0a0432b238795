"""Pure loss functions shared by the algorithms, as the papers write them. No modules, no state."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rl_hydra.choices import TD_LOSSES


def q_learning_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q_target: torch.Tensor,
    discounts: torch.Tensor | float,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """Q-learning targets r + discount * (1 - terminated) * Q_target(s', a*).

    `rewards` may be n-step sums, with `discounts` gamma^k for the k rewards summed (gamma
    for one-step returns). a* = argmax_a Q_target(s', a), or argmax_a Q_online(s', a) when
    `next_q_online` is given (double Q-learning: select with the online net, evaluate with the target).
    """
    # rewards, terminated, discounts: (B,); next_q_target, next_q_online: (B, A)
    selector = next_q_target if next_q_online is None else next_q_online
    next_actions = selector.argmax(dim=1, keepdim=True)  # (B, 1)
    next_values = next_q_target.gather(1, next_actions).squeeze(1)  # (B,)
    return rewards + discounts * (1.0 - terminated) * next_values  # (B,)


def bellman_target(
    rewards: torch.Tensor, terminated: torch.Tensor, next_values: torch.Tensor, discounts: torch.Tensor | float
) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * V(s'), with `discounts` the batch's gamma (B,) or one gamma."""
    # rewards, terminated, next_values: (B,); discounts: (B,) or ()
    return rewards + discounts * (1.0 - terminated) * next_values  # (B,)


def soft_value(next_q: torch.Tensor, next_log_prob: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """V(s') = min_i Q_i(s', a') - alpha * log pi(a' | s'), a' ~ pi(s'): the entropy-regularised value
    under the min over the critics given (SAC's two, REDQ's random subset, CrossQ's live ones)."""
    # next_q: (B, N); next_log_prob: (B,); alpha: ()
    return next_q.min(dim=1).values - alpha * next_log_prob  # (B,)


def ensemble_mse(q_values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Sum over critics of each critic's mean squared error to the shared target."""
    # q_values: (B, N); targets: (B,)
    return (q_values - targets[:, None]).pow(2).mean(dim=0).sum()  # ()


def soft_actor_loss(log_prob: torch.Tensor, q_value: torch.Tensor, alpha: torch.Tensor | float) -> torch.Tensor:
    """E[alpha * log pi(a | s) - Q(s, a)], a ~ pi(s) reparameterised: the maximum-entropy policy loss."""
    # log_prob, q_value: (B,); alpha: ()
    return (alpha * log_prob - q_value).mean()  # ()


def temperature_loss(log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """-E[log alpha * (log pi(a | s) + H_target)]: alpha grows while the entropy is below its target."""
    # log_alpha: (); log_prob: (B,) detached
    return -(log_alpha * (log_prob + target_entropy)).mean()  # ()


def midpoint_taus(num_quantiles: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """tau_i = (2i + 1) / (2N), i = 0..N-1: the fractions whose quantiles minimise W1 (N,)."""
    return (2 * torch.arange(num_quantiles, device=device, dtype=torch.float32) + 1) / (2 * num_quantiles)


def td_loss(
    q_values: torch.Tensor, targets: torch.Tensor, kind: str = "huber", reduction: str = "mean"
) -> torch.Tensor:
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


def quantile_targets(
    rewards: torch.Tensor, terminated: torch.Tensor, next_quantiles: torch.Tensor, discounts: torch.Tensor
) -> torch.Tensor:
    """The distributional Bellman target r + discount * (1 - terminated) * z for each next-state
    sample z (`rewards` may be n-step sums and `discounts` gamma^k)."""
    # rewards, terminated, discounts: (B,); next_quantiles: (B, N')
    return rewards[:, None] + (discounts * (1.0 - terminated))[:, None] * next_quantiles  # (B, N')


def gather_actions(values: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The rows of the chosen actions: values (B, A, T), actions (B,) -> (B, T)."""
    rows = torch.arange(values.shape[0], device=values.device)  # (B,)
    return values[rows, actions]  # (B, T)


def distribution_metrics(quantiles: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Means of the predicted and target distributions and |E[target] - E[Z(s, a)]| (the TD error of Q)."""
    # quantiles: (B, N); targets: (B, N')
    q_values = quantiles.detach().mean(dim=1)  # (B,)
    target_values = targets.mean(dim=1)  # (B,)
    td_errors = (target_values - q_values).abs()  # (B,)
    return {"q_value_mean": q_values.mean(), "target_mean": target_values.mean(), "td_error_mean": td_errors.mean()}


def quantile_huber_loss(
    quantiles: torch.Tensor,
    target_quantiles: torch.Tensor,
    taus: torch.Tensor,
    kappa: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Quantile regression Huber loss of QR-DQN (Dabney et al. 2018, eq. 10) and IQN.

    For u_ij = target_j - quantile_i: sum over i of the mean over j of
    |tau_i - 1{u_ij < 0}| * Huber_kappa(u_ij) / kappa, averaged over the batch.
    `target_quantiles` are treated as fixed samples (no gradient flows into them, nor into `taus`).
    reduction="mean": the batch mean (); "none": each sample's sum_i mean_j (B,).
    """
    if kappa <= 0:
        raise ValueError(f"kappa={kappa!r} must be > 0")
    per_sample = quantile_huber_per_sample(quantiles, target_quantiles.detach(), taus.detach(), float(kappa))  # (B,)
    return per_sample if reduction == "none" else per_sample.mean()


def quantile_huber_per_sample(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> torch.Tensor:
    """Each sample's sum_i mean_j |tau_i - 1{u_ij < 0}| * Huber_kappa(u_ij) / kappa (B,),
    with u_ij = targets_j - quantiles_i."""
    # quantiles: (B, N); targets: (B, N'); taus: (N,) or (B, N)
    u = targets[:, None, :] - quantiles[:, :, None]  # (B, N, N')
    huber = torch.where(u.abs() <= kappa, 0.5 * u.pow(2), kappa * (u.abs() - 0.5 * kappa))  # (B, N, N')
    tau = taus.expand_as(quantiles)[:, :, None]  # (B, N, 1)
    weight = (tau - (u.detach() < 0).to(u.dtype)).abs()  # (B, N, N')
    return (weight * huber / kappa).mean(dim=2).sum(dim=1)  # (B,)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `x` over the entries where `mask` is 1 (0 if there are none)."""
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def masked_td_loss(
    q_values: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    kind: str = "huber",
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean TD loss over the steps of a sequence batch where `mask` is 1 (DRQN), each sequence's
    steps scaled by its importance weight where `weights` is given (R2D2's prioritized draw).

    Padding after an episode's end and burn-in steps carry mask 0: they add nothing
    to the loss or its gradient, and the mean is over the counted steps only.
    """
    # q_values, targets, mask: (T, B); weights: (B,)
    if kind == "huber":
        per_step = F.smooth_l1_loss(q_values, targets, reduction="none")  # (T, B)
    elif kind == "mse":
        per_step = F.mse_loss(q_values, targets, reduction="none")  # (T, B)
    else:
        raise ValueError(f"unknown TD loss {kind!r}; choose one of: {', '.join(TD_LOSSES)}")
    if weights is not None:
        per_step = per_step * weights[None]  # (T, B)
    return masked_mean(per_step, mask)  # ()


def value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """R2D2's h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x (Pohlen et al. 2018): squashes large
    returns so that one network fits values of any scale."""
    return torch.sign(x) * (torch.sqrt(x.abs() + 1.0) - 1.0) + eps * x


def inverse_value_rescale(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """h^-1(x), in closed form: h is strictly increasing, so h^-1(h(x)) = x."""
    root = (torch.sqrt(1.0 + 4.0 * eps * (x.abs() + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return torch.sign(x) * (root**2 - 1.0)


def ensemble_quantile_loss(
    quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor, kappa: float
) -> torch.Tensor:
    """Sum over critics of each critic's quantile Huber loss to the shared target atoms, averaged over the
    batch, its M quantiles and the K targets (TQC's 1 / (kNM) sum over pairs)."""
    # quantiles: (B, N, M); targets: (B, K); taus: (M,)
    batch, critics, num_quantiles = quantiles.shape
    per_row = quantile_huber_loss(
        quantiles.reshape(batch * critics, num_quantiles),  # (B*N, M)
        targets.repeat_interleave(critics, dim=0),  # (B*N, K)
        taus,
        kappa,
        reduction="none",
    )  # (B*N,) sum_m mean_k
    return per_row.view(batch, critics).mean(dim=0).sum() / num_quantiles  # ()
