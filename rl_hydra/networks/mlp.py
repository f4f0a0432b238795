"""Multi-layer perceptrons and the plain Q-network built from them."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rl_hydra.config import ConfigError, check_int

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}
FUNCTIONS = {nn.ReLU: torch.relu, nn.Tanh: torch.tanh, nn.ELU: F.elu, nn.GELU: F.gelu, nn.SiLU: F.silu}


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ConfigError(f"network.activation={name!r} is not allowed; choose one of: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Sequential):
    """An nn.Sequential of Linear layers and activations whose forward calls the functions
    directly: at batch 1 (acting) and batch 64 (updates) of a small MLP, the per-module call
    overhead is a large share of the time. Same parameters and state_dict keys as the Sequential."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = F.linear(x, layer.weight, layer.bias) if type(layer) is nn.Linear else FUNCTIONS[type(layer)](x)
        return x


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
    return MLP(*layers)


class QNetwork(nn.Module):
    """Q(s, .): observation (B, obs_dim) -> action values (B, num_actions)."""

    def __init__(self, observation_dim: int, num_actions: int,
                 hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu"):
        super().__init__()
        self.net = mlp(observation_dim, num_actions, hidden_sizes, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)
