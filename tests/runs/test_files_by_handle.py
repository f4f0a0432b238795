"""A run directory's files are reached by handle (rl_hydra/runs/files.py): no write goes through a
link, into a file with a second name (a hard link), or through a link swapped in after the check;
every write is a rename or an append to the run's own file."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.runs.files import MAX_DEPTH, Folder, NotOwnFile
from rl_hydra.runs.run_dir import RunDirectory, RunError
from tests.runs.test_record_side_effects import resume


def digest(root) -> dict[str, str]:
    """Every file under `root` (links as their text), by content."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[str(path.relative_to(root))] = "-> " + os.readlink(path)
        elif path.is_file():
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def remove_deep(folder: Folder, name: str) -> None:
    """rm -r by handle, without recursion (the tree is deeper and longer than a path can name)."""
    chain = [folder.child(name)]
    while True:
        inner = [n for n in chain[-1].names()]
        folders = [n for n in inner if os.path.isdir(os.path.join(f"/proc/self/fd/{chain[-1].fd}", n))]
        if folders:
            chain.append(chain[-1].child(folders[0]))
            continue
        for n in inner:
            chain[-1].unlink(n)
        done = chain.pop()
        done.close()
        if not chain:
            os.rmdir(name, dir_fd=folder.fd)
            return
        os.rmdir(os.path.basename(done.path), dir_fd=chain[-1].fd)


@pytest.fixture
def outside(tmp_path):
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"precious\n")
    return victim


@pytest.mark.parametrize("name", [".lock", "train.log", "metrics.csv"])
def test_a_hard_link_to_an_outside_file_is_never_written(run_dir, outside, name, monkeypatch, capsys):
    """Finding 1: the lock's JSON truncated the outside file, train.log appended to it."""
    entry = run_dir / name
    entry.unlink(missing_ok=True)
    os.link(outside, entry)
    before = digest(run_dir)
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 2
    assert resume(run_dir, monkeypatch) == 2  # "not training again" wrote the lock too
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert all("has 2 names (hard links" in line for line in errors), errors
    assert outside.read_bytes() == b"precious\n"
    assert digest(run_dir) == before


def test_the_lock_as_a_folder_is_refused_as_bad_input(run_dir, monkeypatch, capsys):
    """Finding 17: `.lock` as a directory exited 1, as if the run had failed."""
    (run_dir / ".lock").unlink(missing_ok=True)
    (run_dir / ".lock").mkdir()
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 2
    assert ".lock is a folder, not a file" in capsys.readouterr().err


def test_train_log_linked_to_the_summary_is_refused_before_anything_is_taken(run_dir, monkeypatch, capsys):
    """Finding 8: an internal link that O_NOFOLLOW refuses (ELOOP) failed after the directory was taken."""
    (run_dir / "train.log").unlink()
    (run_dir / "train.log").symlink_to("summary.json")
    before = digest(run_dir)
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 2
    assert "train.log is a symbolic link to summary.json" in capsys.readouterr().err
    assert digest(run_dir) == before


def test_a_folder_named_like_a_temp_file_is_left_alone(run_dir, monkeypatch):
    """Finding 8: `.evil.tmp` as a folder made the temp-file cleanup fail after the directory was taken."""
    (run_dir / ".evil.tmp").mkdir()
    (run_dir / ".hydra" / ".x.tmp").mkdir()
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 0
    assert (run_dir / ".evil.tmp").is_dir() and RunDirectory(run_dir).checkpoint_step() == 450


def test_a_hard_linked_gif_is_replaced_not_written_through(run_dir, outside):
    """Finding 1: PIL saved the GIF in place, into the outside file it was a second name of."""
    pytest.importorskip("pygame")
    gif = run_dir / "eval" / "videos" / "last_seed0.gif"
    gif.parent.mkdir(parents=True)
    os.link(outside, gif)
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1", "video=true"]) == 0
    assert outside.read_bytes() == b"precious\n"
    assert gif.read_bytes().startswith(b"GIF8") and gif.stat().st_nlink == 1


def test_a_gif_linked_to_the_checkpoint_replaces_the_link(run_dir):
    """Finding 7: `last_seed0.gif -> ../../checkpoints/last.pt` made evaluate write a GIF over last.pt."""
    pytest.importorskip("pygame")
    last = run_dir / "checkpoints" / "last.pt"
    checkpoint = last.read_bytes()
    gif = run_dir / "eval" / "videos" / "last_seed0.gif"
    gif.parent.mkdir(parents=True)
    gif.symlink_to("../../checkpoints/last.pt")
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1", "video=true"]) == 0
    assert last.read_bytes() == checkpoint
    assert not gif.is_symlink() and gif.read_bytes().startswith(b"GIF8")


def test_a_sweep_with_a_damaged_member_writes_no_gif_anywhere(run_dir, tmp_path, capsys):
    """Finding 7: a sweep's video=true wrote GIFs into every member, then refused for the damaged one."""
    pytest.importorskip("pygame")
    sweep = tmp_path / "sweep"
    shutil.copytree(run_dir, sweep / "seed=0")
    shutil.copytree(run_dir, sweep / "seed=1")
    (sweep / "seed=1" / "metrics.csv").write_text("step,eval/return_mean\n100,abc\n")  # read after the GIFs
    before = digest(sweep)
    assert evaluate_main([f"run_dir={sweep}", "episodes=1", "video=true"]) == 2
    assert len([line for line in capsys.readouterr().err.splitlines() if line.strip()]) == 1
    assert digest(sweep) == before


def swap(run_dir, name: str, victim_folder) -> None:
    entry = run_dir / name
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    entry.symlink_to(victim_folder, target_is_directory=True)


