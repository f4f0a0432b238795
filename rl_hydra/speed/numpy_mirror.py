"""A numpy mirror of a small network's forward pass, for acting one observation at a time.

At batch 1 a small MLP's torch forward is mostly per-op dispatch; numpy on the same weight
memory computes it at a fraction of the cost (figures: docs/benchmark.md). The mirror must
never answer differently from the torch method it stands for, so it is exact by construction:

- It mirrors only the torch methods in TWINS, each named by where it is defined. A subclass
  that overrides such a method defines a method of another name, which has no twin, and the
  torch method runs; so does a method replaced on the instance.
- It walks the module tree as it is at each call and gives up (returns None, and the caller
  runs torch) at anything it does not know: a module type other than exact `nn.Linear`, the
  activations below, `nn.Sequential` or a forward with a twin; a forward hook or pre-hook
  (module or global); a parametrization (it replaces the module's class); weights that are
  not float32 on the CPU. Noisy layers and dueling heads have twins: a noisy layer's twin
  reads the noise the layer holds.
- Weights are read through numpy views of the parameters' current storage; a view is made
  again whenever a parameter's storage changes (`p.data = ...`, `vector_to_parameters`, `.to()`).
  In-place changes (optimizer steps, `load_state_dict`) show through the views themselves.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as torch_module

NUMPY_ACTIVATIONS: dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]] = {
    nn.ReLU: lambda x: np.maximum(x, 0.0, out=x),   # in place: x is always the mirror's own array
    nn.Tanh: lambda x: np.tanh(x, out=x),
}

# id(parameter) -> (its storage address and shape when the view was made, the numpy view, transposed for
# a matrix); an entry goes when its parameter does. Keyed by id: tensors compare elementwise, not by identity.
_views: dict[int, tuple[int, torch.Size, np.ndarray]] = {}


@functools.lru_cache(maxsize=None)   # keyed by the function object: an override is another function
def twin_of(method: Callable) -> Callable[[Any, np.ndarray], np.ndarray | None] | None:
    """The numpy twin of a torch method (a function defined in a class), or None."""
    return TWINS.get(f"{getattr(method, '__module__', '')}.{getattr(method, '__qualname__', '')}")


def call_mirror(owner: Any, method_name: str, x: np.ndarray) -> np.ndarray | None:
    """`owner.<method_name>(x)` through its numpy twin, or None where it has none (the method
    was overridden, replaced on the instance, or the network cannot be mirrored)."""
    if method_name in vars(owner):
        return None
    twin = twin_of(getattr(type(owner), method_name))
    return None if twin is None else twin(owner, x)


def numpy_forward(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
    """module(x) computed in numpy, or None where the module tree cannot be mirrored exactly."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return None
    return _forward_tree(module, x)


