"""The fuzzer's worker, `python -m tests.fuzz.worker`: it imports rl_hydra, torch and the rest once,
then for each request (one JSON line on stdin) forks a child and answers one JSON line on stdout.

A case's child opens one run directory through one entry point, guarded: its own process group;
stdout and stderr to capture files; cwd, HOME and TMPDIR inside the case's sandbox; an address-space
limit LIMIT_BYTES above the worker's size; and an audit hook (which cannot be removed, hence a child
per case) that records, as JSON lines in the events file, and refuses an import of planted code and
any network use, and records spawned commands, forks, writes outside the run directory (a name
relative to a folder's handle placed in that folder) and modules the worker had not imported.

Below Python, where no audit hook sees: the worker's listeners (Listeners) stand where a library
would connect, named in each child's environment (DISPLAY, MLFLOW_TRACKING_URI, WANDB_BASE_URL, the
HTTP proxies), and every connection they accept is in the answer; the worker counts the processes in
the child's group from /proc. It kills the group past the case's timeout or PROCESS_LIMIT processes.
Started under `unshare -rn` (tests/fuzz/harness.py), it brings up the loopback of its own network
namespace, and nothing else is reachable."""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

LIMIT_BYTES = 2 << 30  # address space a case may add to the worker's
CRASHED, HARNESS = 70, 71  # exit codes of a child whose entry point raised, or whose guard failed
PLANTED = ("tests", "fuzz_evil")  # modules (and all below) that opening a run directory must never import
NETWORK = {
    "socket.connect",
    "socket.bind",
    "socket.getaddrinfo",
    "socket.sendto",
    "socket.sendmsg",
    "http.client.connect",
    "urllib.Request",
    "ftplib.connect",
    "smtplib.connect",
}
SPAWNS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile", "pty.spawn"}
# audit events that change a path: (the argument that names it, the one that gives a dir_fd it is relative to)
WRITES = {
    "os.mkdir": (0, 2),
    "os.remove": (0, 1),
    "os.rmdir": (0, 1),
    "os.rename": (1, 3),
    "os.symlink": (1, 2),
    "os.link": (1, 3),
    "os.chmod": (0, 2),
    "os.chown": (0, 3),
    "os.truncate": (0, None),
    "os.utime": (0, 3),
    "shutil.rmtree": (0, 1),
    "shutil.copyfile": (1, None),
    "shutil.copytree": (1, None),
    "shutil.move": (1, None),
    "os.mkfifo": (0, 2),
    "os.mknod": (0, 3),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
PROC_FD = re.compile(r"/proc/\d+/fd")  # a process's descriptors, each a link to what it has open
IN_HANDLE = re.compile(r"(?P<folder>/proc/(?:self|\d+)/fd/\d+)/(?P<rest>[^/]+)")  # one name below a handle
SCRATCH = "rl-hydra-verify-"  # the verify command's own scratch directory, in the temp dir


def preload() -> None:
    """What every entry point imports, imported before any fork (torch on one thread: fork-safe)."""
    import gymnasium as gym
    import torch

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    from hydra.core.plugins import Plugins

    import rl_hydra.commands.api  # noqa: F401
    import rl_hydra.commands.cli  # noqa: F401
    import rl_hydra.commands.report  # noqa: F401
    import rl_hydra.commands.run  # noqa: F401
    import rl_hydra.training  # noqa: F401
    import rl_hydra.verify  # noqa: F401

    Plugins.instance()  # scans hydra_plugins once, here
    from torch.utils.tensorboard import SummaryWriter  # noqa: F401 - the tensorboard logger's, slow

    gym.make("CartPole-v1").close()


# --- the entry points, each returning an exit code ------------------------------------------------


def evaluate(run_dir: str) -> int:
    from rl_hydra.commands.report import main

    return main([f"run_dir={run_dir}", "episodes=1"])


def load_run(run_dir: str) -> int:
    """The Python API: a refusal is RunError or ConfigError (one line), printed here as the CLIs do."""
    from rl_hydra import load_run
    from rl_hydra.errors import ConfigError
    from rl_hydra.runs.run_dir import RunError

    try:
        run = load_run(run_dir)
        run.observation_space.seed(0)
        run.predict(run.observation_space.sample())
    except (RunError, ConfigError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def verify(run_dir: str) -> int:
    from rl_hydra.verify import main

    return main([run_dir, "--steps", "all"])


def resume(run_dir: str) -> int:
    """`python train.py resume=<run_dir>`, in-process."""
    from rl_hydra.commands.cli import main

    sys.argv = ["train.py", f"resume={run_dir}"]
    main()
    return 0


def probe(run_dir: str, source: str) -> int:
    """The harness's own tests: run `source` as an entry point would (its `code`: the exit code)."""
    namespace = {"run_dir": run_dir}
    exec(source, namespace)
    return namespace.get("code", 0)


def evaluate_video(run_dir: str) -> int:
    """evaluate with video=true: the GIF it writes into eval/videos/ (a hard link or a link there)."""
    from rl_hydra.commands.report import main

    return main([f"run_dir={run_dir}", "episodes=1", "video=true"])


ENTRIES = {
    "evaluate": evaluate,
    "load_run": load_run,
    "verify": verify,
    "resume": resume,
    "evaluate_video": evaluate_video,
}


# --- the guard ----------------------------------------------------------------------------------


class Blocked(ImportError):
    """An import the guard refused."""


class NetworkBlocked(ConnectionRefusedError):
    """A connection the guard refused."""


class Guard:
    """The audit hook: JSON lines to `events_fd` (os.write: no audit event of its own)."""

    def __init__(self, events_fd: int, allowed: list[str], scratch: str):
        self.fd, self.allowed, self.scratch = events_fd, allowed, scratch
        self.known = {name.partition(".")[0] for name in sys.modules}
        self.busy = False
        self.opening = threading.local()  # the dir_fd of the os.open in progress (its audit event has none)

    def watch_os_open(self) -> None:
        """os.open wrapped so that the guard knows the folder a relative name is opened in: the audit
        event "open" carries no dir_fd, and a run's files are opened relative to its handle."""
        real_open = os.open

        def os_open(path, flags, mode=0o777, *, dir_fd=None):
            self.opening.dir_fd = dir_fd
            try:
                return real_open(path, flags, mode, dir_fd=dir_fd)
            finally:
                self.opening.dir_fd = None

        os.open = os_open

    def event(self, kind: str, detail) -> None:
        os.write(self.fd, (json.dumps({"kind": kind, "detail": detail}, default=repr) + "\n").encode())

    def __call__(self, name: str, args: tuple) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            self.check(name, args)
        finally:
            self.busy = False

    def check(self, name: str, args: tuple) -> None:
        if name == "import":
            module = str(args[0])
            if module.partition(".")[0] in PLANTED:
                self.event("planted_import", module)
                raise Blocked(f"the fuzzer's guard refused importing {module}")
            top = module.partition(".")[0]
            if top not in self.known:
                self.known.add(top)
                self.event("new_import", module)
        elif name in NETWORK:
            self.event("network", [name, *map(repr, args[:3])])
            raise NetworkBlocked(f"the fuzzer's guard refused {name}")
        elif name in SPAWNS:
            argv = args[1] if name == "subprocess.Popen" and len(args) > 1 else None
            git = isinstance(argv, (list, tuple)) and bool(argv) and os.path.basename(str(argv[0])) == "git"
            self.event("spawn", {"git": git, "what": f"{name} {args[:2]!r}"[:300]})  # git: provenance's commit
        elif name == "open":
            path, mode, flags = (list(args) + [None, None])[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writes:
                follow = not (isinstance(flags, int) and flags & os.O_NOFOLLOW)
                self.write(name, path, follow, getattr(self.opening, "dir_fd", None))
        elif name == "os.fork":
            self.event("fork", os.getpid())
        elif name in WRITES:
            at, dir_fd = WRITES[name]
            folder = args[dir_fd] if dir_fd is not None and len(args) > dir_fd else None
            if len(args) > at:
                self.write(name, args[at], False, folder if isinstance(folder, int) and folder >= 0 else None)

    def write(self, name: str, path, follow: bool, dir_fd: int | None = None) -> None:
        """Record a write whose place (a relative name resolved in `dir_fd`'s folder) is outside."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # a file descriptor: opened (and checked) before
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            try:
                folder = os.readlink(f"/proc/self/fd/{dir_fd}")  # the kernel's name of the open folder
            except OSError:
                return  # not a folder's descriptor: the call itself fails
            if not follow and os.sep not in path:
                # a name in the open folder lands there: looking the folder up again by its path would
                # follow a link swapped in for it since (the write itself went by the handle)
                self.check_place(name, os.path.join(folder, path))
                return
            path = os.path.join(folder, path)
        handle = IN_HANDLE.fullmatch(path)
        if handle is not None and not (follow and os.path.islink(path)):  # a name in a handle's folder
            try:
                folder = os.readlink(handle["folder"])  # the kernel's name, not looked up again by path
            except OSError:
                return  # not an open folder: the call itself fails
            self.check_place(name, os.path.join(folder, handle["rest"]))
            return
        if follow:
            where = resolved(path)
        else:  # the entry itself, not what a link at it points to
            where = os.path.join(resolved(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
            if PROC_FD.fullmatch(os.path.dirname(where)):  # /proc/self/fd/N: the folder of a handle, by name
                where = resolved(path)
        self.check_place(name, where)

    def check_place(self, name: str, where: str) -> None:
        """Record the write `name` at `where` when that lies outside the places a command may write."""
        if where == "/dev/null" or where.startswith(self.scratch):
            return
        if not any(where == root or where.startswith(root + os.sep) for root in self.allowed):
            self.event("write_outside", [name, where])


def resolved(path: str) -> str:
    """os.path.realpath, looked up again when a link swapped for a folder between its lstat and its
    readlink makes it fail (EINVAL): a mutator swaps folders for links every few milliseconds."""
    for _ in range(100):
        try:
            return os.path.realpath(path)
        except OSError:
            continue
    return os.path.realpath(path)


def die_with_parent(parent: int) -> None:
    """SIGKILL when the parent process ends (Linux's PR_SET_PDEATHSIG): a case blocked on a FIFO, or
    the worker, never outlives a test run that was killed."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before the call
        os._exit(HARNESS)


def memory_status() -> dict[str, int]:
    """VmPeak, VmSize and VmHWM of this process, in bytes."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmPeak", "VmSize", "VmHWM", "VmRSS"):
            found[key] = int(value.split()[0]) * 1024
    return found


ANSWERS = -1  # the worker's answers: a descriptor its children close first


def child(request: dict, events_fd: int, worker: int) -> None:
    """The forked child: guard, run the entry point, report, os._exit. Never returns."""
    sandbox, code = Path(request["sandbox"]), HARNESS
    guard = Guard(events_fd, [], "")
    try:
        die_with_parent(worker)
        os.setpgid(0, 0)
        os.close(ANSWERS)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # never the worker's requests
        for fd, name in ((1, "stdout"), (2, "stderr")):
            os.dup2(os.open(sandbox / "capture" / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.chdir(sandbox / "cwd")
        LISTENERS.close()
        os.environ.update(
            HOME=str(sandbox / "home"),
            TMPDIR=str(sandbox / "tmp"),
            RL_HYDRA_FUZZ_MARK=str(sandbox / "capture" / "planted"),
            **LISTENERS.environment(),
        )
        for name in ("no_proxy", "NO_PROXY", "XAUTHORITY", "WAYLAND_DISPLAY"):
            os.environ.pop(name, None)
        for name, value in request.get("environment", {}).items():  # a case's own: None unsets
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
        tempfile.tempdir = str(sandbox / "tmp")
        start = memory_status()
        limit = start["VmSize"] + LIMIT_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        guard = Guard(
            events_fd,
            # held/: where a case's link swapper keeps a folder of the run while a link stands in for it
            [os.path.realpath(request["run_dir"]), str(sandbox / "capture"), os.path.realpath(sandbox / "held")],
            os.path.join(os.path.realpath(sandbox / "tmp"), SCRATCH),
        )
        guard.event("start", {**start, "limit": limit})
        guard.watch_os_open()
        sys.addaudithook(guard)
        try:
            if request["entry"] == "probe":
                code = probe(request["run_dir"], request["source"])
            else:
                code = ENTRIES[request["entry"]](request["run_dir"])
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException as error:  # noqa: BLE001 - a crash of the entry point: reported, not raised
            traceback.print_exc()
            guard.event("raised", f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0][:300]}")
            code = CRASHED
        sys.stdout.flush()
        sys.stderr.flush()
        guard.event("end", {"code": code, **memory_status()})
    except BaseException:  # noqa: BLE001 - the guard itself failed
        os.write(events_fd, json.dumps({"kind": "harness", "detail": traceback.format_exc()}).encode() + b"\n")
    os._exit(code if isinstance(code, int) and 0 <= code < 256 else HARNESS)


def train_child(request: dict, worker: int) -> None:
    """Make a baseline run: rl_hydra.train(*overrides) into run_dir, stopped as by SIGTERM at
    `stop_at` env steps when given (an unfinished run)."""
    code = 0
    try:
        die_with_parent(worker)
        LISTENERS.close()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if request.get("stop_at"):
            from rl_hydra.loops.runner import Runner

            record_step, stop_at = Runner.record_step, request["stop_at"]

            def stop_once_reached(self):
                if self.global_step + self.local.env.num_envs >= stop_at:
                    self.stop_requested = True
                record_step(self)

            Runner.record_step = stop_once_reached
        from rl_hydra.commands.api import train
        from rl_hydra.commands.launch import RunFailed

        try:
            train(*request["overrides"], run_dir=request["run_dir"])
        except RunFailed as stopped:
            code = 0 if request.get("stop_at") and stopped.code == 130 else 1
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def group_size(group: int) -> int:
    """How many processes are in process group `group` now (from /proc: forks below Python too)."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            count += int(fields[2]) == group  # after the command's name: state, ppid, pgrp
    return count


def serve(request: dict) -> dict:
    """Fork, wait (killing the child's group past the timeout, or once it holds more than
    PROCESS_LIMIT processes) and describe what happened, with the connections the listeners took."""
    events_path = Path(request["sandbox"]) / "capture" / "events" if request["op"] == "case" else None
    events_fd = os.open(events_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if events_path else -1
    sys.stdout.flush()
    sys.stderr.flush()
    LISTENERS.accepted()  # none is the case's before it starts
    began, worker = time.monotonic(), os.getpid()
    pid = os.fork()
    if pid == 0:
        child(request, events_fd, worker) if request["op"] == "case" else train_child(request, worker)
    if events_fd >= 0:
        os.close(events_fd)
    deadline, timed_out, processes, counted, connections = began + request.get("timeout", 60), False, 1, 0.0, []
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        connections += LISTENERS.accepted()
        if time.monotonic() - counted > 0.1:
            counted, processes = time.monotonic(), max(processes, group_size(pid))
        if time.monotonic() > deadline or processes > PROCESS_LIMIT:
            timed_out = processes <= PROCESS_LIMIT
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.005)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # whatever the child left running (a spawned process)
    return {
        "status": os.waitstatus_to_exitcode(status),
        "timed_out": timed_out,
        "wall_s": round(time.monotonic() - began, 3),
        "maxrss": usage.ru_maxrss * 1024,
        "processes": processes,
        "too_many_processes": processes > PROCESS_LIMIT,
        "process_limit": PROCESS_LIMIT,
        "connections": connections + LISTENERS.accepted(),  # a handshake done is queued until accepted
    }


# --- connections below Python ---------------------------------------------------------------------


class Listeners:
    """Local TCP listeners where a library would connect, named in each case's environment: an X11
    display (DISPLAY=127.0.0.1:N is port 6000 + N), MLflow's and W&B's servers, and an HTTP proxy
    (what libcurl, Go and requests honour). A connection made in C (pygame's X11, a service binary)
    never passes the audit hook; a listener that accepted one sees it whatever made it."""

    def __init__(self):
        self.sockets: dict[str, socket.socket] = {}
        for number in range(64, 200):  # a display number no X server here is likely to hold
            with contextlib.suppress(OSError):
                self.sockets["x11"] = self.listen(6000 + number)
                break
        for name in ("mlflow", "wandb", "proxy"):
            self.sockets[name] = self.listen(0)
        self.ports = {name: server.getsockname()[1] for name, server in self.sockets.items()}

    @staticmethod
    def listen(port: int) -> socket.socket:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            server.bind(("127.0.0.1", port))
            server.listen(64)
        except OSError:
            server.close()
            raise
        server.setblocking(False)
        return server

    def port(self, name: str) -> int:
        return self.ports.get(name, 1)

    def environment(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{self.port('proxy')}"
        return {
            "DISPLAY": f"127.0.0.1:{self.port('x11') - 6000}",
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{self.port('mlflow')}",
            "WANDB_BASE_URL": f"http://127.0.0.1:{self.port('wandb')}",
            **{name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")},
        }

    def accepted(self) -> list[dict]:
        """The connections each listener took since the last call (each closed at once)."""
        found = []
        for name, server in self.sockets.items():
            while True:
                try:
                    connection, peer = server.accept()
                except (BlockingIOError, InterruptedError):
                    break
                connection.close()
                found.append({"listener": name, "port": self.ports[name], "peer": peer[1]})
        return found

    def close(self) -> None:
        """In a child: its copies of the listening sockets closed (the worker alone accepts)."""
        for server in self.sockets.values():
            server.close()


def loopback_up() -> None:
    """Bring `lo` up in the network namespace `unshare -rn` made (it starts down, so that the
    listeners could not be reached): SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(probe, 0x8913, request))[1]
        fcntl.ioctl(probe, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))


LISTENERS: Listeners
PROCESS_LIMIT = (os.cpu_count() or 1) + 2  # the child, a process per core (capped vector envs) and a git


def main() -> None:
    global ANSWERS, LISTENERS
    ANSWERS = os.dup(1)
    answers = os.fdopen(ANSWERS, "w", buffering=1)
    os.dup2(2, 1)  # whatever an import prints goes to stderr, never into the answers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pytest's Ctrl-C ends the worker by closing stdin
    die_with_parent(int(os.environ["RL_HYDRA_FUZZ_PARENT"]))
    netns = os.environ.get("RL_HYDRA_FUZZ_NETNS") == "1"
    if netns:
        loopback_up()
    preload()
    LISTENERS = Listeners()
    answers.write(json.dumps({"ready": True, "pid": os.getpid(), "netns": netns, **LISTENERS.environment()}) + "\n")
    for line in sys.stdin:
        answers.write(json.dumps(serve(json.loads(line))) + "\n")


if __name__ == "__main__":
    main()
