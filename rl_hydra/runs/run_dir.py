"""The run directory: checkpoints, summary.json and loading them back safely; every write atomic
and named when it fails; one writer at a time (RunLock)."""

from __future__ import annotations

import collections
import contextlib
import errno
import fcntl
import json
import math
import os
import shlex
import socket
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl_hydra.runs import data
from rl_hydra.runs.checkpoint import check_checkpoint  # noqa: F401 - its home was here
from rl_hydra.runs.data import load_json_object
from rl_hydra.runs.errors import RunError
from rl_hydra.runs.files import TEMP_PREFIX, TEMP_SUFFIX, Folder, NotOwnFile, by_descriptor
from rl_hydra.runs.files import refusal as files_refusal
from rl_hydra.runs.sweep_parent import ORPHAN_STOP_S, POLL_S, orphaned, sweep_process

if TYPE_CHECKING:
    import torch


def misfit(error: Exception) -> str:
    """Why a checkpoint does not load into the agent or runner built from a config, in one line:
    torch's first line and the first mismatch it lists (a size mismatch names the tensor and both
    shapes, so that a checkpoint made before a network changed says which part changed)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {' '.join(lines[:2])}"


class RunBusy(RunError):
    """Another process holds the run directory's lock."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class WriteFailed(RunError):
    """Writing a file of the run failed (a full disk, a read-only or vanished file system, ...)."""

    def __init__(self, path: Path, error: OSError):
        self.path, self.error = Path(path), error
        self.disk_full = error.errno in DISK_FULL
        why = "the disk is full" if self.disk_full else (error.strerror or type(error).__name__)
        super().__init__(f"writing {self.path} failed: {why}")


