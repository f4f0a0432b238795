"""Encoders: what turns an observation into the feature vector a Q head (or LSTM) reads.

The network config's `encoder` picks one and it is checked against the env's observation space:

- `flat`: vectors as they are (no module, so a vector network is exactly its MLP);
- `nature_cnn`: the Nature DQN convolutions (Mnih et al. 2015) for (C, 84, 84) frame stacks;
- `minatar_cnn`: MinAtar's one 3x3 convolution of 16 channels (Young & Tian 2019) for (C, 10, 10) grids;
- `grid_cnn`: BabyAI's small convolutions (2x2 filters of 16, 32 and 64 with a max-pool) for
  (C, H, W) grids of 7 to 16 cells a side (MiniGrid's 7x7 view);
- `auto`: the one that fits the observation's shape.

Raw uint8 frames and bool grids go in as the env produced them (the replay buffer keeps that
dtype, four or more times smaller than float32); the encoder scales them to [0, 1] itself
(uint8 by 1/255, or by 1/high where the space declares a smaller bound, as MiniGrid's grid does).

Other spaces (rl_hydra/spaces.py) are encoded part by part and the features concatenated:
- Discrete: the index, one-hot, or a learned embedding of `network.discrete_embedding` features;
- MultiDiscrete: each dimension so (one multi-hot vector, or one embedding per dimension); a
  (C, H, W) grid of indices (MiniGrid's view: object, colour and state per cell) keeps its layout:
  each channel one-hot (or embedded) along the channel axis, then `grid_cnn`, as BabyAI 1.1
  (Hui et al. 2020) embeds the view's indices instead of reading them as intensities;
- MultiBinary: its bits as floats;
- a Dict of parts (Dict and Tuple observations, made flat by the env): one encoder per part,
  chosen as above (an image part gets a CNN), in the order of the parts.
Those encoders take any leading axes: (B, ...) while acting, (T, B, ...) in DRQN's sequences.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.errors import ConfigError, EnvMismatch
from rl_hydra.spaces import check_observation_space

CNN_INPUTS = {"nature_cnn": (84, 84), "minatar_cnn": (10, 10)}  # the (height, width) each is built for
GRID_SIDES = (7, 16)  # grid_cnn's smallest and largest side


def grid_cnn_fits(shape: tuple[int, ...]) -> bool:
    """A (C, H, W) shape whose sides grid_cnn takes."""
    return len(shape) == 3 and all(GRID_SIDES[0] <= side <= GRID_SIDES[1] for side in shape[1:])


class ScaleObservation(nn.Module):
    """uint8 pixels -> float in [0, 1]; bool or other inputs -> float as they are."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.float() * self.scale if self.scale != 1.0 else obs.float()


def nature_cnn(channels: int) -> nn.Sequential:
    """(B, C, 84, 84) -> (B, 3136): 32 8x8 filters, stride 4; 64 4x4, stride 2; 64 3x3, stride 1."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, 8, stride=4),
        nn.ReLU(),  # (B, 32, 20, 20)
        nn.Conv2d(32, 64, 4, stride=2),
        nn.ReLU(),  # (B, 64, 9, 9)
        nn.Conv2d(64, 64, 3, stride=1),
        nn.ReLU(),  # (B, 64, 7, 7)
        nn.Flatten(),
    )  # (B, 3136)


def minatar_cnn(channels: int) -> nn.Sequential:
    """(B, C, 10, 10) -> (B, 1024): 16 3x3 filters, stride 1, no padding (8x8 outputs), as MinAtar's DQN."""
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, stride=1),
        nn.ReLU(),  # (B, 16, 8, 8)
        nn.Flatten(),
    )  # (B, 1024)


