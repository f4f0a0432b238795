"""A run directory is a record: a refused command changes no byte of it, one process writes to it
at a time, faults (kill -9, a full disk) lose nothing and say what happened, and every run records its
provenance (rl-hydra-verify, which re-makes a run from its record: tests/runs/test_verify.py)."""

from __future__ import annotations

import copy
import errno
import functools
import hashlib
import json
import multiprocessing
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rl_hydra.commands.cli import main as cli_main
from rl_hydra.commands.launch import RunFailed, launch
from rl_hydra.runs.run_dir import RunDirectory, RunLock
from rl_hydra.runs.trust import TRUST_VARIABLE
from tests.conftest import ROOT, TINY, compose_config, metric_rows, run_cli

# a run with updates, evaluations, log rows and checkpoints, in about half a second
RECORD = [
    *TINY,
    "train.total_steps=400",
    "train.eval_every=200",
    "train.log_every=50",
    "train.checkpoint_every=100",
    "train.stop_at_return=null",
    "algo.learning_starts=50",
    "algo.train_every=4",
    "algo.gradient_steps=1",
    "algo.batch_size=16",
]


def snapshot(path: Path) -> dict[str, tuple]:
    """Every file and folder under `path`: its bytes' hash, mode and modification time."""
    found = {}
    for item in sorted(path.rglob("*")):
        stat = item.stat()
        digest = hashlib.sha1(item.read_bytes()).hexdigest() if item.is_file() else "dir"
        found[str(item.relative_to(path))] = (digest, stat.st_mode, stat.st_mtime_ns)
    return found


def cli(monkeypatch, capsys, *argv: str) -> tuple[int, list[str], list[str]]:
    """`python train.py argv...` in this process: (exit code, stdout lines, stderr lines). Hydra's
    job logging leaves its console handler (on this test's captured stdout) on the root logger:
    the root logger is put back as it was."""
    import logging

    from hydra.core.singleton import Singleton

    root = logging.getLogger()
    handlers, level, hydra_state = list(root.handlers), root.level, copy.deepcopy(Singleton.get_state())
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    try:
        cli_main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code
    finally:  # and Hydra's process-wide singletons (its version_base, config, ...), as hydra.main left them
        root.handlers[:] = handlers
        root.setLevel(level)
        Singleton.set_state(hydra_state)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    from rl_hydra import train

    run_dir = tmp_path_factory.mktemp("record") / "run"
    train(*RECORD, run_dir=run_dir)
    return run_dir


# one key of each group and of the run itself, each given a wrong type, an out-of-range value and a typo
FUZZ_KEYS = {
    "algo": ("algo.gamma", "2"),
    "env": ("env.num_envs", "0"),
    "network": ("network.hidden_sizes", "[-4]"),
    "buffer": ("buffer.capacity", "-1"),
    "logger": ("logger.csv._target_", "nowhere.Logger"),
    "train": ("train.eval_every", "0"),
    "run": ("seed", "-1"),
}
FUZZ = [
    case
    for key, out_of_range in FUZZ_KEYS.values()
    for case in ([f"{key}=abc"], [f"{key}={out_of_range}"], [f"{key[:-1]}={out_of_range}"])
]
REFUSED_LAUNCHES = [
    ["seed=7"],
    ["train.total_steps=600"],
    ["algo=iqn"],
    ["env=acrobot"],
    ["device=cuda:9"],
    ["algo=nope"],
    ["+algo.extra=1"],
    *FUZZ,
]
REFUSED_RESUMES = [
    ["train.total_steps=100"],
    ["train.total_steps=3e2", "seed=3"],
    ["algo.gamma=0.5"],
    ["env.id=Acrobot-v1"],
    ["algo=iqn"],
    ["network.hidden_sizes=[8]"],
    ["train.total_stepz=500"],
    ["train.total_steps=abc"],
    ["train.total_steps=-5"],
    ["train.total_steps=1.5"],
    ["+foo=1"],
    ["train.total_steps=[1"],
    ["seed=0,1"],
    *FUZZ,
]


