"""A run's training as steps: the loops, the session around them and the launch around that are
generators. Each yields once at the end of every vector step (None) and once for every update it
needs (`UpdateWanted`), and goes on with the answer it is sent (the agent's `Update`).

`drive` runs one run to its end, each update the agent's own. The packed launcher (rl_hydra/pack)
drives many runs' steps in turn in one process and answers their updates with one batched update:
the loop, schedule, reporting and checkpoints are the same code for a run alone and in a pack.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # a launch imports this before it builds the run: torch only then
    from rl_hydra.protocols import Agent, Update

T = TypeVar("T")


@dataclass(frozen=True)
class UpdateWanted:
    """What a run's steps yield when its schedule wants an update of `agent` on `batch`; `turn` is what
    the update runs within (a pack's member: its random state and its train.log; alone: nothing)."""

    agent: Agent
    batch: Any
    turn: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext


# yields None at a vector step's end, UpdateWanted for an update (and is sent its Update); returns T
Steps = Generator["UpdateWanted | None", "Update | None", T]


def drive(steps: Steps[T]) -> T:
    """Run `steps` alone to its end, answering each wanted update with the agent's own; an error of the
    update is raised where the steps asked for it (so their session records it as it would any)."""
    answer: Any = None
    resume: Callable[[Any], UpdateWanted | None] = steps.send
    while True:
        try:
            wanted = resume(answer)
        except StopIteration as end:
            return end.value
        resume = steps.send
        if wanted is None:
            answer = None
            continue
        try:
            answer = wanted.agent.update(wanted.batch)
        except BaseException as error:  # noqa: BLE001 - handed to the steps, which raise it on
            answer, resume = error, steps.throw


def at_once(call: Callable[[], T]) -> Steps[T]:
    """`call()` as steps that yield nothing (a distributed learner's loop, which updates by itself)."""
    return call()
    yield  # unreachable: it makes this function a generator


class Turn:
    """Which run's steps are being advanced now (a pack's member), so that what is logged goes to that
    run's train.log only (rl_hydra/commands/launch.py log_to_file); None outside a pack."""

    current: object | None = None
