"""`distributed=apex`: one run spread over Ray. This process (the driver, on the GPU where there is
one) is the learner: it samples from the replay shards, updates the run's agent, sends the new
priorities back and publishes its weights; Ray actors act (rl_hydra/distributed/actor.py) and hold
the replay (replay.py), started and watched by cluster.py. The run directory, its metrics, checkpoints, resume
and refusals are a single-process run's (rl_hydra/training.py); what differs is counted in the
metrics' distributed/* columns and recorded in provenance.json.

Env steps are counted as actors report their rounds; evaluations, rows and checkpoints fall due
on them as in the single-process loop. The learner updates at most `max_replay_ratio` times per
env step after `algo.learning_starts`, so that adding actors adds data, not a different algorithm.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from omegaconf import DictConfig

from rl_hydra.buffers.device import to_device
from rl_hydra.config import ConfigError
from rl_hydra.distributed.actor import network_weights
from rl_hydra.distributed.cluster import Cluster, ClusterFault
from rl_hydra.distributed.replay import as_tensors
from rl_hydra.distributed.settings import (
    Settings,
    actor_epsilons,
    read_settings,
    replay_ratios,
    require_ray,
    sequence_priorities,
)
from rl_hydra.loggers import build_loggers
from rl_hydra.loops.evaluate import Evaluator
from rl_hydra.loops.monitor import StopRequested, TrainingDiverged, UpdateMonitor
from rl_hydra.loops.reporting import Reporter
from rl_hydra.loops.runner import run_summary
from rl_hydra.loops.schedule import Due, Schedule
from rl_hydra.runs.run_dir import RunDirectory, RunError, misfit, resume_command

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
    from rl_hydra.training import process_settings

    settings = read_settings(cfg.distributed)
    if stop_after is not None:
        raise ConfigError("distributed=apex runs cannot be re-run for a prefix (they are not bit-reproducible)")
    with process_settings(cfg):
        learner = Learner(cfg, run_dir, device, settings)
        try:
            return learner.train(resume, on_ready)
        finally:
            learner.cluster.shutdown()


class Learner:
    """The driver's side of a distributed run: the agent it updates, the schedule of env steps that
    actors report, evaluation, metrics and checkpoints; the Ray side is its `cluster`."""

    def __init__(self, cfg: DictConfig, run_dir: RunDirectory, device: torch.device, settings: Settings):
        from rl_hydra.algos.dqn import DQN
        from rl_hydra.envs import make_env
        from rl_hydra.fit import check_fit, import_class
        from rl_hydra.training import build_agent, cfg_choice, compile_agent, run_settings

        self.cfg, self.run_dir, self.device, self.settings = cfg, run_dir, device, settings
        if not issubclass(import_class(cfg.algo._target_, "algo._target_"), DQN):
            raise ConfigError(
                f"distributed=apex runs the Q family (algo=dqn, qr_dqn, iqn, c51, rainbow; drqn as "
                f"R2D2), not algo={cfg_choice(cfg, 'algo')}; use distributed=none"
            )
        env = make_env(cfg.env, seed=cfg.seed)
        self.spaces = {"observation_space": env.single_observation_space, "action_space": env.single_action_space}
        env.close()
        check_fit(cfg, env.single_action_space, lambda group: cfg_choice(cfg, group))
        self.agent: Any = build_agent(cfg, **self.spaces, device=device)
        if cfg.get("compile", False):
            compile_agent(self.agent)
        self.recurrent = self.agent.capabilities.recurrent
        if self.recurrent:
            from rl_hydra.loops.recurrent import check_sequences

            check_sequences(self.agent, cfg.buffer)
        # R2D2's sequences always; transitions where the run's buffer draws by priority (buffer=prioritized)
        buffer_class = import_class(cfg.buffer._target_, "buffer._target_")
        self.prioritized = self.recurrent or callable(getattr(buffer_class, "update_priorities", None))
        agent = self.agent
        self.replay_ratio, self.min_replay_ratio = replay_ratios(settings, agent.train_every, agent.gradient_steps)
        loop = self.loop_settings = run_settings(cfg, agent)  # what the loop's parts are told
        self.schedule = Schedule(loop.total_steps, loop.eval_every, loop.log_every, loop.checkpoint_every)
        self.evaluator = Evaluator(
            loop.make_eval_env, loop.seed, loop.eval_episodes, loop.stop_at_return, loop.eval_epsilon
        )
        self.monitor = UpdateMonitor(device.type == "cpu", loop.divergence_hint)
        self.reporter = Reporter(run_dir, agent.metric_names, loop, build_loggers(loop.loggers))
        self.reporter.columns += list(COLUMNS)
        self.episodes = 0
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.elapsed_before = 0.0
        self.started: float | None = None
        self.restarts_before = 0  # actor restarts in earlier sessions of the run
        self.lags: list[int] = []
        self.stop_requested = False
        # Ray last: a config it cannot run is refused above whether Ray is installed or not
        self.cluster = Cluster(require_ray(), settings, cfg, self.recurrent, self.prioritized)
        self.row_mark = (time.perf_counter(), 0, 0)  # (time, env steps, updates) at the last row

    # --- where the run stands -------------------------------------------------------------
    @property
    def global_step(self) -> int:
        return self.schedule.step

    @property
    def done(self) -> bool:
        return self.global_step >= self.schedule.total_steps or self.evaluator.solved_at is not None

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + (0.0 if self.started is None else time.perf_counter() - self.started)

    def provenance_sessions(self) -> list[dict[str, Any]]:
        from rl_hydra.runs import provenance

        try:
            return (provenance.read(self.run_dir) or {}).get("sessions", [])
        except RunError:
            return []

    # --- training ---------------------------------------------------------------------
    def train(self, resume: bool, on_ready: Callable[[int, torch.device], None] | None) -> dict[str, Any]:
        from rl_hydra.training import log_through_progress_bar, stop_at_step_boundary

        checkpoint = self.run_dir.load_checkpoint("last") if resume else None
        if checkpoint is not None:
            self.load_state_dict(checkpoint)
        cluster = self.cluster
        cluster.connect()
        cluster.start_replay(self.spaces, (checkpoint or {}).get("replay"))
        self.publish()
        cluster.start_actors(session=len(self.provenance_sessions()))  # a resumed run's actors explore new seeds
        if on_ready is not None:
            on_ready(self.global_step, self.device)
        self.record_provenance()
        log.info(
            "distributed=apex: %d actors (epsilon %s), %d replay shard%s, the learner on %s; at most %.3g "
            "updates per env step, %s",
            self.settings.actors,
            ", ".join(
                f"{e:.3g}"
                for e in actor_epsilons(self.settings.actors, self.settings.epsilon_base, self.settings.epsilon_alpha)
            ),
            self.settings.shards,
            "" if self.settings.shards == 1 else "s",
            self.device,
            self.replay_ratio,
            waiting(self.min_replay_ratio, self.settings.min_replay_ratio),
        )
        if checkpoint is not None:
            log.info("resuming %s at step %d with fresh actors", self.run_dir.path, self.global_step)
        status, summary = "failed", None
        with log_through_progress_bar(self.reporter.show_progress):
            try:
                with stop_at_step_boundary(cast(Any, self)):
                    self.started = started = time.perf_counter()
                    self.row_mark = (started, self.global_step, self.agent.updates)
                    self.reporter.start(self.global_step)
                    self.loop()
                self.save_checkpoint("last")
                summary = self.summary("completed")
                self.run_dir.write_summary(summary)
                status = "completed"
            except TrainingDiverged as error:
                self.run_dir.write_summary(self.summary("failed", reason=str(error)))
                raise
            except StopRequested:
                self.save_checkpoint("last")
                self.run_dir.write_summary(self.summary("interrupted", reason="stopped by signal"))
                status = "interrupted"
                raise
            except ClusterFault as error:  # the launch reports it as a failed run (exit status 1)
                self.run_dir.write_summary(self.summary("failed", reason=str(error)))
                step = self.run_dir.checkpoint_step("last")
                where = (
                    f"the last checkpoint is {self.run_dir.checkpoints / 'last.pt'} (step {step})"
                    if step is not None
                    else "no checkpoint was written yet"
                )
                raise ClusterFault(f"{error}; {where}; resume with: {resume_command(self.run_dir.path)}") from None
            finally:
                self.reporter.close(status)
                self.evaluator.close()
        assert summary is not None
        log.info(
            "finished: eval return %s, %d steps in %.1f s (%.0f steps/s, %d updates, %d actor restarts); "
            "run directory: %s",
            "none" if summary["eval_return_mean"] is None else f"{summary['eval_return_mean']:.1f}",
            summary["global_step"],
            summary["wall_time_s"],
            summary["steps_per_second"],
            self.agent.updates,
            self.restarts,
            self.run_dir.path,
        )
        return summary

    @property
    def restarts(self) -> int:
        return self.restarts_before + self.cluster.restarts

    def loop(self) -> None:
        cluster = self.cluster
        while not self.done:
            if self.stop_requested:
                raise StopRequested
            # with a floor, a finished round's actor waits until its steps are counted and the learner is not behind
            for report in cluster.finished_rounds(hold=self.min_replay_ratio is not None):
                self.account(report)
                if self.done:
                    return
            updated = self.may_update() and self.update()
            if cluster.held and not (updated and self.behind()):
                cluster.release()
            if not updated:  # idle until an actor reports
                cluster.wait(0.05)

    def account(self, report: dict[str, Any]) -> None:
        """An actor's round: count its steps and episodes, and run what falls due."""
        self.lags.append(self.agent.updates - max(report["version"], 0))
        self.finished_returns += report["returns"]
        self.finished_lengths += report["lengths"]
        self.episodes += len(report["returns"])
        # the budget is the run's: a round that passes train.total_steps counts its steps up to it (an
        # actor cannot stop mid-round), so the run ends there and a resume of it is not refused
        steps = min(report["steps"], self.schedule.total_steps - self.global_step)
        # DQN's learning-rate schedule runs on env steps taken after warm-up, as in one process
        self.agent.explore_steps = max(0, self.global_step + steps - self.agent.learning_starts)
        due = self.schedule.advance(steps)
        if self.monitor.device_check_pending:
            self.monitor.check_device(self.global_step)
        if due is not None:
            self.on_due(due)

    def behind(self) -> bool:
        """Whether the learner has made fewer than `min_replay_ratio` updates per env step (after warm-up)."""
        floor = self.min_replay_ratio
        learned_from = self.global_step - self.agent.learning_starts
        return floor is not None and learned_from > 0 and self.agent.updates < floor * learned_from

    def may_update(self) -> bool:
        learned_from = self.global_step - self.agent.learning_starts
        return learned_from >= 0 and self.agent.updates < self.replay_ratio * max(learned_from, 1)

    def update(self) -> bool:
        """One update on the next prefetched batch; False while the shards hold too little."""
        drawn = self.cluster.sample(self.agent.batch_size)
        if drawn is None:
            return False
        i, sample = drawn
        batch, rows = sample if self.recurrent else (sample, sample.indices)
        batch = to_device(as_tensors(batch), self.device)
        metrics = self.agent.update(batch)
        priorities = metrics.pop("priorities", None)
        if priorities is not None and self.prioritized:
            if self.recurrent:
                priorities = sequence_priorities(priorities, self.agent.counted(batch), self.settings.priority_eta)
            # kept on the device until the next sample request; a copy, as a CUDA-graphed step reuses its outputs
            self.cluster.send_priorities(i, np.asarray(rows), priorities.detach().clone())
        self.monitor.record(metrics, self.agent.updates, self.global_step)
        if self.agent.updates % self.settings.publish_every == 0:
            self.publish()
        return True

    def publish(self) -> None:
        self.cluster.publish(network_weights(self.agent), self.agent.updates)

    # --- what falls due ---------------------------------------------------------------
    def on_due(self, due: Due) -> None:
        if due.evaluate:
            if self.evaluator.run(self.agent, self.global_step, self.elapsed, lambda: self.stop_requested):
                self.save_checkpoint("best", with_replay=False)
        if due.log:
            self.write_row(with_eval=due.evaluate)
        if due.checkpoint and not self.done:
            self.save_checkpoint("last")

    def write_row(self, with_eval: bool) -> None:
        now, steps, updates = time.perf_counter(), self.global_step, self.agent.updates
        then, steps_before, updates_before = self.row_mark
        self.row_mark = (now, steps, updates)
        seconds = max(now - then, 1e-9)
        row: dict[str, Any] = {
            "time/elapsed_s": round(self.elapsed, 3),
            "rollout/episodes": self.episodes,
            **{f"train/{k}": float(v) for k, v in self.monitor.latest.items()},
        }
        if self.finished_returns:
            row["rollout/return_mean"] = float(np.mean(self.finished_returns))
            row["rollout/length_mean"] = float(np.mean(self.finished_lengths))
            self.finished_returns, self.finished_lengths = [], []
        row.update(
            {
                "distributed/updates": updates,
                "distributed/env_sps": round((steps - steps_before) / seconds, 1),
                "distributed/updates_per_s": round((updates - updates_before) / seconds, 1),
                "distributed/replay_ratio": round((updates - updates_before) / max(steps - steps_before, 1), 4),
                "distributed/weight_lag": float(np.mean(self.lags)) if self.lags else None,
                "distributed/actor_restarts": self.restarts,
                "distributed/actors": self.settings.actors,
            }
        )
        self.lags = []
        last = self.evaluator.last
        if with_eval and last is not None:
            row.update(last)
        self.reporter.write(steps, row, None if last is None else last["eval/return_mean"])

    # --- checkpoints ------------------------------------------------------------------
    def state_dict(self, with_replay: bool) -> dict[str, Any]:
        state: dict[str, Any] = {
            "agent": self.agent.state_dict(),
            "runner": {
                "global_step": self.global_step,
                **self.evaluator.state_dict(),
                "episodes": self.episodes,
                "elapsed": self.elapsed,
                "finished_returns": list(self.finished_returns),
                "finished_lengths": list(self.finished_lengths),
                "latest_update": {k: float(v) for k, v in self.monitor.latest.items()},
            },
            "rng": {"torch": torch.get_rng_state()},
            "distributed": {"actors": self.settings.actors, "actor_restarts": self.restarts},
        }
        if with_replay:
            state["replay"] = self.cluster.replay_states()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            self.agent.load_state_dict(state["agent"])
            runner = state["runner"]
            self.schedule.step = int(runner["global_step"])
            self.evaluator.load_state_dict(runner)
            self.episodes = int(runner["episodes"])
            self.elapsed_before = float(runner["elapsed"])
            self.finished_returns = list(runner["finished_returns"])
            self.finished_lengths = list(runner["finished_lengths"])
            self.monitor.latest = dict(runner["latest_update"])
            self.restarts_before = int(state.get("distributed", {}).get("actor_restarts", 0))
            torch.set_rng_state(state["rng"]["torch"])
        except (KeyError, RuntimeError, ValueError) as error:
            raise RunError(
                f"checkpoint {self.run_dir.checkpoints / 'last.pt'} does not fit this config ({misfit(error)})"
            ) from None
        if self.global_step > self.cfg.train.total_steps:
            raise ConfigError(
                f"train.total_steps={self.cfg.train.total_steps} is below the step this run has "
                f"reached ({self.global_step}); give train.total_steps >= {self.global_step}"
            )

    def save_checkpoint(self, name: str, with_replay: bool | None = None) -> Path:
        if with_replay is None:
            with_replay = self.loop_settings.save_buffer
        path = self.run_dir.save_checkpoint(name, self.state_dict(with_replay))
        if name == "last":
            log.info("checkpoint %s at step %d (%.1f MB)", path, self.global_step, path.stat().st_size / 1e6)
        return path

    def summary(self, status: str, reason: str | None = None) -> dict[str, Any]:
        loop = self.loop_settings
        identity = self.run_dir.identity_of(loop.env_id, loop.seed, loop.algo_name)
        return run_summary(status, reason, identity, self.global_step, self.agent.updates, self.evaluator, self.elapsed)

    # --- provenance and the end -------------------------------------------------------
    def record_provenance(self) -> None:
        """The latest provenance session gets the cluster: Ray's version, its nodes, the actors and shards."""
        import json

        from rl_hydra.runs import provenance
        from rl_hydra.runs.run_dir import atomic_write_text

        record = provenance.read(self.run_dir)
        if not record or not record["sessions"]:
            return
        record["sessions"][-1]["distributed"] = self.cluster.describe()
        atomic_write_text(self.run_dir.provenance_json, json.dumps(record, indent=2) + "\n")


def waiting(floor: float | None, given: float | str | None) -> str:
    """What the start line says of the actors' waiting for the learner."""
    if floor is None:
        return "actors never wait for the learner (distributed.min_replay_ratio=null)"
    return f"actors wait while the learner is below {floor:.3g} (distributed.min_replay_ratio={given})"
