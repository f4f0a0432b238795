"""Where a Runner's experience comes from, and what of it a run's rows and checkpoints hold.

One process: `LocalExperience`, the training env (through a Rollout) and the buffer the loop fills.
A distributed run: the learner's remote actors and replay shards (rl_hydra/distributed/learner.py).
The Runner's schedule, evaluation, reporting and checkpoints are the same for both."""

from __future__ import annotations

from typing import Any, Protocol

from rl_hydra.loops.monitor import EpisodeStats
from rl_hydra.loops.rollout import Rollout
from rl_hydra.protocols import Buffer


class Experience(Protocol):
    episodes: EpisodeStats  # the finished episodes reported in the next row, and the episode count
    columns: tuple[str, ...]  # metrics.csv columns of its own, after the Runner's

    def row(self, step: int, updates: int) -> dict[str, Any]:
        """Its columns' values for the row written at `step`, after `updates` updates."""

    def state_dict(self, with_buffer: bool) -> dict[str, Any]:
        """Its parts of a checkpoint (top-level keys, `rng` merged with the Runner's)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore its parts from a whole checkpoint."""

    def close(self) -> None: ...


class LocalExperience:
    """The training env and the buffer, in this process."""

    columns: tuple[str, ...] = ()

    def __init__(self, env, buffer: Buffer):
        self.env, self.buffer = env, buffer
        self.rollout = Rollout(env)
        self.episodes = self.rollout.episodes
        # a prioritized buffer's (protocols.PrioritizedBuffer): each update's new priorities go back to it
        self.update_priorities = getattr(buffer, "update_priorities", None)

    def row(self, step: int, updates: int) -> dict[str, Any]:  # noqa: ARG002
        return {}

    def state_dict(self, with_buffer: bool) -> dict[str, Any]:
        state: dict[str, Any] = {"rng": {"action_space": self.env.action_space.np_random.bit_generator.state}}
        rollout = self.rollout.state_dict()
        if rollout is not None:
            state["env"] = rollout
        if with_buffer:
            state["buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env.action_space.np_random.bit_generator.state = state["rng"]["action_space"]
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])
        if "env" in state:
            self.rollout.load_state_dict(state["env"])

    def close(self) -> None:
        self.env.close()
