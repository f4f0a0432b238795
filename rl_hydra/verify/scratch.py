"""rl-hydra-verify's temporary directory, named by the pid of the process that re-runs in it and
removed when it ends, also on Ctrl-C or SIGTERM (or by the next verify, after a kill -9)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from rl_hydra.commands.launch import EXIT_INTERRUPTED
from rl_hydra.runs.run_dir import RunDirectory

SCRATCH_PREFIX = "rl-hydra-verify-"  # + the pid of the verify that re-runs in it
LIVE_SCRATCH: set[Path] = set()  # this process's scratch directories, removed by `stop_now` too


@contextlib.contextmanager
def scratch_directory() -> Iterator[RunDirectory]:
    """A temporary directory for the re-run, named by this process's pid and removed at the end,
    also on Ctrl-C or SIGTERM; the leftovers of a verify that was killed (kill -9) are removed first."""
    remove_leftovers()
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-") as path:
        LIVE_SCRATCH.add(Path(path))
        try:
            yield RunDirectory(path)
        finally:
            LIVE_SCRATCH.discard(Path(path))


def remove_leftovers() -> None:
    """Remove this user's scratch directories whose verify process has ended (never a live one's)."""
    owner = re.compile(rf"{re.escape(SCRATCH_PREFIX)}(\d+)-")
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        match = owner.match(path.name)
        with contextlib.suppress(OSError):
            info = path.lstat()
            if match and stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not alive(int(match[1])):
                shutil.rmtree(path, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def stopped_line(run_dir: str) -> str:
    return f"rl-hydra-verify stopped by Ctrl-C or SIGTERM before a verdict; {run_dir} was not changed"


@contextlib.contextmanager
def stop_on_signal(run_dir: str) -> Iterator[None]:
    """Ctrl-C or SIGTERM ends verify at once: it only reads the run, so its scratch directory is
    removed and it exits 130 with one line (an exception raised inside whatever library code was
    running, an import say, could leave it half-done). While the re-run trains, rl_hydra.training's
    own handlers stop it at the next step instead, and `main` ends it the same way."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop_now(signum, frame):  # noqa: ARG001
        for path in list(LIVE_SCRATCH):
            shutil.rmtree(path, ignore_errors=True)
        print(stopped_line(run_dir), file=sys.stderr, flush=True)
        os._exit(EXIT_INTERRUPTED)

    previous = {sig: signal.signal(sig, stop_now) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
