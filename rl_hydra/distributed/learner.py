"""`distributed=apex`: one run spread over Ray. This process (the driver, on the GPU where there is
one) is the learner: it samples from the replay shards, updates the run's agent, sends the new
priorities back and publishes its weights; Ray actors act (rl_hydra/distributed/actor.py) and hold
the replay (replay.py), started and watched by cluster.py.

The learner drives the same Runner as one process (rl_hydra/loops/runner.py: schedule, evaluation,
reporting, checkpoints, summary), its experience coming from the actors' rounds (`RemoteExperience`)
instead of a local env and buffer. Env steps count as actors report their rounds; the learner
updates at most `max_replay_ratio` times per env step after `algo.learning_starts`, so that adding
actors adds data, not a different algorithm, and actors wait while it is below `min_replay_ratio`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from rl_hydra.algos.dqn import DQN
from rl_hydra.buffers.device import to_device
from rl_hydra.build import build_runner, cfg_choice, process_settings
from rl_hydra.distributed.actor import network_weights
from rl_hydra.distributed.cluster import Cluster, ClusterFault
from rl_hydra.distributed.parts import RunParts
from rl_hydra.distributed.replay import as_tensors
from rl_hydra.distributed.settings import (
    Settings,
    actor_epsilons,
    epsilons_said,
    read_settings,
    replay_ratios,
    require_ray,
    sequence_priorities,
)
from rl_hydra.errors import BadArgument, ClassMismatch
from rl_hydra.fit import import_class
from rl_hydra.loops import session
from rl_hydra.loops.monitor import EpisodeStats, StopRequested
from rl_hydra.runs import provenance
from rl_hydra.runs.run_dir import RunDirectory, RunError, resume_command

log = logging.getLogger(__name__)

COLUMNS = (
    "distributed/updates",
    "distributed/env_sps",
    "distributed/updates_per_s",
    "distributed/replay_ratio",
    "distributed/weight_lag",
    "distributed/actor_restarts",
    "distributed/actors",
)


def run(
    cfg: DictConfig,
    run_dir: RunDirectory,
    device: torch.device,
    resume: bool,
    on_ready: Callable[[int, torch.device], None] | None,
    stop_after: int | None,
) -> dict[str, Any]:
    """rl_hydra.training.run for `distributed=apex`: the same promises (nothing written before
    `on_ready`, the summary returned and written), the same errors."""
    settings = read_settings(cfg.distributed)
    if stop_after is not None:
        raise BadArgument("distributed=apex runs cannot be re-run for a prefix (they are not bit-reproducible)")
    with process_settings(cfg):
        learner = Learner(cfg, run_dir, device, settings)
        try:
            return learner.train(resume, on_ready)
        finally:
            learner.cluster.shutdown()


class RemoteExperience:
    """A Runner's experience from Ray actors (loops/experience.py): the episodes their rounds report,
    the distributed/* columns, and in checkpoints the replay shards' contents and the restart count."""

    columns: tuple[str, ...] = COLUMNS

    def __init__(self, cluster: Cluster, actors: int):
        self.cluster, self.actors = cluster, actors
        self.episodes = EpisodeStats(1)
        self.lags: list[int] = []
        self.restarts_before = 0  # actor restarts in earlier sessions of the run
        self.saved_replay: list[dict] | None = None  # a resumed checkpoint's, for the shards as they start
        self.mark(0, 0)

    @property
    def restarts(self) -> int:
        return self.restarts_before + self.cluster.restarts

    def report(self, report: dict[str, Any], updates: int) -> None:
        """An actor's round: its finished episodes, and how far its weights lagged the learner's."""
        self.lags.append(updates - max(report["version"], 0))
        self.episodes.finished_returns += report["returns"]
        self.episodes.finished_lengths += report["lengths"]
        self.episodes.episodes += len(report["returns"])

    def mark(self, step: int, updates: int) -> None:
        """Where the rates of the next row start from."""
        self.row_mark = (time.perf_counter(), step, updates)

    def row(self, step: int, updates: int) -> dict[str, Any]:
        then, steps_before, updates_before = self.row_mark
        self.mark(step, updates)
        seconds = max(self.row_mark[0] - then, 1e-9)
        lags, self.lags = self.lags, []
        return {
            "distributed/updates": updates,
            "distributed/env_sps": round((step - steps_before) / seconds, 1),
            "distributed/updates_per_s": round((updates - updates_before) / seconds, 1),
            "distributed/replay_ratio": round((updates - updates_before) / max(step - steps_before, 1), 4),
            "distributed/weight_lag": float(np.mean(lags)) if lags else None,
            "distributed/actor_restarts": self.restarts,
            "distributed/actors": self.actors,
        }

    def state_dict(self, with_buffer: bool) -> dict[str, Any]:
        state: dict[str, Any] = {"distributed": {"actors": self.actors, "actor_restarts": self.restarts}}
        if with_buffer:
            state["replay"] = self.cluster.replay_states()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.restarts_before = int(state.get("distributed", {}).get("actor_restarts", 0))
        self.saved_replay = state.get("replay")

    def close(self) -> None:
        """The cluster outlives the Runner: run() shuts it down."""


class Learner:
    """The driver's side of a distributed run: the agent it updates and the Runner it drives from the
    actors' reports; the Ray side is its `cluster`."""

    def __init__(self, cfg: DictConfig, run_dir: RunDirectory, device: torch.device, settings: Settings):
        self.run_dir, self.device, self.settings = run_dir, device, settings
        if not issubclass(import_class(cfg.algo._target_, "algo._target_"), DQN):
            raise ClassMismatch(
                f"distributed=apex runs the Q family (algo=dqn, qr_dqn, iqn, c51, rainbow; drqn as "
                f"R2D2), not algo={cfg_choice(cfg, 'algo')}; use distributed=none"
            )
        self.runner = build_runner(cfg, run_dir, device, remote=lambda agent, spaces: self.remote(cfg, agent, spaces))
        self.agent: Any = self.runner.agent

    def remote(self, cfg: DictConfig, agent: Any, spaces: dict[str, Any]) -> RemoteExperience:
        """The Runner's experience: the actors' and replay shards' (`build_runner`'s `remote`)."""
        self.spaces, self.recurrent = spaces, agent.capabilities.recurrent
        # R2D2's sequences always; transitions where the run's buffer draws by priority (buffer=prioritized)
        buffer_class = import_class(cfg.buffer._target_, "buffer._target_")
        self.prioritized = self.recurrent or callable(getattr(buffer_class, "update_priorities", None))
        settings = self.settings
        self.replay_ratio, self.min_replay_ratio = replay_ratios(settings, agent.train_every, agent.gradient_steps)
        # Ray last: a config it cannot run is refused above whether Ray is installed or not
        self.cluster = Cluster(require_ray(), settings, RunParts.of(cfg), self.recurrent, self.prioritized)
        self.experience = RemoteExperience(self.cluster, settings.actors)
        return self.experience

    # --- training ---------------------------------------------------------------------
    def train(self, resume: bool, on_ready: Callable[[int, torch.device], None] | None) -> dict[str, Any]:
        runner, cluster, run_dir = self.runner, self.cluster, self.run_dir
        checkpoint = run_dir.load_checkpoint("last") if resume else None
        if checkpoint is not None:
            session.restore(runner, checkpoint, run_dir.checkpoints / "last.pt")
        cluster.connect()
        cluster.run_step = runner.global_step
        cluster.start_replay(self.spaces, self.experience.saved_replay)
        self.publish()
        cluster.start_actors(session=len(self.provenance_sessions()))  # a resumed run's actors explore new seeds
        if on_ready is not None:
            on_ready(runner.global_step, self.device)
        self.record_provenance()
        log.info("%s", self.start_line())
        if checkpoint is not None:
            log.info("resuming %s at step %d with fresh actors", run_dir.path, runner.global_step)
        self.experience.mark(runner.global_step, self.agent.updates)
        try:
            summary = session.train(runner, self.loop, failures=(ClusterFault,))
        except ClusterFault as error:  # the launch reports it as a failed run (exit status 1)
            step = run_dir.checkpoint_step("last")
            where = (
                f"the last checkpoint is {run_dir.checkpoints / 'last.pt'} (step {step})"
                if step is not None
                else "no checkpoint was written yet"
            )
            raise ClusterFault(f"{error}; {where}; resume with: {resume_command(run_dir.path)}") from None
        log.info(
            "finished: eval return %s, %d steps in %.1f s (%.0f steps/s, %d updates, %d actor restarts); "
            "run directory: %s",
            "none" if summary["eval_return_mean"] is None else f"{summary['eval_return_mean']:.1f}",
            summary["global_step"],
            summary["wall_time_s"],
            summary["steps_per_second"],
            self.agent.updates,
            self.experience.restarts,
            run_dir.path,
        )
        return summary

    def start_line(self) -> str:
        settings = self.settings
        epsilons = actor_epsilons(settings.actors, settings.epsilon_base, settings.epsilon_alpha)
        return (
            f"distributed=apex: {settings.actors} actors (epsilon {epsilons_said(epsilons)}), "
            f"{settings.shards} replay shard{'' if settings.shards == 1 else 's'}, the learner on {self.device}; "
            f"at most {self.replay_ratio:.3g} updates per env step, "
            f"{waiting(self.min_replay_ratio, settings.min_replay_ratio)}"
        )

    def loop(self) -> None:
        runner, cluster = self.runner, self.cluster
        while not runner.done:
            if runner.stop_requested:
                raise StopRequested
            # with a floor, a finished round's actor waits until its steps are counted and the learner is not behind
            for report in cluster.finished_rounds(hold=self.min_replay_ratio is not None):
                self.account(report)
                if runner.done:
                    return
            updated = self.may_update() and self.update()
            if cluster.held and not (updated and self.behind()):
                cluster.release()
            if not updated:  # idle until an actor reports
                cluster.wait(0.05)

    def account(self, report: dict[str, Any]) -> None:
        """An actor's round: count its steps and episodes, and run what falls due."""
        runner = self.runner
        self.experience.report(report, self.agent.updates)
        # the budget is the run's: a round that passes train.total_steps counts its steps up to it (an
        # actor cannot stop mid-round), so the run ends there and a resume of it is not refused
        steps = min(report["steps"], runner.schedule.total_steps - runner.global_step)
        # DQN's learning-rate schedule runs on env steps taken after warm-up, as in one process
        self.agent.explore_steps = max(0, runner.global_step + steps - self.agent.learning_starts)
        self.cluster.run_step = runner.global_step + steps
        runner.record_steps(steps)

    def behind(self) -> bool:
        """Whether the learner has made fewer than `min_replay_ratio` updates per env step (after warm-up)."""
        floor = self.min_replay_ratio
        learned_from = self.runner.global_step - self.agent.learning_starts
        return floor is not None and learned_from > 0 and self.agent.updates < floor * learned_from

    def may_update(self) -> bool:
        learned_from = self.runner.global_step - self.agent.learning_starts
        return learned_from >= 0 and self.agent.updates < self.replay_ratio * max(learned_from, 1)

    def update(self) -> bool:
        """One update on the next prefetched batch; False while the shards hold too little."""
        drawn = self.cluster.sample(self.agent.batch_size)
        if drawn is None:
            return False
        i, sample = drawn
        batch, rows = sample if self.recurrent else (sample, sample.indices)
        batch = to_device(as_tensors(batch), self.device)
        priorities = self.runner.update(batch)
        if priorities is not None and self.prioritized:
            if self.recurrent:
                priorities = sequence_priorities(priorities, self.agent.counted(batch), self.settings.priority_eta)
            # kept on the device until the next sample request; a copy, as a CUDA-graphed step reuses its outputs
            self.cluster.send_priorities(i, np.asarray(rows), priorities.detach().clone())
        if self.agent.updates % self.settings.publish_every == 0:
            self.publish()
        return True

    def publish(self) -> None:
        self.cluster.publish(network_weights(self.agent), self.agent.updates)

    # --- provenance -------------------------------------------------------------------
    def provenance_sessions(self) -> list[dict[str, Any]]:
        try:
            return (provenance.read(self.run_dir) or {}).get("sessions", [])
        except RunError:
            return []

    def record_provenance(self) -> None:
        """The latest provenance session gets the cluster: Ray's version, its nodes, the actors and shards."""
        record = provenance.read(self.run_dir)
        if not record or not record["sessions"]:
            return
        record["sessions"][-1]["distributed"] = self.cluster.describe()
        self.run_dir.write_text(self.run_dir.provenance_json, json.dumps(record, indent=2) + "\n")


def waiting(floor: float | None, given: float | str | None) -> str:
    """What the start line says of the actors' waiting for the learner."""
    if floor is None:
        return "actors never wait for the learner (distributed.min_replay_ratio=null)"
    return f"actors wait while the learner is below {floor:.3g} (distributed.min_replay_ratio={given})"