class _Recording:
    """A file object that remembers the OSError its write raised: torch.save reports a failed
    write as a RuntimeError of its own ("unexpected pos ..."), which hides the disk being full."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as error:
            self.error = error
            raise

    def __getattr__(self, name: str):
        return getattr(self.file, name)


TRACKER_STORES = ("mlartifacts", "mlruns", "wandb")  # what trackers write in a run or sweep directory
# the files a run writes in place (the lock's content, appended lines): each must be its own file
WRITTEN_IN_PLACE = (".lock", "train.log", "metrics.csv")


def write_whole(open_folder: Callable[[], Folder], path: Path, write) -> None:
    """Write `path` (named `path.name` in the folder `open_folder` opens) whole, through a temp file
    and a rename (files.Folder.replace): a crash mid-write leaves the previous file, and a link or
    hard link at `path` is replaced, never written through. An OSError, also one torch.save wraps,
    raises WriteFailed naming `path`."""
    recording: list[_Recording] = []

    def through(f) -> None:
        recording.append(_Recording(f))
        try:
            write(recording[0])
        except Exception as error:
            if recording[0].error is not None and not isinstance(error, OSError):
                raise recording[0].error from error
            raise

    try:
        with open_folder() as folder:
            folder.replace(path.name, through)
    except OSError as error:
        raise WriteFailed(path, error) from error


def atomic_write_bytes(path: Path, write) -> None:
    """`write_whole` into `path`'s folder, opened by its path once. A run directory's own files go
    through RunDirectory's `write_bytes`, which reaches the folder from the run's handle."""
    write_whole(lambda: Folder.open(path.parent, create=True), path, write)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, lambda f: f.write(text.encode()))


# summary.json: every key always present, null where it does not apply (docs/runs.md)
SUMMARY_KEYS = (
    "status",
    "reason",
    "algo",
    "env",
    "env_id",
    "seed",
    "global_step",
    "updates",
    "eval_return_mean",
    "eval_return_std",
    "best_eval_return_mean",
    "stop_at_return",
    "solved_at_step",
    "solved_at_s",
    "wall_time_s",
    "steps_per_second",
)


class RunDirectory:
    """A run directory. Its files are reached from one handle on the directory, opened at first
    use (files.py: no link below it is followed, a write is a rename or an append to the run's
    own file); the `Path` attributes name them in messages and for reading."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.metrics_csv = self.path / "metrics.csv"
        self.summary_json = self.path / "summary.json"
        self.tensorboard = self.path / "tb"
        self.hydra = self.path / ".hydra"  # config.yaml, overrides.yaml, hydra.yaml
        self.config_yaml = self.hydra / "config.yaml"
        self.provenance_json = self.path / "provenance.json"
        self.lock_file = self.path / ".lock"
        self.handle: Folder | None = None
        self.choices: dict[str, Any] | None = None  # .hydra/hydra.yaml's, once read
        self.overrides: list[str] | None = None  # .hydra/overrides.yaml's, once read

    @classmethod
    def of(cls, run_dir: str | Path | RunDirectory) -> RunDirectory:
        """`run_dir` itself when it is a RunDirectory (one object per run in a process), else a new one."""
        return run_dir if isinstance(run_dir, RunDirectory) else cls(run_dir)

    def folder(self, path: str | Path | None = None, create: bool = False) -> Folder:
        """The open folder at `path` (the run directory, or a folder below it named from
        `self.path`), reached from the run's handle one name at a time; the caller closes it."""
        if self.handle is None or self.handle.fd < 0:
            self.handle = Folder.open(self.path, create=create)
        relative = Path(path).relative_to(self.path) if path is not None else Path()
        return self.handle.at(relative, create=create)

    def forget_handle(self) -> None:
        """Close the handle (the directory was removed, or the process is done with it)."""
        if self.handle is not None:
            self.handle.close()
            self.handle = None

    def write_bytes(self, path: Path, write) -> None:
        """Write the run's file `path` whole, atomically (`write_whole`), in its folder reached by handle."""
        write_whole(lambda: self.folder(path.parent, create=True), path, write)

    def write_text(self, path: Path, text: str) -> None:
        self.write_bytes(path, lambda f: f.write(text.encode()))

    def append(self, path: Path, encoding: str | None = "utf-8"):
        """The run's file `path` opened to append: its own regular file only (files.Folder.open_own)."""
        try:
            with self.folder(path.parent, create=True) as folder:
                return folder.append(path.name, encoding)
        except RunError:
            raise
        except OSError as error:
            raise WriteFailed(path, error) from error

    @property
    def recorded_config(self) -> Path:
        """The config the run trains with: .hydra/config.yaml (run_config.yaml in directories made
        while Hydra still rewrote config.yaml at every launch, refused ones included)."""
        legacy = self.hydra / "run_config.yaml"
        return legacy if legacy.is_file() else self.config_yaml

    def check_links(self) -> None:
        """Refuse, in one RunError line, a directory holding a symbolic link that leads out of it or
        in a loop, anything but files, folders and links (a FIFO would block whoever opens it), a
        file the run writes in place (WRITTEN_IN_PLACE) that is a link, not a file, or has a second
        name (a hard link), or folders nested past files.MAX_DEPTH. Links inside it are fine
        elsewhere (a write replaces a link, never follows it), and so is anything in a tracker's
        store (wandb/); the run directory itself may be a link. The walk goes by handle, without
        recursion, so a deep or long-named tree costs no traceback."""
        if not os.path.lexists(self.path):
            return  # a new run's directory: nothing in it yet
        root = self.path.resolve()
        try:
            with self.folder() as top:
                for folder, name, info in top.walk(skip=TRACKER_STORES):  # theirs (W&B links its logs out)
                    self.check_entry(Path(folder), name, info, root)
        except OSError as error:
            raise RunError(f"{self.path} cannot be read ({error.strerror or type(error).__name__})") from None

    def check_entry(self, folder: Path, name: str, info: os.stat_result, root: Path) -> None:
        path, mode = folder / name, info.st_mode
        written_in_place = folder == self.path and name in WRITTEN_IN_PLACE
        if stat.S_ISLNK(mode):
            target = os.readlink(path)
            try:
                inside = path.resolve(strict=True).is_relative_to(root)
            except (OSError, RuntimeError):  # a loop, or a link to nothing (a write would make it)
                raise RunError(
                    f"{path} is a symbolic link to {target}, which leads nowhere or back "
                    f"to itself; a run directory's files are written in place"
                ) from None
            if not inside:
                raise RunError(
                    f"{path} is a symbolic link to {target}, outside the run directory; "
                    f"nothing was written (a run directory's files are written in place: replace "
                    f"the link with the file itself)"
                )
            if written_in_place:
                raise RunError(files_refusal(path, f"is a symbolic link to {target}"))
        elif not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise RunError(f"{path} is not a file or a folder (a pipe, socket or device): not a run's")
        elif written_in_place and not stat.S_ISREG(mode):
            raise RunError(files_refusal(path, "is a folder, not a file"))
        elif written_in_place and info.st_nlink != 1:
            raise RunError(files_refusal(path, f"has {info.st_nlink} names (hard links: another may be outside)"))

    def holds_output(self) -> bool:
        """Whether a run has trained here (checkpoints or metrics exist)."""
        return self.checkpoints.is_dir() or self.metrics_csv.is_file()

    TEMP_FOLDERS = ("", ".hydra", "checkpoints", "eval")

    def temp_files(self) -> list[Path]:
        """The temp files of atomic writes that a killed process left (regular files only: a
        folder named like one is not this project's)."""
        found = []
        for relative in self.TEMP_FOLDERS:
            try:
                with self.folder(self.path / relative) as folder:
                    found += [
                        folder.path / name
                        for name in folder.names()
                        if name.startswith(TEMP_PREFIX)
                        and name.endswith(TEMP_SUFFIX)
                        and stat.S_ISREG(getattr(folder.lstat(name), "st_mode", 0))
                    ]
            except OSError:  # no such folder (or not one)
                continue
        return found

    def remove_temp_files(self) -> None:
        """Remove what `temp_files` finds (call with the lock held), by handle."""
        for tmp in self.temp_files():
            with contextlib.suppress(OSError), self.folder(tmp.parent) as folder:
                info = folder.lstat(tmp.name)
                if info is not None and stat.S_ISREG(info.st_mode):
                    folder.unlink(tmp.name)

    def checkpoint_step(self, name: str = "last") -> int | None:
        """The env step checkpoint `name` was saved at, or None when there is none (or it is unreadable)."""
        try:
            return int(self.load_checkpoint(name)["runner"]["global_step"])
        except (RunError, KeyError, TypeError):
            return None

    def config_choice(self, group: str) -> str | None:
        """The option the run chose for a config group (`algo=iqn` -> "iqn"), from .hydra/hydra.yaml,
        read once (a run's later summaries name what it began with, whatever happens to the file)."""
        if self.choices is None:
            self.choices = read_choices(self)  # None until a launch has written it
        return (self.choices or {}).get(group)

    def recorded_overrides(self) -> list[str]:
        """.hydra/overrides.yaml's command-line overrides, read once ([] without the file)."""
        if self.overrides is None:
            self.overrides = read_overrides(self)
        return self.overrides

    def read_hydra_record(self) -> None:
        """Read what a launch uses of an existing .hydra/ now (the choices, the overrides), so that
        nothing after the lock is taken reads it: a file swapped there later cannot refuse a run
        that has begun writing."""
        self.choices = read_choices(self) or {}
        self.recorded_overrides()

    def identity(self, cfg, algo_name: str | None = None) -> dict[str, Any]:
        """What a run is, for summary.json: the algo and env options it chose (without
        .hydra/hydra.yaml, `algo_name` and the env id), the env id (None while a refused job's
        env.id is still `???`) and the seed."""
        from omegaconf import OmegaConf

        return self.identity_of(OmegaConf.select(cfg, "env.id", throw_on_missing=False), cfg.seed, algo_name)

    def identity_of(self, env_id: str | None, seed: int, algo_name: str | None = None) -> dict[str, Any]:
        """`identity`, from the env id and seed (the choices are read from .hydra/ now)."""
        return {
            "algo": self.config_choice("algo") or algo_name,
            "env": self.config_choice("env") or env_id,
            "env_id": env_id,
            "seed": seed,
        }

    def save_checkpoint(self, name: str, state: dict[str, Any]) -> Path:
        import torch  # here, not at the top: a sweep's launcher process reads summaries without torch

        path = self.checkpoints / f"{name}.pt"
        self.write_bytes(path, lambda f: torch.save(own_storages(state), f))
        return path

    def load_checkpoint(self, name: str = "last", map_location: str | torch.device = "cpu") -> dict[str, Any]:
        """checkpoints/`name`.pt as plain data, its cost bounded by its bytes (runs/checkpoint.py)."""
        from rl_hydra.runs.checkpoint import load_checkpoint_file

        path = self.checkpoints / f"{name}.pt"
        if not path.is_file():
            raise RunError(f"no checkpoint {path}; a run directory has checkpoints/last.pt (and best.pt)")
        try:  # by the run's handle, no link followed: the file read is the one opened here
            with self.folder(self.checkpoints) as folder, folder.read(path.name) as opened:
                return load_checkpoint_file(path, map_location, by_descriptor(opened.fileno(), path))
        except OSError as error:
            raise RunError(f"checkpoint {path} cannot be read ({error.strerror or type(error).__name__})") from None

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json with every key of SUMMARY_KEYS (null where `summary` has none)."""
        unknown = set(summary) - set(SUMMARY_KEYS)
        if unknown:
            raise ValueError(f"summary keys {sorted(unknown)} are not in SUMMARY_KEYS")
        text = json.dumps({key: summary.get(key) for key in SUMMARY_KEYS}, indent=2) + "\n"
        self.write_text(self.summary_json, text)

    def read_summary(self) -> dict[str, Any] | None:
        """summary.json, or None where there is none; one RunError line for a damaged or foreign file."""
        if not self.summary_json.is_file():
            return None
        summary = read_json_object(self.summary_json, self)
        check_summary(summary, self.summary_json)
        return summary


# running: a session that follows an ended one trains (or was killed: resume it); rl_hydra/loops/session.py
STATUSES = ("completed", "failed", "interrupted", "running")
SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "status": (str,),
    "reason": (str,),
    "algo": (str,),
    "env": (str,),
    "env_id": (str,),
    "seed": (int,),
    "global_step": (int,),
    "updates": (int,),
    "solved_at_step": (int,),
    **{key: (int, float) for key in SUMMARY_KEYS if key.endswith(("_mean", "_std", "_return", "_s", "_second"))},
}


def check_summary(summary: dict[str, Any], path: Path) -> None:
    """One RunError line unless summary.json holds the keys a run writes, each null or of its type."""
    unknown = [key for key in summary if key not in SUMMARY_KEYS]
    if unknown:
        raise RunError(f"{path} has the key {unknown[0]!r}, which a run's summary does not (its keys: status, ...)")
    for key, value in summary.items():
        kinds = SUMMARY_TYPES.get(key, (str, int, float))
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            raise RunError(f"{path} has {key}={value!r}, not {' or '.join(k.__name__ for k in kinds)} or null")
        if key.endswith(("step", "updates")) and isinstance(value, int) and value < 0:
            raise RunError(f"{path} has {key}={value}, a negative count")
    if summary.get("status") not in (*STATUSES, None):
        raise RunError(f"{path} has status={summary['status']!r}; a run's is one of: {', '.join(STATUSES)}")


def check_fits(fresh: Any, loaded: Any, path: Path, where: str = "") -> None:
    """One RunError line unless the checkpoint's `loaded` state has the shape of `fresh`, the state
    of the same parts built anew from the run's config: no key they lack, the same kinds of values,
    tensors of the same dtype and trailing shape (a buffer's rows and a list's length may differ).
    An empty mapping in `fresh` (an optimizer before its first step) takes any plain content."""
    import torch

    def refuse(what: str) -> None:
        raise RunError(f"checkpoint {path} does not fit the run's config: {where.lstrip('.') or 'its state'} {what}")

    if isinstance(fresh, dict):
        if not isinstance(loaded, dict):
            refuse(f"is a {type(loaded).__name__}, not a mapping")
        unknown = [key for key in loaded if key not in fresh] if fresh else []
        if unknown:
            refuse(f"holds {unknown[0]!r}, which the run's parts do not have")
        for key in [key for key in fresh if key in loaded]:
            check_fits(fresh[key], loaded[key], path, f"{where}.{key}")
        if "param_groups" in fresh and isinstance(loaded.get("param_groups"), (list, tuple)):
            check_hyperparameters(fresh["param_groups"], loaded["param_groups"], path, f"{where}.param_groups")
    elif isinstance(fresh, torch.Tensor):
        if not isinstance(loaded, torch.Tensor):
            refuse(f"is a {type(loaded).__name__}, not a tensor")
        elif loaded.dtype != fresh.dtype or loaded.shape[1:] != fresh.shape[1:] or loaded.dim() != fresh.dim():
            refuse(f"is a {loaded.dtype} tensor of shape {tuple(loaded.shape)}, not {fresh.dtype} {tuple(fresh.shape)}")
    elif isinstance(fresh, (list, tuple)):
        if not isinstance(loaded, (list, tuple)):
            refuse(f"is a {type(loaded).__name__}, not a list")
        if len(loaded) == len(fresh):
            for index, (mine, theirs) in enumerate(zip(fresh, loaded)):
                check_fits(mine, theirs, path, f"{where}[{index}]")
    elif fresh is None:
        return
    elif isinstance(fresh, bool) or isinstance(fresh, str):
        if type(loaded) is not type(fresh):
            refuse(f"is {type(loaded).__name__}, not {type(fresh).__name__}")
    elif isinstance(fresh, (int, float)):
        if (
            isinstance(loaded, bool)
            or not isinstance(loaded, (int, float))
            or (isinstance(fresh, int) and not isinstance(loaded, int))
        ):
            refuse(f"is {type(loaded).__name__}, not {type(fresh).__name__}")


IMPLEMENTATION_FLAGS = ("foreach", "fused", "capturable", "differentiable")  # torch's, per parameter group


def check_hyperparameters(fresh: Any, loaded: Any, path: Path, where: str) -> None:
    """An optimizer's hyperparameters come from the run's config, never from its checkpoint: each
    parameter group's values (betas, eps, weight_decay, ...) equal those the config builds, and lr
    lies between 0 and the config's (algo.final_lr_fraction only lowers it as the run goes)."""
    if len(loaded) != len(fresh):
        raise RunError(f"checkpoint {path} does not fit the run's config: {where.lstrip('.')} has {len(loaded)} groups")
    for index, (mine, theirs) in enumerate(zip(fresh, loaded)):
        if not isinstance(theirs, dict):
            raise RunError(
                f"checkpoint {path} does not fit the run's config: {where.lstrip('.')}[{index}] is not a mapping"
            )
        for key, value in mine.items():
            given = theirs.get(key)
            if key == "params" or key not in theirs:  # an older torch's checkpoint: torch fills its default
                continue
            if key in IMPLEMENTATION_FLAGS:  # how torch runs the step (a CUDA run's fused kernel), not its math
                fits = given is None or isinstance(given, bool)
            elif key == "lr" and isinstance(value, float):
                fits = isinstance(given, (int, float)) and not isinstance(given, bool) and 0.0 <= given <= value
            else:
                fits = plain_value(given) == plain_value(value)
            if not fits:
                raise RunError(
                    f"checkpoint {path} sets {where.lstrip('.')}[{index}].{key}={given!r}, but the run's config "
                    f"builds {value!r}: a checkpoint cannot change an optimizer's hyperparameters"
                )


