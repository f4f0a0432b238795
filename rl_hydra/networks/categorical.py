"""The categorical network of C51 (Bellemare et al. 2017): for each action, the logits of a
distribution over num_atoms fixed returns; the algorithm takes their softmax."""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.config import check_int
from rl_hydra.networks.encoders import make_encoder
from rl_hydra.networks.mlp import action_value_mlp, encode, note_if_linear
from rl_hydra.networks.numpy_mirror import mirrored_by, numpy_forward


class CategoricalNetwork(nn.Module):
    """observation (B, obs_dim) -> logits (B, num_actions, num_atoms).

    `dueling`: a shared trunk of hidden_sizes[:-1], then value (num_atoms outputs) and advantage
    (A * num_atoms) streams that each have their own copy of the last hidden layer, combined on
    the logits per atom as Rainbow does. `noisy`: every Linear is a NoisyLinear.
    See `networks.mlp.action_value_mlp`.
    """

    def __init__(self, observation: int | gym.Space, num_actions: int, num_atoms: int,
                 hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu",
                 layer_norm: bool = False, dropout: float = 0.0,
                 dueling: bool = False, noisy: bool = False, noisy_sigma0: float = 0.5, encoder: str = "auto"):
        super().__init__()
        self.num_actions = num_actions
        self.num_atoms = check_int("algo.num_atoms", num_atoms, minimum=2)
        self.observation_encoder, features = make_encoder(observation, encoder)   # None for vectors
        self.net = action_value_mlp(features, num_actions, num_atoms, hidden_sizes, activation,
                                    layer_norm=layer_norm, dropout=dropout,
                                    dueling=dueling, noisy=noisy, noisy_sigma0=noisy_sigma0)
        note_if_linear(hidden_sizes)

    def forward_numpy(self, obs: np.ndarray) -> np.ndarray | None:
        out = None if self.observation_encoder is not None else numpy_forward(self.net, obs)  # (B, A * N) or None
        return None if out is None else out.reshape(-1, self.num_actions, self.num_atoms)  # (B, A, N)

    @mirrored_by(forward_numpy)
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # obs: (B, *observation_shape)
        features = encode(self.observation_encoder, obs)                 # (B, F)
        return self.net(features).view(-1, self.num_actions, self.num_atoms)  # (B, A, N) logits
