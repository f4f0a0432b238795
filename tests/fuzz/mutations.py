"""Mutations of a run directory. Each is a small frozen dataclass whose repr reproduces it (a long
value shows a short repr: Raw, Long, Big); `apply(run, outside)` changes the copy of a real run in
`run` (`outside`: a folder beside it, for link targets) and returns what it did, or None when what it
edits is not there to edit (an earlier mutation replaced it). tests/fuzz/attacks.py names the
issue's attacks; tests/fuzz/strategies.py draws mutations."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONFIG, HYDRA, OVERRIDES = ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml"
SUMMARY, PROVENANCE, METRICS = "summary.json", "provenance.json", "metrics.csv"
LAST, BEST = "checkpoints/last.pt", "checkpoints/best.pt"
FILES = (CONFIG, HYDRA, OVERRIDES, SUMMARY, PROVENANCE, METRICS, LAST, BEST, ".lock", "train.log")
FOLDERS = ("checkpoints", ".hydra", "tb", "eval")
PLANTED = "tests.fuzz.planted"


class Raw:
    """Text spliced into a YAML or JSON file as it is (what a dump could not write: 10**5000,
    100k-deep nesting, anchors and aliases, tags); its repr stays short."""

    def __init__(self, text: str, name: str | None = None):
        self.text, self.name = text, name

    def __repr__(self) -> str:
        return f"Raw({self.name})" if self.name else f"Raw({self.text!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Raw) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


class Long(str):
    """A long string whose repr stays short (Hypothesis prints a failing case's arguments)."""

    def __repr__(self) -> str:
        return f"Long({str.__repr__(self[:24])}... {len(self)} characters)"


def bomb(levels: int = 9) -> str:
    """A YAML alias bomb in flow style: 9**levels strings once its aliases are expanded."""
    parts = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    parts += [f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, levels)]
    return "{" + ", ".join(parts) + "}"


DEEP = 100_000
HUGE_INT = Raw("1" + "0" * 5000, "10**5000")
DEEP_LIST = Raw("[" * DEEP + "]" * DEEP, "[[[... 100k deep")
BOMB = Raw(bomb(), "alias bomb 9**9")
PYTHON_TAG = Raw("!!python/object/apply:os.system ['touch pwned']", "!!python/object/apply")
DEEP_JSON_OBJECT = Raw('{"a": ' * DEEP + "1" + "}" * DEEP, '{"a": ... 100k deep')


def key(text: str) -> tuple:
    """`sessions/0/config_changes/train.total_steps` as a key path: ("sessions", 0, "config_changes", ...)."""
    return tuple(int(part) if part.isdigit() else part for part in text.split("/"))


def keys(text: str) -> list[tuple]:
    """Key paths, separated by white space."""
    return [key(part) for part in text.split()]


def regular(path: Path) -> bool:
    """A plain file, not a link or a FIFO: what a mutation may read to edit."""
    return path.is_file() and not path.is_symlink()


