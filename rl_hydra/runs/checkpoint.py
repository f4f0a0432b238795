"""A checkpoint read back as a record is: what it can cost is bounded by its bytes.

Before torch.load sees the file, its zip directory is read (no entry decompressed): torch.save
writes every entry stored, uncompressed, under one folder, so a compressed entry (a zip bomb's
gigabytes behind a few kilobytes), a name given twice, an absolute name or one with `..` is
refused in one line. After the load, one walk visits each object once (a pickle can reference one
list from many places: `[L, L]` nested 40 deep is 2**40 paths through 187 bytes) and stops at
MAX_NODES; every tensor must be dense, hold the bytes it spans and be finite."""

from __future__ import annotations

import zipfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from rl_hydra.runs.errors import RunError

if TYPE_CHECKING:
    import torch

# objects (mappings, sequences, tensors, values) in one checkpoint: a run's holds a few thousand,
# its replay buffer being a few tensors; a budget keeps a walk short whatever a file claims
MAX_NODES = 1_000_000
# containers within containers: a run's state nests about 8 deep (an optimizer's per-parameter
# state, a wrapper chain's env state); what restores a deeper one would walk a tree, not a graph
MAX_DEPTH = 32


def check_archive(path: Path, source: str | Path | None = None) -> None:
    """One RunError line unless `path` (read from `source`, a path naming the opened file, where
    given) is a zip archive laid out as torch.save writes one: every entry stored (uncompressed, so
    no entry holds more than the file's own bytes), each name once, relative and without `..`.
    Only the zip's directory is read."""
    source = path if source is None else source
    try:
        with zipfile.ZipFile(source) as archive:  # the central directory only; no entry is read
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        raise RunError(
            f"checkpoint {path} cannot be read (not a zip archive as torch.save writes one; {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else 'corrupt'})"
        ) from None
    size, seen = Path(source).stat().st_size, set[str]()
    for entry in entries:
        name = entry.filename
        if entry.compress_type != zipfile.ZIP_STORED or max(entry.file_size, entry.compress_size) > size:
            raise RunError(
                f"checkpoint {path} holds the entry {name!r} of {entry.compress_size:,} bytes declared to hold "
                f"{entry.file_size:,} (a compressed entry): torch.save stores each uncompressed, within the file"
            )
        parts = PurePosixPath(name).parts
        if name.startswith(("/", "\\")) or ".." in parts or "\\" in name or ":" in (parts[0] if parts else ""):
            raise RunError(f"checkpoint {path} holds the entry {name!r}, outside the archive's folder")
        if name in seen:
            raise RunError(f"checkpoint {path} holds the entry {name!r} twice: torch.save writes each once")
        seen.add(name)


def load_checkpoint_file(
    path: Path, map_location: str | torch.device = "cpu", source: str | Path | None = None
) -> dict[str, Any]:
    """The checkpoint at `path`, loaded as plain data (weights_only: no code runs) and checked
    (check_archive before, check_checkpoint after), or one RunError line. `source`: a path that
    names the file already opened (RunDirectory.load_checkpoint: /proc/self/fd/N), read instead."""
    import torch

    source = path if source is None else source
    check_archive(path, source)
    try:
        # weights_only: tensors and plain data only, so loading a stranger's run runs no code;
        # mmap: a replay buffer of several GB is copied from the file, not read into memory first
        state = torch.load(source, map_location=map_location, weights_only=True, mmap=True)
    except Exception as error:  # truncated, corrupt or not a torch file
        raise RunError(
            f"checkpoint {path} cannot be read ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else 'corrupt'})"
        ) from None
    check_checkpoint(state, path, torch.device(map_location).type)
    return state


def check_checkpoint(state: Any, path: Path, device_type: str = "cpu") -> None:
    """One RunError line unless `state` is shaped as a run's checkpoint: a mapping with the agent's
    and the runner's state, a whole number of env steps, and tensors that each are dense, on the
    device it was loaded to (`device_type`) and hold the bytes they span (an expanded view of one
    stored value, stride 0, would be gigabytes once copied), so that what a checkpoint can cost to
    load is bounded by its file's size. Each object is visited once, at most MAX_NODES of them."""
    runner = state.get("runner") if isinstance(state, dict) else None
    if not isinstance(state, dict) or not isinstance(state.get("agent"), dict) or not isinstance(runner, dict):
        raise RunError(f"checkpoint {path} holds no agent and runner state: not a checkpoint a run writes")
    step = runner.get("global_step")
    if type(step) is not int or step < 0:
        scalar = isinstance(step, (int, float, str, bool, type(None)))  # a shared list's repr can be 2**55 long
        shown = repr(step) if scalar else f"<a {type(step).__name__}>"
        raise RunError(f"checkpoint {path} has runner.global_step={shown}, not a number of env steps")
    for tensor in tensors_once(state, path):
        check_tensor(tensor, path, device_type)


def tensors_once(state: Any, path: Path) -> list[torch.Tensor]:
    """Every tensor in `state`, found by a walk that visits each container once (by identity, as
    the pickle shares it), or one RunError line past MAX_NODES objects or MAX_DEPTH levels (a
    restore that walks the state as a tree would expand `[L, L]` nested 40 deep to 2**40 nodes)."""
    import torch

    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(state, 1)]
    found: list[torch.Tensor] = []
    while stack:
        node, depth = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if len(seen) > MAX_NODES:
            raise RunError(
                f"checkpoint {path} holds more than {MAX_NODES:,} objects (a run's holds a few thousand): "
                f"not a checkpoint a run writes"
            )
        if isinstance(node, (dict, list, tuple)) and depth > MAX_DEPTH:
            raise RunError(
                f"checkpoint {path} nests containers more than {MAX_DEPTH} deep (a run's nest about 8): "
                f"not a checkpoint a run writes"
            )
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((child, depth + 1) for child in node)
        elif isinstance(node, torch.Tensor):
            found.append(node)
    return found


def check_tensor(node: torch.Tensor, path: Path, device_type: str) -> None:
    """One RunError line unless `node` is dense, on `device_type`, spans only its stored bytes and is finite."""
    import torch

    if node.layout != torch.strided or node.device.type != device_type:  # a meta tensor: no values at all
        raise RunError(
            f"checkpoint {path} holds a {node.layout} tensor on device {node.device.type}: "
            f"a run saves dense tensors, loaded here to {device_type}"
        )
    spans = node.numel() * node.element_size()
    stored = node.untyped_storage().nbytes() - node.storage_offset() * node.element_size()
    overlaps = any(stride == 0 and size > 1 for stride, size in zip(node.stride(), node.shape))
    if spans > stored or overlaps:
        raise RunError(
            f"checkpoint {path} holds a tensor of shape {tuple(node.shape)} over {stored:,} stored bytes "
            f"(a view repeating its values): not a tensor a run saves"
        )
    if node.is_floating_point() and not bool(torch.isfinite(node).all()):
        raise RunError(
            f"checkpoint {path} holds a tensor of shape {tuple(node.shape)} with NaN or infinite values: "
            f"a run stops before it saves those (training diverged)"
        )