@pytest.mark.parametrize("resume", [False, True], ids=["launch", "resume"])
def test_a_refused_command_changes_no_byte_of_the_run_and_says_why_in_one_line(finished, monkeypatch, capsys, resume):
    before = snapshot(finished)
    for args in REFUSED_RESUMES if resume else REFUSED_LAUNCHES:
        argv = [f"resume={finished}", *args] if resume else [*RECORD, f"hydra.run.dir={finished}", *args]
        code, out, err = cli(monkeypatch, capsys, *argv)
        assert code == 2 and out == [] and len(err) == 1 and err[0].startswith("error: "), (args, out, err)
        assert snapshot(finished) == before, args


def test_a_launch_that_finds_its_run_finished_writes_nothing(finished, monkeypatch, capsys):
    before = snapshot(finished)
    for argv in (
        [*RECORD, f"hydra.run.dir={finished}"],
        [f"resume={finished}"],
        [f"resume={finished}", "train.total_steps=400", "train.progress=false"],
    ):
        code, out, _ = cli(monkeypatch, capsys, *argv)
        assert code == 0 and "already holds a finished run (step 400); not training again" in out[-1]
    assert snapshot(finished) == before


def test_a_resume_validates_its_overrides_as_a_fresh_run_and_records_them_once_it_runs(
    finished, tmp_path, monkeypatch, capsys
):
    run_dir = tmp_path / "run"
    os.system(f"cp -r {finished} {run_dir}")
    code, _, err = cli(monkeypatch, capsys, f"resume={run_dir}", "train.total_steps=600.5")  # as a new run: refused
    assert code == 2 and err == [
        "error: train.total_steps=600.5 is not an integer; expected an integer >= 1 and <= 1000000000000"
    ], err
    code, _, err = cli(monkeypatch, capsys, f"resume={run_dir}", "train.total_steps=6e2")  # as a new run: 600
    assert code == 0, err
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    assert cfg.train.total_steps == 600 and isinstance(cfg.train.total_steps, int)
    assert OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")[-1] == "train.total_steps=600"
    assert json.loads((run_dir / "summary.json").read_text())["global_step"] == 600
    sessions = json.loads((run_dir / "provenance.json").read_text())["sessions"]
    assert [s["start_step"] for s in sessions] == [0, 400] and [s["end_step"] for s in sessions] == [400, 600]
    assert sessions[1]["config_changes"] == {"train.total_steps": [400, 600]}
    assert cli(monkeypatch, capsys, f"resume={run_dir}")[0] == 0  # a plain resume after it still works


# --- one writer at a time -----------------------------------------------------------------
def test_a_second_process_is_refused_while_one_holds_the_run(finished, monkeypatch, capsys):
    with RunLock(RunDirectory(finished)):  # another process, as far as flock is concerned
        before = snapshot(finished)
        for argv in ([*RECORD, f"hydra.run.dir={finished}"], [f"resume={finished}", "train.total_steps=500"]):
            code, out, err = cli(monkeypatch, capsys, *argv)
            assert code == 2 and out == [] and len(err) == 1, err
            assert f"in use by another process (pid {os.getpid()} on host {socket.gethostname()}" in err[0]
        assert snapshot(finished) == before
    assert cli(monkeypatch, capsys, f"resume={finished}")[0] == 0  # released: the lock died with its holder


SLOW = "env.wrappers=[{_target_:tests.helpers.SlowDown,_partial_:true,seconds:0.001}]"


