"""When things fall due, in env steps: training phases, evaluations, log rows, checkpoints."""

from __future__ import annotations

from typing import NamedTuple


def crossed(before: int, after: int, every: int) -> bool:
    """True when a multiple of `every` lies in (before, after]."""
    return after // every > before // every


class Due(NamedTuple):
    evaluate: bool
    log: bool
    checkpoint: bool


class Schedule:
    """Counts env steps and says what falls due as they go by (`train.*` intervals).

    A vector step of n envs moves the count by n. The final step always evaluates and logs.
    Nothing falls due before the next multiple of an interval, so `advance` is a compare and
    an add on most steps."""

    def __init__(self, total_steps: int, eval_every: int, log_every: int, checkpoint_every: int):
        self.total_steps, self.eval_every = total_steps, eval_every
        self.log_every, self.checkpoint_every = log_every, checkpoint_every
        self.step = 0
        self._next_due = 0

    def updates_due(self, agent, num_envs: int) -> bool:
        """Whether the vector step being taken starts a training phase: it crosses a multiple
        of `agent.train_every` and reaches `agent.learning_starts`."""
        after = self.step + num_envs
        return after >= agent.learning_starts and crossed(self.step, after, agent.train_every)

    def advance(self, num_steps: int) -> Due | None:
        """Count `num_steps` env steps; what falls due at them, or None when nothing does."""
        before, self.step = self.step, self.step + num_steps
        if self.step < self._next_due:
            return None
        after = self.step
        final = after >= self.total_steps
        evaluate = crossed(before, after, self.eval_every) or final
        due = Due(evaluate=evaluate, log=evaluate or crossed(before, after, self.log_every),
                  checkpoint=crossed(before, after, self.checkpoint_every) and not final)
        intervals = (self.eval_every, self.log_every, self.checkpoint_every)
        self._next_due = min(self.total_steps, *((after // every + 1) * every for every in intervals))
        return due