def put(tree, path: tuple, value) -> Any:
    """`tree` with `value` at `path`, containers made along the way (a list past its end appends)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(tree, list) and isinstance(head, int):
        if head < len(tree):
            tree[head] = put(tree[head], rest, value)
        else:
            tree.append(put(None, rest, value))
        return tree
    if not isinstance(tree, dict):
        tree = {}
    tree[head] = put(tree.get(head), rest, value)
    return tree


def drop(tree, path: tuple) -> bool:
    node = tree
    for part in path[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return False
    try:
        del node[path[-1]]
    except (KeyError, IndexError, TypeError):
        return False
    return True


def load_tree(path: Path):
    text = path.read_text()
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def dump_tree(path: Path, tree) -> None:
    """Write `tree` as YAML or JSON, each Raw in it spliced in as its text."""
    raws: dict[str, str] = {}
    # a node met twice is copied once: a YAML alias bomb loaded back (9**9 strings behind its aliases,
    # each list shared) stays a few shared lists, which yaml.safe_dump writes as anchors and aliases again
    copies: dict[int, Any] = {}

    def placeholders(node):
        if id(node) in copies:
            return copies[id(node)]
        if isinstance(node, Raw):
            raws[f"RAW{len(raws)}PLACEHOLDER"] = node.text
            return f"RAW{len(raws) - 1}PLACEHOLDER"
        if isinstance(node, dict):
            copy: Any = copies.setdefault(id(node), {})
            copy.update((key, placeholders(value)) for key, value in node.items())
            return copy
        if isinstance(node, list):
            copy = copies.setdefault(id(node), [])
            copy.extend(placeholders(value) for value in node)
            return copy
        return str(node) if isinstance(node, str) else node  # a Long: yaml.safe_dump takes plain str only

    tree = placeholders(tree)
    if path.suffix == ".json":
        text = json.dumps(tree, indent=2)
        for name, raw in raws.items():
            text = text.replace(f'"{name}"', raw)
    else:
        text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=1 << 30)
        for name, raw in raws.items():
            text = text.replace(name, raw)
    path.write_text(text)


def brief(value) -> str:
    text = repr(value)
    return text if len(text) <= 100 else f"{text[:80]}... ({len(text)} characters)"


def shown(path: tuple) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".") or "<root>"


@dataclass(frozen=True)
class Set:
    """Set a key of a YAML or JSON file (`path` a tuple of keys and list indices) to `value`."""

    file: str
    path: tuple
    value: Any

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / self.file
        if target.is_symlink() or (target.exists() and not regular(target)):
            return None
        try:
            tree = load_tree(target) if target.exists() else None
        except (ValueError, yaml.YAMLError, RecursionError):
            return None
        dump_tree(target, put(tree, self.path, self.value))
        return f"{self.file}: {shown(self.path)} = {brief(self.value)}"


@dataclass(frozen=True)
class Delete:
    file: str
    path: tuple

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / self.file
        try:
            tree = load_tree(target) if regular(target) else None
        except (ValueError, yaml.YAMLError, RecursionError):
            return None
        if tree is None or not drop(tree, self.path):
            return None
        dump_tree(target, tree)
        return f"{self.file}: {shown(self.path)} deleted"


@dataclass(frozen=True)
class Write:
    """Replace a file's bytes (or make it)."""

    file: str
    data: Raw | bytes

    def apply(self, run: Path, outside: Path) -> str:
        target = run / self.file
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or (target.exists() and not target.is_file()):
            remove(target)
        target.write_bytes(self.data.text.encode("utf-8", "surrogatepass") if isinstance(self.data, Raw) else self.data)
        return f"{self.file} = {brief(self.data)}"


@dataclass(frozen=True)
class Truncate:
    """Keep the first `keep` (a fraction) of a file's bytes."""

    file: str
    keep: float

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / self.file
        if not regular(target):
            return None
        data = target.read_bytes()
        target.write_bytes(data[: int(len(data) * self.keep)])
        return f"{self.file} cut to {int(len(data) * self.keep)} of {len(data)} bytes"


@dataclass(frozen=True)
class Remove:
    file: str

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / self.file
        if not (target.exists() or target.is_symlink()):
            return None
        remove(target)
        return f"{self.file} removed"


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


@dataclass(frozen=True)
class CsvCell:
    """Set field `column` of line `line` of metrics.csv (0: the header; both modulo what is there)."""

    line: int
    column: int
    text: str | bytes

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / METRICS
        if not regular(target):
            return None
        lines = target.read_bytes().split(b"\n")
        number = self.line % max(len(lines) - 1, 1)
        fields = lines[number].split(b",")
        column = self.column % len(fields)
        fields[column] = self.text if isinstance(self.text, bytes) else self.text.encode()
        lines[number] = b",".join(fields)
        target.write_bytes(b"\n".join(lines))
        return f"{METRICS} line {number + 1} field {column + 1} = {brief(self.text)}"


@dataclass(frozen=True)
class CsvLine:
    """Duplicate, drop or blank line `line` of metrics.csv, or swap it with the next."""

    how: str
    line: int

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / METRICS
        if not regular(target):
            return None
        lines = target.read_bytes().split(b"\n")
        n = self.line % max(len(lines) - 1, 1)
        if self.how == "duplicate":
            lines.insert(n, lines[n])
        elif self.how == "drop":
            del lines[n]
        elif self.how == "blank":
            lines.insert(n, b"")
        elif n + 1 < len(lines) - 1:
            lines[n], lines[n + 1] = lines[n + 1], lines[n]
        target.write_bytes(b"\n".join(lines))
        return f"{METRICS} line {n + 1} {self.how}"


