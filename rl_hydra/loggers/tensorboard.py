"""TensorBoard events in <run>/tb/ (`tensorboard --logdir outputs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rl_hydra.loggers.base import numbers
from rl_hydra.runs.run_dir import RunDirectory

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class TensorBoardLogger:
    def __init__(self) -> None:
        self.writer: SummaryWriter | None = None

    def start(self, run_dir: RunDirectory, config: Mapping[str, Any], step: int, columns: Sequence[str]) -> None:
        from torch.utils.tensorboard import SummaryWriter  # slow import, only when used

        # TensorBoard drops the events at steps >= purge_step: those after the checkpoint, not its own
        # (after step 0: those of a first attempt killed before its first checkpoint)
        stale = run_dir.tensorboard.is_dir() and any(run_dir.tensorboard.iterdir())
        self.writer = SummaryWriter(str(run_dir.tensorboard), purge_step=step + 1 if step or stale else None)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        assert self.writer is not None, "log() before start()"
        for key, value in numbers(metrics).items():
            self.writer.add_scalar(key, value, step)

    def finish(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close()
