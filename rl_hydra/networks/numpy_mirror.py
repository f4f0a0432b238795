"""A numpy mirror of a small network's forward pass, for acting one observation at a time.

At batch 1 a small MLP's torch forward is mostly per-op dispatch; numpy on the same weight
memory computes it at a fraction of the cost (figures: docs/benchmark.md). The mirror must
never answer differently from the torch method it stands for, so it is exact by construction:

- It mirrors only methods marked with `@mirrored_by(twin)`. A subclass that overrides such a
  method without marking its own version has no mirror, and the torch method runs.
- It walks the module tree as it is at each call and gives up (returns None, and the caller
  runs torch) at anything it does not know: a module type other than exact `nn.Linear`, the
  activations below, `nn.Sequential` or a forward marked with a twin; a forward hook or
  pre-hook (module or global); a parametrization (it replaces the module's class); weights
  that are not float32 on the CPU. Noisy layers (networks/noisy.py) and dueling heads
  (networks/dueling.py) have twins: a noisy layer's twin reads the noise the layer holds.
- Weights are read through numpy views of the parameters' current storage; a view is made
  again whenever a parameter's storage changes (`p.data = ...`, `vector_to_parameters`, `.to()`).
  In-place changes (optimizer steps, `load_state_dict`) show through the views themselves.
"""

from __future__ import annotations

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


def mirrored_by(twin: Callable[..., np.ndarray | None]) -> Callable:
    """Mark a torch method with `twin(self, x: ndarray) -> ndarray | None`, its numpy mirror."""
    def mark(method: Callable) -> Callable:
        method.numpy_twin = twin
        return method
    return mark


def call_mirror(owner: Any, method_name: str, x: np.ndarray) -> np.ndarray | None:
    """`owner.<method_name>(x)` through its numpy twin, or None where it has none (the method
    was overridden without a twin, replaced on the instance, or the network cannot be mirrored)."""
    if method_name in vars(owner):
        return None
    twin = getattr(getattr(type(owner), method_name), "numpy_twin", None)
    return None if twin is None else twin(owner, x)


def numpy_forward(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
    """module(x) computed in numpy, or None where the module tree cannot be mirrored exactly."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return None
    return _forward(module, x)


def _forward(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
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
            x = _forward(child, x)
            if x is None:
                return None
        return x
    twin = getattr(kind.forward, "numpy_twin", None)
    return None if twin is None else twin(module, x)


def parameter_view(param: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a float32 CPU parameter or buffer (a matrix transposed: (in, out)), or None."""
    return _view(param)


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
