"""Checkpoints below torch.save: the zip archive torch writes and the pickle inside it (data.pkl),
rewritten into shapes torch.save never writes, by `Archive(name, how)` (a mutation, as those of
tests/fuzz/mutations.py):

- `deflated`: every entry compressed (torch stores them); harmless in itself.
- `bomb`: data.pkl followed by 3 GiB of zeros after its STOP, deflated to about 3 MB: reading the
  entry whole takes more memory than a case may.
- `duplicate_bomb_last` / `duplicate_bomb_first`: a second data.pkl, a pickle reference bomb, after or
  before the real one (zipfile reads the last of a name, other readers the first).
- `duplicate_planted_last` / `duplicate_planted_first`: the second data.pkl calls tests.payload.mark.
- `dotdot_entry`: an extra entry named `archive/../../pwned`; `dotdot_names`: every entry under `../`.
- `declared_storage`: the first storage declares 10**12 bytes where its entry holds a few thousand.

A zip is written here by hand (write_zip), since zipfile writes neither a deflated stream it did not
make nor, without a warning, a name twice."""

from __future__ import annotations

import functools
import io
import pickle
import pickletools
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from tests.fuzz.mutations import Bomb, regular, tuples_to_lists
from tests.payload import Marker

STORED, DEFLATED = 0, 8
PADDING = 3 << 30  # the zip bomb's zeros: past the 2 GiB a case may add to the worker's address space
CHUNK = 16 << 20
READABLE = 256 << 20


@dataclass(frozen=True)
class Member:
    """One entry: its name, and its bytes as the archive holds them (`size` and `crc` of the bytes
    they stand for when deflated)."""

    name: str
    payload: bytes
    method: int = STORED
    size: int = -1
    crc: int = -1

    @classmethod
    def stored(cls, name: str, data: bytes) -> Member:
        return cls(name, data, STORED, len(data), zlib.crc32(data))

    @classmethod
    def deflated(cls, name: str, data: bytes) -> Member:
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)
        return cls(name, packer.compress(data) + packer.flush(), DEFLATED, len(data), zlib.crc32(data))


def members(path: Path) -> list[Member]:
    """The archive's entries in order, every one stored; none of an archive already a bomb (an entry
    that stands for more than READABLE bytes is not read back to be rewritten again)."""
    with zipfile.ZipFile(path) as archive:
        if any(info.file_size > READABLE for info in archive.infolist()):
            return []
        return [Member.stored(info.filename, archive.open(info).read()) for info in archive.infolist()]


def write_zip(path: Path, entries: list[Member]) -> None:
    """A plain zip (no zip64: every size under 4 GiB): local headers, the central directory, its end."""
    out, directory = io.BytesIO(), io.BytesIO()
    for entry in entries:
        name, offset = entry.name.encode(), out.tell()
        sizes = (entry.crc & 0xFFFFFFFF, len(entry.payload), entry.size)
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, entry.method, 0, 0x21, *sizes, len(name), 0))
        out.write(name + entry.payload)
        directory.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, entry.method, 0, 0x21, *sizes,
                                    len(name), 0, 0, 0, 0, 0, offset) + name)  # fmt: skip
    start, table = out.tell(), directory.getvalue()
    out.write(table + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries), len(table), start, 0))
    path.write_bytes(out.getvalue())


