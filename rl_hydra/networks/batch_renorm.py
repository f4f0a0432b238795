"""Batch Renormalization (Ioffe 2017, "Batch Renormalization: Towards Reducing Minibatch
Dependence in Batch-Normalized Models"), the normalization CrossQ puts in its critic and actor.

In training mode a layer normalizes each feature with its batch's mean and standard deviation,
corrected toward its running statistics (mu, sigma):

    x_hat = (x - mu_B) / sigma_B * r + d,   r = clip(sigma_B / sigma, 1 / r_max, r_max)
                                            d = clip((mu_B - mu) / sigma, -d_max, d_max)

with r and d held constant for the gradient, sigma_B = sqrt(var_B + eps), sigma = sqrt(var + eps).
r = 1, d = 0 is batch normalization. Ioffe relaxes r_max and d_max from (1, 0) gradually; CrossQ's
implementations (the paper's JAX code, sb3-contrib) keep r = 1, d = 0 for the first
`warmup_steps` training-mode calls and clip at (r_max, d_max) after, and so does this layer. Each
training-mode call moves the running mean and variance toward the batch's by `momentum`.
In inference mode the layer normalizes with the running statistics alone. Either way the output
is scale * x_hat + bias, per feature.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


class BatchRenorm(nn.Module):
    """Batch renormalization over the batch dimension (the second to last) of x (..., B, F).

    The statistics and the affine parameters have the shape (F,), or (K, F) for an ensemble of K
    networks evaluated together on x (K, B, F), each member with its own. The running mean and
    variance and the count of training-mode calls are buffers: in the state_dict, so checkpoints
    keep them.
    """

    running_mean: torch.Tensor
    running_var: torch.Tensor
    steps: torch.Tensor

    def __init__(
        self,
        num_features: int,
        members: int | None = None,
        *,
        momentum: float,
        eps: float,
        warmup_steps: int,
        r_max: float,
        d_max: float,
    ):
        super().__init__()
        shape = (num_features,) if members is None else (members, num_features)
        # their ranges: rl_hydra/schema/networks.py (BatchRenormKeys)
        self.momentum, self.eps, self.warmup_steps, self.r_max, self.d_max = momentum, eps, warmup_steps, r_max, d_max
        self.scale = nn.Parameter(torch.ones(shape))
        self.bias = nn.Parameter(torch.zeros(shape))
        self.register_buffer("running_mean", torch.zeros(shape))
        self.register_buffer("running_var", torch.ones(shape))
        self.register_buffer("steps", torch.tensor(0, dtype=torch.int64))

    def forward(self, x: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """x (..., B, F) normalized per feature; `frozen` detaches scale and bias (gradients still
        reach x)."""
        scale, bias = (self.scale.detach(), self.bias.detach()) if frozen else (self.scale, self.bias)
        if not self.training:  # scale * (x - mu) / sigma + bias
            return batch_norm(x, self.running_mean, self.running_var, scale, bias, self.eps)
        with torch.no_grad():
            batch_mean = x.mean(dim=-2)  # (..., F)
            batch_var = (x - batch_mean.unsqueeze(-2)).square().mean(dim=-2)  # (..., F)
            batch_std, running_std = (batch_var + self.eps).sqrt(), (self.running_var + self.eps).sqrt()
            warm = self.steps >= self.warmup_steps  # (): no host sync
            r = torch.where(warm, (batch_std / running_std).clamp(1 / self.r_max, self.r_max), 1.0)
            d = torch.where(
                warm, ((batch_mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max), 0.0
            )  # (..., F) each
            self.running_mean.lerp_(batch_mean, self.momentum)
            self.running_var.lerp_(batch_var, self.momentum)
            self.steps += 1
        # scale * (x_hat * r + d) + bias is batch normalization (x_hat, its gradient through the
        # batch's statistics included) with the affine (scale * r, scale * d + bias)
        return batch_norm(x, None, None, scale * r, scale * d + bias, self.eps)  # (..., B, F)

    def extra_repr(self) -> str:
        return (
            f"{tuple(self.scale.shape)}, momentum={self.momentum}, eps={self.eps}, "
            f"warmup_steps={self.warmup_steps}, r_max={self.r_max}, d_max={self.d_max}"
        )


def batch_norm(
    x: torch.Tensor,
    mean: torch.Tensor | None,
    var: torch.Tensor | None,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
) -> torch.Tensor:
    """weight * (x - mean) / sqrt(var + eps) + bias over the batch dimension of x (..., B, F), every
    argument shaped (..., F): with the batch's own mean and variance where `mean` and `var` are
    None. torch's batch norm, whose fused kernel and closed-form backward take a fraction of the
    time of the same formula written out; it normalizes the columns of a (B, C) matrix."""
    if x.dim() == 2:
        return F.batch_norm(x, mean, var, weight, bias, training=mean is None, eps=eps)
    *lead, batch, features = x.shape
    columns = x.movedim(-2, 0).reshape(batch, -1)  # (B, prod(...) * F)
    mean, var = (None, None) if mean is None or var is None else (mean.reshape(-1), var.reshape(-1))
    y = F.batch_norm(
        columns, mean, var, weight.reshape(-1), bias.reshape(-1), training=mean is None, eps=eps
    )  # (B, prod(...) * F)
    return y.reshape(batch, *lead, features).movedim(0, -2)  # (..., B, F)


def renorm_layers(*modules: nn.Module) -> list[BatchRenorm]:
    return [layer for module in modules for layer in module.modules() if isinstance(layer, BatchRenorm)]


@contextlib.contextmanager
def batch_statistics(*modules: nn.Module) -> Iterator[None]:
    """Inside the block the batch renormalization layers of `modules` normalize with their batch's
    statistics and update their running ones (training mode); after it they are back in inference
    mode, where networks that hold such layers rest (acting, evaluation, the other passes)."""
    layers = renorm_layers(*modules)
    for layer in layers:
        layer.train(True)
    try:
        yield
    finally:
        for layer in layers:
            layer.train(False)
