"""The one error a run directory's readers raise (below them all, so that none imports another for it)."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run directory or checkpoint that cannot be used; the message is one user-facing line."""
