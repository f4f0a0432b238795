"""A pack: many runs trained in one process, each run's steps (rl_hydra/loops/steps.py) advanced in turn.

Each member is a whole run (its own config, run directory, envs, replay, agent, schedule and stop); what
the members share is the process. While a member has its turn it has the process's global random state
it would have alone (torch's generator, swapped in and out), and what is logged goes to its own
train.log (`Turn`). Members move in lockstep by vector step: each wanted update is answered before any
member takes its next step, all of a round's updates at once (`Updates`), so that a batched update
(rl_hydra/loops/pack_updates.py) can stand in for the members' own.

A member that fails (an error of its own) ends with that error and the others go on. A signal (Ctrl-C,
SIGTERM) reaches every member: each stops at its step's end and writes its checkpoint.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rl_hydra.loops.session import Stopping
from rl_hydra.loops.steps import Steps, Turn, UpdateWanted

# a round's wanted updates -> each one's Update, or the error its agent raised
Updates = Callable[[Sequence[UpdateWanted]], list[Any]]


def each_alone(wanted: Sequence[UpdateWanted]) -> list[Any]:
    """Every member's update by its own agent, one after another, each in its member's turn (the random
    draws it makes alone, such as dropout's and the actor's noise): right for every algorithm."""
    answers: list[Any] = []
    for want in wanted:
        try:
            with want.turn():
                answers.append(want.agent.update(want.batch))
        except Exception as error:  # noqa: BLE001 - the member's own failure, handed back to its steps
            answers.append(error)
    return answers


@dataclass
class Member:
    """One run of a pack: its steps, what they yielded last, and how they ended."""

    name: str
    steps: Steps[Any]
    random_state: tuple[torch.Tensor, list[torch.Tensor] | None] = field(default_factory=lambda: random_state())
    wanted: UpdateWanted | None = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def advance(self, answer: Any = None) -> None:
        """Run the member to its next yield (or its end) in its turn; an error answer is thrown into its
        steps, where its update was asked for. The update it wants is to run in its turn too."""
        with self.turn():
            try:
                if isinstance(answer, BaseException):
                    wanted = self.steps.throw(answer)
                else:
                    wanted = self.steps.send(answer)
                self.wanted = None if wanted is None else replace(wanted, turn=self.turn)
            except StopIteration as end:
                self.done, self.result = True, end.value
            except BaseException as error:  # noqa: BLE001 - it ended the member; the pack decides what follows
                self.done, self.error = True, error

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """The member's turn: its random state in the process's generators and its train.log (`Turn`)."""
        Turn.current, outside = self, random_state()
        set_random_state(self.random_state)
        try:
            yield
        finally:
            self.random_state = random_state()
            set_random_state(outside)
            Turn.current = None


def random_state() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """torch's global generators' state: the CPU's, and each GPU's once CUDA is in use."""
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None


def set_random_state(state: tuple[torch.Tensor, list[torch.Tensor] | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def start(name: str, steps: Steps[Any]) -> Member:
    """A member whose steps have run to their first yield: the run is built (its build seeds torch's
    generators, which the member keeps) and has taken its first vector step, or has ended already."""
    member = Member(name, steps)
    member.advance(None)
    return member


def run_pack(members: list[Member], updates: Updates = each_alone) -> None:
    """Advance every member to its end. A member stopped by a signal ends with SystemExit (its run's
    interrupted exit) while the others, asked to stop by the same signal, end at their steps' ends; a
    KeyboardInterrupt between turns (a second Ctrl-C) is thrown into each member still running. The
    first exit is raised once all have ended; an error of one member's own ends that member only."""
    try:
        drive_all(members, updates)
    except KeyboardInterrupt:
        for member in members:
            if not member.done:
                member.advance(KeyboardInterrupt())
    stopped = next((m.error for m in members if is_stop(m.error)), None)
    if stopped is not None:
        raise stopped


def drive_all(members: list[Member], updates: Updates) -> None:
    while running := [m for m in members if not m.done]:
        if any(is_stop(m.error) for m in members):  # one stopped: the rest stop at their steps' ends
            for runner in Stopping.runners:
                runner.stop_requested = True
        wanting = [m for m in running if m.wanted is not None]
        if wanting:  # a round of updates, then each member goes on to its next yield
            answers = updates([m.wanted for m in wanting])  # type: ignore[misc]
            for member, answer in zip(wanting, answers, strict=True):
                member.advance(answer)
        else:  # every member is at a step's end: the next step of each
            for member in running:
                member.advance(None)


def is_stop(error: BaseException | None) -> bool:
    return isinstance(error, (SystemExit, KeyboardInterrupt))
