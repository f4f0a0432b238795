"""A sweep job's life is tied to its sweep's. Launchers that run jobs in worker processes (joblib,
submitit's local executor) leave those workers training when the sweep's process is killed with
kill -9: nothing tells them. The sweep's process names itself (`RL_HYDRA_SWEEP_PID`, set before
Hydra starts its launcher, inherited by every worker); a job in a worker watches that process and,
once it is gone, stops as Ctrl-C would stop it (SIGTERM to itself: a checkpoint, then exit), so
that the same sweep command, run again at once, resumes every job. A re-launched job that finds
its directory still locked by such an orphan waits for it to stop (`RunLock`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

SWEEP_PID = "RL_HYDRA_SWEEP_PID"
POLL_S = 0.2
ORPHAN_STOP_S = 30  # how long a re-launched job waits for an orphaned job to stop
EXIT_ORPHANED = 130  # a stop on request, as after Ctrl-C


def mark_sweep_process() -> None:
    """Called by the sweep's own process before its launcher starts any job."""
    os.environ[SWEEP_PID] = str(os.getpid())


def sweep_process() -> int | None:
    """The pid of the sweep this process runs a job of, or None outside a sweep."""
    value = os.environ.get(SWEEP_PID, "")
    return int(value) if value.isdigit() else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Watch:
    """This worker's watch on its sweep: how many jobs run now, and whether the sweep is gone."""

    started = False
    jobs = 0
    orphaned = False


@contextlib.contextmanager
def sweep_job() -> Iterator[None]:
    """Around a job: in a worker process of a sweep, the job is stopped (SIGTERM to itself, which
    the run turns into a checkpoint and a stop) once the sweep's process is gone, and the worker
    exits when the job has ended. In the sweep's own process (the basic launcher), or outside a
    sweep, it does nothing."""
    sweep = sweep_process()
    if sweep is None or sweep == os.getpid():
        yield
        return
    if not Watch.started:  # a worker runs job after job: one watch
        Watch.started = True
        threading.Thread(target=watch, args=(sweep, os.getppid()), name="rl-hydra-sweep-watch", daemon=True).start()
    Watch.jobs += 1
    try:
        yield
    finally:
        Watch.jobs -= 1
        if Watch.orphaned:
            os._exit(EXIT_ORPHANED)


def watch(sweep: int, parent: int) -> None:
    # a direct child sees its parent change (no reused pid can fool it); a grandchild polls the pid
    while (os.getppid() == parent) if parent == sweep else alive(sweep):
        time.sleep(POLL_S)
    Watch.orphaned = True
    if Watch.jobs:
        os.kill(os.getpid(), signal.SIGTERM)  # the job stops at its next step; sweep_job then exits
    else:
        os._exit(EXIT_ORPHANED)


def orphaned(holder: dict) -> bool:
    """Whether a lock's holder (RunLock's record) is a sweep job whose sweep is gone: it is stopping."""
    sweep = holder.get("sweep")
    return isinstance(sweep, int) and sweep != os.getpid() and not alive(sweep)
