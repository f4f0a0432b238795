"""Multi-layer perceptrons and the plain Q-network built from them."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from rl_hydra.config import ConfigError, check_int

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ConfigError(f"network.activation={name!r} is not allowed; choose one of: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def mlp(in_dim: int, out_dim: int | None, hidden_sizes: Sequence[int], activation: str = "relu") -> nn.Sequential:
    """Linear layers of `hidden_sizes` with activations; a final linear to `out_dim` if given."""
    act = activation_class(activation)
    layers: list[nn.Module] = []
    for i, size in enumerate(hidden_sizes):
        check_int(f"network.hidden_sizes[{i}]", size, minimum=1)
        layers += [nn.Linear(in_dim, size), act()]
        in_dim = size
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class QNetwork(nn.Module):
    """Q(s, .): observation (B, obs_dim) -> action values (B, num_actions)."""

    def __init__(self, observation_dim: int, num_actions: int,
                 hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu"):
        super().__init__()
        self.net = mlp(observation_dim, num_actions, hidden_sizes, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)
