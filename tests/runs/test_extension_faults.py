"""A crash while a completed run is extended (`train.py resume=RUN train.total_steps=<more>`) leaves a
record that resumes and verifies: summary.json says `running` before the first step past the old
budget, so kill -9 at any point of the extension, or a full disk in the middle of it, is followed by a
resume that completes exactly as an uninterrupted extension does, and rl-hydra-verify accepts the
record before and after that resume."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from rl_hydra.commands.launch import RunFailed, launch
from rl_hydra.commands.resume import resume_config
from rl_hydra.runs.run_dir import RunDirectory
from rl_hydra.verify import main as verify_main
from tests.conftest import metric_rows
from tests.runs.test_run_record import RECORD, DiskFull

EXTEND = ["train.total_steps=800"]  # RECORD trains 400 steps with a checkpoint every 100


def extend(run_dir: Path) -> dict:
    """`train.py resume=run_dir train.total_steps=800` in this process (also what a user types again
    after a crash: the change is then already recorded)."""
    directory = RunDirectory(run_dir)
    cfg, changes = resume_config(directory, EXTEND)
    return launch(cfg, run_dir, resume=True, overrides=EXTEND, config_changes=changes)


def _extend_in_child(run_dir: str, kill_after_replace: int | None) -> None:
    """The extension in a child process; `kill_after_replace`: SIGKILL itself right after that
    rename of a new last.pt (the first is the extension's first new checkpoint)."""
    if kill_after_replace is not None:
        replace, calls = os.replace, []

        def dying_replace(src, dst, **dir_fds):
            replace(src, dst, **dir_fds)
            if str(dst).endswith("last.pt"):
                calls.append(dst)
                if len(calls) == kill_after_replace:
                    os.kill(os.getpid(), signal.SIGKILL)

        os.replace = dying_replace
    try:
        extend(Path(run_dir))
    except RunFailed as error:
        print(f"error: {error}", file=sys.stderr)
        os._exit(error.code)


@pytest.fixture(scope="module")
def forkserver():
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "rl_hydra.training", "rl_hydra.commands.resume", "tests.conftest"])
    return context


def extend_in_child(context, run_dir: Path, kill_after_s: float | None = None, kill_after_replace=None) -> int | None:
    child = context.Process(target=_extend_in_child, args=(str(run_dir), kill_after_replace))
    child.start()
    if kill_after_s is not None:
        child.join(kill_after_s)
        if child.is_alive():
            os.kill(child.pid, signal.SIGKILL)
    child.join(120)
    return child.exitcode


@pytest.fixture(scope="module")
def completed(tmp_path_factory) -> Path:
    """A run completed at step 400 (the record every test extends a copy of)."""
    from rl_hydra import train

    run_dir = tmp_path_factory.mktemp("completed") / "run"
    train(*RECORD, run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def extended(completed, tmp_path_factory) -> Path:
    """The same run extended to step 800 without a fault: what every faulty extension must end as."""
    run_dir = Path(shutil.copytree(completed, tmp_path_factory.mktemp("extended") / "run"))
    extend(run_dir)
    return run_dir


def copy_of(completed: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(completed, tmp_path / name))


def weights(run_dir: Path, name: str = "last") -> dict:
    return torch.load(run_dir / "checkpoints" / f"{name}.pt", weights_only=True)["agent"]


def assert_same_tensors(found, expected, where: str = "") -> None:
    if isinstance(expected, dict):
        assert isinstance(found, dict) and found.keys() == expected.keys(), where
        for key in expected:
            assert_same_tensors(found[key], expected[key], f"{where}.{key}")
    elif isinstance(expected, torch.Tensor):
        assert torch.equal(found, expected), where
    else:
        assert found == expected, where


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def verifies(capsys, run_dir: Path) -> bool:
    capsys.readouterr()
    code = verify_main([str(run_dir)])
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    return True


def assert_completes_as_the_uninterrupted_extension(run_dir: Path, extended: Path) -> None:
    assert metric_rows(run_dir) == metric_rows(extended)
    for name in ("last", "best"):
        assert_same_tensors(weights(run_dir, name), weights(extended, name), name)
    summary = summary_of(run_dir)
    assert summary["status"] == "completed" and summary["global_step"] == 800
    assert not list(run_dir.rglob("*.tmp"))


def test_an_extension_killed_after_its_first_new_checkpoint_verifies_and_resumes_exactly(
    completed, extended, forkserver, tmp_path, capsys
):
    run_dir = copy_of(completed, tmp_path)
    assert extend_in_child(forkserver, run_dir, kill_after_replace=1) == -signal.SIGKILL
    assert torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)["runner"]["global_step"] == 500
    summary = summary_of(run_dir)  # the record says the run was being extended, from where
    assert summary["status"] == "running" and summary["global_step"] == 400
    assert verifies(capsys, run_dir)
    assert extend_in_child(forkserver, run_dir) == 0
    assert_completes_as_the_uninterrupted_extension(run_dir, extended)
    sessions = json.loads((run_dir / "provenance.json").read_text())["sessions"]
    assert [s["status"] for s in sessions] == ["completed", "killed", "completed"]
    assert verifies(capsys, run_dir)


