"""The run directory: checkpoints, summary.json and loading them back safely."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class RunError(RuntimeError):
    """A run directory or checkpoint that cannot be used; the message is one user-facing line."""


def atomic_write_bytes(path: Path, write) -> None:
    """Write through a temp file in the same directory, then rename over `path`.

    A crash or kill mid-write leaves the previous file intact. The file gets the mode any new
    file gets under the process's umask (mkstemp alone would make it 0600, unreadable to others
    on a shared cluster).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# summary.json: every key always present, null where it does not apply (docs/runs.md)
SUMMARY_KEYS = ("status", "reason", "algo", "env", "env_id", "seed", "global_step", "updates",
                "eval_return_mean", "eval_return_std", "best_eval_return_mean", "stop_at_return",
                "solved_at_step", "solved_at_s", "wall_time_s", "steps_per_second")


def current_umask() -> int:
    """The process's umask (the only way to read it is to set it, so it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


class RunDirectory:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.metrics_csv = self.path / "metrics.csv"
        self.summary_json = self.path / "summary.json"
        self.tensorboard = self.path / "tb"
        self.hydra = self.path / ".hydra"   # config.yaml, overrides.yaml, hydra.yaml

    def config_choice(self, group: str) -> str | None:
        """The option the run chose for a config group (`algo=iqn` -> "iqn"), from .hydra/hydra.yaml."""
        import yaml

        path = self.hydra / "hydra.yaml"
        if not path.is_file():
            return None
        choices = ((yaml.safe_load(path.read_text()) or {}).get("hydra", {}).get("runtime", {}) or {}).get("choices")
        return (choices or {}).get(group)

    def identity(self, cfg, algo_name: str | None = None) -> dict[str, Any]:
        """What a run is, for summary.json: the algo and env options it chose (without
        .hydra/hydra.yaml, `algo_name` and the env id), the env id and the seed."""
        return {"algo": self.config_choice("algo") or algo_name, "env": self.config_choice("env") or cfg.env.id,
                "env_id": cfg.env.id, "seed": cfg.seed}

    def save_checkpoint(self, name: str, state: dict[str, Any]) -> Path:
        import torch  # here, not at the top: a sweep's launcher process reads summaries without torch

        path = self.checkpoints / f"{name}.pt"
        atomic_write_bytes(path, lambda f: torch.save(state, f))
        return path

    def load_checkpoint(self, name: str = "last", map_location: str | torch.device = "cpu") -> dict[str, Any]:
        import torch

        path = self.checkpoints / f"{name}.pt"
        if not path.is_file():
            raise RunError(f"no checkpoint {path}; a run directory has checkpoints/last.pt (and best.pt)")
        try:
            # weights_only: tensors and plain data only, so loading a stranger's run runs no code;
            # mmap: a replay buffer of several GB is copied from the file, not read into memory first
            return torch.load(path, map_location=map_location, weights_only=True, mmap=True)
        except Exception as error:  # truncated, corrupt or not a torch file
            raise RunError(f"checkpoint {path} cannot be read ({type(error).__name__}: "
                           f"{str(error).splitlines()[0] if str(error) else 'corrupt'})") from error

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json with every key of SUMMARY_KEYS (null where `summary` has none)."""
        unknown = set(summary) - set(SUMMARY_KEYS)
        if unknown:
            raise ValueError(f"summary keys {sorted(unknown)} are not in SUMMARY_KEYS")
        text = json.dumps({key: summary.get(key) for key in SUMMARY_KEYS}, indent=2) + "\n"
        atomic_write_bytes(self.summary_json, lambda f: f.write(text.encode()))

    def read_summary(self) -> dict[str, Any] | None:
        if not self.summary_json.is_file():
            return None
        return json.loads(self.summary_json.read_text())
