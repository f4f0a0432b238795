"""The layers every network is made of: MLPs, their activations, and dropout drawn from gaps.

Dropout (DroQ's critics, the MLPs' `dropout`) draws its mask from the gaps between dropped units. A
dropout mask is n independent Bernoulli(p) draws: unit i is dropped with probability p and the kept
units are scaled by 1 / (1 - p). The dropped positions of such a sequence are exactly those reached
by gaps G_1, G_2, ... ~ Geometric(p) on {1, 2, ...} (the trials up to the next drop): drop at G_1 -
1, G_1 + G_2 - 1, and so on. Drawing the gaps costs about n * p random numbers instead of n, and
torch's CPU generator draws one number at a time: at DroQ's p = 0.01, forward and backward take 0.59
of F.dropout's time on the Pendulum preset's (2, 128, 64) critic activations and 0.28 on (2, 256,
256) (scripts/benchmarks/dropout.py; about equal at p = 0.3). Above GAPS_UP_TO, off the CPU, or
inside torch.compile (compile=true), this is F.dropout. Both draw from torch's default generator,
which a run's checkpoint holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from rl_hydra.choices import ACTIVATIONS

log = logging.getLogger(__name__)

GAPS_UP_TO = 0.25  # p above which drawing n * p gaps stops paying against one draw per unit (measured)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """x with each unit zeroed with probability p and the rest scaled by 1 / (1 - p) (identity
    outside training or at p = 0); gradients pass through the kept units, scaled alike."""
    if not training or p == 0.0:
        return x
    if p > GAPS_UP_TO or x.device.type != "cpu" or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    dropped = dropped_positions(x.numel(), p)  # (D,) int64, increasing
    mask = torch.full(x.shape, 1.0 / (1.0 - p), dtype=x.dtype)
    mask.view(-1)[dropped] = 0.0
    return x * mask


def dropped_positions(
    n: int, p: float, generator: torch.Generator | None = None, chunk: int | None = None
) -> torch.Tensor:
    """The positions in [0, n) that n independent Bernoulli(p) trials drop, increasing (D,) int64:
    the partial sums of Geometric(p) gaps, less one, drawn `chunk` at a time until they pass n
    (by default enough that one chunk almost always does)."""
    expected = n * p
    chunk = chunk or int(expected + 4.0 * math.sqrt(expected) + 16)
    parts, last = [], -1
    while last < n - 1:
        gaps = torch.empty(chunk, dtype=torch.int64).geometric_(p, generator=generator)  # (chunk,) >= 1
        positions = gaps.cumsum(0).add_(last)
        parts.append(positions)
        last = int(positions[-1])
    positions = parts[0] if len(parts) == 1 else torch.cat(parts)
    return positions[positions < n]


class Dropout(nn.Dropout):
    """nn.Dropout drawn as `dropout` above: the same module, state and repr."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


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
