"""CPU tensors in one block of memory that the kernel may back with 2 MiB pages.

A one-update-per-step run alternates a few hundred microseconds of acting, env stepping and
sampling with each update. Sampling reads rows scattered over the whole replay buffer, and
on 4 KiB pages every row, every network weight matrix and every optimizer moment needs an
address translation of its own: the CPU's translation cache cannot hold them all, so each
update first walks the page tables again for its weights and state (a nested walk under a
hypervisor). On 2 MiB pages a replay buffer of a few MB, or a network with its target and
Adam moments, needs a handful of entries. Measured in docs/benchmark.md.

Linux only (madvise(MADV_HUGEPAGE) with transparent huge pages in `madvise` or `always`
mode). Elsewhere (`probe` fails) rl_hydra.speed makes ordinary tensors; where the kernel refuses
the advice, the tensors are the same in ordinary pages.
Each tensor has a storage of its own size, so torch.save writes only its bytes.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable

import torch
from torch import nn

HUGE_PAGE = 2 << 20  # bytes
ALIGNMENT = 64  # each tensor starts on a cache line

Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]


def can_use_huge_pages(device: torch.device) -> bool:
    return device.type == "cpu" and hasattr(mmap, "MADV_HUGEPAGE")


def zeros(layout: Layout, device: torch.device) -> dict[str, torch.Tensor]:
    """Zero-filled tensors of the given shapes and dtypes; on the CPU, all in one anonymous
    mapping aligned to and advised for huge pages."""
    sizes = {name: torch.Size(shape).numel() * dtype.itemsize for name, (shape, dtype) in layout.items()}
    if not can_use_huge_pages(device) or not all(sizes.values()):
        return {name: torch.zeros(shape, dtype=dtype, device=device) for name, (shape, dtype) in layout.items()}
    offsets, total = {}, 0
    for name, size in sizes.items():
        offsets[name] = total
        total += -(-size // ALIGNMENT) * ALIGNMENT
    # anonymous memory is zero-filled; the extra huge page leaves room to start on a 2 MiB boundary
    region = mmap.mmap(-1, total + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    start = -torch.frombuffer(region, dtype=torch.uint8, count=1).data_ptr() % HUGE_PAGE
    try:
        region.madvise(mmap.MADV_HUGEPAGE, start, total + HUGE_PAGE - start)
    except OSError:  # a kernel without transparent huge pages: ordinary pages work the same
        pass
    # each tensor keeps the mapping alive, and owns a storage of exactly its bytes
    return {
        name: torch.frombuffer(
            region, dtype=dtype, count=sizes[name] // dtype.itemsize, offset=start + offsets[name]
        ).view(shape)
        for name, (shape, dtype) in layout.items()
    }


def zeros_list(specs: list[tuple[tuple[int, ...], torch.dtype]], device: torch.device) -> list[torch.Tensor]:
    """`zeros` for a list of (shape, dtype), in the list's order."""
    return list(zeros({str(i): spec for i, spec in enumerate(specs)}, device).values())


def zeros_like(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Zeros like each of `tensors`, on their device: the contiguous ones side by side in one
    region, any other with its own strides (torch.zeros_like)."""
    contiguous = [t for t in tensors if t.is_contiguous()]
    slots = iter(
        zeros_list([(tuple(t.shape), t.dtype) for t in contiguous], contiguous[0].device) if contiguous else []
    )
    return [
        next(slots) if t.is_contiguous() else torch.zeros_like(t, memory_format=torch.preserve_format) for t in tensors
    ]


def relocate(modules: Iterable[nn.Module]) -> None:
    """Move the parameters of `modules` that live on the CPU into one region, values unchanged.

    The Parameter objects stay the same (optimizers built on them still hold them); each module's
    own `_apply` runs, so modules that keep derived views (an LSTM's flat weights) renew them.
    """
    modules = list(modules)
    params = list(
        {
            id(p): p for module in modules for p in module.parameters() if p.device.type == "cpu" and p.is_contiguous()
        }.values()
    )
    if not params or not can_use_huge_pages(params[0].device):
        return
    with torch.no_grad():
        new = {id(p): slot.copy_(p) for p, slot in zip(params, zeros_like([p.detach() for p in params]))}
    for module in modules:
        module._apply(lambda t: new.get(id(t), t))


def probe() -> None:
    """Raises unless huge pages can be asked for here and a relocated module keeps its values
    and Parameter objects (nn.Module._apply still swaps tensors in place of the old ones)."""
    if not hasattr(mmap, "MADV_HUGEPAGE"):
        raise AttributeError("mmap.MADV_HUGEPAGE is missing (not Linux, or Python built without it)")
    made = zeros({"a": ((3, 5), torch.float32), "b": ((7,), torch.int64)}, torch.device("cpu"))
    if made["a"].shape != (3, 5) or made["b"].dtype != torch.int64 or made["a"].any() or made["b"].any():
        raise ValueError("zeros gave other shapes, dtypes or values than asked")
    layer = nn.Linear(3, 2)
    weight, before = layer.weight, layer.weight.detach().clone()
    relocate([layer])
    if layer.weight is not weight or not torch.equal(layer.weight, before):
        raise ValueError("relocate changed a parameter's object or values")