def test_evaluate_never_writes_through_a_folder_swapped_for_a_link(run_dir, tmp_path, monkeypatch, capsys):
    """Finding 5: evaluate wrote eval/ into an outside folder linked in after the check (here: while
    the episodes run, after every check)."""
    from rl_hydra.commands.run import Run

    victim = tmp_path / "victim"
    victim.mkdir()
    evaluate = Run.evaluate

    def evaluate_then_swap(self, *args, **kwargs):
        result = evaluate(self, *args, **kwargs)
        swap(run_dir, "eval", victim)
        return result

    monkeypatch.setattr(Run, "evaluate", evaluate_then_swap)
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1"]) != 0
    assert list(victim.iterdir()) == []
    assert "eval" in capsys.readouterr().err


def test_resume_never_writes_checkpoints_through_a_folder_swapped_for_a_link(run_dir, tmp_path, monkeypatch):
    """Finding 5: resume wrote checkpoints/ into an outside folder linked in after the check (here:
    once the resume has taken the directory)."""
    victim = tmp_path / "victim"
    shutil.copytree(run_dir / "checkpoints", victim)
    before = digest(victim)
    remove_temp_files = RunDirectory.remove_temp_files

    def remove_then_swap(self):
        remove_temp_files(self)
        swap(run_dir, "checkpoints", victim)

    monkeypatch.setattr(RunDirectory, "remove_temp_files", remove_then_swap)
    assert resume(run_dir, monkeypatch, "train.total_steps=450") != 0
    assert digest(victim) == before


def test_a_resume_reads_hydra_only_before_it_takes_the_directory(run_dir, tmp_path, monkeypatch, capsys):
    """CI's fuzz race: .hydra/ swapped for a link after the lock was taken made the summary's read of
    hydra.yaml fail, a refusal (exit 2) after train.log and provenance.json were written. The resume
    reads .hydra/ before the lock; its write of the extended config is refused (a failed write, exit
    1, the last checkpoint kept), and nothing goes through the link."""
    victim = tmp_path / "victim"
    shutil.copytree(run_dir / ".hydra", victim)
    before = digest(victim)
    remove_temp_files = RunDirectory.remove_temp_files

    def remove_then_swap(self):
        remove_temp_files(self)
        swap(run_dir, ".hydra", victim)

    monkeypatch.setattr(RunDirectory, "remove_temp_files", remove_then_swap)
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 1
    assert "config.yaml failed" in capsys.readouterr().err
    assert digest(victim) == before


def test_a_deep_tree_is_refused_in_one_line(run_dir, monkeypatch, capsys):
    """Finding 15: 1,200 nested folders under tb/ were a RecursionError traceback."""
    deep = run_dir / "tb"
    with Folder.open(run_dir) as folder:  # by handle: the path is longer than the OS takes
        inner = folder.child("tb", create=True)
        for _ in range(1200):
            inner, outer = inner.child("d", create=True), inner
            outer.close()
        inner.close()
    assert resume(run_dir, monkeypatch, "train.total_steps=450") == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and f"nested more than {MAX_DEPTH} folders deep" in errors[0]
    assert deep.is_dir()
    with Folder.open(run_dir) as folder:
        remove_deep(folder, "tb")


def test_a_path_longer_than_the_os_takes_is_walked_by_handle(run_dir):
    """Finding 15: a path over 4,096 characters was an ENAMETOOLONG traceback from the link check."""
    with Folder.open(run_dir) as folder:
        inner = folder.child("tb", create=True)
        for _ in range(20):  # 20 x 250 characters, within MAX_DEPTH
            inner, outer = inner.child("x" * 250, create=True), inner
            outer.close()
        inner.close()
        RunDirectory(run_dir).check_links()
        remove_deep(folder, "tb")


def test_a_write_by_handle_refuses_what_is_not_the_runs_own_file(tmp_path, outside):
    directory = RunDirectory(tmp_path / "run")
    directory.path.mkdir()
    os.link(outside, directory.path / "train.log")
    with pytest.raises(NotOwnFile, match="has 2 names"):
        directory.append(directory.path / "train.log")
    (directory.path / "summary.json").symlink_to(outside)
    directory.write_text(directory.summary_json, "{}\n")  # a rename: the link is replaced
    assert outside.read_bytes() == b"precious\n" and directory.summary_json.read_text() == "{}\n"
    with pytest.raises(RunError, match="leads out of"):
        directory.folder(directory.path / ".." / "elsewhere")


def test_tensorboard_writes_through_the_handle_not_a_link_swapped_in(tmp_path):
    """Finding 5, for tb/: TensorBoard's writer is given the open folder, not its name."""
    from rl_hydra.loggers.tensorboard import TensorBoardLogger

    directory = RunDirectory(tmp_path / "run")
    directory.path.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    logger = TensorBoardLogger()
    logger.start(directory, {}, 0, ["a"])
    directory.tensorboard.rename(directory.path / "tb_moved")
    directory.tensorboard.symlink_to(victim, target_is_directory=True)
    logger.log(1, {"a": 1.0})
    logger.finish("completed")
    assert list(victim.iterdir()) == []
    assert [p.stat().st_size > 0 for p in (directory.path / "tb_moved").iterdir()] == [True]


def test_a_sweeps_failed_jobs_file_is_never_appended_through_a_hard_link(tmp_path, outside, capsys):
    from rl_hydra.commands.sweep_report import FAILED_JOBS, record_failure

    os.link(outside, tmp_path / FAILED_JOBS)
    record_failure(tmp_path, tmp_path / "job")
    assert outside.read_bytes() == b"precious\n"
    assert "has 2 names" in capsys.readouterr().err
