"""Greedy actions: the argmax of an agent's action values for a batch of observations.

Acting runs a few observations at a time, where a small network's torch forward is mostly
per-op dispatch. Inside `speed.acting()` the speed layer runs the forward passes that have a
numpy twin in numpy (rl_hydra/speed/numpy_mirror.py); the rest of `action_values` runs in torch
on their results, so the actions are those of the agent's own method.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from rl_hydra import speed
from rl_hydra.protocols import ObservationTensor


def argmax_actions(action_values: Callable[[ObservationTensor], torch.Tensor], obs: ObservationTensor) -> np.ndarray:
    """argmax_a action_values(obs)[b, a] for each row b: obs (n, ...) -> actions (n,)."""
    with speed.acting():  # without autograd
        values = action_values(obs)  # (n, A)
    if values.is_cpu:  # the same first index of the maximum, without torch's per-op dispatch
        return values.numpy().argmax(axis=1)
    return values.argmax(dim=1).cpu().numpy()
