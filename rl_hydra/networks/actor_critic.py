"""Continuous control networks: actors (squashed Gaussian for SAC, REDQ and TQC; deterministic
for TD3) and batched critic ensembles (a scalar Q per member, or TQC's quantiles per member).

Actors act in the unit box [-1, 1]^A (tanh) and rescale to the env's Box bounds only at the
env boundary; critics see unit-box actions too. The critics' hidden layers may add dropout and
layer norm (DroQ, Hiraoka et al. 2022): Linear -> Dropout -> LayerNorm -> activation.

With `gsde=true` the actor explores by generalized state-dependent exploration (gSDE; Raffin
et al. 2022, "Smooth exploration for robotic reinforcement learning"): the Gaussian's noise is
z(s) E, the actor's last hidden features z(s) (F,) times a noise matrix E (F, A) whose entries
are N(0, sigma_fa^2), sigma a learned (F, A) parameter. E is held for many env steps, so the
action changes smoothly with the state instead of jittering every step. Given s, the noise is
N(0, sum_f z_f^2 sigma_fa^2) per action dimension: a diagonal Gaussian, whose log-probability
is the same as without gSDE.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rl_hydra.networks.layers import activation_class, dropout, mlp, note_if_linear

LOG_2PI = math.log(2 * math.pi)


def squashed_gaussian_log_prob(pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) for u ~ N(mean, exp(log_std)^2), summed over action dimensions.

    Change of variables (SAC, Haarnoja et al. 2018, appendix C):
    log pi(a) = log N(u) - sum_i log(1 - tanh(u_i)^2), with the stable identity
    log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)).
    """
    # pre_tanh, mean, log_std: (B, A)
    z = (pre_tanh - mean) * torch.exp(-log_std)  # (B, A)
    gaussian = -0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI  # (B, A)
    log_det = 2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))  # (B, A)
    return (gaussian - log_det).sum(dim=-1)  # (B,)


class UnitBoxActor(nn.Module):
    """What every actor shares: it acts in the unit box, and knows the env's bounds to rescale."""

    action_center: torch.Tensor  # the buffers registered below, (A,) each
    action_half_range: torch.Tensor
    action_low: torch.Tensor
    action_high: torch.Tensor

    def __init__(self, action_low: np.ndarray, action_high: np.ndarray):
        super().__init__()
        low = torch.as_tensor(np.asarray(action_low), dtype=torch.float32)
        high = torch.as_tensor(np.asarray(action_high), dtype=torch.float32)
        self.action_dim = int(low.numel())
        self.register_buffer("action_center", (high + low) / 2)
        self.register_buffer("action_half_range", (high - low) / 2)
        self.register_buffer("action_low", low)
        self.register_buffer("action_high", high)

    def to_env(self, unit_action: torch.Tensor) -> torch.Tensor:
        """Unit box [-1, 1] -> the env's [low, high] (clamped against rounding)."""
        action = self.action_center + self.action_half_range * unit_action
        return torch.maximum(torch.minimum(action, self.action_high), self.action_low)

    def from_env(self, action: torch.Tensor) -> torch.Tensor:
        """The env's [low, high] -> unit box [-1, 1]."""
        return (action - self.action_center) / self.action_half_range


