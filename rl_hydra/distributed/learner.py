"""`distributed=apex`: one run spread over Ray. This process (the driver, on the GPU where there is
one) is the learner: it samples from the replay shards, updates the run's agent, sends the new
priorities back and publishes its weights; Ray actors act (rl_hydra/distributed/actor.py) and hold
the replay (rl_hydra/distributed/replay.py). The run directory, its metrics, checkpoints, resume
and refusals are a single-process run's (rl_hydra/training.py); what differs is counted in the
metrics' distributed/* columns and recorded in provenance.json.

Env steps are counted as actors report their rounds; evaluations, rows and checkpoints fall due
on them as in the single-process loop. The learner updates at most `max_replay_ratio` times per
env step after `algo.learning_starts`, so that adding actors adds data, not a different algorithm.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable, cast

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from rl_hydra.buffers.device import to_device
from rl_hydra.config import ConfigError
from rl_hydra.distributed.actor import Actor, network_weights
from rl_hydra.distributed.replay import SequenceShard, TransitionShard, as_tensors, shard_config
from rl_hydra.distributed.settings import Settings, actor_epsilons, read_settings, require_ray, sequence_priorities
from rl_hydra.loggers import build_loggers
from rl_hydra.loops.evaluate import Evaluator
from rl_hydra.loops.monitor import StopRequested, TrainingDiverged, UpdateMonitor
from rl_hydra.loops.reporting import Reporter
from rl_hydra.loops.schedule import Due, Schedule
from rl_hydra.runs.run_dir import RunDirectory, RunError, misfit, resume_command

log = logging.getLogger(__name__)

COLUMNS = ("distributed/updates", "distributed/env_sps", "distributed/updates_per_s", "distributed/replay_ratio",
           "distributed/weight_lag", "distributed/actor_restarts", "distributed/actors")
SAMPLE_BATCHES = 4     # batches per sample request: one Ray round trip serves several updates
RESTART_PATIENCE = 300.0   # seconds an actor may take to come back after a death, before the run stops
ACTOR_SEED_STRIDE = 10_007   # actor i's envs are seeded from seed + (i + 1) * stride: apart from each other's


class ClusterFault(RuntimeError):
    """A replay shard's process died (its data is gone), or an actor more often than Ray restarts it:
    the run stops with the resume command."""


def run(cfg: DictConfig, run_dir: RunDirectory, device: torch.device, resume: bool,
        on_ready: Callable[[int, torch.device], None] | None, stop_after: int | None) -> dict[str, Any]:
    """rl_hydra.training.run for `distributed=apex`: the same promises (nothing written before
    `on_ready`, the summary returned and written), the same errors."""
    from rl_hydra.training import process_settings

    settings = read_settings(cfg.distributed)
    if stop_after is not None:
        raise ConfigError("distributed=apex runs cannot be re-run for a prefix (they are not bit-reproducible)")
    ray = require_ray()
    with process_settings(cfg):
        learner = Learner(cfg, run_dir, device, settings, ray)
        try:
            return learner.train(resume, on_ready)
        finally:
            learner.shutdown()


class Learner:
    def __init__(self, cfg: DictConfig, run_dir: RunDirectory, device: torch.device, settings: Settings, ray: Any):
        from rl_hydra.algos.dqn import DQN
        from rl_hydra.envs import make_env
        from rl_hydra.fit import check_fit, import_class
        from rl_hydra.training import build_agent, cfg_choice, compile_agent, run_settings

        self.cfg, self.run_dir, self.device, self.settings, self.ray = cfg, run_dir, device, settings, ray
        if not issubclass(import_class(cfg.algo._target_, "algo._target_"), DQN):
            raise ConfigError(f"distributed=apex runs the Q family (algo=dqn, qr_dqn, iqn, c51, rainbow; drqn as "
                              f"R2D2), not algo={cfg_choice(cfg, 'algo')}; use distributed=none")
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
        self.prioritized = self.recurrent or cfg.buffer._target_.endswith("PrioritizedReplayBuffer")
        agent = self.agent
        self.replay_ratio = settings.max_replay_ratio or agent.gradient_steps / agent.train_every
        if settings.min_replay_ratio is not None and settings.min_replay_ratio > self.replay_ratio:
            raise ConfigError(f"distributed.min_replay_ratio={settings.min_replay_ratio} is out of range; expected a "
                              f"number <= {self.replay_ratio:g}, the cap on updates per env step "
                              f"(distributed.max_replay_ratio, else algo.gradient_steps / algo.train_every)")
        loop = self.loop_settings = run_settings(cfg, agent)   # what the loop's parts are told
        self.schedule = Schedule(loop.total_steps, loop.eval_every, loop.log_every, loop.checkpoint_every)
        self.evaluator = Evaluator(loop.make_eval_env, loop.seed, loop.eval_episodes, loop.stop_at_return,
                                   loop.eval_epsilon)
        self.monitor = UpdateMonitor(device.type == "cpu", loop.divergence_hint)
        self.reporter = Reporter(run_dir, agent.metric_names, loop, build_loggers(loop.loggers))
        self.reporter.columns += list(COLUMNS)
        self.episodes = 0
        self.finished_returns: list[float] = []
        self.finished_lengths: list[int] = []
        self.elapsed_before = 0.0
        self.started: float | None = None
        self.restarts = 0
        self.deaths: collections.Counter[int] = collections.Counter()
        self.down_since: dict[int, float] = {}          # actors whose last round failed: since when
        self.retries: list[tuple[float, int]] = []      # (when, actor): rounds to ask for again
        self.held: list[int] = []                       # actors whose next round waits for the learner
        self.lags: list[int] = []
        self.stop_requested = False
        self.actors: list[Any] = []
        self.shards: list[Any] = []
        self.ray_started = False
        self.row_mark = (time.perf_counter(), 0, 0)   # (time, env steps, updates) at the last row

    # --- building ---------------------------------------------------------------------
    @property
    def global_step(self) -> int:
        return self.schedule.step

    @property
    def done(self) -> bool:
        return self.global_step >= self.schedule.total_steps or self.evaluator.solved_at is not None

    @property
    def elapsed(self) -> float:
        return self.elapsed_before + (0.0 if self.started is None else time.perf_counter() - self.started)

    def start_ray(self) -> None:
        ray, settings = self.ray, self.settings
        if ray.is_initialized():   # inside a Ray job already (the Ray sweep launcher): its cluster
            return
        ray_log = logging.getLogger("ray")   # its notes at start-up (token authentication, ...) stay off the console
        level = ray_log.level
        ray_log.setLevel(logging.ERROR)
        try:
            if settings.address is None:
                ray.init(num_cpus=math.ceil(settings.actors * settings.cpus_per_actor), include_dashboard=False,
                         log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
            else:
                ray.init(address=settings.address, log_to_driver=False, logging_level=logging.WARNING,
                         configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise ConfigError(f"distributed.address={settings.address}: cannot join a Ray cluster there "
                              f"({str(error).splitlines()[0]})") from None
        finally:
            ray_log.setLevel(level)
        self.ray_started = True

    def start_replay(self, checkpoint: dict[str, Any] | None) -> None:
        ray, cfg = self.ray, self.cfg
        shard_class = ray.remote(num_cpus=0, max_restarts=0)(SequenceShard if self.recurrent else TransitionShard)
        buffer = shard_config(cfg)
        for i in range(self.settings.shards):
            seed = cfg.seed + i
            if self.recurrent:
                shard = shard_class.remote(buffer, seed, alpha=self.settings.priority_alpha)
            else:
                shard = shard_class.remote(buffer, **self.spaces, gamma=float(cfg.algo.gamma), seed=seed)
            self.shards.append(shard)
        saved = (checkpoint or {}).get("replay")
        if saved is not None:
            if len(saved) != len(self.shards):
                raise RunError(f"the checkpoint holds {len(saved)} replay shards but distributed.shards="
                               f"{len(self.shards)}; resume with the run's own distributed.shards")
            ray.get([shard.load_state_dict.remote(state) for shard, state in zip(self.shards, saved)])
        self.inflight: list[collections.deque] = [collections.deque() for _ in self.shards]   # sample requests
        self.drawn: list[collections.deque] = [collections.deque() for _ in self.shards]      # batches not used yet
        self.new_priorities: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in self.shards]
        self.turn = 0

    def start_actors(self) -> None:
        ray, cfg, settings = self.ray, self.cfg, self.settings
        plain = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(plain, dict)
        plain.pop("logger", None)
        actor_class = ray.remote(num_cpus=settings.cpus_per_actor, max_restarts=settings.max_restarts,
                                 max_task_retries=0)(Actor)
        epsilons = actor_epsilons(settings.actors, settings.epsilon_base, settings.epsilon_alpha)
        session = len(self.provenance_sessions())   # a resumed run's actors explore new seeds
        for i, epsilon in enumerate(epsilons):   # a restarted actor is built again from these arguments
            seed = cfg.seed + (i + 1 + session * settings.actors) * ACTOR_SEED_STRIDE
            self.actors.append(actor_class.remote(plain, i, epsilon, seed, settings.send_every, settings.priority_eta,
                                                  self.prioritized))
        self.publish()
        self.rounds: dict[Any, concurrent.futures.Future] = {}   # each actor's round under way: its ref, a future
        self.round_actor: dict[Any, int] = {}
        for i in range(len(self.actors)):
            self.launch(i)

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
        self.start_ray()
        self.start_replay(checkpoint)
        self.start_actors()
        if on_ready is not None:
            on_ready(self.global_step, self.device)
        self.record_provenance()
        log.info("distributed=apex: %d actors (epsilon %s), %d replay shard%s, the learner on %s; at most %.3g "
                 "updates per env step", len(self.actors),
                 ", ".join(f"{e:.3g}" for e in actor_epsilons(len(self.actors), self.settings.epsilon_base,
                                                             self.settings.epsilon_alpha)),
                 len(self.shards), "" if len(self.shards) == 1 else "s", self.device, self.replay_ratio)
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
            except ClusterFault as error:
                from rl_hydra.launch import EXIT_FAILED, RunFailed

                self.run_dir.write_summary(self.summary("failed", reason=str(error)))
                step = self.run_dir.checkpoint_step("last")
                where = (f"the last checkpoint is {self.run_dir.checkpoints / 'last.pt'} (step {step})"
                         if step is not None else "no checkpoint was written yet")
                raise RunFailed(f"{error}; {where}; resume with: {resume_command(self.run_dir.path)}",
                                EXIT_FAILED) from None
            finally:
                self.reporter.close(status)
                self.evaluator.close()
        assert summary is not None
        log.info("finished: eval return %s, %d steps in %.1f s (%.0f steps/s, %d updates, %d actor restarts); "
                 "run directory: %s", "none" if summary["eval_return_mean"] is None
                 else f"{summary['eval_return_mean']:.1f}", summary["global_step"], summary["wall_time_s"],
                 summary["steps_per_second"], self.agent.updates, self.restarts, self.run_dir.path)
        return summary

    def loop(self) -> None:
        while not self.done:
            if self.stop_requested:
                raise StopRequested
            # a Ray future's done() is a flag set by a callback: far cheaper than ray.wait between updates
            for ref in [ref for ref, future in self.rounds.items() if future.done()]:
                self.harvest(ref)
                if self.done:
                    return
            now = time.monotonic()
            for retry in [retry for retry in self.retries if retry[0] <= now]:
                self.retries.remove(retry)
                self.launch(retry[1])
            updated = self.may_update() and self.update()
            if self.held and not (updated and self.behind()):
                for i in self.held:
                    self.launch(i)
                self.held = []
            if not updated:   # idle until an actor reports
                if self.rounds:
                    concurrent.futures.wait(self.rounds.values(), timeout=0.05, return_when="FIRST_COMPLETED")
                else:
                    time.sleep(0.05)

    def launch(self, i: int) -> None:
        """Actor i's next round, with the latest published weights (pulled from the object store)."""
        # its shard comes with each round, not at construction: Ray rebuilds a restarted actor from plain arguments
        shard = self.shards[i % len(self.shards)]
        ref = self.actors[i].collect.remote(self.weights, self.version, self.settings.weights_every, shard)
        self.rounds[ref] = ref.future()
        self.round_actor[ref] = i

    def harvest(self, future: Any) -> None:
        """An actor's round: count its steps and episodes, run what falls due, start its next round."""
        ray = self.ray
        del self.rounds[future]
        i = self.round_actor.pop(future)
        try:
            report = ray.get(future)
        except ray.exceptions.RayTaskError as error:
            if isinstance(error.cause, ray.exceptions.RayActorError):   # its shard died under it
                raise ClusterFault(f"replay shard {i % len(self.shards)} was lost ({type(error.cause).__name__})")
            raise
        except ray.exceptions.RayActorError as error:
            self.actor_down(i, error)
            return
        self.down_since.pop(i, None)
        if self.behind():   # min_replay_ratio: its next round waits for the learner (see `loop`)
            self.held.append(i)
        else:
            self.launch(i)
        self.lags.append(self.agent.updates - max(report["version"], 0))
        self.finished_returns += report["returns"]
        self.finished_lengths += report["lengths"]
        self.episodes += len(report["returns"])
        # DQN's learning-rate schedule runs on env steps taken after warm-up, as in one process
        self.agent.explore_steps = max(0, self.global_step + report["steps"] - self.agent.learning_starts)
        due = self.schedule.advance(report["steps"])
        if self.monitor.device_check_pending:
            self.monitor.check_device(self.global_step)
        if due is not None:
            self.on_due(due)

    def actor_down(self, i: int, error: Exception) -> None:
        """Actor i's round failed: it died (counted and logged once), or Ray is still restarting it
        (its next round is asked for again shortly)."""
        now = time.monotonic()
        if i not in self.down_since:
            self.down_since[i] = now
            self.deaths[i] += 1
            self.restarts += 1
            if self.deaths[i] > self.settings.max_restarts:
                raise ClusterFault(f"actor {i} died {self.deaths[i]} times, more than distributed.max_restarts="
                                   f"{self.settings.max_restarts}")
            log.warning("actor %d died (%s); Ray restarts it (%d of distributed.max_restarts=%d) and the run goes on",
                        i, type(error).__name__, self.deaths[i], self.settings.max_restarts)
        elif now - self.down_since[i] > RESTART_PATIENCE:
            raise ClusterFault(f"actor {i} did not come back within {RESTART_PATIENCE:.0f} s of its death")
        self.retries.append((now + 0.5, i))

    def behind(self) -> bool:
        """Whether the learner has made fewer than `min_replay_ratio` updates per env step (after warm-up)."""
        floor = self.settings.min_replay_ratio
        learned_from = self.global_step - self.agent.learning_starts
        return floor is not None and learned_from > 0 and self.agent.updates < floor * learned_from

    def may_update(self) -> bool:
        learned_from = self.global_step - self.agent.learning_starts
        return learned_from >= 0 and self.agent.updates < self.replay_ratio * max(learned_from, 1)

    def update(self) -> bool:
        """One update on the next prefetched batch; False while the shards hold too little."""
        drawn = self.next_batch()
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
            self.new_priorities[i].append((np.asarray(rows), priorities.detach().cpu().numpy()))
        self.monitor.record(metrics, self.agent.updates, self.global_step)
        if self.agent.updates % self.settings.publish_every == 0:
            self.publish()
        return True

    def next_batch(self) -> tuple[int, Any] | None:
        """(its shard, a sampled batch), taking turns over the shards. Each shard has sample requests
        in flight; the new priorities of its batches go with the request that replaces one (one call)."""
        i = self.turn % len(self.shards)
        self.turn += 1
        if self.drawn[i]:
            return i, self.drawn[i].popleft()
        shard, queue, ray = self.shards[i], self.inflight[i], self.ray
        if self.new_priorities[i]:
            rows, priorities = (np.concatenate(parts) for parts in zip(*self.new_priorities[i]))
            shard.update_priorities.remote(rows, priorities)
            self.new_priorities[i] = []
        while len(queue) < self.settings.prefetch + 1:
            queue.append(shard.sample.remote(self.agent.batch_size, SAMPLE_BATCHES))
        try:
            batches = ray.get(queue.popleft())
        except ray.exceptions.RayActorError as error:
            raise ClusterFault(f"replay shard {i} was lost ({type(error).__name__})") from None
        if batches is None:
            return None
        self.drawn[i].extend(batches[1:])
        return i, batches[0]

    def publish(self) -> None:
        """The learner's weights into the object store, where actors pull them at their next round."""
        self.weights = self.ray.put(network_weights(self.agent))
        self.version = self.agent.updates

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
        row: dict[str, Any] = {"time/elapsed_s": round(self.elapsed, 3), "rollout/episodes": self.episodes,
                               **{f"train/{k}": float(v) for k, v in self.monitor.latest.items()}}
        if self.finished_returns:
            row["rollout/return_mean"] = float(np.mean(self.finished_returns))
            row["rollout/length_mean"] = float(np.mean(self.finished_lengths))
            self.finished_returns, self.finished_lengths = [], []
        row.update({"distributed/updates": updates, "distributed/env_sps": round((steps - steps_before) / seconds, 1),
                    "distributed/updates_per_s": round((updates - updates_before) / seconds, 1),
                    "distributed/replay_ratio": round((updates - updates_before) / max(steps - steps_before, 1), 4),
                    "distributed/weight_lag": float(np.mean(self.lags)) if self.lags else None,
                    "distributed/actor_restarts": self.restarts, "distributed/actors": len(self.actors)})
        self.lags = []
        last = self.evaluator.last
        if with_eval and last is not None:
            row.update(last)
        self.reporter.write(steps, row, None if last is None else last["eval/return_mean"])

    # --- checkpoints ------------------------------------------------------------------
    def state_dict(self, with_replay: bool) -> dict[str, Any]:
        state: dict[str, Any] = {
            "agent": self.agent.state_dict(),
            "runner": {"global_step": self.global_step, **self.evaluator.state_dict(), "episodes": self.episodes,
                       "elapsed": self.elapsed, "finished_returns": list(self.finished_returns),
                       "finished_lengths": list(self.finished_lengths),
                       "latest_update": {k: float(v) for k, v in self.monitor.latest.items()}},
            "rng": {"torch": torch.get_rng_state()},
            "distributed": {"actors": len(self.actors), "actor_restarts": self.restarts},
        }
        if with_replay:
            try:
                state["replay"] = self.ray.get([shard.state_dict.remote() for shard in self.shards])
            except self.ray.exceptions.RayActorError as error:
                raise ClusterFault(f"a replay shard was lost ({type(error).__name__})") from None
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
            self.restarts = int(state.get("distributed", {}).get("actor_restarts", 0))
            torch.set_rng_state(state["rng"]["torch"])
        except (KeyError, RuntimeError, ValueError) as error:
            raise RunError(f"checkpoint {self.run_dir.checkpoints / 'last.pt'} does not fit this config "
                           f"({misfit(error)})") from None
        if self.global_step > self.cfg.train.total_steps:
            raise ConfigError(f"train.total_steps={self.cfg.train.total_steps} is below the step this run has "
                              f"reached ({self.global_step}); give train.total_steps >= {self.global_step}")

    def save_checkpoint(self, name: str, with_replay: bool | None = None) -> Path:
        if with_replay is None:
            with_replay = bool(self.cfg.checkpoint.save_buffer)
        path = self.run_dir.save_checkpoint(name, self.state_dict(with_replay))
        if name == "last":
            log.info("checkpoint %s at step %d (%.1f MB)", path, self.global_step, path.stat().st_size / 1e6)
        return path

    def summary(self, status: str, reason: str | None = None) -> dict[str, Any]:
        last, evaluator, elapsed = self.evaluator.last or {}, self.evaluator, self.elapsed
        solved = evaluator.solved_at or {}
        return {
            "status": status, "reason": reason, **self.run_dir.identity(self.cfg, self.agent.name),
            "global_step": self.global_step, "updates": self.agent.updates,
            "eval_return_mean": last.get("eval/return_mean"), "eval_return_std": last.get("eval/return_std"),
            "best_eval_return_mean": evaluator.best_return if math.isfinite(evaluator.best_return) else None,
            "stop_at_return": evaluator.stop_at_return, "solved_at_step": solved.get("step"),
            "solved_at_s": solved.get("elapsed_s"),
            "wall_time_s": round(elapsed, 3), "steps_per_second": round(self.global_step / max(elapsed, 1e-9), 1),
        }

    # --- provenance and the end -------------------------------------------------------
    def record_provenance(self) -> None:
        """The latest provenance session gets the cluster: Ray's version, its nodes, the actors and shards."""
        import json

        from rl_hydra.runs import provenance
        from rl_hydra.runs.run_dir import atomic_write_text

        ray = self.ray
        nodes = sorted({node.get("NodeManagerHostname") or node.get("NodeManagerAddress")
                        for node in ray.nodes() if node.get("Alive")})
        record = provenance.read(self.run_dir)
        if not record or not record["sessions"]:
            return
        record["sessions"][-1]["distributed"] = {
            "kind": "apex", "ray": ray.__version__, "address": self.settings.address or "local",
            "nodes": nodes, "actors": len(self.actors), "cpus_per_actor": self.settings.cpus_per_actor,
            "shards": len(self.shards)}
        atomic_write_text(self.run_dir.provenance_json, json.dumps(record, indent=2) + "\n")

    def shutdown(self) -> None:
        """End the actors and shards (and the local Ray instance this run started)."""
        ray = self.ray
        if not ray.is_initialized():
            return
        for handle in [*self.actors, *self.shards]:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.ray_started:
            ray.shutdown()
