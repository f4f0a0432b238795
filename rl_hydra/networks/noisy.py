"""Noisy linear layers with factorised Gaussian noise (Fortunato et al. 2018, "Noisy Networks
for Exploration", section 3.2): the network explores through learned noise on its weights.

    y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b,
    eps_w = f(eps_out) f(eps_in)^T,  eps_b = f(eps_out),  f(x) = sign(x) sqrt(|x|),

with eps_in (p,) and eps_out (q,) standard normal: p + q draws instead of p * q + q.

The noise is held in buffers and never redrawn by `forward`: the algorithm says when, with
`resample_noise(network)` (from torch's global RNG, so a checkpoint that saves torch's RNG
state resumes exactly), and evaluates with the mean weights inside `noise_disabled(network)`.
f(eps_in) and f(eps_out) are computed once per draw (and per load) into buffers of their own,
not per forward: acting and the update's forward passes reuse them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


def scale_noise(epsilon: torch.Tensor) -> torch.Tensor:
    """f(x) = sign(x) sqrt(|x|)."""
    return epsilon.sign() * epsilon.abs().sqrt()


class NoisyLinear(nn.Module):
    """A Linear layer whose weights are mu + sigma * factorised noise; mu and sigma are learned.

    Initialised as the paper does for factorised noise, with p = in_features:
    mu ~ U(-1/sqrt(p), 1/sqrt(p)) and sigma = sigma0 / sqrt(p).
    """

    epsilon_in: torch.Tensor  # the buffers registered below
    epsilon_out: torch.Tensor
    scaled_in: torch.Tensor
    scaled_out: torch.Tensor

    def __init__(self, in_features: int, out_features: int, sigma0: float):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features).uniform_(-bound, bound))  # (q, p)
        self.weight_sigma = nn.Parameter(torch.full((out_features, in_features), sigma0 * bound))  # (q, p)
        self.bias_mu = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))  # (q,)
        self.bias_sigma = nn.Parameter(torch.full((out_features,), sigma0 * bound))  # (q,)
        self.register_buffer("epsilon_in", torch.zeros(in_features))  # (p,) standard normal
        self.register_buffer("epsilon_out", torch.zeros(out_features))  # (q,) standard normal
        # f(eps_in) (p,) and f(eps_out) (q,): derived, so not saved; made again by each draw and each load
        self.register_buffer("scaled_in", torch.zeros(in_features), persistent=False)
        self.register_buffer("scaled_out", torch.zeros(out_features), persistent=False)
        self.register_load_state_dict_post_hook(scale_loaded_noise)
        self.noise_enabled = True
        resample_noise(self)

    @torch.no_grad()
    def scale_drawn_noise(self) -> None:
        """f(eps_in) and f(eps_out) of the noise the layer holds, into `scaled_in` and `scaled_out`."""
        self.scaled_in.copy_(scale_noise(self.epsilon_in))
        self.scaled_out.copy_(scale_noise(self.epsilon_out))

    def factorised_noise(self) -> tuple[torch.Tensor, torch.Tensor]:
        """eps_w = f(eps_out) f(eps_in)^T (q, p) and eps_b = f(eps_out) (q,)."""
        return torch.outer(self.scaled_out, self.scaled_in), self.scaled_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (..., p)
        if not self.noise_enabled:
            return F.linear(x, self.weight_mu, self.bias_mu)  # (..., q)
        f_in, f_out = self.scaled_in, self.scaled_out  # (p,), (q,)
        bias = self.bias_mu + self.bias_sigma * f_out  # (q,)
        if x.numel() <= 8 * self.in_features:
            # a few rows (acting): (sigma * f_out f_in^T) x = f_out * (sigma (f_in * x)), without building
            # the (q, p) noisy weight, which costs more than the products at one row
            return F.linear(x, self.weight_mu, bias) + f_out * F.linear(x * f_in, self.weight_sigma)  # (..., q)
        weight = self.weight_mu + self.weight_sigma * torch.outer(f_out, f_in)  # (q, p)
        return F.linear(x, weight, bias)  # (..., q)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def scale_loaded_noise(layer: NoisyLinear, incompatible_keys) -> None:  # noqa: ARG001
    """After a load: the scaled noise of the noise loaded."""
    layer.scale_drawn_noise()


def noisy_layers(module: nn.Module) -> list[NoisyLinear]:
    return [m for m in module.modules() if isinstance(m, NoisyLinear)]


def has_noisy_layers(module: nn.Module) -> bool:
    return any(isinstance(m, NoisyLinear) for m in module.modules())


@torch.no_grad()
def resample_noise(module: nn.Module) -> None:
    """Draw fresh eps_in, eps_out for every NoisyLinear in `module`, from torch's global RNG
    (that of the layer's device)."""
    for layer in noisy_layers(module):
        layer.epsilon_in.normal_()
        layer.epsilon_out.normal_()
        layer.scale_drawn_noise()


@contextlib.contextmanager
def noise_disabled(module: nn.Module) -> Iterator[nn.Module]:
    """Every NoisyLinear in `module` computes with its mean weights mu only (deterministic
    evaluation); the previous setting of each comes back on exit, also on an error."""
    layers = noisy_layers(module)
    previous = [layer.noise_enabled for layer in layers]
    for layer in layers:
        layer.noise_enabled = False
    try:
        yield module
    finally:
        for layer, enabled in zip(layers, previous):
            layer.noise_enabled = enabled