@functools.cache
def padded(prefix: bytes, padding: int = PADDING) -> Member:
    """`prefix` and `padding` zeros, deflated: each CHUNK of zeros after a full flush deflates to the
    same bytes, so it is deflated once and repeated (3 GiB in well under a second, once a session)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = packer.compress(prefix) + packer.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(CHUNK)
    block = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    assert block == again, "a full flush should make every chunk of zeros deflate alike"
    crc = zlib.crc32(prefix)
    for _ in range(padding // CHUNK):
        crc = zlib.crc32(zeros, crc)
    payload = head + block * (padding // CHUNK) + packer.flush()
    return Member("", payload, DEFLATED, len(prefix) + padding // CHUNK * CHUNK, crc)


def bombed_pickle(path: Path) -> bytes:
    """data.pkl of the same checkpoint with runner.finished_returns a reference bomb 40 deep (its
    storages keep their keys: torch.save numbers them in the order it meets them, and the same)."""
    import torch

    state = tuples_to_lists(torch.load(path, weights_only=True))
    state.setdefault("runner", {})["finished_returns"] = Bomb(40).make(None)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return data_pickle(members_of(buffer.getvalue())).payload


def members_of(data: bytes) -> list[Member]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [Member.stored(info.filename, archive.open(info).read()) for info in archive.infolist()]


def data_pickle(entries: list[Member]) -> Member:
    return next(entry for entry in entries if entry.name.endswith("/data.pkl"))


def declare_first_storage(data: bytes, numel: int) -> bytes:
    """data.pkl with the first persistent id's size (the int just before the TUPLE that BINPERSID
    takes: ('storage', type, key, location, numel)) replaced by `numel`, as LONG1."""
    ops = list(pickletools.genops(data))
    for index, (op, _, _) in enumerate(ops):
        if op.name != "BINPERSID":
            continue
        at = index - 1
        while ops[at][0].name in ("BINPUT", "LONG_BINPUT", "MEMOIZE"):
            at -= 1
        assert ops[at][0].name == "TUPLE", "a persistent id is a tuple"
        start, end = ops[at - 1][2], ops[at][2]
        number = numel.to_bytes(numel.bit_length() // 8 + 1, "little", signed=True)
        return data[:start] + pickle.LONG1 + bytes([len(number)]) + number + data[end:]
    raise ValueError("no storage in this pickle")


@dataclass(frozen=True)
class Archive:
    """Rewrite a checkpoint's zip archive (the module's docstring lists `how`)."""

    name: str
    how: str

    def apply(self, run: Path, outside: Path) -> str | None:
        target = run / self.name
        try:
            entries = members(target) if regular(target) else None
        except Exception:  # noqa: BLE001 - damaged by an earlier mutation (cut, replaced, not a zip)
            return None
        if not entries or not any(entry.name.endswith("/data.pkl") for entry in entries):
            return None
        write_zip(target, self.rewrite(entries, target))
        return f"{self.name}: zip archive {self.how}"

    def rewrite(self, entries: list[Member], path: Path) -> list[Member]:
        real = data_pickle(entries)
        others = [entry for entry in entries if entry is not real]
        top = real.name.partition("/")[0]
        if self.how == "deflated":
            return [Member.deflated(entry.name, entry.payload) for entry in entries]
        if self.how == "bomb":
            bomb = padded(real.payload)
            return [Member(real.name, bomb.payload, DEFLATED, bomb.size, bomb.crc), *others]
        if self.how.startswith("duplicate_"):
            # protocol 2, torch.save's: a newer one has torch.load warn before it refuses
            evil = bombed_pickle(path) if "bomb" in self.how else pickle.dumps(Marker("pwned"), protocol=2)
            pair = [real, Member.stored(real.name, evil)]
            return [*(pair if self.how.endswith("_last") else pair[::-1]), *others]
        if self.how == "dotdot_entry":
            return [*entries, Member.stored(f"{top}/../../pwned", b"pwned\n")]
        if self.how == "dotdot_names":
            return [Member.stored("../" + entry.name.partition("/")[2], entry.payload) for entry in entries]
        if self.how == "declared_storage":
            return [Member.stored(real.name, declare_first_storage(real.payload, 10**12)), *others]
        raise ValueError(f"no archive rewrite {self.how!r}")


HOWS = (
    "deflated", "bomb", "duplicate_bomb_last", "duplicate_bomb_first", "duplicate_planted_last",
    "duplicate_planted_first", "dotdot_entry", "dotdot_names", "declared_storage",
)  # fmt: skip
