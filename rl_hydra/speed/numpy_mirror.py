"""A numpy mirror of a small network's forward pass, for acting on a few observations at a time.

At batch 1 a small MLP's torch forward is mostly per-op dispatch; numpy on the same weight
memory computes it at a fraction of the cost (figures: docs/benchmark.md). The mirror must
never answer differently from the torch forward it stands for, so it is exact by construction:

- The speed layer names the module classes whose forward has a numpy twin (`TWINS`, filled by
  speed/twins.py); a network's own code knows nothing of it. A subclass that overrides `forward`
  defines another function, which has no twin, and torch runs it.
- Only acting asks (`mirroring`, around an agent's `act`, where `speed.attach` puts it): there a
  module whose forward has a twin runs the twin on a float32 CPU input without gradient; the rest
  of the agent's method (a mean over quantiles, a softmax over atoms, the argmax) runs in torch on
  the result. Losses never meet the mirror: their numbers and gradients are torch's.
- It walks the module tree as it is at each call and gives up (returns None, and torch runs) at
  anything it does not know: a module type other than exact `nn.Linear`, the activations below,
  `nn.Sequential` or a forward with a twin; a forward hook or pre-hook (module or global); a
  parametrization (it replaces the module's class); weights that are not float32 on the CPU.
- Weights are read through numpy views of the parameters' current storage; a view is made
  again whenever a parameter's storage changes (`p.data = ...`, `vector_to_parameters`, `.to()`).
  In-place changes (optimizer steps, `load_state_dict`) show through the views themselves.
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as torch_module

NUMPY_ACTIVATIONS: dict[type[nn.Module], Callable[[np.ndarray], np.ndarray]] = {
    nn.ReLU: lambda x: np.maximum(x, 0.0, out=x),  # in place: x is always the mirror's own array
    nn.Tanh: lambda x: np.tanh(x, out=x),
}

# id(parameter) -> (its storage address and shape when the view was made, the numpy view, transposed for
# a matrix); an entry goes when its parameter does. Keyed by id: tensors compare elementwise, not by identity.
_views: dict[int, tuple[int, torch.Size, np.ndarray]] = {}


Twin = Callable[[Any, np.ndarray], "np.ndarray | None"]

# each module class whose forward has a numpy twin -> that twin (speed/twins.py fills it)
TWINS: dict[type[nn.Module], Twin] = {}


class Acting:
    """A block without autograd in which the twinned forwards answer through their twins where they
    can (`on`); `answered` says afterwards whether one did. Nested blocks restore the outer one's
    settings."""

    current: Acting | None = None

    def __init__(self, on: bool = True):
        self.on, self.answered = on, False

    def __enter__(self) -> Acting:
        self.outer, Acting.current = Acting.current, (self if self.on else None)
        self.grad = torch.is_grad_enabled()
        torch.set_grad_enabled(False)
        return self

    def __exit__(self, *exc_info) -> None:
        Acting.current = self.outer
        torch.set_grad_enabled(self.grad)


def twin_for(kind: type) -> Twin | None:
    """The numpy twin of `kind`'s forward: that of the class defining the forward it runs, or None."""
    owner = next((klass for klass in kind.__mro__ if "forward" in vars(klass)), None)
    return TWINS.get(owner) if owner is not None else None


def forward_or_twin(forward: Callable, numpy_twin: Twin) -> Callable:
    """`forward`, answered by `numpy_twin` inside an Acting block where the twin can answer."""

    @functools.wraps(forward)
    def answered(module: nn.Module, x: Any, *args: Any, **kwargs: Any) -> Any:
        acting = Acting.current
        if acting is not None and not args and not kwargs:
            out = answer(numpy_twin, module, x)
            if out is not None:
                acting.answered = True
                return out
        return forward(module, x, *args, **kwargs)

    answered.mirrors = forward  # type: ignore[attr-defined]
    return answered


