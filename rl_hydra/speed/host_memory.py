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

import functools
import mmap
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

HUGE_PAGE = 2 << 20  # bytes
ALIGNMENT = 64  # each tensor starts on a cache line
CPU = torch.device("cpu")
# methods that allocate a buffer's storage after it was built: SequenceBuffer learns the shapes of
# its actor's state at the first add
LATE_ALLOCATIONS = ("_allocate_states",)

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


# --- a buffer's storage ---------------------------------------------------------------------------
def relocate_storage(buffer: Any) -> bool:
    """Move the CPU storage of a freshly built, still empty buffer into one region advised for huge
    pages, side by side (`zeros`); whether it moved any.

    The storage is found by structure: the tensors among the attributes of `buffer` and of the
    rl_hydra objects it holds (a DeviceFeed's buffer, a buffer's frames), in dicts, lists and tuples,
    and the tensors under its numpy arrays. Each storage moves whole and every tensor and numpy array
    on it is taken again at the same offset and strides, so views and shared objects alias as before.
    Nothing is copied: where `len(buffer)` is not 0 or the storage holds anything but zeros, the
    buffer is left alone; tensors on other devices always are. Storage the buffer allocates later
    (LATE_ALLOCATIONS) moves as it is made.
    """
    if not can_use_huge_pages(CPU) or (hasattr(buffer, "__len__") and len(buffer)):
        return False
    holders = list(held_objects(buffer))
    if not move_zero_storages(holders):
        return False
    for holder in holders:
        for name in LATE_ALLOCATIONS:
            if callable(getattr(type(holder), name, None)) and name not in vars(holder):
                setattr(holder, name, moving_what_it_allocates(holder, getattr(holder, name)))
    return True


def held_objects(root: object) -> Iterator[object]:
    """`root` and the objects of rl_hydra's classes it holds, however deep, each once."""
    seen, pending = set(), [root]
    while pending:
        holder = pending.pop()
        if id(holder) in seen or not hasattr(holder, "__dict__"):
            continue
        seen.add(id(holder))
        yield holder
        pending.extend(v for v in leaves(vars(holder).values()) if type(v).__module__.startswith("rl_hydra."))


def leaves(values: Iterable[Any]) -> Iterator[Any]:
    """The values, with dicts, lists and tuples among them opened, however deep."""
    for value in values:
        if isinstance(value, dict):
            yield from leaves(value.values())
        elif isinstance(value, list | tuple):
            yield from leaves(value)
        else:
            yield value


def storage_tensor(value: Any) -> torch.Tensor | None:
    """`value` where it is a plain CPU tensor, the one under it where it is a numpy array over a
    tensor's memory, else None."""
    while isinstance(value, np.ndarray):
        value = value.base
    plain = type(value) is torch.Tensor and value.layout == torch.strided and not value.requires_grad
    return value if plain and value.device == CPU else None


def cpu_storages(holders: list[object]) -> dict[int, torch.UntypedStorage]:
    """{address: storage} of the CPU tensors the holders keep, directly or under numpy arrays."""
    found = {}
    for value in leaves(value for holder in holders for value in vars(holder).values()):
        tensor = storage_tensor(value)
        if tensor is not None and tensor.untyped_storage().nbytes():
            found[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage()
    return found


def move_zero_storages(holders: list[object], kept: dict[int, torch.UntypedStorage] | None = None) -> bool:
    """Move the holders' CPU storages (but those in `kept`) into one region, where all of them hold
    only zeros (so that nothing needs copying); whether they moved."""
    storages = {address: s for address, s in cpu_storages(holders).items() if address not in (kept or {})}
    if not storages or any(torch.empty(0, dtype=torch.uint8).set_(s).any() for s in storages.values()):
        return False
    regions = zeros({str(address): ((s.nbytes(),), torch.uint8) for address, s in storages.items()}, CPU)
    spans = [(address, address + s.nbytes(), regions[str(address)]) for address, s in storages.items()]
    renewed: dict[int, tuple[Any, Any]] = {}  # id(old) -> (old, kept alive so its id is not reused; new)
    for holder in holders:
        for name, value in list(vars(holder).items()):
            new = taken_again(value, spans, renewed)
            if new is not value:
                setattr(holder, name, new)
    return True


Span = tuple[int, int, torch.Tensor]  # a moved storage's addresses [start, end) and its new bytes


def taken_again(value: Any, spans: list[Span], renewed: dict[int, tuple[Any, Any]]) -> Any:
    """`value` with each tensor and numpy array on a moved storage taken again on its new bytes
    (dicts and lists changed in place, tuples made anew); an object held twice gets one new object."""
    if isinstance(value, dict):
        for key, item in list(value.items()):
            value[key] = taken_again(item, spans, renewed)
        return value
    if isinstance(value, list):
        value[:] = [taken_again(item, spans, renewed) for item in value]
        return value
    if isinstance(value, tuple):
        items = [taken_again(item, spans, renewed) for item in value]
        if all(new is old for new, old in zip(items, value)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if id(value) in renewed:
        return renewed[id(value)][1]
    new = on_new_bytes(value, spans)
    if new is None:
        return value
    renewed[id(value)] = (value, new)
    return new


def on_new_bytes(value: Any, spans: list[Span]) -> torch.Tensor | np.ndarray | None:
    """A tensor or numpy array like `value` on the new bytes of the moved storage it lies on, or None."""
    if isinstance(value, np.ndarray):
        address = value.__array_interface__["data"][0]
        for start, end, region in spans:
            if start <= address < end:
                array = np.ndarray(
                    value.shape, value.dtype, buffer=region.numpy(), offset=address - start, strides=value.strides
                )
                array.flags.writeable = value.flags.writeable
                return array
        return None
    if not torch.is_tensor(value) or storage_tensor(value) is not value:
        return None
    start = value.untyped_storage().data_ptr()
    for address, _, region in spans:
        if address == start:
            moved = torch.empty(0, dtype=value.dtype)
            return moved.set_(region.untyped_storage(), value.storage_offset(), value.shape, value.stride())
    return None


def moving_what_it_allocates(holder: object, allocate: Callable[..., Any]) -> Callable[..., Any]:
    """`allocate`, a method of `holder`, followed by the move of the storage it made."""

    @functools.wraps(allocate)
    def allocate_then_move(*args: Any, **kwargs: Any) -> Any:
        before = cpu_storages([holder])  # held meanwhile: no new storage can take a freed one's address
        result = allocate(*args, **kwargs)
        move_zero_storages([holder], before)
        return result

    return allocate_then_move


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
