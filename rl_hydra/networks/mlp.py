"""The Q-network built from MLPs (networks/layers.py), with the Rainbow options: a dueling head
(networks/dueling.py) and noisy layers (networks/noisy.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rl_hydra.networks.dueling import DuelingHead
from rl_hydra.networks.encoders import make_encoder
from rl_hydra.networks.layers import mlp, note_if_linear
from rl_hydra.networks.noisy import NoisyLinear


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


class ActionValueNetwork(nn.Module):
    """observation (B, *observation_shape) -> action values (B, num_actions) (QNetwork), or with
    `values_per_action` N the parameters of a return distribution per action (B, num_actions, N):
    QR-DQN's quantiles, C51's logits (PerActionNetwork).

    `observation` is a vector's size, or the observation space (frames, grids, indices, a Dict of
    parts); `encoder` (networks/encoders.py) turns it into the features the MLP reads, with
    Discrete indices one-hot or embedded in `discrete_embedding` features.

    `dueling`: a shared trunk of hidden_sizes[:-1], then value and advantage streams that each
    have their own copy of the last hidden layer (with hidden_sizes=[], each stream is one Linear
    of the features), Q = V + A - mean_a A (per value). `noisy`: every Linear is a NoisyLinear
    (factorised noise, sigma0 = `noisy_sigma0`). `bias=false`: Linear layers without a bias
    (hidden_sizes=[] on one-hot states is then exactly a Q-table, whose unvisited entries keep their
    initial values). See `action_value_mlp`.
    """

    def __init__(
        self,
        observation: int | gym.Space,
        num_actions: int,
        values_per_action: int | None,  # None: one value per action, (B, A)
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
        self.num_actions, self.values_per_action = num_actions, values_per_action
        self.observation_encoder, features = make_encoder(observation, encoder, discrete_embedding)  # None for vectors
        self.net = action_value_mlp(
            features,
            num_actions,
            values_per_action or 1,
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

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # obs: (B, *observation_shape)
        out = self.net(encode(self.observation_encoder, obs))  # (B, A * N)
        return out if self.values_per_action is None else out.view(-1, self.num_actions, self.values_per_action)


class QNetwork(ActionValueNetwork):
    """Q(s, .): observation (B, *observation_shape) -> action values (B, num_actions)."""

    def __init__(self, observation: int | gym.Space, num_actions: int, **keys: Any):
        super().__init__(observation, num_actions, None, **keys)


class PerActionNetwork(ActionValueNetwork):
    """observation (B, *observation_shape) -> (B, num_actions, values_per_action), its Linear layers
    always with a bias."""

    def __init__(self, observation: int | gym.Space, num_actions: int, values_per_action: int, **keys: Any):
        super().__init__(observation, num_actions, values_per_action, bias=True, **keys)