def _forward_tree(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
    if module._forward_hooks or module._forward_pre_hooks:
        return None
    kind = type(module)
    if kind is nn.Linear:
        weight_t, bias = _view(module._parameters["weight"]), module._parameters["bias"]
        if weight_t is None:
            return None
        x = np.dot(x, weight_t)  # a fresh array: the in-place ops after it never touch the caller's input
        if bias is not None:
            bias = _view(bias)
            if bias is None:
                return None
            x += bias
        return x
    activation = NUMPY_ACTIVATIONS.get(kind)
    if activation is not None:
        return activation(x)
    if kind.forward is nn.Sequential.forward:
        for child in module._modules.values():
            x = _forward_tree(child, x)
            if x is None:
                return None
        return x
    twin = twin_of(kind.forward)
    return None if twin is None else twin(module, x)


def _view(param: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a float32 CPU parameter (a weight matrix transposed), kept while its storage is."""
    address, shape = param.data_ptr(), param.shape
    cached = _views.get(id(param))
    if cached is not None and cached[0] == address and cached[1] == shape:
        return cached[2]
    if param.device.type != "cpu" or param.dtype != torch.float32:
        return None
    view = param.detach().numpy()
    view = view.T if view.ndim == 2 else view
    if id(param) not in _views:
        weakref.finalize(param, _views.pop, id(param), None)
    _views[id(param)] = (address, shape, view)
    return view


# --- the twins, each the numpy form of the torch method it is keyed by -------------------------
def q_network_forward(net: Any, obs: np.ndarray) -> np.ndarray | None:
    return None if net.observation_encoder is not None else _forward_tree(net.net, obs)                # (B, A)


def per_action_network_forward(net: Any, obs: np.ndarray) -> np.ndarray | None:
    out = None if net.observation_encoder is not None else _forward_tree(net.net, obs)                 # (B, A * N)
    return None if out is None else out.reshape(-1, net.num_actions, net.values_per_action)           # (B, A, N)


def dueling_head_forward(head: Any, features: np.ndarray) -> np.ndarray | None:
    value, advantage = _forward_tree(head.value, features), _forward_tree(head.advantage, features)  # (..., K), (..., A * K)
    if value is None or advantage is None:
        return None
    A, K = head.num_actions, head.outputs_per_action
    value = value.reshape(*value.shape[:-1], 1, K)                                                     # (..., 1, K)
    advantage = advantage.reshape(*advantage.shape[:-1], A, K)                                         # (..., A, K)
    q = value + advantage - advantage.mean(axis=-2, keepdims=True)                                     # (..., A, K)
    return q.reshape(*q.shape[:-2], A * K)                                                             # (..., A * K)


def noisy_linear_forward(layer: Any, x: np.ndarray) -> np.ndarray | None:
    """The same products, in the same order, from the same parameters and the noise the layer holds."""
    views = [_view(t) for t in (layer.weight_mu, layer.bias_mu, layer.weight_sigma, layer.bias_sigma)]
    if any(v is None for v in views):
        return None
    weight_mu_t, bias_mu, weight_sigma_t, bias_sigma = views                                           # (p, q), (q,), (p, q), (q,)
    if not layer.noise_enabled:
        return np.dot(x, weight_mu_t) + bias_mu
    # f(eps) = sign(eps) sqrt(|eps|): exact in both libraries (sqrt is correctly rounded)
    f_in, f_out = (np.sign(e) * np.sqrt(np.abs(e)) for e in (layer.epsilon_in.numpy(), layer.epsilon_out.numpy()))
    bias = bias_mu + bias_sigma * f_out                                                                # (q,)
    if x.size <= 8 * layer.in_features:
        return np.dot(x, weight_mu_t) + bias + f_out * np.dot(x * f_in, weight_sigma_t)
    return np.dot(x, weight_mu_t + weight_sigma_t * np.outer(f_in, f_out)) + bias


def dqn_action_values(agent: Any, obs: np.ndarray) -> np.ndarray | None:
    return numpy_forward(agent.q_net, obs)                                                             # (B, A)


def qr_dqn_action_values(agent: Any, obs: np.ndarray) -> np.ndarray | None:
    quantiles = numpy_forward(agent.q_net, obs)                                                        # (B, A, N)
    # sum / N: ndarray.mean runs Python-level code on every call
    return None if quantiles is None else quantiles.sum(axis=2) / agent.num_quantiles                 # (B, A)


def c51_action_values(agent: Any, obs: np.ndarray) -> np.ndarray | None:
    logits = numpy_forward(agent.q_net, obs)                                                           # (B, A, N)
    if logits is None or agent.support.device.type != "cpu":
        return None
    probs = np.exp(logits - logits.max(axis=2, keepdims=True))                                         # softmax, as
    probs /= probs.sum(axis=2, keepdims=True)                                                          # torch takes it
    return np.dot(probs, agent.support.numpy())                                                        # (B, A)


# where each torch method is defined -> its twin; tests/test_acting.py checks every name resolves
TWINS: dict[str, Callable[[Any, np.ndarray], np.ndarray | None]] = {
    "rl_hydra.networks.mlp.QNetwork.forward": q_network_forward,
    "rl_hydra.networks.mlp.PerActionNetwork.forward": per_action_network_forward,
    "rl_hydra.networks.dueling.DuelingHead.forward": dueling_head_forward,
    "rl_hydra.networks.noisy.NoisyLinear.forward": noisy_linear_forward,
    "rl_hydra.algos.dqn.DQN.action_values": dqn_action_values,
    "rl_hydra.algos.qr_dqn.QRDQN.action_values": qr_dqn_action_values,
    "rl_hydra.algos.c51.C51.action_values": c51_action_values,
}


def probe() -> None:
    """Raises unless the module internals the mirror reads are where it reads them and a small
    MLP's mirror gives torch's answer."""
    for name in ("_global_forward_hooks", "_global_forward_pre_hooks"):
        getattr(torch_module, name)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    for attribute in ("_forward_hooks", "_forward_pre_hooks", "_parameters", "_modules"):
        getattr(net, attribute)
    obs = np.linspace(-1.0, 1.0, 8, dtype=np.float32).reshape(2, 4)
    mirrored = numpy_forward(net, obs)
    with torch.no_grad():
        expected = net(torch.from_numpy(obs)).numpy()
    if mirrored is None or not np.allclose(mirrored, expected, rtol=1e-5, atol=1e-6):
        raise ValueError("its forward differs from torch's on a small MLP")