@dataclass(frozen=True)
class Tensor:
    """A tensor made from the one it replaces: `expand` and `expand_all` (stride-0 views of ~10**12
    elements, a few bytes on disk), `grow`, `empty`, a dtype, `nan`, `meta`, `sparse`, `transpose`."""

    how: str

    def make(self, old):
        import torch

        old = old if torch.is_tensor(old) else torch.zeros(3)
        if self.how == "expand":  # ~10**12 elements, the trailing dims kept: (10**9, 4) for a (450, 4) buffer
            return torch.zeros((), dtype=old.dtype).expand(10**12 // max(old[0].numel(), 1) if old.dim() else 10**12,
                                                           *old.shape[1:])  # fmt: skip
        if self.how == "expand_all":  # every dim 10**6
            return torch.zeros((), dtype=old.dtype).expand(*((10**6,) * max(old.dim(), 2)))
        if self.how == "grow":
            return torch.zeros(old.shape[0] + 1 if old.dim() else 2, *old.shape[1:], dtype=old.dtype)
        if self.how == "empty":
            return torch.zeros(0, *old.shape[1:], dtype=old.dtype)
        if self.how == "nan":
            return torch.full(old.shape, float("nan"))
        if self.how == "meta":
            return torch.empty(old.shape, dtype=old.dtype, device="meta")
        if self.how == "sparse":
            return old.float().to_sparse()
        if self.how == "transpose":
            return old.t() if old.dim() == 2 else old.flip(0) if old.dim() else old
        if self.how == "scalar":  # 0 dims (an optimizer's exp_avg_sq of one number)
            return torch.zeros((), dtype=old.dtype)
        return old.to(getattr(torch, self.how))


@dataclass(frozen=True)
class Bomb:
    """A pickle reference bomb: [L, L] nested `depth` deep, one list per level on disk (the pickle's
    memo shares it), 2**depth paths to whatever walks it as a tree."""

    depth: int

    def make(self, old):
        node: list = []
        for _ in range(self.depth):
            node = [node, node]
        return node


class DeclaredTensor:
    """Pickled as torch's _rebuild_tensor_v2 over a one-element storage with the `size` and `stride`
    it declares: (10**12,) with stride (1,) reads past its storage; stride 0, every element the same."""

    def __init__(self, size: tuple, stride: tuple):
        self.size, self.stride = size, stride

    def __reduce_ex__(self, protocol):
        import warnings
        from collections import OrderedDict

        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # TypedStorage is deprecated, and what torch.save writes
            storage = torch.storage.TypedStorage(wrap_storage=torch.zeros(1).untyped_storage(), dtype=torch.float32)
        return torch._utils._rebuild_tensor_v2, (storage, 0, self.size, self.stride, False, OrderedDict())


@dataclass(frozen=True)
class Declared:
    """A tensor whose declared shape its bytes do not hold (DeclaredTensor)."""

    size: tuple
    stride: tuple

    def make(self, old):
        return DeclaredTensor(self.size, self.stride)


@dataclass(frozen=True)
class Big:
    """An int of `digits` digits (its repr would raise: Python prints no int past 4,300 digits)."""

    digits: int

    def make(self, old):
        return 10 ** (self.digits - 1)


def leaves(node, path=(), seen=None):
    """(path, value) of every leaf of a checkpoint's plain tree; a container met twice (a pickle's
    shared reference: [L, L] nested 40 deep is 2**40 paths) is walked once."""
    seen = set() if seen is None else seen
    if isinstance(node, (dict, list, tuple)) and node:
        if id(node) in seen:
            return
        seen.add(id(node))
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*path, key), seen)
    elif isinstance(node, (list, tuple)) and node:
        for index, value in enumerate(node):
            yield from leaves(value, (*path, index), seen)
    else:
        yield path, node