@pytest.mark.slow  # real processes (the in-process lock test above runs by default)
def test_two_launches_into_one_directory_one_trains_and_the_other_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(TRUST_VARIABLE, "tests.helpers.")  # the resume would build the run's slowed env again
    # long enough (6000 steps of 1 ms at least) to outlast two more processes' start-up on a loaded machine
    args = [
        sys.executable,
        str(ROOT / "train.py"),
        *RECORD,
        "train.total_steps=6000",
        SLOW,
        f"hydra.run.dir={tmp_path}",
    ]
    first = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while not (tmp_path / "metrics.csv").exists() and first.poll() is None:
        time.sleep(0.05)
    second = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    resume = run_cli(f"resume={tmp_path}", "train.total_steps=8000")
    assert first.wait(120) == 0, first.communicate()[1]
    for refused in (second, resume):
        assert refused.returncode == 2 and f"in use by another process (pid {first.pid} " in refused.stderr
    steps = [int(row["step"]) for row in metric_rows(tmp_path)]
    assert steps == list(range(50, 6001, 50))


@pytest.mark.slow  # real processes (the in-process lock test above runs by default)
def test_two_sweeps_into_one_sweep_directory_leave_every_job_whole(tmp_path):
    """Each job is trained by one sweep; the other sweep's launch of it is refused (a failed job
    of that sweep) or finds it finished."""
    args = [
        sys.executable,
        str(ROOT / "train.py"),
        "-m",
        *RECORD,
        "train.total_steps=1000",
        SLOW,
        "seed=0,1",
        f"hydra.sweep.dir={tmp_path}",
        "hydra.sweep.subdir=seed${seed}",
    ]
    sweeps = [
        subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outputs = [sweep.communicate(timeout=180) for sweep in sweeps]
    for (_, err), sweep in zip(outputs, sweeps):
        job_errors = [line for line in err.splitlines() if line.startswith("error: ") and "jobs failed" not in line]
        assert all("in use by another process" in line for line in job_errors), err
        assert sweep.returncode == (1 if job_errors else 0), err
    for seed in (0, 1):
        job = tmp_path / f"seed{seed}"
        assert [int(row["step"]) for row in metric_rows(job)] == list(range(50, 1001, 50)), job
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["global_step"] == 1000 and summary["seed"] == seed
    assert not list(tmp_path.rglob("*.tmp"))


# --- faults -------------------------------------------------------------------------------
def _train_in_child(run_dir: str, config: str, kill_at_replace: int | None) -> None:
    """A training process (started by a forkserver that has imported torch): launch, or resume
    when the directory holds a run. `kill_at_replace`: SIGKILL itself inside that checkpoint write,
    between writing the temp file and renaming it over last.pt."""
    if kill_at_replace is not None:
        replace, calls = os.replace, []

        def dying_replace(src, dst, **dir_fds):
            if str(dst).endswith("last.pt"):
                calls.append(dst)
                if len(calls) == kill_at_replace:
                    os.kill(os.getpid(), signal.SIGKILL)
            replace(src, dst, **dir_fds)

        os.replace = dying_replace
    directory = RunDirectory(run_dir)
    resume = directory.config_yaml.is_file()
    cfg = OmegaConf.load(directory.config_yaml) if resume else OmegaConf.create(config)  # RECORD's, composed once
    try:
        launch(cfg, run_dir, resume=resume, overrides=RECORD)
    except RunFailed as error:
        print(f"error: {error}", file=sys.stderr)
        os._exit(error.code)


@pytest.fixture(scope="module")
def forkserver():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "rl_hydra.training", "rl_hydra.commands.launch", "tests.conftest"])
    return context


@functools.cache
def record_config() -> str:
    return OmegaConf.to_yaml(compose_config(*RECORD))


def train_in_child(
    context, run_dir: Path, kill_after_s: float | None = None, kill_at_replace: int | None = None
) -> int | None:
    child = context.Process(target=_train_in_child, args=(str(run_dir), record_config(), kill_at_replace))
    child.start()
    if kill_after_s is not None:
        child.join(kill_after_s)
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
    child.join(120)
    return child.exitcode


