"""The categorical network of C51 (Bellemare et al. 2017): for each action, the logits of a
distribution over num_atoms fixed returns; the algorithm takes their softmax."""

from __future__ import annotations

import gymnasium as gym

from rl_hydra.networks.mlp import PerActionNetwork


class CategoricalNetwork(PerActionNetwork):
    """observation (B, obs_dim) -> logits (B, num_actions, num_atoms).

    `dueling`: a shared trunk of hidden_sizes[:-1], then value (num_atoms outputs) and advantage
    (A * num_atoms) streams that each have their own copy of the last hidden layer (none with
    hidden_sizes=[]: each stream one Linear), combined on the logits per atom as Rainbow does.
    `noisy`: every Linear is a NoisyLinear.
    The other options are QNetwork's (networks/mlp.py).
    """

    def __init__(self, observation: int | gym.Space, num_actions: int, num_atoms: int, **keys):
        super().__init__(observation, num_actions, num_atoms, **keys)
        self.num_atoms = num_atoms
