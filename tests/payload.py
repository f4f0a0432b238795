"""What an attacker would put in a run directory: callables that leave a mark when they run, so
that a test can show that opening the directory ran nothing."""

from __future__ import annotations

import pickle
from pathlib import Path


def mark(path: str, *args, **kwargs) -> None:
    """Leaves `path` behind: the code ran."""
    Path(path).write_text("ran")


class Marker:
    """Pickled, unpickling it calls `mark` (what torch.load with weights_only=false runs)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return mark, (self.path,)


def pickled_mark(path: str) -> bytes:
    return pickle.dumps(Marker(path))