def tensorboard_steps(run_dir: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    return [event.step for event in events.Scalars("rollout/episodes")]


def test_kill_9_at_any_moment_then_resume_completes_the_run_exactly(tmp_path, forkserver):
    reference = tmp_path / "reference"
    assert train_in_child(forkserver, reference) == 0
    expected = metric_rows(reference)
    started = time.perf_counter()
    train_in_child(forkserver, tmp_path / "timing")
    duration = time.perf_counter() - started
    rng = random.Random(0)
    # 20 kills at random moments (start-up, updates, evaluations, checkpoints), 4 inside a checkpoint's write
    trials = [("time", rng.uniform(0, duration)) for _ in range(20)] + [("rename", k) for k in (1, 2, 3, 4)]
    for i, (how, when) in enumerate(trials):
        run_dir = tmp_path / f"trial{i}"
        code = train_in_child(forkserver, run_dir, **{"kill_after_s" if how == "time" else "kill_at_replace": when})
        assert code in (0, -signal.SIGKILL), (how, when, code)
        assert train_in_child(forkserver, run_dir) == 0, (how, when)  # resume=, or launch again if it never began
        assert metric_rows(run_dir) == expected, (how, when)
        assert tensorboard_steps(run_dir) == [int(row["step"]) for row in expected], (how, when)
        assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
        assert not list(run_dir.rglob("*.tmp")), (how, when)


class DiskFull:
    """Writes to the file named `name` fail with ENOSPC once it has been opened for writing `after`
    times, however it is written: atomically (os.fdopen of a temp file beside it), appended to
    (open), or raw (os.write)."""

    def __init__(self, monkeypatch, name: str, after: int = 0):
        self.name, self.after, self.seen = name, after, 0
        opener, fdopen, write = open, os.fdopen, os.write
        monkeypatch.setattr(
            "builtins.open", lambda file, mode="r", *a, **k: self.wrap(opener(file, mode, *a, **k), mode)
        )
        monkeypatch.setattr(os, "fdopen", lambda fd, mode="r", *a, **k: self.wrap(fdopen(fd, mode, *a, **k), mode))
        monkeypatch.setattr(os, "write", lambda fd, data: self.check(fd) or write(fd, data))

    def hits(self, fd: int) -> bool:
        target = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if target != self.name and not (target.startswith(f".{self.name}.") and target.endswith(".tmp")):
            return False
        self.seen += 1
        return self.seen > self.after

    def check(self, fd: int) -> None:
        if self.hits(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def wrap(self, file, mode: str):
        writable = any(c in mode for c in "wa+")
        return FailingFile(file) if writable and self.hits(file.fileno()) else file


class FailingFile:
    """A file whose every write fails as on a full disk."""

    def __init__(self, file):
        self.file = file

    def write(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


# (file, which write of it fails, the checkpoint step the error names; None: no checkpoint yet)
WRITE_SITES = [
    ("config.yaml", 0, None),
    ("overrides.yaml", 0, None),
    ("provenance.json", 0, None),
    (".lock", 0, None),
    ("metrics.csv", 0, None),
    ("last.pt", 0, None),
    ("last.pt", 2, 200),
    ("best.pt", 0, 100),
    ("summary.json", 0, 400),
    ("provenance.json", 1, 400),
]


@pytest.mark.parametrize("name,after,checkpoint", WRITE_SITES)
def test_a_full_disk_at_any_write_says_what_and_where_to_resume_and_loses_nothing(
    tmp_path, monkeypatch, name, after, checkpoint, finished
):
    run_dir = tmp_path / "run"
    cfg = compose_config(*RECORD)
    with monkeypatch.context() as patch:
        DiskFull(patch, name, after)
        try:
            launch(cfg, run_dir)
            failure = None
        except RunFailed as error:
            failure = error
    assert not list(tmp_path.rglob("*.tmp"))
    if name == "provenance.json" and after == 1:  # the session's end: the run itself is whole
        assert failure is None
    else:
        message = str(failure)
        assert failure.code == 1 and "\n" not in message and f"{name} failed: the disk is full" in message
        if checkpoint is None:
            assert "no checkpoint was written yet" in message and "launch the run again" in message
        else:
            assert (
                f"checkpoints/last.pt (step {checkpoint})" in message
                and f"resume with: python train.py resume={run_dir}" in message
            )
        launch(
            OmegaConf.load(run_dir / ".hydra" / "config.yaml")
            if (run_dir / ".hydra" / "config.yaml").is_file()
            else compose_config(*RECORD),
            run_dir,
            resume=(run_dir / ".hydra" / "config.yaml").is_file(),
        )
    assert metric_rows(run_dir) == metric_rows(finished)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize(
    "name,what", [("train.log", "the log goes on in the console only"), ("tensorboard", "logger=tensorboard failed")]
)
def test_a_full_disk_under_the_log_or_tensorboard_is_one_warning_and_the_record_goes_on(
    tmp_path, monkeypatch, capsys, caplog, name, what
):
    """metrics.csv is the run's record; its log and TensorBoard's copy are not worth stopping for."""
    from torch.utils.tensorboard import SummaryWriter

    def full(*args, **kwargs):  # TensorBoard writes its events from a thread of its own: fail where it is fed
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        if name == "tensorboard":
            patch.setattr(SummaryWriter, "add_scalar", full)
        else:
            DiskFull(patch, name)
        summary = launch(compose_config(*RECORD, "logger=[csv,tensorboard]"), tmp_path)
    assert summary["status"] == "completed" and summary["global_step"] == 400
    said = capsys.readouterr().err.splitlines() + [record.getMessage() for record in caplog.records]
    warnings = [line for line in said if what in line]
    assert len(warnings) == 1 and ("the disk is full" in warnings[0] or "No space left" in warnings[0]), said
    assert not list(tmp_path.rglob("*.tmp"))


@pytest.mark.slow  # a real tmpfs filled up, then grown: mounting needs root
def test_a_really_full_disk_stops_the_run_in_one_line_and_a_resume_finishes_it(tmp_path):
    """A small tmpfs fills up during the run (mounting one needs root: skipped elsewhere)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        failed = run_cli(*RECORD, "train.total_steps=3000", f"hydra.run.dir={mount / 'run'}")
        errors = [line for line in failed.stderr.splitlines() if line.startswith("error:")]
        assert failed.returncode == 1 and len(errors) == 1, failed.stderr
        assert (
            "failed: the disk is full" in errors[0]
            and f"resume with: python train.py resume={mount / 'run'}" in errors[0]
        )
        assert not list(mount.rglob("*.tmp"))
        subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
        resumed = run_cli(f"resume={mount / 'run'}")
        assert resumed.returncode == 0, resumed.stderr
        steps = [int(row["step"]) for row in metric_rows(mount / "run")]
        assert steps == list(range(50, 3001, 50)) or steps == sorted(set(steps)) and steps[-1] == 3000
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


# --- provenance (rl-hydra-verify: tests/runs/test_verify.py) ---------------------------------------
def test_every_run_records_its_provenance_and_load_run_shows_it(finished):
    import gymnasium
    import numpy
    import torch

    from rl_hydra import load_run

    record = load_run(finished).provenance["sessions"][0]
    assert record["status"] == "completed" and (record["start_step"], record["end_step"]) == (0, 400)
    assert (record["torch"], record["gymnasium"], record["numpy"]) == (
        torch.__version__,
        gymnasium.__version__,
        numpy.__version__,
    )
    assert record["python"] and record["hydra"] and record["rl_hydra"] and record["device"] == "cpu"
    assert record["host"] == socket.gethostname() and record["started"] <= record["ended"]
    if (ROOT / ".git").exists():
        assert len(record["git_commit"]) == 40 and isinstance(record["git_dirty"], bool)
