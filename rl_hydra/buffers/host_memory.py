"""Replay storage in one block of memory that the kernel may back with 2 MiB pages.

Sampling a batch reads rows scattered over the whole buffer. On 4 KiB pages each row
costs an address translation of its own: a batch of 128 rows in six columns fills the
CPU's translation cache and pushes out the entries of the network and optimizer state,
which the update that follows must then walk the page tables for again (a nested walk,
under a hypervisor). On 2 MiB pages a buffer of a few MB needs a handful of entries.

Linux only (madvise(MADV_HUGEPAGE) with transparent huge pages in `madvise` or `always`
mode); elsewhere, or when the kernel refuses, the storage is the same zeros in ordinary pages.
"""

from __future__ import annotations

import mmap

import torch

HUGE_PAGE = 2 << 20  # bytes
ALIGNMENT = 64       # each column starts on a cache line

Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]


def can_use_huge_pages(device: torch.device) -> bool:
    return device.type == "cpu" and hasattr(mmap, "MADV_HUGEPAGE")


def zeros(layout: Layout, device: torch.device) -> dict[str, torch.Tensor]:
    """Zero-filled tensors of the given shapes and dtypes; on the CPU, all in one anonymous
    mapping aligned to and advised for huge pages."""
    if not can_use_huge_pages(device):
        return {name: torch.zeros(shape, dtype=dtype, device=device) for name, (shape, dtype) in layout.items()}
    sizes = {name: torch.Size(shape).numel() * dtype.itemsize for name, (shape, dtype) in layout.items()}
    offsets, total = {}, 0
    for name, size in sizes.items():
        offsets[name] = total
        total += -(-size // ALIGNMENT) * ALIGNMENT
    # anonymous memory is zero-filled; the extra huge page leaves room to start on a 2 MiB boundary
    region = mmap.mmap(-1, total + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    raw = torch.frombuffer(region, dtype=torch.uint8)  # shares the mapping, which it keeps alive
    start = -raw.data_ptr() % HUGE_PAGE
    try:
        region.madvise(mmap.MADV_HUGEPAGE, start, total + HUGE_PAGE - start)
    except OSError:  # a kernel without transparent huge pages: ordinary pages work the same
        pass
    return {name: raw[start + offsets[name]: start + offsets[name] + sizes[name]].view(dtype).view(shape)
            for name, (shape, dtype) in layout.items()}
