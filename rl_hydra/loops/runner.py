"""What both training loops share, put together: the schedule, the rollout, update monitoring,
evaluation, reporting, checkpoints and the final summary. Each part lives in its own module;
this one says when each runs.

A loop only acts and fills the buffer. After each vector step it runs `run_due_updates` (the training
phase, when one falls due: steps that yield each wanted update, loops/steps.py) and then `record_step`.
A distributed run's learner drives the same Runner over its remote experience (loops/experience.py):
it calls `update` and `record_steps`.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import torch

from rl_hydra.loggers import build_loggers
from rl_hydra.loops.evaluate import Evaluator
from rl_hydra.loops.experience import Experience, LocalExperience
from rl_hydra.loops.monitor import StopRequested, TrainingDiverged, UpdateMonitor
from rl_hydra.loops.reporting import Reporter
from rl_hydra.loops.schedule import Due, Schedule
from rl_hydra.loops.settings import RunSettings
from rl_hydra.loops.steps import Steps, UpdateWanted
from rl_hydra.protocols import Agent, Update
from rl_hydra.runs.rng import spawn_seeds
from rl_hydra.runs.run_dir import RunDirectory

log = logging.getLogger(__name__)

__all__ = ["Runner", "StopRequested", "TrainingDiverged"]


class Runner:
    """`settings`: what the run's config says of the loop (loops/settings.py); `experience`: where the
    transitions come from, this process's env and buffer (LocalExperience) or a distributed run's
    actors. Built by rl_hydra.build.build_runner, for every way a run starts."""

    def __init__(
        self,
        settings: RunSettings,
        agent: Agent,
        experience: Experience,
        run_dir: str | Path | RunDirectory,
        stop_after: int | None = None,
    ):
        self.settings, self.agent, self.experience = settings, agent, experience
        self.run_dir = RunDirectory.of(run_dir)  # the launch's own: what it has read of the record, it keeps
        self.schedule = Schedule(
            settings.total_steps, settings.eval_every, settings.log_every, settings.checkpoint_every
        )
        self.monitor = UpdateMonitor(
            torch.device(getattr(agent, "device", "cpu")).type == "cpu", settings.divergence_hint
        )
        self.evaluator = Evaluator(
            settings.make_eval_env,
            spawn_seeds(settings.seed).evaluation,
            settings.eval_episodes,
            settings.stop_at_return,
            settings.eval_epsilon,
        )
        self.reporter = Reporter(self.run_dir, agent.metric_names, settings, build_loggers(settings.loggers))
        self.reporter.columns += list(experience.columns)
        self.elapsed_before = 0.0  # wall time of earlier sessions of this run (resume)
        self.started: float | None = None
        self.stop_requested = False
        self.stop_after = stop_after  # end here, as if interrupted (rl-hydra-verify's prefix)
        # what fell due at the step a stop interrupted (an evaluation abandoned, a row not yet
        # written): checkpointed, and done first when the run resumes
        self.pending: Due | None = None
        self._before_evaluation: tuple[dict[str, Any], torch.Tensor] | None = None

    @property
    def global_step(self) -> int:
        return self.schedule.step

    @property
    def done(self) -> bool:
        return (
            self.global_step >= self.schedule.total_steps
            or self.evaluator.solved_at is not None
            or (self.stop_after is not None and self.global_step >= self.stop_after)
        )

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + (0.0 if self.started is None else time.perf_counter() - self.started)

    def start(self) -> None:
        """Open the loggers; a resumed run first does what was due when it was stopped."""
        self.started = time.perf_counter()
        self.reporter.start(self.global_step)
        if self.pending is not None:
            due, self.pending = self.pending, None
            self._on_due(due)

    @property
    def local(self) -> LocalExperience:
        """The env, buffer and rollout of a run in this process (the loops'; a distributed learner has none)."""
        assert isinstance(self.experience, LocalExperience), "a distributed learner's Runner has no env or buffer"
        return self.experience

    # --- called by the loops ----------------------------------------------------------
    def run_due_updates(self) -> Steps[None]:
        """The training phases that the vector step being taken falls due for, each of
        `agent.gradient_steps` updates on freshly sampled batches, as steps that yield each update they
        want. A prioritized buffer (protocols.PrioritizedBuffer) gets each batch's new priorities before
        it draws the next."""
        agent, local = self.agent, self.local
        phases = self.schedule.phases_due(agent, local.env.num_envs)
        if phases and len(local.buffer):
            for batch in local.buffer.sample_batches(agent.batch_size, phases * agent.gradient_steps):
                update = yield UpdateWanted(agent, batch)
                assert update is not None  # whoever drives the steps answers with the agent's Update
                priorities = self.record_update(update)
                if local.update_priorities is not None:
                    local.update_priorities(batch.indices, priorities)

    def update(self, batch) -> torch.Tensor | None:
        """One update of the agent on `batch` (a distributed learner's); see `record_update`."""
        return self.record_update(self.agent.update(batch))

    def record_update(self, update: Update) -> torch.Tensor | None:
        """An update's metrics kept (a NaN or infinite one stops the run with TrainingDiverged), its
        batch's new priorities returned (None unless the agent is prioritized)."""
        self.monitor.record(update.metrics, self.agent.updates, self.global_step)
        return update.priorities

    def record_step(self) -> None:
        """Account for the vector step just taken and run whatever falls due."""
        self.record_steps(self.local.env.num_envs)

    def record_steps(self, steps: int) -> None:
        """Account for `steps` env steps (a vector step's, or an actor's round) and run whatever falls due."""
        if self.monitor.device_check_pending:
            self.monitor.check_device(self.global_step)
        due = self.schedule.advance(steps)
        if self.stop_requested:
            self.pending = due
            raise StopRequested
        if due is not None:
            self._on_due(due)

    def _on_due(self, due: Due) -> None:
        if due.evaluate:
            # an evaluation draws on the agent's and torch's generators: a stop that abandons it
            # checkpoints them as they were before it, so the resumed run repeats it exactly
            self._before_evaluation = (self.agent.state_dict(), torch.get_rng_state())
            try:
                improved = self.evaluator.run(self.agent, self.global_step, self.elapsed, lambda: self.stop_requested)
            except StopRequested:
                self.pending = due
                raise
            self._before_evaluation = None
            if improved:
                self.save_checkpoint("best", with_buffer=False)
        if due.log:
            self.write_row(with_eval=due.evaluate)
        if due.checkpoint and not self.done:  # the final checkpoint is the caller's
            self.save_checkpoint("last")

    def write_row(self, with_eval: bool) -> None:
        row = {
            "time/elapsed_s": round(self.elapsed, 3),
            **self.experience.episodes.row(),
            **{f"train/{k}": float(v) for k, v in self.monitor.latest.items()},
            **self.experience.row(self.global_step, self.agent.updates),
        }
        last = self.evaluator.last  # None before the first evaluation
        if with_eval and last is not None:
            row.update(last)
        self.reporter.write(self.global_step, row, None if last is None else last["eval/return_mean"])

    # --- checkpoints and summary ------------------------------------------------------
    def state_dict(self, with_buffer: bool) -> dict[str, Any]:
        """Everything needed to continue exactly: agent, buffer, counters, RNG streams, env."""
        episodes = self.experience.episodes
        agent_state, torch_rng = (
            (self.agent.state_dict(), torch.get_rng_state())
            if (self.pending is None or self._before_evaluation is None)
            else self._before_evaluation
        )
        state = {
            "agent": agent_state,
            "runner": {
                "global_step": self.global_step,
                **self.evaluator.state_dict(),
                "episodes": episodes.episodes,
                "elapsed": self.elapsed,
                "finished_returns": list(episodes.finished_returns),
                "finished_lengths": list(episodes.finished_lengths),
                "latest_update": dict(self.monitor.latest),
            },
        }
        state["runner"]["pending"] = list(self.pending) if self.pending is not None else None
        own = self.experience.state_dict(with_buffer)
        state["rng"] = {"torch": torch_rng, **own.pop("rng", {})}
        return {**state, **own}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        runner, episodes = state["runner"], self.experience.episodes
        self.schedule.step = runner["global_step"]
        self.evaluator.load_state_dict(runner)
        episodes.episodes = runner["episodes"]
        episodes.finished_returns = list(runner["finished_returns"])
        episodes.finished_lengths = list(runner["finished_lengths"])
        self.elapsed_before = runner["elapsed"]
        self.monitor.latest = dict(runner["latest_update"])
        self.pending = Due(*runner["pending"]) if runner.get("pending") is not None else None
        torch.set_rng_state(state["rng"]["torch"])
        self.experience.load_state_dict(state)

    def save_checkpoint(self, name: str, with_buffer: bool | None = None) -> Path:
        if with_buffer is None:
            with_buffer = self.settings.save_buffer
        path = self.run_dir.save_checkpoint(name, self.state_dict(with_buffer))
        if name == "last":
            log.info("checkpoint %s at step %d (%.1f MB)", path, self.global_step, path.stat().st_size / 1e6)
        return path

    def summary(self, status: str, reason: str | None = None) -> dict[str, Any]:
        """summary.json's figures (its schema: runs/run_dir.py SUMMARY_KEYS)."""
        return run_summary(
            status, reason, self.identity(), self.global_step, self.agent.updates, self.evaluator, self.elapsed
        )

    def identity(self) -> dict[str, Any]:
        """What the run is, for summary.json (the group choices from .hydra/, written by now)."""
        return self.run_dir.identity_of(self.settings.env_id, self.settings.seed, self.settings.algo_name)

    def close(self, status: str = "completed") -> None:
        """`status`: the run's, as summary.json has it (completed, failed, interrupted)."""
        self.reporter.close(status, self.global_step)
        self.experience.close()
        self.evaluator.close()


def run_summary(
    status: str,
    reason: str | None,
    identity: dict[str, Any],
    global_step: int,
    updates: int,
    evaluator: Evaluator,
    elapsed: float,
) -> dict[str, Any]:
    """summary.json's figures (its schema: runs/run_dir.py SUMMARY_KEYS)."""
    last, solved = evaluator.last or {}, evaluator.solved_at or {}
    return {
        "status": status,
        "reason": reason,
        **identity,
        "global_step": global_step,
        "updates": updates,
        "eval_return_mean": last.get("eval/return_mean"),
        "eval_return_std": last.get("eval/return_std"),
        "best_eval_return_mean": evaluator.best_return if math.isfinite(evaluator.best_return) else None,
        "stop_at_return": evaluator.stop_at_return,
        "solved_at_step": solved.get("step"),
        "solved_at_s": solved.get("elapsed_s"),
        "wall_time_s": round(elapsed, 3),
        "steps_per_second": round(global_step / max(elapsed, 1e-9), 1),
    }