@contextlib.contextmanager
def mirroring(classes: Iterable[type[nn.Module]], on: bool = True) -> Iterator[Acting]:
    """An Acting block in which each of `classes` (those of TWINS an agent holds) answers through its
    twin: their forwards are wrapped for the block's length only, and put back after it."""
    wrapped = [klass for klass in classes if klass in TWINS and not hasattr(vars(klass)["forward"], "mirrors")]
    for klass in wrapped:
        klass.forward = forward_or_twin(vars(klass)["forward"], TWINS[klass])
    try:
        with Acting(on) as acting:
            yield acting
    finally:
        for klass in wrapped:
            klass.forward = vars(klass)["forward"].mirrors


def twinned_classes(modules: Iterable[nn.Module]) -> set[type[nn.Module]]:
    """The classes of TWINS whose forward some module of `modules` (or below) runs."""
    found = set()
    for module in modules:
        for sub in module.modules():
            owner = next((klass for klass in type(sub).__mro__ if "forward" in vars(klass)), None)
            if owner in TWINS:
                found.add(owner)
    return found


def answer(numpy_twin: Twin, module: nn.Module, x: Any) -> torch.Tensor | None:
    """module(x) computed by its twin, as a tensor on the result's memory; None where x is not a
    float32 CPU tensor outside autograd, a global hook is set, or the twin cannot answer."""
    if (
        type(x) is not torch.Tensor
        or not x.is_cpu
        or x.dtype != torch.float32
        or x.requires_grad
        or torch.is_grad_enabled()
        or torch_module._global_forward_hooks
        or torch_module._global_forward_pre_hooks
    ):
        return None
    out = numpy_twin(module, x.numpy())
    return None if out is None else torch.from_numpy(out)


def call_mirror(owner: Any, method_name: str, x: np.ndarray) -> np.ndarray | None:
    """`owner.<method_name>(x)` as acting computes it, or None where no forward pass it made ran
    through a twin (torch computed all of it)."""
    modules = [value for value in vars(owner).values() if isinstance(value, nn.Module)]
    with mirroring(twinned_classes(modules)) as acting:
        out = getattr(owner, method_name)(torch.from_numpy(x))
    return out.numpy() if acting.answered else None


def numpy_forward(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
    """module(x) computed in numpy, or None where the module tree cannot be mirrored exactly."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return None
    return forward_tree(module, x)


def forward_tree(module: nn.Module, x: np.ndarray) -> np.ndarray | None:
    """`numpy_forward` without the check for global hooks, which the walk's start made."""
    if module._forward_hooks or module._forward_pre_hooks:
        return None
    kind = type(module)
    if kind is nn.Linear:
        weight, bias = module._parameters["weight"], module._parameters["bias"]
        weight_t = None if weight is None else view(weight)
        if weight_t is None:
            return None
        x = np.dot(x, weight_t)  # a fresh array: the in-place ops after it never touch the caller's input
        if bias is not None:
            bias_view = view(bias)
            if bias_view is None:
                return None
            x += bias_view
        return x
    activation = NUMPY_ACTIVATIONS.get(kind)
    if activation is not None:
        return activation(x)
    if kind.forward is nn.Sequential.forward:
        for child in module._modules.values():
            out = None if child is None else forward_tree(child, x)
            if out is None:
                return None
            x = out
        return x
    twin = twin_for(kind)
    return None if twin is None else twin(module, x)


def view(param: torch.Tensor) -> np.ndarray | None:
    """A numpy view of a float32 CPU parameter (a weight matrix transposed), kept while its storage is."""
    address, shape = param.data_ptr(), param.shape
    cached = _views.get(id(param))
    if cached is not None and cached[0] == address and cached[1] == shape:
        return cached[2]
    if param.device.type != "cpu" or param.dtype != torch.float32:
        return None
    array = param.detach().numpy()
    array = array.T if array.ndim == 2 else array
    if id(param) not in _views:
        weakref.finalize(param, _views.pop, id(param), None)
    _views[id(param)] = (address, shape, array)
    return array


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
