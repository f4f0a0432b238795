"""The fuzzer's harness on pytest's side: the worker (tests/fuzz/worker.py), the baseline runs it
makes once, and one case: copy a baseline into a fresh sandbox, mutate it, snapshot, run an entry
point in the worker's guarded child (while a case's concurrent mutation, a link swapper, runs in a
thread here), snapshot again, and list what broke the issue's invariants.

Side effects are looked for below Python too: the worker's listeners take any connection to the
ports a library would use, it counts the processes in a case's group from /proc, and where
`unshare -rn` works the worker runs in a network namespace of its own (loopback only)."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from collections import Counter
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.worker import CRASHED, HARNESS, SCRATCH, memory_status

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 30
ALLOWED = {"evaluate": {0, 2}, "load_run": {0, 2}, "verify": {0, 1, 2}, "resume": {0, 2}}
ENTRIES = tuple(ALLOWED)
ALLOWED["probe"] = {0, 2}  # the harness's own tests (worker.probe)
ALLOWED["evaluate_video"] = {0, 2}  # evaluate video=true, for the cases that aim at its GIF
READ_ONLY = {"load_run", "verify"}  # they never change a run directory, whatever the outcome
EVALUATES = {"evaluate", "evaluate_video"}
# a write the attack made fail (a folder swapped for a link as it is opened): exit 1, as docs/runs.md's
# table gives a failed write, by the commands that write (the outside and below-Python checks still hold)
WRITE_FAILED = ("error: writing ", " failed: ")  # they change nothing of a run but its eval/ folder
APPLY_BYTES = 2 << 30  # address space applying a case's mutations may add to pytest's process
MEMORY_WORDS = ("can't allocate memory", "Cannot allocate memory", "MemoryError", "std::bad_alloc")

# a tiny DQN CartPole run: two evaluations, both checkpoints, a few updates; ~3 s to make
RUN = """train.total_steps=600 train.eval_every=300 train.eval_episodes=2 train.checkpoint_every=300
    train.log_every=100 train.progress=false device=cpu algo.learning_starts=100 algo.train_every=50
    algo.gradient_steps=2""".split()
BASES = {"finished": None, "unfinished": 450}  # stopped (as by SIGTERM) at step 450: a resume trains on


def network_namespace() -> list[str]:
    """`unshare -rn` where it works: the worker in a user and network namespace of its own, with no
    interface but the loopback it brings up for its listeners, so that a connection they miss reaches
    nothing. [] where it does not (CI's machine may refuse user namespaces) or RL_HYDRA_FUZZ_NETNS=0."""
    if os.environ.get("RL_HYDRA_FUZZ_NETNS") == "0" or not shutil.which("unshare"):
        return []
    try:
        works = subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ["unshare", "-rn"] if works else []


class Worker:
    """`python -m tests.fuzz.worker`, one JSON line each way per request."""

    def __init__(self, log: Path):
        # one thread (fork-safe), no bytecode written beside a module first imported by a case, and
        # the same verdicts with or without a GPU (a record's device=cuda then has none to use)
        namespace = network_namespace()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "CUDA_VISIBLE_DEVICES": "", "RL_HYDRA_FUZZ_PARENT": str(os.getpid()),
               "RL_HYDRA_FUZZ_NETNS": "1" if namespace else "0"}  # fmt: skip
        env.pop("RL_HYDRA_TRUST", None)
        self.log = open(log, "wb")
        self.process = subprocess.Popen(
            [*namespace, sys.executable, "-m", "tests.fuzz.worker"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.ready = self.answer()  # {"ready": true, "netns": ..., and the listeners' environment}

    def answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the fuzz worker ended: {Path(self.log.name).read_text()[-2000:]}")
        return json.loads(line)

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self.answer()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.log.close()


def snapshot(root: Path, skip=lambda rel: False) -> dict[str, tuple]:
    """Every entry under `root` (links not followed): its type, mode, and content hash or link target.
    Walked with a stack, not os.walk's recursion (Python 3.11's): a case may nest 1,200 folders."""
    found: dict[str, tuple] = {}
    folders = [""]
    while folders:
        folder = folders.pop()
        for name in sorted(os.listdir(root / folder) if folder else os.listdir(root)):
            rel = f"{folder}/{name}" if folder else name
            if skip(rel):
                continue
            path = root / rel
            info = path.lstat()
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[rel] = ("file", mode, hashlib.sha256(path.read_bytes()).hexdigest()[:16])
            else:
                found[rel] = (stat.filemode(info.st_mode), mode)
                if stat.S_ISDIR(info.st_mode):
                    folders.append(rel)
    return found


def remove_tree(root: Path) -> None:
    """shutil.rmtree without its recursion (Python 3.11's), for a sandbox that nests 1,200 folders."""
    folders, seen = [root], []
    while folders:
        folder = folders.pop()
        seen.append(folder)
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                folders.append(Path(entry.path))
            else:
                os.unlink(entry.path)
    for folder in reversed(seen):
        os.rmdir(folder)


def differences(before: dict, after: dict) -> list[str]:
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(name for name in set(before) & set(after) if before[name] != after[name])
    return [f"+{name}" for name in added] + [f"-{name}" for name in removed] + [f"~{name}" for name in changed]


@dataclass
class Outcome:
    entry: str
    base: str
    applied: list[str]
    answer: dict
    stdout: str
    stderr: str
    events: list[dict]
    changed: list[str]
    outside: list[str]
    planted: str
    problems: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list:
        return [event["detail"] for event in self.events if event["kind"] == kind]

    @property
    def code(self) -> int:
        ends = self.of("end")
        return ends[-1]["code"] if ends else self.answer["status"]

    @property
    def new_imports(self) -> list[str]:
        return self.of("new_import")

    def describe(self) -> str:
        tail = [line for line in self.stderr.splitlines() if line.strip()][-3:]
        imported = f"; imported {', '.join(self.new_imports)}" if self.new_imports else ""
        return (
            f"{self.entry} on a {self.base} run, mutated by {self.applied}: {'; '.join(self.problems)}"
            f" (exit {self.code}, {self.answer['wall_s']} s; stderr ends {tail}{imported})"
        )


def failed_writing(lines: list[str]) -> bool:
    """stderr is the one line of a write that failed (`error: writing <path> failed: <why>`)."""
    return len(lines) == 1 and lines[0].startswith(WRITE_FAILED[0]) and WRITE_FAILED[1] in lines[0]


def judge(outcome: Outcome, start: dict) -> list[str]:
    """The issue's invariants, each broken one a line that starts with its category."""
    problems, code, entry = [], outcome.code, outcome.entry
    problems += below_python(outcome.answer)
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    if outcome.answer["timed_out"]:
        problems.append(f"time: still running after {outcome.answer['wall_s']:.0f} s (killed)")
    elif outcome.answer["status"] < 0:
        problems.append(f"crash: killed by signal {-outcome.answer['status']}")
    for detail in outcome.of("harness"):
        problems.append(f"harness: {detail.strip().splitlines()[-1]}")
    for raised in outcome.of("raised"):
        problems.append(f"traceback: {raised}")
    allowed = ALLOWED[entry] | ({1} if entry not in READ_ONLY and failed_writing(lines) else set())
    if code not in allowed and code not in (CRASHED, HARNESS) and not outcome.answer["timed_out"]:
        problems.append(f"exit: {code} (allowed: {sorted(ALLOWED[entry])})")
    if "Traceback (most recent call last)" in outcome.stderr and not outcome.of("raised"):
        problems.append(f"traceback: printed on stderr ({lines[-1][:150] if lines else ''})")
    if code not in (0, CRASHED, HARNESS) and not outcome.answer["timed_out"]:
        if len(lines) != 1 or not lines[0].startswith("error: "):
            first = lines[0][:150] if lines else ""
            problems.append(f"stderr: {len(lines)} lines on exit {code}, not one `error: ` line (first: {first!r})")
    if outcome.changed and (code == 2 or entry in READ_ONLY):
        problems.append(f"changed: the run directory on exit {code}: {', '.join(outcome.changed[:6])}")
    elif entry in EVALUATES and (beyond := [name for name in outcome.changed if not name[1:].startswith("eval")]):
        problems.append(f"changed: {entry} changed more than eval/: {', '.join(beyond[:6])}")
    written = sorted({f"{name} {path}" for name, path in outcome.of("write_outside")})
    if outcome.outside or written:
        problems.append(f"outside: wrote {', '.join([*outcome.outside[:4], *written[:4]])}")
    if outcome.of("planted_import") or outcome.planted:
        problems.append(f"import: {', '.join(outcome.of('planted_import')) or outcome.planted.strip()}")
    for detail in outcome.of("network"):
        problems.append(f"network: {' '.join(detail)}")
    for spawned in outcome.of("spawn"):
        if not spawned["git"]:
            problems.append(f"spawn: {spawned['what'][:150]}")
    peak = max((end.get("VmPeak", 0) for end in outcome.of("end")), default=0)
    text = outcome.stdout + outcome.stderr + " ".join(outcome.of("raised"))
    if start and peak >= start["limit"] - (64 << 20):
        problems.append(f"memory: address space reached the limit ({peak >> 20} MiB)")
    elif any(word in text for word in MEMORY_WORDS):
        problems.append(
            "memory: an allocation past the limit was refused (" + next(w for w in MEMORY_WORDS if w in text) + ")"
        )
    return problems


def below_python(answer: dict) -> list[str]:
    """What the worker saw that no audit hook does: connections its listeners accepted, and a
    process group past its limit (killed)."""
    problems = []
    taken = Counter(connection["listener"] for connection in answer.get("connections", []))
    for listener, count in sorted(taken.items()):
        problems.append(f"connection: {count} to the {listener} listener, made below Python's audit hook")
    if answer.get("too_many_processes"):
        count, limit = answer["processes"], answer["process_limit"]
        problems.append(f"processes: {count} in the case's group, past {limit} (killed)")
    return problems


class Fuzzer:
    """The worker, the baseline runs and a scratch root, for one test module."""

    def __init__(self, root: Path):
        self.root = root
        self.worker = Worker(root / "worker.log")
        self.bases = {}
        for name, stop_at in BASES.items():
            path = root / "bases" / name
            answer = self.worker.ask(
                {
                    "op": "train",
                    "run_dir": str(path),
                    "overrides": RUN,
                    "stop_at": stop_at,
                    "log": str(root / f"{name}.log"),
                    "timeout": 300,
                }
            )
            if answer["status"] != 0 or not (path / "checkpoints" / "last.pt").is_file():
                raise RuntimeError(f"baseline {name}: {(root / f'{name}.log').read_text()[-3000:]}")
            (path / "train.log").unlink(missing_ok=True)  # its timestamps are no one's business
            self.bases[name] = path
        self.pristine = {name: snapshot(path) for name, path in self.bases.items()}

    def run(
        self,
        entry: str,
        mutations=(),
        base: str = "finished",
        timeout: float = TIMEOUT_S,
        source: str = "",
        environment: dict | None = None,
    ) -> Outcome:
        """Open a mutated copy of the `base` run with `entry` (or run `source`: entry "probe"), with
        `environment` over the case's own (a name set to None: unset)."""
        sandbox = Path(tempfile.mkdtemp(prefix="case-", dir=self.root))
        options = {"timeout": timeout, "source": source, "environment": environment or {}}
        try:
            return self._run(sandbox, entry, list(mutations), base, options)
        finally:
            try:
                remove_tree(sandbox)
            except OSError:
                shutil.rmtree(sandbox, ignore_errors=True)  # a folder the case left unreadable

    def _run(self, sandbox: Path, entry: str, mutations: list, base: str, options: dict) -> Outcome:
        run = sandbox / "run"
        shutil.copytree(self.bases[base], run, symlinks=True)
        for folder in ("outside", "home", "tmp", "cwd", "capture", "held"):
            (sandbox / folder).mkdir()
        with address_space(APPLY_BYTES):
            applied = [apply(mutation, run, sandbox / "outside") for mutation in mutations]

        def elsewhere(rel: str) -> bool:  # held/: the run's own folder while a swapper's link stands in
            return rel in ("run", "capture", "held") or rel.startswith(f"tmp/{SCRATCH}")

        before, outside = snapshot(run), snapshot(sandbox, elsewhere)
        with ExitStack() as concurrently:  # a link swapper: started here, stopped (and undone) on leaving
            for mutation in mutations:
                for during in getattr(mutation, "during", lambda run, sandbox: [])(run, sandbox):
                    concurrently.enter_context(during)
            answer = self.worker.ask(
                {"op": "case", "entry": entry, "run_dir": str(run), "sandbox": str(sandbox), **options}
            )
        capture = sandbox / "capture"
        events = [json.loads(line) for line in read(capture / "events").splitlines() if line.strip()]
        outcome = Outcome(
            entry,
            base,
            applied,
            answer,
            read(capture / "stdout"),
            read(capture / "stderr"),
            events,
            differences(before, snapshot(run)),
            differences(outside, snapshot(sandbox, elsewhere)),
            read(capture / "planted"),
        )
        start = next(iter(outcome.of("start")), {})
        outcome.problems = judge(outcome, start)
        return outcome

    def close(self) -> None:
        """Stop the worker; a case that reached a baseline run (never its copy) is the harness's failure."""
        self.worker.close()
        for name, path in self.bases.items():
            assert snapshot(path) == self.pristine[name], f"a case changed the baseline run {name}"


@contextmanager
def address_space(extra: int):
    """At most `extra` bytes more address space in this process for the block, the limit restored after: a
    mutation that blows up (once, copying an alias bomb's shared lists one by one) fails its case with a
    MemoryError, where it would take the machine's memory and have pytest's worker killed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = memory_status()["VmSize"]
    bound = size + extra if hard == resource.RLIM_INFINITY else min(size + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (bound, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def apply(mutation, run: Path, outside: Path) -> str:
    """What the mutation did; one that finds nothing to change (an earlier one replaced its file by a
    link, a FIFO, or a file where a folder was) says so."""
    try:
        return mutation.apply(run, outside) or f"{mutation!r} (nothing to change)"
    except OSError as error:
        return f"{mutation!r} (not applied: {error.strerror})"


def read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""
