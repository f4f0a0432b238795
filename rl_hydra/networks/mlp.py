"""Multi-layer perceptrons and the plain Q-network built from them."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rl_hydra.config import ConfigError, check_int

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU}
FUNCTIONS = {nn.ReLU: torch.relu, nn.Tanh: torch.tanh, nn.ELU: F.elu, nn.GELU: F.gelu, nn.SiLU: F.silu}
NUMPY_FUNCTIONS = {torch.relu: lambda x: np.maximum(x, 0.0, out=x), torch.tanh: lambda x: np.tanh(x, out=x)}  # in place


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ConfigError(f"network.activation={name!r} is not allowed; choose one of: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Sequential):
    """An nn.Sequential of Linear layers, each followed by an activation except perhaps the last,
    whose forward calls the functions on a tuple of (weight, bias, activation) steps gathered once:
    at batch 1 (acting) and batch 64 (updates) of a small MLP, walking the modules costs as much
    as the matmuls. Same parameters and state_dict keys as the Sequential. The steps are gathered
    again whenever the parameters may have been replaced (.to(), .cuda(), load_state_dict, deepcopy)."""

    def __init__(self, *layers: nn.Module):
        super().__init__(*layers)
        self._gather_steps()
        self.register_load_state_dict_post_hook(lambda module, _keys: module._gather_steps())

    def _gather_steps(self) -> None:
        steps: list[list] = []
        for i, layer in enumerate(self):
            if type(layer) is nn.Linear:
                steps.append([layer.weight, layer.bias, None])
            elif steps and steps[-1][2] is None and type(layer) in FUNCTIONS:
                steps[-1][2] = FUNCTIONS[type(layer)]
            else:
                raise ValueError(f"MLP layer {i} ({type(layer).__name__}) must be a Linear or one activation "
                                 f"after a Linear; activations: {', '.join(ACTIVATIONS)}")
        self.steps = tuple(tuple(step) for step in steps)
        # numpy views of float32 CPU weights share their memory: optimizer steps show through, no copies
        numpy_ready = all(w.device.type == "cpu" and w.dtype == torch.float32 and b is not None
                          and (f is None or f in NUMPY_FUNCTIONS) for w, b, f in self.steps)
        self.numpy_steps = tuple((w.detach().numpy().T, b.detach().numpy(), NUMPY_FUNCTIONS.get(f))
                                 for w, b, f in self.steps) if numpy_ready else None

    def __setstate__(self, state: dict) -> None:  # deepcopy and unpickling: numpy views must be made anew
        super().__setstate__(state)
        self._gather_steps()

    def _apply(self, fn, recurse: bool = True):
        module = super()._apply(fn, recurse)
        self._gather_steps()
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for weight, bias, activation in self.steps:
            x = F.linear(x, weight, bias)
            if activation is not None:
                x = activation(x)
        return x

    def forward_numpy(self, x: np.ndarray) -> np.ndarray | None:
        """The same forward in numpy on the CPU weights, for acting: at batch 1 it costs about a
        third of torch's per-op overhead. None where there is no numpy path (GPU, other activations)."""
        if self.numpy_steps is None:
            return None
        for weight_t, bias, activation in self.numpy_steps:
            # np.dot, not @: the matmul ufunc's dispatch costs ~3 us more a layer (~7 us cold, after an
            # update); a fresh array, so the in-place ops below never touch the caller's input
            x = np.dot(x, weight_t)
            x += bias
            if activation is not None:
                activation(x)  # in place
        return x


def mlp(in_dim: int, out_dim: int | None, hidden_sizes: Sequence[int], activation: str = "relu") -> nn.Sequential:
    """Linear layers of `hidden_sizes` with activations; a final linear to `out_dim` if given."""
    act = activation_class(activation)
    layers: list[nn.Module] = []
    for i, size in enumerate(hidden_sizes):
        check_int(f"network.hidden_sizes[{i}]", size, minimum=1)
        layers += [nn.Linear(in_dim, size), act()]
        in_dim = size
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return MLP(*layers)


class QNetwork(nn.Module):
    """Q(s, .): observation (B, obs_dim) -> action values (B, num_actions)."""

    def __init__(self, observation_dim: int, num_actions: int,
                 hidden_sizes: Sequence[int] = (256, 256), activation: str = "relu"):
        super().__init__()
        self.net = mlp(observation_dim, num_actions, hidden_sizes, activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def forward_numpy(self, obs: np.ndarray) -> np.ndarray | None:
        return self.net.forward_numpy(obs)
