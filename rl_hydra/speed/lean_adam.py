"""An Adam whose step costs a kernel call, for the tens of thousands of tiny updates of RL runs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.optim import optimizer as torch_optimizer

FUSED_ADAM: Any = getattr(torch, "_fused_adam_", None)  # the kernel behind torch.optim.Adam(fused=True), or None

MomentAllocator = Callable[[list[torch.Tensor]], list[torch.Tensor]]


def undecorated(method: Callable) -> Callable:
    return getattr(method, "__wrapped__", method)


def has_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    return bool(
        optimizer._optimizer_step_pre_hooks
        or optimizer._optimizer_step_post_hooks
        or torch_optimizer._global_optimizer_pre_hooks
        or torch_optimizer._global_optimizer_post_hooks
    )


class LeanAdam(torch.optim.Adam):
    """torch.optim.Adam(fused=True) with a step that goes straight to the fused kernel.

    torch's own step spends much of a small network's update on bookkeeping (the hook and
    profiler wrapper, grouping tensors by device, option checks; figures in docs/benchmark.md).
    In the common case, one param group of same-device, same-dtype dense tensors that all have
    gradients, plain Adam options and no step hooks, this step creates the state as torch does
    and makes the very calls torch's fused path makes, so parameters and state come out identical
    (tests/speed/test_lean_paths.py). The state_dict is torch's (checkpoints load into either class);
    every other case goes through torch's own step. `allocate_moments(tensors)` gives zeros like
    each tensor (rl_hydra.speed passes its huge-page allocator); by default, torch.zeros_like.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float | torch.Tensor = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        fused: bool = True,
        allocate_moments: MomentAllocator | None = None,
        **kwargs,
    ):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=fused, **kwargs)
        self.allocate_moments = allocate_moments or plain_zeros_like

    # torch's __getstate__ keeps defaults, state and param_groups only: a copy or an unpickled
    # optimizer needs its allocator too
    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "allocate_moments": self.allocate_moments}

    def __setstate__(self, state: dict) -> None:
        # torch's load_state_dict calls this too, with its state alone: the allocator stays
        allocate = state.pop("allocate_moments", None) or getattr(self, "allocate_moments", plain_zeros_like)
        self.allocate_moments = allocate
        super().__setstate__(state)

    # torch wraps these (and its step) in a lazy torch._dynamo.disable whose first call imports
    # torch._dynamo, seconds of every training process. The optimizer is never traced
    # (compile=true compiles losses only), so it keeps the plain functions underneath.
    add_param_group = undecorated(torch.optim.Optimizer.add_param_group)
    state_dict = undecorated(torch.optim.Optimizer.state_dict)
    _torch_load_state_dict = undecorated(torch.optim.Optimizer.load_state_dict)
    zero_grad = undecorated(torch.optim.Optimizer.zero_grad)

    def _fast_path_ok(self, group: dict, params: list[torch.Tensor]) -> bool:
        if (
            FUSED_ADAM is None
            or not group["fused"]
            or group["amsgrad"]
            or group["maximize"]
            or group["capturable"]
            or group["differentiable"]
            or group.get("decoupled_weight_decay")
            or torch.is_tensor(group["lr"])
            or has_step_hooks(self)
        ):
            return False
        first = params[0]
        return all(
            p.grad is not None
            and p.device == first.device
            and p.dtype == first.dtype
            and not p.grad.is_sparse
            and not torch.is_complex(p)
            for p in params
        )

    def _torch_step(self, closure: Callable[[], float] | None = None):
        """torch's Adam step inside torch's hook and profiler wrapper, as torch.optim.Adam runs it."""
        adam_step = torch.optim.Adam.step
        if getattr(adam_step, "hooked", False):  # torch patched the class's step already
            adam_step = adam_step.__wrapped__  # type: ignore[attr-defined]  # set by torch's functools.wraps
        return torch.optim.Optimizer.profile_hook_step(adam_step)(self, closure)

    def _init_state(self, params: list[torch.Tensor], states: list[dict]) -> None:
        """The state torch's fused Adam creates, its moments from `allocate_moments`."""
        missing = [(p, state) for p, state in zip(params, states) if not state]
        new = [p for p, _ in missing]
        moments = self.allocate_moments(new * 2)
        for i, (p, state) in enumerate(missing):
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"], state["exp_avg_sq"] = moments[i], moments[len(new) + i]

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, then the loaded moments copied to where `_init_state` puts fresh ones (a
        resumed run keeps its Adam moments in huge pages too)."""
        self._torch_load_state_dict(state_dict)
        moments = [(state, key) for state in self.state.values() for key in ("exp_avg", "exp_avg_sq") if key in state]
        slots = self.allocate_moments([state[key] for state, key in moments])
        for (state, key), slot in zip(moments, slots):
            state[key] = slot.copy_(state[key])

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        group = self.param_groups[0]
        params = group["params"]
        if closure is not None or len(self.param_groups) != 1 or not params or not self._fast_path_ok(group, params):
            return self._torch_step(closure)
        states = [self.state[p] for p in params]
        if not all(states):
            self._init_state(params, states)
        steps = [state["step"] for state in states]
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        FUSED_ADAM(
            params,
            [p.grad for p in params],
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            [],
            steps,
            amsgrad=False,
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=False,
            grad_scale=None,
            found_inf=None,
        )
        return None

    # keeps torch from wrapping it in its (costly) hook wrapper: hooks take _torch_step (mypy types no
    # attributes on functions)
    step.hooked = True  # type: ignore[attr-defined]


def plain_zeros_like(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.zeros_like(t, memory_format=torch.preserve_format) for t in tensors]


def probe() -> None:
    """Raises unless the private torch API LeanAdam uses is here and its step follows Adam's rule.

    The reference is Adam's update written out in float64 (Kingma & Ba 2015, with L2 weight decay
    as torch adds it), not torch's own step, whose first call would import torch._dynamo
    (seconds); tests/speed/test_lean_paths.py checks the step against torch's bit for bit."""
    if FUSED_ADAM is None:
        raise AttributeError(f"torch {torch.__version__} has no torch._fused_adam_")
    for name in ("_global_optimizer_pre_hooks", "_global_optimizer_post_hooks"):
        getattr(torch_optimizer, name)
    torch.optim.Optimizer.profile_hook_step  # noqa: B018 (its presence is what is checked)
    lr, (beta1, beta2), eps, weight_decay = 0.1, (0.8, 0.9), 1e-8, 0.01
    generator = torch.Generator().manual_seed(0)
    params = [nn.Parameter(torch.randn(3, 2, generator=generator)), nn.Parameter(torch.randn(2, generator=generator))]
    expected = [p.detach().double().clone() for p in params]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in expected]
    optimizer = LeanAdam(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay)
    has_step_hooks(optimizer)
    for t in range(1, 4):
        grads = [torch.randn(p.shape, generator=generator) for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
        for want, (m, v), g in zip(expected, moments, grads):
            g = g.double() + weight_decay * want
            m.mul_(beta1).add_((1 - beta1) * g)
            v.mul_(beta2).add_((1 - beta2) * g * g)
            want -= lr / (1 - beta1**t) * m / (v.sqrt() / (1 - beta2**t) ** 0.5 + eps)
    if not all(torch.allclose(p.detach().double(), want, rtol=1e-5, atol=1e-6) for p, want in zip(params, expected)):
        raise ArithmeticError("torch._fused_adam_ no longer computes Adam's step from the arguments LeanAdam passes")