def tuples_to_lists(node, copies=None):
    """The tree with lists for tuples; a shared container copied once, so that it stays shared."""
    copies = {} if copies is None else copies
    if not isinstance(node, (dict, list, tuple)):
        return node
    if id(node) not in copies:
        if isinstance(node, dict):
            copies[id(node)] = copy = {}
            copy.update((key, tuples_to_lists(value, copies)) for key, value in node.items())
        else:
            copies[id(node)] = copy = []
            copy.extend(tuples_to_lists(value, copies) for value in node)
    return copies[id(node)]


def get(node, path: tuple):
    for part in path:
        node = node[part]
    return node


@dataclass(frozen=True)
class Checkpoint:
    """Load a checkpoint (weights_only) and set `path` (a tuple of keys, or an int: the n-th leaf,
    modulo their number; the empty tuple: the whole object) to `value` (a Tensor or Big spec made
    from the old value, a plain value, or `DELETE`), then torch.save it."""

    name: str
    path: tuple | int
    value: Any

    def apply(self, run: Path, outside: Path) -> str | None:
        import torch

        target = run / self.name
        try:
            state = torch.load(target, weights_only=True) if regular(target) else None
        except Exception:  # noqa: BLE001 - damaged by an earlier mutation
            return None
        if not isinstance(state, dict):
            return None
        state = tuples_to_lists(state)
        path = self.path
        if isinstance(path, int):
            found = list(leaves(state))
            path = found[path % len(found)][0]
        try:
            old = get(state, path)
        except (KeyError, IndexError, TypeError):
            old = None
        if self.value == "DELETE":
            if not path or not drop(state, path):
                return None
        else:
            new = self.value.make(old) if isinstance(self.value, (Tensor, Big, Bomb, Declared)) else self.value
            state = put(state, path, new)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        target.write_bytes(buffer.getvalue())
        return f"{self.name}: {shown(path)} = {brief(self.value)}"


@dataclass(frozen=True)
class Link:
    """Replace a file or folder by a symbolic link: `outside` (to a copy beside the run directory,
    an empty one for what does not exist yet), `self` (a loop), `dangling`, `inside` (to a file of
    the run), or an absolute path."""

    file: str
    to: str

    def apply(self, run: Path, outside: Path) -> str:
        entry = run / self.file
        entry.parent.mkdir(parents=True, exist_ok=True)
        exists = entry.exists() or entry.is_symlink()
        if self.to == "outside":
            target = outside / self.file.replace("/", "_")
            if target.exists() or target.is_symlink():
                pass  # linked before
            elif entry.is_symlink() or not entry.exists():
                target.mkdir() if self.file in FOLDERS else target.write_bytes(b"precious\n")
            elif entry.is_dir():
                shutil.copytree(entry, target, symlinks=True)
            elif entry.is_file():
                shutil.copyfile(entry, target)
            else:
                target.write_bytes(b"precious\n")
        elif self.to.startswith("relative:"):  # a link inside the run: eval/videos/x.gif -> ../../checkpoints/last.pt
            target = Path(self.to.removeprefix("relative:"))
        else:
            target = {"self": entry, "dangling": run / "no-such-file", "inside": run / SUMMARY}.get(self.to, self.to)
        if exists:
            remove(entry)
        entry.symlink_to(target)
        return f"{self.file} -> {target}"


@dataclass(frozen=True)
class Fifo:
    """Replace a file by a named pipe (opening it to read blocks until a writer comes)."""

    file: str

    def apply(self, run: Path, outside: Path) -> str:
        entry = run / self.file
        entry.parent.mkdir(parents=True, exist_ok=True)
        if entry.exists() or entry.is_symlink():
            remove(entry)
        os.mkfifo(entry)
        return f"{self.file} is a FIFO"


@dataclass(frozen=True)
class WholeCheckpoint:
    """Replace a checkpoint by torch.save(`value`): a list, a tensor, a number, None."""

    name: str
    value: Any

    def apply(self, run: Path, outside: Path) -> str:
        import torch

        target = run / self.name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            remove(target)
        buffer = io.BytesIO()
        torch.save(self.value.make(None) if isinstance(self.value, Tensor) else self.value, buffer)
        target.write_bytes(buffer.getvalue())
        return f"{self.name} = torch.save({self.value!r})"


