"""Quantile networks: a fixed-fraction head (QR-DQN) and an implicit one (IQN)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from rl_hydra.networks.encoders import make_encoder
from rl_hydra.networks.layers import activation_class, mlp
from rl_hydra.networks.mlp import PerActionNetwork, action_value_mlp, encode, linear_layer


class QuantileNetwork(PerActionNetwork):
    """Z(s, .) for QR-DQN: observation (B, obs_dim) -> quantiles (B, num_actions, num_quantiles).

    `dueling`: a shared trunk of hidden_sizes[:-1], then value (N outputs) and advantage (A * N)
    streams that each have their own copy of the last hidden layer (none with hidden_sizes=[]:
    each stream one Linear), combined per quantile.
    `noisy`: every Linear is a NoisyLinear. The other options are QNetwork's (networks/mlp.py).
    """

    def __init__(self, observation: int | gym.Space, num_actions: int, num_quantiles: int, **keys):
        super().__init__(observation, num_actions, num_quantiles, **keys)
        self.num_quantiles = num_quantiles


def cosine_embedding(taus: torch.Tensor, embedding_dim: int) -> torch.Tensor:
    """cos(pi * i * tau) for i = 0..embedding_dim-1: taus (B, T) -> (B, T, embedding_dim)."""
    i = torch.arange(embedding_dim, device=taus.device, dtype=taus.dtype)  # (E,)
    return torch.cos(math.pi * i * taus[..., None])  # (B, T, E)


class ImplicitQuantileNetwork(nn.Module):
    """Z_tau(s, .) for IQN (Dabney et al. 2018b).

    psi(s): an MLP over the observation, ending in `feature_dim = hidden_sizes[-1]` features;
    phi(tau): activation(Linear(cos(pi * i * tau))) to the same width; their elementwise
    product goes through the head MLP to one value per action. forward(obs (B, obs_dim),
    taus (B, T)) -> (B, num_actions, T).

    `dueling`: the streams sit in the head, on the product features: a shared head trunk of
    head_hidden_sizes[:-1], then value (1 output) and advantage (A) streams that each have their
    own copy of the last head layer, combined per tau; with head_hidden_sizes=[] each stream is
    one Linear of the product features.
    `noisy`: every Linear of psi and the head is a NoisyLinear; phi stays a plain Linear (it
    embeds the sampled tau, a fixed feature map rather than part of the value function).
    """

    def __init__(
        self,
        observation: int | gym.Space,
        num_actions: int,
        *,
        embedding_dim: int,
        hidden_sizes: Sequence[int],
        head_hidden_sizes: Sequence[int],
        activation: str,
        dueling: bool,
        noisy: bool,
        noisy_sigma0: float,
        encoder: str,
        discrete_embedding: int | None,
    ):
        super().__init__()
        self.embedding_dim = embedding_dim
        feature_dim = hidden_sizes[-1]
        linear = linear_layer(noisy, noisy_sigma0)
        self.observation_encoder, features = make_encoder(observation, encoder, discrete_embedding)  # None for vectors
        self.psi = mlp(features, None, hidden_sizes, activation, linear=linear)  # (B, F) -> (B, D)
        self.phi = nn.Sequential(nn.Linear(embedding_dim, feature_dim), activation_class(activation)())
        self.head = action_value_mlp(
            feature_dim,
            num_actions,
            1,
            head_hidden_sizes,
            activation,
            layer_norm=False,
            dropout=0.0,
            dueling=dueling,
            noisy=noisy,
            noisy_sigma0=noisy_sigma0,
        )  # (.., D) -> (.., A)

    def forward(self, obs: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        # obs: (B, *observation_shape); taus: (B, T)
        state_features = self.psi(encode(self.observation_encoder, obs))  # (B, D)
        tau_features = self.phi(cosine_embedding(taus, self.embedding_dim))  # (B, T, D)
        mixed = state_features[:, None, :] * tau_features  # (B, T, D)
        return self.head(mixed).transpose(1, 2)  # (B, A, T)
