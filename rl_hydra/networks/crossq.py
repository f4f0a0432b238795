"""CrossQ's networks (Bhatt et al. 2024): SAC's squashed-Gaussian actor and critic ensemble with a
batch renormalization layer (networks/batch_renorm.py) before every linear layer:

    BRN -> Linear -> act -> BRN -> Linear -> act -> BRN -> Linear (the critic's Q, the actor's heads)

Both rest in inference mode (running statistics): acting, evaluation and the passes an update
makes without new statistics use them as they are; the agent asks for batch statistics with
`batch_statistics(network)` for the passes that should update them (algos/crossq.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from rl_hydra.networks.actor_critic import CriticEnsemble, SquashedGaussianActor
from rl_hydra.networks.batch_renorm import BatchRenorm
from rl_hydra.networks.layers import activation_class


def renorm_factory(
    momentum: float, eps: float, warmup_steps: int, r_max: float, d_max: float
) -> Callable[..., BatchRenorm]:
    """BatchRenorm(num_features, members) with these settings (network.<actor|critic>.*)."""
    return functools.partial(
        BatchRenorm, momentum=momentum, eps=eps, warmup_steps=warmup_steps, r_max=r_max, d_max=d_max
    )


class BatchRenormActor(SquashedGaussianActor):
    """SquashedGaussianActor (gSDE included) whose body is BRN -> [Linear -> act -> BRN] per hidden
    layer; the mean and log-std heads read the last BRN's output."""

    def __init__(
        self,
        observation_dim: int,
        action_low: np.ndarray,
        action_high: np.ndarray,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        momentum: float,
        eps: float,
        warmup_steps: int,
        r_max: float,
        d_max: float,
        **actor_keys,  # SquashedGaussianActor's: gsde, gsde_log_std_init, gsde_clip_mean
    ):
        super().__init__(
            observation_dim, action_low, action_high, hidden_sizes=hidden_sizes, activation=activation, **actor_keys
        )
        renorm = renorm_factory(momentum, eps, warmup_steps, r_max, d_max)
        layers: list[nn.Module] = [renorm(observation_dim)]
        for fan_in, fan_out in zip([observation_dim, *hidden_sizes[:-1]], hidden_sizes):
            layers += [nn.Linear(fan_in, fan_out), activation_class(activation)(), renorm(fan_out)]
        self.body = nn.Sequential(*layers)  # in place of the parent's plain MLP
        self.eval()


class BatchRenormCriticEnsemble(nn.Module):
    """N critics Q(s, a) evaluated together, each BRN -> [Linear -> act -> BRN] per hidden layer
    -> Linear(1). The weights are a CriticEnsemble's (stacked per member, nn.Linear's init); each
    member's normalization layers have statistics of their own, shaped (N, F)."""

    def __init__(
        self,
        input_dim: int,
        ensemble_size: int,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        momentum: float,
        eps: float,
        warmup_steps: int,
        r_max: float,
        d_max: float,
    ):
        super().__init__()
        # the weights only: the renormalization layers below stand where dropout and LayerNorm would
        self.ensemble = CriticEnsemble(
            input_dim, ensemble_size, hidden_sizes=hidden_sizes, activation=activation, dropout=0.0, layer_norm=False
        )
        self.ensemble_size = self.ensemble.ensemble_size
        renorm = renorm_factory(momentum, eps, warmup_steps, r_max, d_max)
        self.norms = nn.ModuleList(renorm(size, ensemble_size) for size in [input_dim, *hidden_sizes])
        self.activation = activation_class(activation)()
        self.eval()

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, frozen: bool = False) -> torch.Tensor:
        """Q-values (B, N). `frozen` detaches the weights: gradients still reach `actions` (the
        actor's loss) but no parameter gradients are built for the critics."""
        weights, biases = list(self.ensemble.weights), list(self.ensemble.biases)
        if frozen:
            weights, biases = [w.detach() for w in weights], [b.detach() for b in biases]
        x = torch.cat([obs, actions], dim=-1)  # (B, in)
        h = x.expand(self.ensemble_size, *x.shape)  # (N, B, in)
        for norm, w, b in zip(self.norms[:-1], weights[:-1], biases[:-1]):
            h = self.activation(torch.baddbmm(b, norm(h, frozen), w))  # (N, B, hidden)
        h = self.norms[-1](h, frozen)  # (N, B, hidden)
        q = (h * weights[-1].transpose(1, 2)).sum(dim=-1) + biases[-1].squeeze(-1)  # (N, B)
        return q.transpose(0, 1)  # (B, N)
