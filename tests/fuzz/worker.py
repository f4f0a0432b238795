"""The fuzzer's worker, `python -m tests.fuzz.worker`: it imports rl_hydra, torch and the rest once,
then for each request (one JSON line on stdin) forks a child and answers one JSON line on stdout.

A case's child opens one run directory through one entry point, guarded: its own process group;
stdout and stderr to capture files; cwd, HOME and TMPDIR inside the case's sandbox; an address-space
limit LIMIT_BYTES above the worker's size; and an audit hook (which cannot be removed, hence a child
per case) that records, as JSON lines in the events file, and refuses an import of planted code and
any network use, and records spawned commands, writes outside the run directory and modules the
worker had not imported. The worker kills the child's group past the case's timeout."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
import tempfile
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
    from rl_hydra.config import ConfigError
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


ENTRIES = {"evaluate": evaluate, "load_run": load_run, "verify": verify, "resume": resume}


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
                self.write(name, path, follow=not (isinstance(flags, int) and flags & os.O_NOFOLLOW))
        elif name in WRITES:
            at, dir_fd = WRITES[name]
            relative_to_fd = dir_fd is not None and len(args) > dir_fd and args[dir_fd] not in (None, -1)
            if len(args) > at and not relative_to_fd:  # relative to a dir_fd: shutil.rmtree's, of what it removes
                self.write(name, args[at], follow=False)

    def write(self, name: str, path, follow: bool) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return  # a file descriptor: opened (and checked) before
        path = os.fsdecode(path)
        if follow:
            where = os.path.realpath(path)
        else:  # the entry itself, not what a link at it points to
            where = os.path.join(os.path.realpath(os.path.dirname(os.path.abspath(path))), os.path.basename(path))
        if where == "/dev/null" or where.startswith(self.scratch):
            return
        if not any(where == root or where.startswith(root + os.sep) for root in self.allowed):
            self.event("write_outside", [name, where])


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
        os.environ.update(
            HOME=str(sandbox / "home"),
            TMPDIR=str(sandbox / "tmp"),
            RL_HYDRA_FUZZ_MARK=str(sandbox / "capture" / "planted"),
        )
        tempfile.tempdir = str(sandbox / "tmp")
        start = memory_status()
        limit = start["VmSize"] + LIMIT_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        guard = Guard(
            events_fd,
            [os.path.realpath(request["run_dir"]), str(sandbox / "capture")],
            os.path.join(os.path.realpath(sandbox / "tmp"), SCRATCH),
        )
        guard.event("start", {**start, "limit": limit})
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
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        if request.get("stop_at"):
            from rl_hydra.loops.runner import Runner

            record_step, stop_at = Runner.record_step, request["stop_at"]

            def stop_once_reached(self):
                if self.global_step + self.env.num_envs >= stop_at:
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


def serve(request: dict) -> dict:
    """Fork, wait (killing the child's group past the timeout) and describe what happened."""
    events_path = Path(request["sandbox"]) / "capture" / "events" if request["op"] == "case" else None
    events_fd = os.open(events_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600) if events_path else -1
    sys.stdout.flush()
    sys.stderr.flush()
    began, worker = time.monotonic(), os.getpid()
    pid = os.fork()
    if pid == 0:
        child(request, events_fd, worker) if request["op"] == "case" else train_child(request, worker)
    if events_fd >= 0:
        os.close(events_fd)
    deadline, timed_out = began + request.get("timeout", 60), False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            timed_out = True
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
    }


def main() -> None:
    global ANSWERS
    ANSWERS = os.dup(1)
    answers = os.fdopen(ANSWERS, "w", buffering=1)
    os.dup2(2, 1)  # whatever an import prints goes to stderr, never into the answers
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # pytest's Ctrl-C ends the worker by closing stdin
    die_with_parent(int(os.environ["RL_HYDRA_FUZZ_PARENT"]))
    preload()
    answers.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    for line in sys.stdin:
        answers.write(json.dumps(serve(json.loads(line))) + "\n")


if __name__ == "__main__":
    main()
