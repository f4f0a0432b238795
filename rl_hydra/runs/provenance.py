"""provenance.json: what made a run. One session per launch that trained in the directory (a
resume adds one): the code (package version, git commit and whether the tree was dirty), the
versions of python, torch, gymnasium, numpy and hydra, the device and host, the command line,
the steps it covered and its start and end times; and, for a member of a pack, which pack."""

from __future__ import annotations

import json
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from rl_hydra.runs.run_dir import RunDirectory, RunError, read_json_object

PACKAGES = {"rl_hydra": "rl-hydra", "torch": "torch", "gymnasium": "gymnasium", "numpy": "numpy", "hydra": "hydra-core"}
# what may explain why the same config gives other numbers; `rl-hydra-verify` names the ones that differ
CODE_KEYS = ("rl_hydra", "git_commit", "git_dirty", "python", "torch", "gymnasium", "numpy", "hydra", "device")


class Pack:
    """The pack a session trains in (hydra/launcher=packed sets it around each member's start, and puts
    None back): {"size": members, "member": this one's index, "members": each member's overrides}."""

    current: dict[str, Any] | None = None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def package_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


SOURCE = Path(__file__).resolve().parents[2]  # the checkout holding the package, if any


def git_state(source: Path = SOURCE) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout the package runs from; (None, None) for an installed copy."""
    if not (source / ".git").exists():
        return None, None
    try:

        def git(*args: str) -> str:
            return subprocess.run(
                ["git", "-C", str(source), *args], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()

        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None, None


def describe_device(device: Any) -> str:
    """`cpu`, or `cuda:0 (NVIDIA H100 80GB HBM3)`."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


def collect(device: Any) -> dict[str, Any]:
    """This process's provenance (for a session's record, or to compare with one)."""
    commit, dirty = git_state()
    versions = {name: package_version(dist) for name, dist in PACKAGES.items()}
    return {
        "rl_hydra": versions.pop("rl_hydra"),
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        **versions,
        "device": describe_device(device),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]) if sys.argv else "",
    }


def read(directory: RunDirectory) -> dict[str, Any] | None:
    """The run's provenance.json ({"sessions": [...]}), or None for a run made before it existed;
    one RunError line for a damaged or foreign file."""
    path = directory.provenance_json
    if not path.is_file():
        return None
    record = read_json_object(path, directory)
    sessions = record.get("sessions")
    if not isinstance(sessions, list) or not all(isinstance(session, dict) for session in sessions):
        raise RunError(f"{path} has no list of sessions: not a run's provenance")
    return record


class Session:
    """One launch's entry in provenance.json: written when training starts, completed when it ends."""

    def __init__(
        self, directory: RunDirectory, device: Any, start_step: int, config_changes: dict[str, list[Any]] | None = None
    ):
        self.directory = directory
        self.record = {
            "started": now(),
            "ended": None,
            "status": "running",
            "start_step": start_step,
            "end_step": None,
            **collect(device),
            "config_changes": config_changes or {},
            **({"pack": Pack.current} if Pack.current is not None else {}),
        }

        def begin(sessions: list[dict[str, Any]]) -> None:
            for session in sessions:
                mark_killed(session)
            sessions.append(self.record)

        self._write(begin)

    def end(self, status: str, step: int | None) -> None:
        self.record.update(ended=now(), status=status, end_step=step)
        # what others added to the session while it ran (a distributed run's cluster) is kept
        self._write(lambda sessions: sessions.__setitem__(-1, {**sessions[-1], **self.record}))

    def _write(self, change) -> None:
        record = read(self.directory) or {"sessions": []}
        change(record["sessions"])
        self.directory.write_text(self.directory.provenance_json, json.dumps(record, indent=2) + "\n")


def mark_killed(session: dict[str, Any]) -> None:
    """A session still `running` when the next one takes the directory's lock died without ending
    (kill -9, a lost machine): it is marked `killed`."""
    if session.get("status") == "running":
        session["status"] = "killed"


def latest(directory: RunDirectory) -> dict[str, Any]:
    """The latest session's record: the code and libraries the run ended with ({} for a run older
    than provenance.json, or one whose file cannot be read)."""
    try:
        session = (read(directory) or {})["sessions"][-1]
    except (OSError, RunError, ValueError, KeyError, IndexError, TypeError):
        return {}
    return session if isinstance(session, dict) else {}


def code_version(record: dict[str, Any]) -> str | None:
    """The short commit (+ "-dirty" for uncommitted changes), or the package version outside git."""
    commit = record.get("git_commit")
    if commit:
        return str(commit)[:8] + ("-dirty" if record.get("git_dirty") else "")
    return record.get("rl_hydra")


def tags(directory: RunDirectory) -> dict[str, str]:
    """The latest session as flat string tags, `rl_hydra.torch: 2.13.0` (what MLflow gets)."""
    record = latest(directory)
    return {f"rl_hydra.{key}": str(record[key]) for key in (*CODE_KEYS, "host", "command") if key in record}


def short_tags(directory: RunDirectory) -> list[str]:
    """`commit:0123abcd-dirty`, `torch:2.13.0`, ...: W&B's tags are short strings."""
    record = latest(directory)
    code = f"commit:{code_version(record)}" if record.get("git_commit") else None
    versions = [f"{key}:{record[key]}" for key in ("rl_hydra", "torch", "gymnasium") if record.get(key)]
    return [tag for tag in (code, *versions) if tag]


def read_sessions(directory: RunDirectory) -> list[dict[str, Any]]:
    """provenance.json's sessions ([] for a run made before it existed)."""
    path = directory.provenance_json
    if not path.is_file():
        return []
    sessions = read_json_object(path, directory).get("sessions")
    if not isinstance(sessions, list) or not sessions or not all(isinstance(s, dict) for s in sessions):
        raise RunError(f"{path} has no list of sessions: not the provenance a run writes")
    for number, session in enumerate(sessions, start=1):
        start, changes = session.get("start_step"), session.get("config_changes") or {}
        if type(start) is not int or start < 0:
            raise RunError(f"{path}: session {number} has start_step={start!r}, not a number of env steps")
        plain = [key for key in CODE_KEYS if not isinstance(session.get(key), (str, bool, int, type(None)))]
        if plain:
            raise RunError(f"{path}: session {number} has {plain[0]}={session[plain[0]]!r}, not a name or version")
        if not isinstance(changes, dict) or not all(isinstance(c, list) and len(c) == 2 for c in changes.values()):
            raise RunError(f"{path}: session {number} has config_changes that are not {{key: [old, new]}}")
    return sessions


def running_misfit(summary: dict[str, Any], sessions: list[dict[str, Any]], last_step: int | None) -> str | None:
    """Why a summary.json marked `running` does not hold together with the rest of the record, or None.
    A session that follows an ended one writes it at the step it starts from (rl_hydra/loops/session.py),
    so a resumed session started at its step, and checkpoints/last.pt is there or later."""
    step = summary.get("global_step")
    if summary.get("status") != "running":
        return None
    if not any(session.get("start_step") == step for session in sessions[1:]):
        return (
            f"summary.json says a session trains on from step {step!r}, but provenance.json has no resumed "
            f"session that started there"
        )
    if last_step is not None and isinstance(step, int) and last_step < step:
        return (
            f"summary.json says a session trains on from step {step}, but checkpoints/last.pt is at step "
            f"{last_step}, before it"
        )
    return None