def grid_cnn(channels: int) -> nn.Sequential:
    """(B, C, H, W) -> (B, 64 * h * w), H and W in 7..16: BabyAI's (Chevalier-Boisvert et al. 2019)
    convolutions for MiniGrid's symbolic view, 7x7 -> 1x1."""
    return nn.Sequential(
        nn.Conv2d(channels, 16, 2),
        nn.ReLU(),
        nn.MaxPool2d(2),  # (B, 16, (H-1)//2, (W-1)//2)
        nn.Conv2d(16, 32, 2),
        nn.ReLU(),  # (B, 32, .. - 1, .. - 1)
        nn.Conv2d(32, 64, 2),
        nn.ReLU(),  # (B, 64, .. - 2, .. - 2)
        nn.Flatten(),
    )


def output_size(body: nn.Module, shape: tuple[int, ...]) -> int:
    """How many features a CNN body makes of one input of `shape`."""
    with torch.no_grad():
        return int(body(torch.zeros(1, *shape)).shape[1])


def describe(observation: int | gym.Space) -> str:
    return f"vectors of {observation}" if isinstance(observation, int) else str(observation)


def choose_encoder(observation: int | gym.spaces.Box, kind: str) -> str:
    """The encoder `kind` (one of the schema's ENCODERS) resolves to for this observation, or a
    ConfigError naming what fits."""
    shape = (observation,) if isinstance(observation, int) else tuple(observation.shape)
    fits = {"flat": len(shape) == 1 or kind == "flat"}
    for name, size in CNN_INPUTS.items():
        fits[name] = len(shape) == 3 and shape[1:] == size
    fits["grid_cnn"] = grid_cnn_fits(shape)
    if kind == "auto":
        for name in ("flat", *CNN_INPUTS, "grid_cnn"):
            if fits[name]:
                return name
        raise EnvMismatch(
            f"network.encoder=auto has no encoder for observations {describe(observation)}; "
            "encoders: vectors (flat), (C, 84, 84) frame stacks (nature_cnn), (C, 10, 10) grids "
            "(minatar_cnn), (C, 7..16, 7..16) grids (grid_cnn); network.encoder=flat flattens anything"
        )
    if not fits[kind]:
        wanted = (
            "vectors"
            if kind == "flat"
            else "(C, H, W) inputs with H and W in 7..16"
            if kind == "grid_cnn"
            else f"(C, {CNN_INPUTS[kind][0]}, {CNN_INPUTS[kind][1]}) inputs"
        )
        raise EnvMismatch(
            f"network.encoder={kind} needs {wanted} but the env has {describe(observation)}; use network.encoder=auto"
        )
    return kind


def pixel_scale(space: gym.spaces.Box) -> float:
    """uint8 values are scaled by 1/255, or by 1/high where every bound is smaller (MiniGrid's
    object, colour and state indices); other dtypes are taken as they are."""
    if space.dtype != np.uint8:
        return 1.0
    high = int(np.max(space.high))
    return 1.0 / (high if 0 < high < 255 else 255.0)


def make_encoder(
    observation: int | gym.Space, kind: str = "auto", discrete_embedding: int | None = None
) -> tuple[nn.Module | None, int]:
    """(the encoder, or None for a vector passed as it is; its output size). `discrete_embedding`:
    None encodes Discrete and MultiDiscrete parts one-hot, an integer d embeds each index in d features."""
    if not isinstance(observation, (int, gym.spaces.Box)):
        return part_encoders(observation, kind, discrete_embedding)
    kind = choose_encoder(observation, kind)
    if isinstance(observation, int) or (
        kind == "flat" and len(observation.shape) == 1 and observation.dtype == np.float32
    ):
        return None, observation if isinstance(observation, int) else int(observation.shape[0])
    scale = ScaleObservation(pixel_scale(observation))
    shape = tuple(observation.shape)
    if kind == "flat":
        return nn.Sequential(scale, nn.Flatten()), int(np.prod(shape))
    body = {"nature_cnn": nature_cnn, "minatar_cnn": minatar_cnn, "grid_cnn": grid_cnn}[kind](shape[0])
    return nn.Sequential(scale, body), output_size(body, shape)