def plain_value(value: Any) -> Any:
    """A hyperparameter compared as data: tuples as lists (betas), a 0-dim tensor as its number."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.tolist() if value.numel() <= 16 else value
    return [plain_value(item) for item in value] if isinstance(value, (list, tuple)) else value


# per-parameter optimizer state that a square root or a division takes: never below zero
NON_NEGATIVE_STATE = ("exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum", "acc_delta", "step")


def check_optimizer_state(owner: Any, path: Path) -> None:
    """After a checkpoint loaded, before the run takes its directory: each optimizer's
    per-parameter state (Adam's moments) has its parameter's shape and dtype, finite values, no
    negative second moment, and a step count that is a whole number >= 0 (a 0-dim tensor); torch
    checks only the parameter groups, and a misfit would fail mid-update or train on NaN."""
    import torch

    for name, optimizer in vars(owner).items():
        if not isinstance(optimizer, torch.optim.Optimizer):
            continue
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                for key, value in optimizer.state.get(parameter, {}).items():
                    problem = optimizer_state_problem(key, value, parameter)
                    if problem:
                        raise RunError(f"checkpoint {path} does not fit the run's config: {name}'s {key} {problem}")


def optimizer_state_problem(key: str, value: Any, parameter: Any) -> str | None:
    """What is wrong with one optimizer state value of `parameter` (None: nothing)."""
    import torch

    if key == "step":
        number = value.item() if isinstance(value, torch.Tensor) and value.numel() == 1 else value
        if isinstance(value, torch.Tensor) and value.dim() != 0:
            return f"is a tensor of shape {tuple(value.shape)}, not a step count"
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            return f"is {type(value).__name__}, not a step count"
        return None if math.isfinite(number) and number >= 0 and float(number).is_integer() else f"is {number!r}"
    if not isinstance(value, torch.Tensor):
        return None
    if value.shape != parameter.shape or value.dtype != parameter.dtype:
        return (
            f"is a {value.dtype} tensor of shape {tuple(value.shape)} for a parameter of "
            f"{parameter.dtype} {tuple(parameter.shape)}"
        )
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        return "holds a value that is not finite"
    if key in NON_NEGATIVE_STATE and bool((value < 0).any()):
        return "holds a negative value"
    return None


def read_json_object(path: Path, directory: RunDirectory | None = None) -> dict[str, Any]:
    """A JSON file of the run that holds an object, or one RunError line saying what is wrong with it
    (read as data, bounded in size and depth: runs/data.py; in `directory`, by the run's handle)."""
    return load_json_object(path, directory)


class RunLock:
    """One writer per run directory: an exclusive flock on `<run>/.lock`, held for the life of the
    process that trains there (the OS drops it when the process ends, kill -9 included, so no
    stale lock is left). The holder writes its pid, host and start time into the file, which a
    refused second process names in its error. Used as a context manager."""

    def __init__(self, directory: RunDirectory):
        self.directory = directory
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        path = self.directory.lock_file
        try:  # the run's own regular file (a link, a folder or a second name is refused: files.py)
            with self.directory.folder(create=True) as folder:
                fd = folder.open_own(path.name, os.O_RDWR)
        except NotOwnFile:
            raise
        except OSError as error:
            raise WriteFailed(path, error) from error
        try:
            take_lock(fd)
        except BlockingIOError:
            held_by = os.pread(fd, 4096, 0).decode(errors="replace")
            os.close(fd)
            raise RunBusy(busy_message(self.directory, held_by)) from None
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "sweep": sweep_process(),
        }
        try:
            os.ftruncate(fd, 0)
            os.write(fd, (json.dumps(holder) + "\n").encode())
        except OSError as error:
            os.close(fd)
            raise WriteFailed(path, error) from error
        self.fd = fd
        return self

    @staticmethod
    def check_free(directory: RunDirectory) -> None:
        """Raise RunBusy when another process holds the directory; writes nothing (a refused
        command checks this first, before it builds anything)."""
        try:
            with directory.folder() as folder:  # by handle, no link followed; a FIFO: no wait
                fd = os.open(directory.lock_file.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder.fd)
        except OSError:
            return  # no lock file: nobody has trained here since locks exist
        try:
            take_lock(fd)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace")
            raise RunBusy(busy_message(directory, holder)) from None
        finally:
            os.close(fd)

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the last descriptor releases the flock
            self.fd = None


def resume_command(path: str | Path, changes: str = "") -> str:
    """The command that resumes the run in `path`, quoted for a POSIX shell where it needs to be
    (a sweep job's directory is named from its overrides: `algo=dqn,seed=0`, brackets, spaces)."""
    return " ".join(["python train.py", shlex.quote(f"resume={path}"), *([changes] if changes else [])])


def take_lock(fd: int) -> None:
    """flock `fd` exclusively, without blocking (BlockingIOError while another process holds it),
    except that a holder left training by a killed sweep (it stops itself: sweep_parent.py) is
    waited for, up to ORPHAN_STOP_S."""
    deadline = time.monotonic() + ORPHAN_STOP_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 4096, 0))
            except ValueError:
                holder = {}
            if not (isinstance(holder, dict) and orphaned(holder)) or time.monotonic() > deadline:
                raise
            time.sleep(POLL_S)


