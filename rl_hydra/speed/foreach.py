"""One call for an operation on a whole list of tensors, where the plain path loops over them.

Gradient clipping and target-network syncs (algos/common.py) touch every parameter of a network at
each update.
torch's `_foreach_*` functions take the list at once, which spares a Python-level call per tensor
(on the CPU they run the same per-tensor kernels, so the numbers are the plain loop's; on CUDA
they fuse the kernels). They are private API: `probe` checks that they are there and give the
plain loop's numbers.
"""

from __future__ import annotations

from typing import Any

import torch

NAMES = ("_foreach_norm", "_foreach_mul_", "_foreach_copy_", "_foreach_lerp_")
FOREACH: dict[str, Any] = {name: getattr(torch, name, None) for name in NAMES}  # None where torch lacks one


def norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return FOREACH["_foreach_norm"](tensors)


def mul_(tensors: list[torch.Tensor], factor: torch.Tensor) -> None:
    FOREACH["_foreach_mul_"](tensors, factor)


def copy_(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    FOREACH["_foreach_copy_"](targets, sources)


def lerp_(targets: list[torch.Tensor], ends: list[torch.Tensor], weight: float) -> None:
    FOREACH["_foreach_lerp_"](targets, ends, weight)


@torch.no_grad()
def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """algos/common.py's clip_grad_norm in two calls: one for the norms, one for the scaling."""
    grads = [p.grad for p in params if p.grad is not None]
    total_norm = torch.linalg.vector_norm(torch.stack(norms(grads)))
    mul_(grads, torch.clamp(max_norm / (total_norm + 1e-6), max=1.0))
    return total_norm


def move_toward(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> None:
    """algos/common.py's move_toward in one call."""
    if tau >= 1.0:
        copy_(targets, sources)
    else:
        lerp_(targets, sources, tau)


def probe() -> None:
    """Raises unless each function is there and gives the per-tensor loop's numbers, bit for bit."""
    missing = [name for name, function in FOREACH.items() if function is None]
    if missing:
        raise AttributeError(f"torch {torch.__version__} has no torch.{', torch.'.join(missing)}")
    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(shape, generator=generator) for shape in ((3, 5), (7,), (2, 2))]
    others = [torch.randn(t.shape, generator=generator) for t in tensors]
    if not all(torch.equal(a, torch.linalg.vector_norm(t)) for a, t in zip(norms(tensors), tensors)):
        raise ArithmeticError("torch._foreach_norm differs from torch.linalg.vector_norm")
    factor, weight = torch.tensor(0.3), 0.25
    scaled, moved, copied = ([t.clone() for t in tensors] for _ in range(3))
    mul_(scaled, factor)
    lerp_(moved, others, weight)
    copy_(copied, others)
    for t, other, a, b, c in zip(tensors, others, scaled, moved, copied):
        if not (torch.equal(a, t * factor) and torch.equal(b, t.lerp(other, weight)) and torch.equal(c, other)):
            raise ArithmeticError("torch._foreach_mul_, _lerp_ or _copy_ differs from the per-tensor operation")