def index_offsets(nvec: np.ndarray, start: np.ndarray) -> torch.Tensor:
    """(K,) for K = nvec.size dimensions: what to add to each dimension's value so that the K
    dimensions index one shared range, sum(nvec) long, dimension after dimension."""
    nvec, start = np.asarray(nvec, np.int64).ravel(), np.asarray(start, np.int64).ravel()
    return torch.as_tensor(np.concatenate([[0], np.cumsum(nvec)[:-1]]) - start)


class OneHot(nn.Module):
    """Indices (..., *shape) of a Discrete (shape ()) or MultiDiscrete space -> (..., sum(nvec)):
    one 1 per dimension, at that dimension's offset plus its index (one-hot for a Discrete)."""

    offsets: torch.Tensor  # a buffer, (K,)

    def __init__(self, nvec: np.ndarray, start: np.ndarray):
        super().__init__()
        nvec = np.asarray(nvec, np.int64)
        self.event_dims, self.size = nvec.ndim, int(nvec.sum())
        self.register_buffer("offsets", index_offsets(nvec, start), persistent=False)  # (K,)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        # obs: (..., *shape) integers, K = prod(shape) of them per observation
        index = obs.long().reshape(*obs.shape[: obs.dim() - self.event_dims], -1) + self.offsets  # (..., K)
        out = torch.zeros(*index.shape[:-1], self.size, device=obs.device)  # (..., sum(nvec))
        return out.scatter_(-1, index, 1.0)


class Embedding(nn.Module):
    """Indices (..., *shape) of a Discrete or MultiDiscrete space -> (..., K * dim): a learned
    vector of `dim` per dimension and value, the K dimensions' vectors side by side."""

    offsets: torch.Tensor  # a buffer, (K,)

    def __init__(self, nvec: np.ndarray, start: np.ndarray, dim: int):
        super().__init__()
        nvec = np.asarray(nvec, np.int64)
        self.event_dims, self.size = nvec.ndim, int(nvec.size) * dim
        self.register_buffer("offsets", index_offsets(nvec, start), persistent=False)  # (K,)
        self.table = nn.Embedding(int(nvec.sum()), dim)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        index = obs.long().reshape(*obs.shape[: obs.dim() - self.event_dims], -1) + self.offsets  # (..., K)
        return self.table(index).flatten(-2)  # (..., K * dim)


class GridIndices(nn.Module):
    """Index grids (..., C, H, W), channel c holding one of nvec[c] values -> (..., F, H, W) feature
    maps: each channel one-hot (F = sum(nvec)) or, with `dim`, a learned vector of `dim` per
    channel and value (F = C * dim). A CNN then reads a key and a ball as different features, where
    scaled indices would make them 0.5 and 0.6 of one."""

    offsets: torch.Tensor  # a buffer, (C, 1, 1)

    def __init__(self, nvec: np.ndarray, start: np.ndarray, dim: int | None = None):
        super().__init__()
        nvec = np.asarray(nvec, np.int64)
        self.register_buffer("offsets", index_offsets(nvec, start).view(-1, 1, 1), persistent=False)  # (C, 1, 1)
        self.total = int(nvec.sum())
        self.table = None if dim is None else nn.Embedding(self.total, dim)
        self.channels = self.total if dim is None else len(nvec) * dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        index = obs.long() + self.offsets  # (..., C, H, W)
        if self.table is None:
            out = torch.zeros(*index.shape[:-3], self.total, *index.shape[-2:], device=obs.device)
            return out.scatter_(-3, index, 1.0)  # (..., sum(nvec), H, W)
        features = self.table(index).movedim(-1, -3)  # (..., C, dim, H, W)
        return features.flatten(-4, -3)  # (..., C * dim, H, W)


def index_grid(space: gym.spaces.MultiDiscrete) -> tuple[np.ndarray, np.ndarray] | None:
    """(nvec, start) per channel of a (C, H, W) MultiDiscrete whose bounds are alike across each
    channel and whose sides grid_cnn takes; None for any other MultiDiscrete."""
    nvec, start = np.asarray(space.nvec), np.asarray(space.start)
    if not grid_cnn_fits(nvec.shape):
        return None
    per_channel = nvec[:, :1, :1], start[:, :1, :1]
    if (nvec != per_channel[0]).any() or (start != per_channel[1]).any():
        return None
    return per_channel[0].ravel(), per_channel[1].ravel()


