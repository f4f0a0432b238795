"""A run directory's files by handle, not by path.

The directory is opened once (`Folder.open`: the run directory itself may be a link, resolved
that once), and every file and folder below it is reached by name relative to an open folder,
never through a link (O_NOFOLLOW on each component). So a link swapped in after a check, or a
folder replaced by one, cannot redirect a write: the write fails instead.

Writes come in two kinds, and no third:
- `replace`: a new file, written whole, then renamed over the name. A name that is a link or
  another file's second name (a hard link) is replaced, never written through.
- `append`: only to a regular file with no other name (st_nlink 1), so that appending changes
  nothing but the run's own file.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from rl_hydra.runs.errors import RunError

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
NO_FOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
MAX_DEPTH = 64  # a run directory nests about 6 deep (wandb/run-*/files/...); deeper is not a run's
TEMP_PREFIX, TEMP_SUFFIX = ".", ".tmp"


class NotOwnFile(RunError):
    """A name the run writes in place is a link, not a regular file, or has a second name."""


def current_umask() -> int:
    """The process's umask (the only way to read it is to set it, so it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Folder:
    """An open directory: its entries reached by name, never through a link."""

    def __init__(self, fd: int, path: Path):
        self.fd, self.path = fd, Path(path)

    @classmethod
    def open(cls, path: str | Path, create: bool = False) -> Folder:
        """The folder at `path` (links in `path` followed, this once); made first with `create`."""
        path = Path(path)
        if create:
            path.mkdir(parents=True, exist_ok=True)
        return cls(os.open(path, DIRECTORY_FLAGS), path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass

    def by_handle(self) -> str:
        """A path that names this open folder itself, for a library that takes a path (by_descriptor)."""
        return str(by_descriptor(self.fd, self.path))

    def child(self, name: str, create: bool = False) -> Folder:
        """The folder `name` in this one (made with `create`); a link there is an OSError (ELOOP
        or ENOTDIR), never followed."""
        if create:
            try:
                os.mkdir(name, 0o777, dir_fd=self.fd)
            except FileExistsError:
                pass
        return Folder(os.open(name, DIRECTORY_FLAGS | NO_FOLLOW, dir_fd=self.fd), self.path / name)

    def at(self, relative: str | Path, create: bool = False) -> Folder:
        """The folder at `relative` below this one, walked one name at a time (no link followed).
        The caller closes what it gets (it may be this folder's copy: `relative` empty)."""
        folder = Folder(os.dup(self.fd), self.path)
        for name in Path(relative).parts:
            if name in ("..", "/"):
                folder.close()
                raise RunError(f"{self.path / relative} leads out of {self.path}")
            inner = folder.child(name, create)
            folder.close()
            folder = inner
        return folder

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry `name` itself (a link is not followed), or None when there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def replace(self, name: str, write: Callable[[IO[bytes]], Any]) -> None:
        """Write `name` whole through a new temp file in this folder, then rename it over `name`:
        a crash mid-write leaves the old file (and a temp file the next writer removes). The file
        gets the mode any new file gets under the umask."""
        tmp = f"{TEMP_PREFIX}{name}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o666, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.unlink(tmp)
            raise

    def open_own(self, name: str, flags: int, create: bool = True) -> int:
        """A descriptor of `name` to write in place (O_RDWR or O_WRONLY|O_APPEND in `flags`): a
        regular file with no other name, made when missing; NotOwnFile for anything else."""
        try:
            fd = os.open(name, flags | NO_FOLLOW | (os.O_CREAT if create else 0) | os.O_NONBLOCK, 0o666, dir_fd=self.fd)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):
                raise NotOwnFile(refusal(self.path / name, "is a link or not a file")) from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            regular = stat.S_ISREG(info.st_mode)
            why = f"has {info.st_nlink} names (hard links)" if regular else "is not a regular file"
            raise NotOwnFile(refusal(self.path / name, why))
        os.set_blocking(fd, True)
        return fd

    def append(self, name: str, encoding: str | None = None) -> IO[Any]:
        """`name` opened to append (text with `encoding`, else bytes): see `open_own`."""
        fd = self.open_own(name, os.O_WRONLY | os.O_APPEND)
        if encoding is None:
            return os.fdopen(fd, "ab")
        return os.fdopen(fd, "a", encoding=encoding, newline="")

    def read(self, name: str) -> IO[bytes]:
        """`name` opened to read: a regular file (not a link, a FIFO is not waited on)."""
        fd = os.open(name, os.O_RDONLY | NO_FOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RunError(f"{self.path / name} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")

    def walk(self, skip: tuple[str, ...] = ()) -> Iterator[tuple[Path, str, os.stat_result]]:
        """(folder's path, name, lstat) of every entry below, folders included, without following
        a link or recursing (a stack of open folders, at most MAX_DEPTH deep); names in `skip` at
        any level are not descended into."""
        stack: list[tuple[Folder, list[str]]] = [(self.at(""), sorted(self.names()))]
        try:
            while stack:
                folder, names = stack[-1]
                if not names:
                    stack.pop()[0].close()
                    continue
                name = names.pop()
                info = folder.lstat(name)
                if info is None:  # removed meanwhile
                    continue
                yield folder.path, name, info
                if stat.S_ISDIR(info.st_mode) and name not in skip:
                    if len(stack) >= MAX_DEPTH:
                        raise RunError(
                            f"{folder.path / name} is nested more than {MAX_DEPTH} folders deep: not a run's directory"
                        )
                    inner = folder.child(name)
                    stack.append((inner, sorted(inner.names())))
        finally:
            for folder, _ in stack:
                folder.close()


def by_descriptor(fd: int, path: Path) -> str | Path:
    """A path naming the open file or folder `fd` itself, for a library that opens by path
    (TensorBoard's writer, zipfile, torch.load with mmap): a link swapped in for its name later is
    not followed. Linux's /proc/self/fd; elsewhere `path`."""
    proc = f"/proc/self/fd/{fd}"
    return proc if os.path.exists(proc) else path


def refusal(path: Path, why: str) -> str:
    return (
        f"{path} {why}; a run writes this file in place, so it must be the run's own regular file "
        f"(nothing was written: replace it with a copy of its content, or remove it)"
    )