def busy_message(directory: RunDirectory, holder: str) -> str:
    return (
        f"{directory.path} is in use by another process ({describe_holder(holder)}); "
        f"wait for it to end, or launch into another directory"
    )


def describe_holder(text: str) -> str:
    """`pid 123 on host box since ...` from a lock file's content (whatever could be read of it)."""
    try:
        holder = json.loads(text)
        return f"pid {holder['pid']} on host {holder['host']}, since {holder['since']}"
    except (ValueError, KeyError, TypeError):
        return "a process that has not yet said which"


def read_overrides(directory: RunDirectory) -> list[str]:
    """.hydra/overrides.yaml: the command lines' overrides, a list of text ([] without the file)."""
    path = directory.hydra / "overrides.yaml"
    if not path.is_file():
        return []
    overrides = data.load_yaml(path, directory)
    if overrides is None:
        return []
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise RunError(f"{path} is not a list of overrides (key=value text), as a run writes there")
    return overrides


def read_choices(directory: RunDirectory) -> dict[str, Any] | None:
    """The config-group choices in .hydra/hydra.yaml (`algo: iqn`), as data; None without the file."""
    path = directory.hydra / "hydra.yaml"
    if not path.is_file():
        return None
    tree = data.load_yaml(path, directory)
    hydra = tree.get("hydra") if isinstance(tree, dict) else None
    runtime = hydra.get("runtime") if isinstance(hydra, dict) else None
    choices = runtime.get("choices") if isinstance(runtime, dict) else None
    if not isinstance(choices, dict) or not all(isinstance(v, (str, type(None))) for v in choices.values()):
        raise RunError(f"{path} has no mapping of config-group choices under hydra.runtime.choices")
    return choices


def own_storages(state: Any) -> Any:
    """`state` with each tensor that is a view into a larger storage copied into one of its own size:
    torch.save writes a view's whole storage (a pack member's weights are views into the pack's stacked
    ones, rl_hydra/loops/pack_updates.py), which would put every member's weights in each checkpoint."""
    import torch

    def own(value: Any) -> Any:
        if torch.is_tensor(value) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
            return value.clone()
        if type(value) in (dict, collections.OrderedDict, list, tuple):  # a state_dict is an OrderedDict
            items = value.items() if isinstance(value, dict) else enumerate(value)
            owned = [(key, own(item)) for key, item in items]
            return type(value)(owned) if isinstance(value, dict) else type(value)(item for _, item in owned)
        return value

    return own(state)