@dataclass(frozen=True)
class HardLink:
    """A second name for a file (links checks never see: it is a regular file). `in`: a precious
    file outside made, and hard-linked in at `file` (in place of the run's); `out`: the run's own
    `file` hard-linked to from outside. Either way the outside name must keep its bytes."""

    file: str
    way: str

    def apply(self, run: Path, outside: Path) -> str | None:
        entry, there = run / self.file, outside / f"linked_{self.file.replace('/', '_')}"
        if there.exists():
            return None  # linked before
        if self.way == "out":
            if not regular(entry):
                return None
            os.link(entry, there)
            return f"{self.file} hard-linked to {there}"
        there.write_bytes(b"precious\n")
        entry.parent.mkdir(parents=True, exist_ok=True)
        if entry.exists() or entry.is_symlink():
            remove(entry)
        os.link(there, entry)
        return f"{there} hard-linked in at {self.file}"


@dataclass(frozen=True)
class Folder:
    """An empty folder at a name: where a file goes (`.lock`), or a stray one (`.evil.tmp`)."""

    file: str

    def apply(self, run: Path, outside: Path) -> str:
        entry = run / self.file
        if entry.exists() or entry.is_symlink():
            remove(entry)
        entry.mkdir(parents=True)
        return f"{self.file} is a folder"


@dataclass(frozen=True)
class Swap:
    """While the command runs, a thread swaps `folder` for a link to a copy of it outside and back,
    every `period` seconds: a check that walks paths passes, a write that opens paths later can land
    outside. The folder is kept in the sandbox's held/ while the link stands in, and put back after."""

    folder: str
    period: float = 0.002

    def apply(self, run: Path, outside: Path) -> str:
        copy, real = outside / f"swapped_{self.folder}", run / self.folder
        if not copy.exists():
            shutil.copytree(real, copy, symlinks=True) if real.is_dir() and not real.is_symlink() else copy.mkdir()
        return f"{self.folder} swapped for a link to {copy} every {self.period} s during the command"

    def during(self, run: Path, sandbox: Path) -> list:
        return [Swapper(run / self.folder, sandbox / "outside" / f"swapped_{self.folder}", sandbox / "held",
                        self.period)]  # fmt: skip


class Swapper:
    """The thread of a Swap, as a context manager: started on entering, stopped and undone on leaving.
    The link waits in held/ and trades places with the folder in one step (renameat2's RENAME_EXCHANGE),
    so that the name never goes missing; where the folder is not there, the link is renamed in and out."""

    def __init__(self, entry: Path, link_to: Path, held: Path, period: float):
        self.entry, self.held, self.link_to, self.period = entry, held / entry.name, link_to, period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def __enter__(self):
        self.active = not (self.held.exists() or self.held.is_symlink())  # not a second swapper of the folder
        if self.active:
            os.symlink(self.link_to, self.held)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        self.stop.set()
        self.thread.join()
        with contextlib.suppress(OSError):
            self.put_back()
        if self.held.is_symlink():
            os.unlink(self.held)

    def ours(self, path: Path) -> bool:
        return path.is_symlink() and Path(os.readlink(path)) == self.link_to

    def loop(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(OSError):
                self.swap_in()
            self.stop.wait(self.period)
            with contextlib.suppress(OSError):
                self.put_back()
            self.stop.wait(self.period)

    def swap_in(self) -> None:
        if self.ours(self.held):
            exchange(self.entry, self.held) if self.entry.exists() else os.rename(self.held, self.entry)

    def put_back(self) -> None:
        if self.ours(self.entry):
            exchange(self.entry, self.held) if self.held.exists() else os.rename(self.entry, self.held)


def exchange(one: Path, other: Path) -> None:
    """Trade two names in one step (Linux's renameat2 with RENAME_EXCHANGE)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(one), -100, os.fsencode(other), 2) != 0:  # -100: AT_FDCWD
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(one))


@dataclass(frozen=True)
class Nest:
    """`depth` folders one inside the other under `folder` (made one at a time: os.makedirs recurses)."""

    folder: str
    depth: int

    def apply(self, run: Path, outside: Path) -> str | None:
        path = run / self.folder
        if not path.is_dir() or path.is_symlink():
            return None
        for _ in range(self.depth):
            path = path / "d"
            path.mkdir()
        return f"{self.folder}: {self.depth} folders nested"
