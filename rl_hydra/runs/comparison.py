"""A run's evaluation protocol (budget, evaluation schedule, early stop) as its config records it,
and what a sweep's table says of it: each row's protocol and checkpoint, and one line when the
runs it compares were not trained under one protocol (docs/comparisons.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SHARED = "protocol=shared"  # conf/protocol/shared.yaml: one protocol for every algorithm


@dataclass(frozen=True)
class Protocol:
    """What decides which policy a run ends with and how often it was measured on the way."""

    total_steps: int | None
    eval_every: int | None
    eval_episodes: int | None
    stop_at_return: float | None

    @classmethod
    def of(cls, config: Any) -> Protocol:
        """From a run's recorded config (data: rl_hydra.runs.trust.read_config); a key an older record
        lacks is None."""
        train = config.get("train") or {}
        return cls(
            train.get("total_steps"), train.get("eval_every"), train.get("eval_episodes"), train.get("stop_at_return")
        )

    def budget(self) -> str:
        return f"{self.total_steps:,} steps" if self.total_steps is not None else "? steps"

    def schedule(self) -> str:
        every = f"{self.eval_every:,}" if self.eval_every is not None else "?"
        return f"eval every {every} ({self.eval_episodes if self.eval_episodes is not None else '?'} ep)"

    def early_stop(self) -> str:
        return "no early stop" if self.stop_at_return is None else f"stop at {self.stop_at_return:g}"

    def __str__(self) -> str:
        return f"{self.budget()}, {self.schedule()}, {self.early_stop()}"


def shown_protocols(protocols: Iterable[Protocol]) -> str:
    """A table cell: the protocol of a configuration's runs (each distinct one, `; ` between)."""
    return "; ".join(sorted({str(p) for p in protocols}))


def steps_range(steps: Iterable[int]) -> str:
    """`50,000`, or `25,000-50,000` where runs were evaluated at different steps ("" for none)."""
    steps = sorted(set(steps))
    if not steps:
        return ""
    return f"{steps[0]:,}" if len(steps) == 1 else f"{steps[0]:,}-{steps[-1]:,}"


def checkpoint_label(checkpoint: str, steps: Iterable[int], evaluations: Iterable[int] = ()) -> str:
    """A row's checkpoint: `last @ 50,000` (the final policy), or `best = max of 20 evals @ 10,000` (the
    best of training's own evaluations: its maximum, an optimistic figure)."""
    counts, at = sorted(set(evaluations)), steps_range(steps)
    label = checkpoint
    if checkpoint == "best":
        of = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}" if counts else ""
        label = f"best = max of {of} evals" if of else "best = max"
    return f"{label} @ {at}" if at else label


def mismatch(protocols: Iterable[Protocol], steps: Iterable[int]) -> str | None:
    """The one line a table gets when its runs were not trained under one protocol (budget,
    evaluation schedule, early stop) or were evaluated at different steps; None when they were."""
    protocols, steps = set(protocols), sorted(set(steps))
    parts = []
    for what, value in (("budget", Protocol.budget), ("evaluation schedule", Protocol.schedule)):
        values = sorted({value(p) for p in protocols})
        if len(values) > 1:
            parts.append(f"{what} ({' / '.join(values)})")
    stops = sorted({p.early_stop() for p in protocols})
    if len(stops) > 1:
        parts.append(f"early stop ({' / '.join(stops)})")
    if not parts and len(steps) <= 1:
        return None
    where = f"; its policies come from steps {steps[0]:,} to {steps[-1]:,}" if len(steps) > 1 else ""
    differ = f"the runs differ in {', '.join(parts)}" if parts else "the runs were evaluated at different steps"
    return (
        f"Not one protocol: {differ}{where}. To compare algorithms under one, train them with "
        f"{SHARED} (docs/comparisons.md)."
    )
