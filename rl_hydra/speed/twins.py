"""The numpy twins of the networks' forward passes that acting runs most (numpy_mirror.py says when
one answers): each the same forward in numpy on a float32 (B, ...) array, None where it cannot answer.
A network's own file knows nothing of these; its class is named here, in TWINS."""

from __future__ import annotations

import numpy as np

from rl_hydra.networks.dueling import DuelingHead
from rl_hydra.networks.mlp import ActionValueNetwork
from rl_hydra.networks.noisy import NoisyLinear
from rl_hydra.speed.numpy_mirror import TWINS, numpy_forward, view


def action_values(net: ActionValueNetwork, obs: np.ndarray) -> np.ndarray | None:
    """ActionValueNetwork.forward (QNetwork's, PerActionNetwork's), for vectors (no encoder):
    (B, obs_dim) -> (B, A), or (B, A, N) with N values per action."""
    out = None if net.observation_encoder is not None else numpy_forward(net.net, obs)  # (B, A * N)
    if out is None or net.values_per_action is None:
        return out
    return out.reshape(-1, net.num_actions, net.values_per_action)  # (B, A, N)


def noisy_linear(layer: NoisyLinear, x: np.ndarray) -> np.ndarray | None:
    """NoisyLinear.forward: the same products, in the same order, from the same parameters and the
    noise the layer holds."""
    names = ("weight_mu", "bias_mu", "weight_sigma", "bias_sigma", "scaled_in", "scaled_out")
    views = [view(getattr(layer, name)) for name in names]
    arrays = [v for v in views if v is not None]
    if len(arrays) < len(views):
        return None
    weight_mu_t, bias_mu, weight_sigma_t, bias_sigma, f_in, f_out = arrays  # (p, q), (q,), (p, q), (q,), (p,), (q,)
    if not layer.noise_enabled:
        return np.dot(x, weight_mu_t) + bias_mu
    bias = bias_mu + bias_sigma * f_out  # (q,)
    if x.size <= 8 * layer.in_features:
        return np.dot(x, weight_mu_t) + bias + f_out * np.dot(x * f_in, weight_sigma_t)
    return np.dot(x, weight_mu_t + weight_sigma_t * np.outer(f_in, f_out)) + bias


def dueling_head(head: DuelingHead, features: np.ndarray) -> np.ndarray | None:
    """DuelingHead.forward."""
    value, advantage = numpy_forward(head.value, features), numpy_forward(head.advantage, features)
    if value is None or advantage is None:
        return None
    A, K = head.num_actions, head.outputs_per_action
    value = value.reshape(*value.shape[:-1], 1, K)  # (..., 1, K)
    advantage = advantage.reshape(*advantage.shape[:-1], A, K)  # (..., A, K)
    q = value + advantage - advantage.mean(axis=-2, keepdims=True)  # (..., A, K)
    return q.reshape(*q.shape[:-2], A * K)  # (..., A * K)


TWINS.update({ActionValueNetwork: action_values, NoisyLinear: noisy_linear, DuelingHead: dueling_head})