class FlatPart(nn.Module):
    """A part (..., *shape) as (..., prod(shape)) floats, scaled by `scale`: vectors, MultiBinary bits."""

    def __init__(self, shape: tuple[int, ...], scale: float = 1.0):
        super().__init__()
        self.event_dims, self.scale = len(shape), scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        flat = obs.reshape(*obs.shape[: obs.dim() - self.event_dims], -1).float()  # (..., F)
        return flat * self.scale if self.scale != 1.0 else flat


class ImagePart(nn.Module):
    """A Box encoder for (N, *shape) inputs (a CNN) applied to (..., *shape): the leading axes
    are folded into N and unfolded after."""

    def __init__(self, encoder: nn.Module, shape: tuple[int, ...]):
        super().__init__()
        self.encoder, self.shape = encoder, shape

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        leading = obs.shape[: obs.dim() - len(self.shape)]
        return self.encoder(obs.reshape(-1, *self.shape)).reshape(*leading, -1)  # (..., F)


class PartsEncoder(nn.Module):
    """A dict of parts {name: (..., *shape)} -> (..., sum of the part encoders' features), in the
    order of the parts."""

    def __init__(self, encoders: dict[str, nn.Module]):
        super().__init__()
        self.names = list(encoders)
        self.parts = nn.ModuleList(encoders.values())  # by position: part names may hold dots

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([encoder(obs[name]) for name, encoder in zip(self.names, self.parts)], dim=-1)


def part_encoder(space: gym.Space, kind: str, discrete_embedding: int | None, name: str = "") -> tuple[nn.Module, int]:
    """The encoder of one part (any leading axes) and its output size."""
    grid = index_grid(space) if isinstance(space, gym.spaces.MultiDiscrete) and kind in ("auto", "grid_cnn") else None
    if isinstance(space, gym.spaces.MultiDiscrete) and grid is not None:
        indices = GridIndices(*grid, dim=discrete_embedding)
        body = grid_cnn(indices.channels)
        size = output_size(body, (indices.channels, *space.shape[1:]))
        return ImagePart(nn.Sequential(indices, body), tuple(space.shape)), size
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        nvec = np.asarray(space.n if isinstance(space, gym.spaces.Discrete) else space.nvec)
        indices_encoder: OneHot | Embedding = (
            OneHot(nvec, space.start)
            if discrete_embedding is None
            else Embedding(nvec, space.start, discrete_embedding)
        )
        return indices_encoder, indices_encoder.size
    if isinstance(space, gym.spaces.MultiBinary):
        return FlatPart(tuple(space.shape)), int(np.prod(space.shape))
    assert isinstance(space, gym.spaces.Box), space  # the one leaf left (check_observation_space)
    shape = tuple(space.shape)
    if len(shape) <= 1:  # a vector part, or a number: as it is, whatever CNN network.encoder names
        return FlatPart(shape, pixel_scale(space)), int(np.prod(shape))
    try:
        encoder, size = make_encoder(space, kind)
    except ConfigError as error:
        if not name:
            raise
        raise EnvMismatch(f"observation part {name!r}: {error}") from None
    assert encoder is not None  # make_encoder leaves only a vector unencoded
    return ImagePart(encoder, shape), size


def part_encoders(space: gym.Space, kind: str, discrete_embedding: int | None) -> tuple[nn.Module, int]:
    """One encoder for a single non-Box space, or a PartsEncoder of one per part of a Dict."""
    check_observation_space(space)
    if not isinstance(space, gym.spaces.Dict):
        return part_encoder(space, kind, discrete_embedding)
    encoders, size = {}, 0
    for name, part in space.spaces.items():
        encoders[name], features = part_encoder(part, kind, discrete_embedding, name)
        size += features
    return PartsEncoder(encoders), size
