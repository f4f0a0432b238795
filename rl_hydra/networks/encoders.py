"""Encoders: what turns an observation into the feature vector a Q head (or LSTM) reads.

The network config's `encoder` picks one and it is checked against the env's observation space:

- `flat`: vectors as they are (no module, so a vector network is exactly its MLP);
- `nature_cnn`: the Nature DQN convolutions (Mnih et al. 2015) for (C, 84, 84) frame stacks;
- `minatar_cnn`: MinAtar's one 3x3 convolution of 16 channels (Young & Tian 2019) for (C, 10, 10) grids;
- `auto`: the one that fits the observation's shape.

Raw uint8 frames and bool grids go in as the env produced them (the replay buffer keeps that
dtype, four or more times smaller than float32); the encoder scales them to [0, 1] itself.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.config import ConfigError

ENCODERS = ("auto", "flat", "nature_cnn", "minatar_cnn")
CNN_INPUTS = {"nature_cnn": (84, 84), "minatar_cnn": (10, 10)}   # the (height, width) each is built for


class ScaleObservation(nn.Module):
    """uint8 pixels -> float in [0, 1]; bool or other inputs -> float as they are."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float() * self.scale if self.scale != 1.0 else obs.float()


def nature_cnn(channels: int) -> nn.Sequential:
    """(B, C, 84, 84) -> (B, 3136): 32 8x8 filters, stride 4; 64 4x4, stride 2; 64 3x3, stride 1."""
    return nn.Sequential(nn.Conv2d(channels, 32, 8, stride=4), nn.ReLU(),   # (B, 32, 20, 20)
                         nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),         # (B, 64, 9, 9)
                         nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),         # (B, 64, 7, 7)
                         nn.Flatten())                                      # (B, 3136)


def minatar_cnn(channels: int) -> nn.Sequential:
    """(B, C, 10, 10) -> (B, 1024): 16 3x3 filters, stride 1, no padding (8x8 outputs), as MinAtar's DQN."""
    return nn.Sequential(nn.Conv2d(channels, 16, 3, stride=1), nn.ReLU(),  # (B, 16, 8, 8)
                         nn.Flatten())                                      # (B, 1024)


def describe(observation: int | gym.Space) -> str:
    return f"vectors of {observation}" if isinstance(observation, int) else str(observation)


def choose_encoder(observation: int | gym.Space, kind: str) -> str:
    """The encoder `kind` resolves to for this observation, or a ConfigError naming what fits."""
    if kind not in ENCODERS:
        raise ConfigError(f"network.encoder={kind!r} is not allowed; choose one of: {', '.join(ENCODERS)}")
    shape = (observation,) if isinstance(observation, int) else tuple(observation.shape)
    fits = {"flat": len(shape) == 1 or kind == "flat"}
    for name, size in CNN_INPUTS.items():
        fits[name] = len(shape) == 3 and shape[1:] == size
    if kind == "auto":
        for name in ("flat", *CNN_INPUTS):
            if fits[name]:
                return name
        raise ConfigError(f"network.encoder=auto has no encoder for observations {describe(observation)}; "
                          "encoders: vectors (flat), (C, 84, 84) frame stacks (nature_cnn), (C, 10, 10) grids "
                          "(minatar_cnn); network.encoder=flat flattens anything")
    if not fits[kind]:
        wanted = "vectors" if kind == "flat" else f"(C, {CNN_INPUTS[kind][0]}, {CNN_INPUTS[kind][1]}) inputs"
        raise ConfigError(f"network.encoder={kind} needs {wanted} but the env has {describe(observation)}; "
                          f"use network.encoder=auto")
    return kind


def make_encoder(observation: int | gym.Space, kind: str = "auto") -> tuple[nn.Module | None, int]:
    """(the encoder, or None for a vector passed as it is; its output size)."""
    kind = choose_encoder(observation, kind)
    if isinstance(observation, int) or (kind == "flat" and len(observation.shape) == 1
                                        and observation.dtype == np.float32):
        return None, observation if isinstance(observation, int) else int(observation.shape[0])
    scale = ScaleObservation(1.0 / 255.0 if observation.dtype == np.uint8 else 1.0)
    shape = tuple(observation.shape)
    if kind == "flat":
        return nn.Sequential(scale, nn.Flatten()), int(np.prod(shape))
    body = nature_cnn(shape[0]) if kind == "nature_cnn" else minatar_cnn(shape[0])
    with torch.no_grad():
        size = body(torch.zeros(1, *shape)).shape[1]
    return nn.Sequential(scale, body), int(size)


def network_input(observation_space: gym.Space) -> int | gym.spaces.Box:
    """What an algorithm passes a network factory: the size of a vector observation (so that a
    network on vectors is built exactly as from an int), or the Box of an image observation."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise ConfigError(f"observations must be a Box (vectors, frame stacks or grids); the env has {observation_space}")
    if len(observation_space.shape) == 1:
        return int(observation_space.shape[0])
    return observation_space
