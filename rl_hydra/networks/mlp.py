"""Multi-layer perceptrons and the plain Q-network built from them."""

from __future__ import annotations

import logging
from typing import Sequence

import torch
from torch import nn

from rl_hydra.config import ConfigError, check_choice, check_float, check_int
from rl_hydra.networks.numpy_mirror import mirrored_by, numpy_forward

log = logging.getLogger(__name__)

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ConfigError(f"network.activation={name!r} is not allowed; choose one of: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


def mlp(in_dim: int, out_dim: int | None, hidden_sizes: Sequence[int], activation: str = "relu",
        *, layer_norm: bool = False, dropout: float = 0.0) -> nn.Sequential:
    """Hidden layers of `hidden_sizes`, each Linear -> [Dropout] -> [LayerNorm] -> activation
    (the order of DroQ's critics, Hiraoka et al. 2022), then a final Linear to `out_dim` if given."""
    act = activation_class(activation)
    check_choice("network.layer_norm", layer_norm, (True, False))
    dropout = check_float("network.dropout", dropout, 0.0, 1.0)
    if dropout == 1.0:
        raise ConfigError("network.dropout=1.0 would drop every unit; expected a number >= 0.0 and < 1.0")
    layers: list[nn.Module] = []
    for i, size in enumerate(hidden_sizes):
        size = check_int(f"network.hidden_sizes[{i}]", size, minimum=1)
        layers.append(nn.Linear(in_dim, size))
        if dropout > 0:
            layers.append(nn.Dropout(dropout))
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        layers.append(act())
        in_dim = size
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def note_if_linear(hidden_sizes: Sequence[int], key: str = "network.hidden_sizes") -> None:
    """An empty hidden_sizes is allowed on purpose (a linear function of the observation, a
    common baseline) and said in the log, since it is also an easy slip."""
    if len(hidden_sizes) == 0:
        log.info("%s=[]: a linear network (no hidden layer)", key)


class QNetwork(nn.Module):
    """Q(s, .): observation (B, obs_dim) -> action values (B, num_actions)."""

    def __init__(self, observation_dim: int, num_actions: int, hidden_sizes: Sequence[int] = (256, 256),
                 activation: str = "relu", layer_norm: bool = False, dropout: float = 0.0):
        super().__init__()
        note_if_linear(hidden_sizes)
        self.net = mlp(observation_dim, num_actions, hidden_sizes, activation, layer_norm=layer_norm, dropout=dropout)

    @mirrored_by(lambda self, obs: numpy_forward(self.net, obs))
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)
