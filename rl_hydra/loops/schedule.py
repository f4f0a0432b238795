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

    def phases_due(self, agent, num_envs: int) -> int:
        """How many training phases the vector step being taken starts: one per multiple of
        `agent.train_every` it crosses from `agent.learning_starts` on. A vector step of 8 envs
        with train_every=4 starts two, so the replay ratio does not depend on `env.num_envs`."""
        before, after = self.step, self.step + num_envs
        if after < agent.learning_starts:
            return 0
        return after // agent.train_every - max(before, agent.learning_starts - 1) // agent.train_every

    def advance(self, num_steps: int) -> Due | None:
        """Count `num_steps` env steps; what falls due at them, or None when nothing does."""
        before, self.step = self.step, self.step + num_steps
        if self.step < self._next_due:
            return None
        after = self.step
        final = after >= self.total_steps
        evaluate = crossed(before, after, self.eval_every) or final
        due = Due(
            evaluate=evaluate,
            log=evaluate or crossed(before, after, self.log_every),
            checkpoint=crossed(before, after, self.checkpoint_every) and not final,
        )
        intervals = (self.eval_every, self.log_every, self.checkpoint_every)
        self._next_due = min(self.total_steps, *((after // every + 1) * every for every in intervals))
        return due
