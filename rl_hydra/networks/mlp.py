"""Multi-layer perceptrons and the Q-network built from them, with the Rainbow options:
a dueling head (networks/dueling.py) and noisy layers (networks/noisy.py)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra import speed
from rl_hydra.networks.dropout import Dropout
from rl_hydra.networks.dueling import DuelingHead
from rl_hydra.networks.encoders import make_encoder
from rl_hydra.networks.noisy import NoisyLinear
from rl_hydra.schema.networks import ACTIVATIONS

log = logging.getLogger(__name__)


def activation_class(name: str) -> type[nn.Module]:
    """torch.nn's class of an activation the schema allows (`network.activation`)."""
    return getattr(nn, ACTIVATIONS[name])


def mlp(
    in_dim: int,
    out_dim: int | None,
    hidden_sizes: Sequence[int],
    activation: str,
    *,
    layer_norm: bool = False,
    dropout: float = 0.0,
    linear: Callable[[int, int], nn.Module] = nn.Linear,
) -> nn.Sequential:
    """Hidden layers of `hidden_sizes`, each Linear -> [Dropout] -> [LayerNorm] -> activation
    (the order of DroQ's critics, Hiraoka et al. 2022), then a final Linear to `out_dim` if given.
    `linear(in, out)` builds each Linear layer (e.g. a NoisyLinear)."""
    act = activation_class(activation)
    layers: list[nn.Module] = []
    for size in hidden_sizes:
        layers.append(linear(in_dim, size))
        if dropout > 0:
            layers.append(Dropout(dropout))
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        layers.append(act())
        in_dim = size
    if out_dim is not None:
        layers.append(linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def note_if_linear(hidden_sizes: Sequence[int], key: str = "network.hidden_sizes") -> None:
    """An empty hidden_sizes is allowed on purpose (a linear function of the observation, a
    common baseline) and said in the log, since it is also an easy slip."""
    if len(hidden_sizes) == 0:
        log.info("%s=[]: a linear network (no hidden layer)", key)


def linear_layer(noisy: bool, noisy_sigma0: float, bias: bool = True) -> Callable[[int, int], nn.Module]:
    """What builds a network's Linear layers: nn.Linear (without its bias where `bias` is false),
    or NoisyLinear with sigma0 = `noisy_sigma0`."""
    if noisy:  # always with its noisy bias (the schema refuses bias=false beside noisy=true)
        return functools.partial(NoisyLinear, sigma0=noisy_sigma0)
    return nn.Linear if bias else functools.partial(nn.Linear, bias=False)


def action_value_mlp(
    in_dim: int,
    num_actions: int,
    outputs_per_action: int,
    hidden_sizes: Sequence[int],
    activation: str,
    *,
    layer_norm: bool,
    dropout: float,
    dueling: bool,
    noisy: bool,
    noisy_sigma0: float,
    bias: bool = True,
) -> nn.Sequential:
    """An MLP (..., in_dim) -> (..., num_actions * K) for K = `outputs_per_action` values per
    action (1, quantiles, atoms), action-major.

    dueling (Wang et al. 2016): the last hidden layer is duplicated into two streams, as the
    paper's streams each have their own fully connected layer: a shared trunk of
    hidden_sizes[:-1], then a value stream Linear(h) -> act -> Linear(K) and an advantage stream
    Linear(h) -> act -> Linear(A * K), combined as Q = V + A - mean_a A for each of the K.
    With no hidden layer (hidden_sizes=[]) each stream is one Linear of the input: Linear(K) and
    Linear(A * K), combined the same way.
    noisy (Fortunato et al. 2018): every Linear is a NoisyLinear(sigma0=noisy_sigma0).
    Neither: exactly `mlp(in_dim, num_actions * K, hidden_sizes)`.
    """
    hidden_sizes = list(hidden_sizes)
    options: dict[str, Any] = dict(
        layer_norm=layer_norm, dropout=dropout, linear=linear_layer(noisy, noisy_sigma0, bias)
    )
    if not dueling:
        return mlp(in_dim, num_actions * outputs_per_action, hidden_sizes, activation, **options)
    # the streams' own layer: the last hidden one, or none for an empty head (each stream one Linear)
    trunk_sizes, stream_sizes = hidden_sizes[:-1], hidden_sizes[-1:]
    trunk = mlp(in_dim, None, trunk_sizes, activation, **options)  # (..., in) -> (..., F)
    features = trunk_sizes[-1] if trunk_sizes else in_dim
    value = mlp(features, outputs_per_action, stream_sizes, activation, **options)  # -> (..., K)
    advantage = mlp(features, num_actions * outputs_per_action, stream_sizes, activation, **options)  # -> (..., A * K)
    return nn.Sequential(*trunk, DuelingHead(value, advantage, num_actions, outputs_per_action))


def encode(encoder: nn.Module | None, obs: torch.Tensor) -> torch.Tensor:
    """The encoder's features of `obs`, or `obs` itself for a vector network (no encoder)."""
    return obs if encoder is None else encoder(obs)


def q_network_numpy(net: QNetwork, obs: np.ndarray) -> np.ndarray | None:
    """QNetwork.forward in numpy, for vectors (no encoder)."""
    return None if net.observation_encoder is not None else speed.numpy_forward(net.net, obs)  # (B, A)


def per_action_network_numpy(net: PerActionNetwork, obs: np.ndarray) -> np.ndarray | None:
    """PerActionNetwork.forward in numpy, for vectors (no encoder)."""
    out = None if net.observation_encoder is not None else speed.numpy_forward(net.net, obs)  # (B, A * N)
    return None if out is None else out.reshape(-1, net.num_actions, net.values_per_action)  # (B, A, N)


class QNetwork(nn.Module):
    """Q(s, .): observation (B, *observation_shape) -> action values (B, num_actions).

    `observation` is a vector's size, or the observation space (frames, grids, indices, a Dict of
    parts); `encoder` (networks/encoders.py) turns it into the features the MLP reads, with
    Discrete indices one-hot or embedded in `discrete_embedding` features.

    `dueling`: a shared trunk of hidden_sizes[:-1], then value and advantage streams that each
    have their own copy of the last hidden layer (with hidden_sizes=[], each stream is one Linear
    of the features), Q = V + A - mean_a A. `noisy`: every Linear is a NoisyLinear (factorised
    noise, sigma0 = `noisy_sigma0`). `bias=false`: Linear layers without a bias (hidden_sizes=[] on
    one-hot states is then exactly a Q-table, whose unvisited entries keep their initial values).
    See `action_value_mlp`.
    """

    def __init__(
        self,
        observation: int | gym.Space,
        num_actions: int,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        layer_norm: bool,
        dropout: float,
        dueling: bool,
        noisy: bool,
        noisy_sigma0: float,
        encoder: str,
        discrete_embedding: int | None,
        bias: bool,
    ):
        super().__init__()
        self.observation_encoder, features = make_encoder(observation, encoder, discrete_embedding)  # None for vectors
        self.net = action_value_mlp(
            features,
            num_actions,
            1,
            hidden_sizes,
            activation,
            layer_norm=layer_norm,
            dropout=dropout,
            dueling=dueling,
            noisy=noisy,
            noisy_sigma0=noisy_sigma0,
            bias=bias,
        )
        note_if_linear(hidden_sizes)

    @speed.numpy_twin(q_network_numpy)
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # obs: (B, *observation_shape)
        return self.net(encode(self.observation_encoder, obs))  # (B, A)


class PerActionNetwork(nn.Module):
    """observation (B, *observation_shape) -> (B, num_actions, values_per_action): the parameters
    of a return distribution per action (QR-DQN's quantiles, C51's logits), from QNetwork's MLP
    with the same options; with `dueling`, value and advantage are combined per value."""

    def __init__(
        self,
        observation: int | gym.Space,
        num_actions: int,
        values_per_action: int,
        *,
        hidden_sizes: Sequence[int],
        activation: str,
        layer_norm: bool,
        dropout: float,
        dueling: bool,
        noisy: bool,
        noisy_sigma0: float,
        encoder: str,
        discrete_embedding: int | None,
    ):
        super().__init__()
        self.num_actions, self.values_per_action = num_actions, values_per_action
        self.observation_encoder, features = make_encoder(observation, encoder, discrete_embedding)  # None for vectors
        self.net = action_value_mlp(
            features,
            num_actions,
            values_per_action,
            hidden_sizes,
            activation,
            layer_norm=layer_norm,
            dropout=dropout,
            dueling=dueling,
            noisy=noisy,
            noisy_sigma0=noisy_sigma0,
        )
        note_if_linear(hidden_sizes)

    @speed.numpy_twin(per_action_network_numpy)
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # obs: (B, *observation_shape)
        features = encode(self.observation_encoder, obs)  # (B, F)
        return self.net(features).view(-1, self.num_actions, self.values_per_action)  # (B, A, N)