class SquashedGaussianActor(UnitBoxActor):
    """pi(a | s): tanh of a diagonal Gaussian whose mean and log-std an MLP predicts (with
    `gsde`, whose mean it predicts and whose noise is its features times a held matrix)."""

    def __init__(
        self,
        observation_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        gsde: bool,
        gsde_log_std_init: float,
        gsde_clip_mean: float,
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
    ):
        super().__init__(action_low, action_high)
        note_if_linear(hidden_sizes, "network.actor.hidden_sizes")
        self.body = mlp(observation_dim, None, hidden_sizes, activation)
        self.features = hidden_sizes[-1] if hidden_sizes else observation_dim
        self.gsde = gsde
        if self.gsde:  # the mean only; the noise's scale is log_std, (F, A)
            self.head = nn.Linear(self.features, self.action_dim)
            self.gsde_log_std = nn.Parameter(torch.full((self.features, self.action_dim), float(gsde_log_std_init)))
            self.gsde_clip_mean = gsde_clip_mean
        else:
            self.head = nn.Linear(self.features, 2 * self.action_dim)
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """obs (B, obs_dim) -> mean, log_std (B, A) of the Gaussian before tanh."""
        return self.gaussian(obs)[:2]

    def gaussian(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """obs (B, obs_dim) -> mean, log_std (B, A) and the last hidden features z(s) (B, F)."""
        features = self.body(obs)  # (B, F)
        if not self.gsde:
            mean, log_std = self.head(features).chunk(2, dim=-1)  # (B, A) each
            return mean, log_std.clamp(self.log_std_min, self.log_std_max), features
        mean = self.head(features).clamp(-self.gsde_clip_mean, self.gsde_clip_mean)  # (B, A)
        variance = features.pow(2) @ (2 * self.gsde_log_std).exp()  # (B, A) sum_f z_f^2 sigma_fa^2
        return mean, 0.5 * torch.log(variance + 1e-6), features

    def noise_shape(self, batch_size: int) -> tuple[int, ...]:
        """The standard normal draws `sample` takes for a batch: (B, A), one per action; with gSDE
        one (F, A) matrix for the whole batch (or (B, F, A): one per row, as per env when acting)."""
        return (self.features, self.action_dim) if self.gsde else (batch_size, self.action_dim)

    def sample(
        self, obs: torch.Tensor, generator: torch.Generator | None = None, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised unit-box action (B, A) and its log-probability (B,); `noise`:
        standard normal draws of `noise_shape`, drawn here from `generator` if not given."""
        mean, log_std, features = self.gaussian(obs)  # (B, A), (B, A), (B, F)
        if noise is None:
            noise = torch.randn(self.noise_shape(len(obs)), generator=generator, device=mean.device)
        if self.gsde:
            exploration = self.gsde_log_std.exp() * noise  # (F, A) or (B, F, A): E
            offset = (
                features @ exploration
                if exploration.dim() == 2  # (B, A) z(s) E
                else torch.bmm(features[:, None], exploration).squeeze(1)
            )
        else:
            offset = log_std.exp() * noise  # (B, A)
        pre_tanh = mean + offset  # (B, A)
        return torch.tanh(pre_tanh), squashed_gaussian_log_prob(pre_tanh, mean, log_std)

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action tanh(mean) (B, A) in the unit box."""
        return torch.tanh(self(obs)[0])


class DeterministicActor(UnitBoxActor):
    """mu(s) = tanh(MLP(s)): TD3's policy, one action per state in the unit box."""

    def __init__(
        self,
        observation_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
    ):
        super().__init__(action_low, action_high)
        note_if_linear(hidden_sizes, "network.actor.hidden_sizes")
        self.body = mlp(observation_dim, self.action_dim, hidden_sizes, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs (B, obs_dim) -> unit-box actions (B, A)."""
        return torch.tanh(self.body(obs))

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The action itself (B, A), as SquashedGaussianActor.mode gives its greedy one."""
        return self(obs)


class EnsembleMLP(nn.Module):
    """N independent MLPs over (s, a) evaluated together: stacked weights and batched matmuls.

    Layer k holds weights (N, in_k, out_k) and biases (N, 1, out_k); one `baddbmm` per layer
    evaluates every member, so there is no Python loop over members. Each hidden layer is
    Linear -> [Dropout] -> [LayerNorm, with each member's own gain and bias] -> activation.
    """

    def __init__(
        self,
        input_dim: int,
        ensemble_size: int,
        output_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        dropout: float,
        layer_norm: bool,
    ):
        super().__init__()
        self.ensemble_size = ensemble_size
        hidden_sizes = list(hidden_sizes)
        note_if_linear(hidden_sizes, "network.critic.hidden_sizes")
        self.dropout, self.layer_norm = dropout, layer_norm
        sizes = [input_dim, *hidden_sizes, output_dim]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            # nn.Linear's default init, drawn independently for every member
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(ensemble_size, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(ensemble_size, 1, fan_out).uniform_(-bound, bound)))
        # empty without layer norm, so that checkpoints of plain critics keep their keys
        self.norm_weights = nn.ParameterList(
            [nn.Parameter(torch.ones(ensemble_size, 1, size)) for size in hidden_sizes if self.layer_norm]
        )
        self.norm_biases = nn.ParameterList(
            [nn.Parameter(torch.zeros(ensemble_size, 1, size)) for size in hidden_sizes if self.layer_norm]
        )
        self.activation = activation_class(activation)()

    def layers(self, members: torch.Tensor | None, frozen: bool) -> list[list[torch.Tensor]]:
        """[weights, biases, norm gains, norm biases] of the K members asked for (all: None);
        `frozen` detaches them."""
        params = [list(self.weights), list(self.biases), list(self.norm_weights), list(self.norm_biases)]
        if members is not None:
            params = [[p[members] for p in group] for group in params]
        if frozen:
            params = [[p.detach() for p in group] for group in params]
        return params

    def hidden(
        self, obs: torch.Tensor, actions: torch.Tensor, members: torch.Tensor | None, frozen: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The last hidden layer's activations (K, B, H), and the output layer's weights
        (K, H, out) and biases (K, 1, out)."""
        weights, biases, gains, shifts = self.layers(members, frozen)
        x = torch.cat([obs, actions], dim=-1)  # (B, in)
        h = x.expand(weights[0].shape[0], *x.shape)  # (K, B, in)
        for i, (w, b) in enumerate(zip(weights[:-1], biases[:-1])):
            h = torch.baddbmm(b, h, w)  # (K, B, hidden)
            if self.dropout > 0:
                h = dropout(h, self.dropout, self.training)
            if self.layer_norm:
                h = F.layer_norm(h, h.shape[-1:]) * gains[i] + shifts[i]  # (K, B, hidden)
            h = self.activation(h)
        return h, weights[-1], biases[-1]


class CriticEnsemble(EnsembleMLP):
    """N independent Q(s, a) MLPs (SAC, REDQ, DroQ with dropout and layer norm, TD3)."""

    def __init__(
        self,
        input_dim: int,
        ensemble_size: int,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        dropout: float,
        layer_norm: bool,
    ):
        super().__init__(input_dim, ensemble_size, 1, hidden_sizes, activation, dropout, layer_norm)

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor, members: torch.Tensor | None = None, frozen: bool = False
    ) -> torch.Tensor:
        """Q-values (B, K) of the K = N members, or of `members` (K,) indices only.

        `frozen` detaches the weights: gradients still reach `actions` (the actor's
        loss) but no parameter gradients are built for the critics.
        """
        h, w_out, b_out = self.hidden(obs, actions, members, frozen)  # (K, B, hidden), ...
        # the 1-unit output layer as multiply-and-sum: on CPU a bmm with a single output
        # column (and its backward) is several times slower than this
        q = (h * w_out.transpose(1, 2)).sum(dim=-1) + b_out.squeeze(-1)  # (K, B)
        return q.transpose(0, 1)  # (B, K)


class QuantileCriticEnsemble(EnsembleMLP):
    """N critics, each predicting M quantiles of Z(s, a) at the fractions (2m + 1) / 2M (TQC)."""

    def __init__(
        self,
        input_dim: int,
        ensemble_size: int,
        num_quantiles: int,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        dropout: float,
        layer_norm: bool,
    ):
        super().__init__(input_dim, ensemble_size, num_quantiles, hidden_sizes, activation, dropout, layer_norm)
        self.num_quantiles = num_quantiles

    def forward(
        self, obs: torch.Tensor, actions: torch.Tensor, members: torch.Tensor | None = None, frozen: bool = False
    ) -> torch.Tensor:
        """Quantiles (B, K, M) of the K = N members (or of `members`); `frozen` as CriticEnsemble's."""
        h, w_out, b_out = self.hidden(obs, actions, members, frozen)  # (K, B, hidden), ...
        return torch.baddbmm(b_out, h, w_out).transpose(0, 1)  # (B, K, M)