def test_an_extension_killed_at_random_moments_resumes_exactly(completed, extended, forkserver, tmp_path):
    started = time.perf_counter()
    extend_in_child(forkserver, copy_of(completed, tmp_path, "timing"))
    duration = time.perf_counter() - started
    rng = random.Random(0)
    for trial, when in enumerate([rng.uniform(0, duration) for _ in range(5)] + [("rename", 4)]):
        run_dir = copy_of(completed, tmp_path, f"trial{trial}")
        if isinstance(when, tuple):  # the last checkpoint before the end (step 800's is the fifth)
            code = extend_in_child(forkserver, run_dir, kill_after_replace=when[1])
        else:
            code = extend_in_child(forkserver, run_dir, kill_after_s=when)
        assert code in (0, -signal.SIGKILL), (when, code)
        assert extend_in_child(forkserver, run_dir) == 0, when
        assert_completes_as_the_uninterrupted_extension(run_dir, extended)


# (file, how many of its writes in the extension succeed before the disk is full): step 600's
# checkpoint, step 800's (the last), the completed summary (the first is the `running` one)
FULL_DURING_EXTENSION = [("last.pt", 1), ("last.pt", 3), ("summary.json", 1)]


@pytest.mark.parametrize("name,after", FULL_DURING_EXTENSION)
def test_a_full_disk_during_an_extension_leaves_a_record_that_verifies_and_resumes_exactly(
    completed, extended, tmp_path, monkeypatch, capsys, name, after
):
    run_dir = copy_of(completed, tmp_path)
    with monkeypatch.context() as patch:
        DiskFull(patch, name, after)
        with pytest.raises(RunFailed) as failed:
            extend(run_dir)
    message = str(failed.value)
    assert failed.value.code == 1 and "\n" not in message
    assert f"{name} failed: the disk is full" in message and "free some space, then resume with" in message
    assert summary_of(run_dir)["status"] in ("running", "failed")
    assert verifies(capsys, run_dir)
    extend(run_dir)
    assert_completes_as_the_uninterrupted_extension(run_dir, extended)
    assert verifies(capsys, run_dir)


def test_a_first_session_killed_leaves_no_summary_and_resumes_as_before(forkserver, tmp_path):
    """Only a session that follows an ended one marks summary.json running: a first session's
    record has none until it ends (tests/runs/test_run_record.py kills first sessions at random)."""
    from tests.runs.test_run_record import train_in_child

    run_dir = tmp_path / "run"
    assert train_in_child(forkserver, run_dir, kill_at_replace=2) == -signal.SIGKILL
    assert not (run_dir / "summary.json").exists()
    assert train_in_child(forkserver, run_dir) == 0
    assert summary_of(run_dir)["status"] == "completed"


def test_a_summary_marked_running_where_no_resumed_session_started_is_refused_and_differs(completed, tmp_path, capsys):
    """`running` is no way around the completed summary's check: it must be where a resume began."""
    from rl_hydra.commands.resume import check_record
    from rl_hydra.runs.run_dir import RunError

    run_dir = copy_of(completed, tmp_path)
    summary = {**summary_of(run_dir), "status": "running"}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(RunError, match="no resumed session that started there: the record does not hold together"):
        check_record(RunDirectory(run_dir))
    capsys.readouterr()
    assert verify_main([str(run_dir)]) == 1
    assert "no resumed session that started there" in capsys.readouterr().err
