"""TensorBoard events in <run>/tb/ (`tensorboard --logdir outputs`)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl_hydra.loggers.base import numbers
from rl_hydra.runs.run_dir import RunDirectory

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from rl_hydra.runs.files import Folder


class TensorBoardLogger:
    def __init__(self) -> None:
        self.writer: SummaryWriter | None = None
        self.folder: Folder | None = None

    def start(self, run_dir: RunDirectory, config: Mapping[str, Any], step: int, columns: Sequence[str]) -> None:  # noqa: ARG002
        from torch.utils.tensorboard import SummaryWriter  # slow import, only when used

        # TensorBoard drops the events at steps >= purge_step: those after the checkpoint, not its own
        # (after step 0: those of a first attempt killed before its first checkpoint)
        stale = run_dir.tensorboard.is_dir() and any(run_dir.tensorboard.iterdir())
        if stale:
            wait_until_after(latest_event_file_second(run_dir.tensorboard))
        # the writer names tb/ through the run's handle (files.Folder.by_handle): a link swapped in for
        # tb/ later cannot redirect its event files
        self.folder = run_dir.folder(run_dir.tensorboard, create=True)
        self.writer = SummaryWriter(self.folder.by_handle(), purge_step=step + 1 if step or stale else None)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        assert self.writer is not None, "log() before start()"
        for key, value in numbers(metrics).items():
            self.writer.add_scalar(key, value, step)

    def finish(self, status: str) -> None:  # noqa: ARG002
        if self.writer is not None:
            self.writer.close()
        if self.folder is not None:
            self.folder.close()


def latest_event_file_second(directory: Path) -> int:
    """The creation second in the newest event file's name (`events.out.tfevents.<second>.<host>.<pid>.<n>`)."""
    seconds = [
        int(part[3])
        for part in (f.name.split(".") for f in directory.glob("events.out.tfevents.*"))
        if len(part) > 3 and part[3].isdigit()
    ]
    return max(seconds, default=0)


def wait_until_after(second: int, longest: float = 2.0) -> None:
    """TensorBoard reads a run's event files in name order, and a name's pid and counter sort as text
    (9 after 10): a resumed run's file must carry a later second than the files before it."""
    wait = second + 1 - time.time()
    if 0 < wait <= longest:  # a longer wait means a clock behind the one that wrote the files: not ours to fix
        time.sleep(wait)
