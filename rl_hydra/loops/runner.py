"""What both training loops share: the step schedule (log, evaluate, checkpoint),
episode statistics, metrics, the progress bar, checkpoints and the final summary.

A loop only collects experience into the buffer; after each vector step it calls
`run_due_updates` (the training phase, when one falls due) and `record_step`.
"""

from __future__ import annotations

import logging
import math
import time
from types import SimpleNamespace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from rl_hydra.envs import make_env
from rl_hydra.envs.state import capture_env_state, restore_env_state
from rl_hydra.loops.evaluate import evaluate
from rl_hydra.runs.metrics import MetricsLogger
from rl_hydra.runs.run_dir import RunDirectory

log = logging.getLogger(__name__)

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training envs


class TrainingDiverged(RuntimeError):
    """A loss or metric became NaN or infinite."""


class StopRequested(Exception):
    """Ctrl-C or SIGTERM arrived; raised at the next step boundary so the checkpoint is consistent."""


def is_on_host(value) -> bool:
    """Whether reading `value` costs no device sync (a number, or a CPU tensor)."""
    return not torch.is_tensor(value) or value.device.type == "cpu"


def crossed(before: int, after: int, every: int) -> bool:
    """True when a multiple of `every` lies in (before, after]."""
    return after // every > before // every


class Runner:
    def __init__(self, cfg: DictConfig, agent, env, buffer, run_dir: str | Path):
        self.cfg, self.agent, self.env, self.buffer = cfg, agent, env, buffer
        # a plain namespace: DictConfig attribute access is too slow for the per-step path
        self.train_cfg = SimpleNamespace(**OmegaConf.to_container(cfg.train, resolve=True))
        self.run = RunDirectory(run_dir)
        self.global_step = 0
        self.eval_rounds = 0
        self.best_eval_return = -math.inf
        self.last_eval: dict[str, float] | None = None
        self.latest_update: dict[str, torch.Tensor] = {}
        self._first_bad_update: torch.Tensor | None = None  # on the device: -1, or the first non-finite update
        self._agent_on_cpu = torch.device(getattr(agent, "device", "cpu")).type == "cpu"  # its metrics too
        self.elapsed_before = 0.0  # wall time of earlier sessions of this run (resume)
        self.started: float | None = None
        n = env.num_envs
        self._episode_return, self._episode_length = np.zeros(n), np.zeros(n, dtype=np.int64)
        self._finished_returns: list[float] = []
        self._finished_lengths: list[int] = []
        self.episodes = 0
        self._eval_env = None
        self.metrics: MetricsLogger | None = None
        self.obs: np.ndarray | None = None   # the loop's current observation, kept for checkpoints
        self._restored_obs: np.ndarray | None = None
        self.actor_state: tuple[torch.Tensor, ...] | None = None  # a recurrent actor's state at self.obs, kept too
        self.stop_requested = False
        self.solved_at: dict[str, float] | None = None  # when an eval reached train.stop_at_return
        self._next_due_step = 0  # the first step at which an eval, log row or checkpoint may fall due

    # --- reported by the loop ---------------------------------------------------
    def record_step(self, rewards: np.ndarray, done: np.ndarray) -> None:
        """Account for one vector step (num_envs env steps) and run whatever falls due."""
        if self._first_bad_update is not None:
            self.check_device_updates()
        self._episode_return += rewards
        self._episode_length += 1
        if np.count_nonzero(done):  # cheaper than .any() on a small array, and this runs every step
            self._finished_returns += self._episode_return[done].tolist()
            self._finished_lengths += self._episode_length[done].tolist()
            self.episodes += int(done.sum())
            self._episode_return[done] = 0.0
            self._episode_length[done] = 0
        before, self.global_step = self.global_step, self.global_step + len(rewards)
        if self.global_step >= self._next_due_step:
            self._on_steps(before, self.global_step)
        if self.stop_requested:
            raise StopRequested

    def run_due_updates(self) -> None:
        """The training phase, when the vector step being taken crosses a multiple of
        `agent.train_every` after warm-up: `gradient_steps` updates on fresh samples.
        Loops call it after adding the step to the buffer and before `record_step`."""
        agent, before = self.agent, self.global_step
        after = before + self.env.num_envs
        if after >= agent.learning_starts and crossed(before, after, agent.train_every) and len(self.buffer):
            for batch in self.buffer.sample_batches(agent.batch_size, agent.gradient_steps):
                self.record_update(agent.update(batch))

    def reset_env(self) -> np.ndarray:
        """The first observation for the loop: the restored one on an exact resume, else a reset."""
        if self._restored_obs is not None:
            self.obs, self._restored_obs = self._restored_obs, None
        else:
            self.obs = self.env.reset()[0]
            self.actor_state = None
            self._episode_return[:] = 0.0
            self._episode_length[:] = 0
        return self.obs

    def record_update(self, metrics: dict[str, torch.Tensor]) -> None:
        """Keep an update's metrics; a NaN or infinite one stops the run (TrainingDiverged).

        Values on the host are checked at once. Reading a flag back from an accelerator
        would make the host wait for every update, so there the check stays on the device
        (the number of the first bad update) and `check_device_updates` reads it once per
        env step, i.e. once per training phase; the error still names that exact update.
        """
        self.latest_update = metrics
        # one float sum: a NaN or inf anywhere makes it non-finite (float() of a CPU scalar is ~1 us)
        on_host = list(metrics) if self._agent_on_cpu else [k for k, v in metrics.items() if is_on_host(v)]
        if on_host and not math.isfinite(sum(float(metrics[k]) for k in on_host)):
            bad = [k for k in on_host if not math.isfinite(float(metrics[k]))]
            if bad:  # not just finite values whose sum overflowed
                self._diverged(bad, getattr(self.agent, "updates", 0))
        if len(on_host) < len(metrics):
            update = getattr(self.agent, "updates", 0)
            values = torch.stack([v.float() for k, v in metrics.items() if not is_on_host(v)])
            first = self._first_bad_update
            if first is None:
                first = torch.full((), -1, dtype=torch.int64, device=values.device)
            bad_now = ~torch.isfinite(values).all() & (first < 0)
            self._first_bad_update = torch.where(bad_now, update, first)

    def check_device_updates(self) -> None:
        """Read the device-side check of the updates since the last call (one host sync)."""
        if self._first_bad_update is None:
            return
        first, self._first_bad_update = int(self._first_bad_update), None
        if first >= 0:
            self._diverged([k for k, v in self.latest_update.items() if not math.isfinite(float(v))], first)

    def _diverged(self, names: list[str], update) -> None:
        raise TrainingDiverged(f"non-finite {', '.join(names) or 'metrics'} at step {self.global_step} "
                               f"(update {update}); "
                               f"try a lower algo.optimizer.lr or enable algo.max_grad_norm")

    @property
    def done(self) -> bool:
        return self.global_step >= self.train_cfg.total_steps or self.solved_at is not None

    # --- the schedule ---------------------------------------------------------------
    def start(self) -> None:
        self.run.path.mkdir(parents=True, exist_ok=True)
        self.started = time.perf_counter()
        self._row_time, self._row_step = self.started, self.global_step
        columns = ["time/elapsed_s", "time/sps", "rollout/return_mean", "rollout/length_mean",
                   "rollout/episodes", *(f"train/{m}" for m in self.agent.metric_names),
                   "eval/return_mean", "eval/return_std", "eval/length_mean"]
        self.metrics = MetricsLogger(self.run.metrics_csv, columns, self.run.tensorboard,
                                     resume_from_step=self.global_step if self.global_step else None)
        self.progress = tqdm(total=self.train_cfg.total_steps, initial=self.global_step, unit="step",
                             dynamic_ncols=True, disable=not self.train_cfg.progress, mininterval=0.5)

    def _on_steps(self, before: int, after: int) -> None:
        cfg = self.train_cfg
        final = after >= cfg.total_steps
        evaluated = crossed(before, after, cfg.eval_every) or final
        if evaluated:
            self.evaluate()
        if evaluated or crossed(before, after, cfg.log_every):
            self.write_row(with_eval=evaluated)
        if crossed(before, after, cfg.checkpoint_every) and not self.done:  # run() saves the final one
            self.save_checkpoint("last")
        # nothing falls due before the next multiple of an interval (or the end): record_step skips to it
        intervals = (cfg.eval_every, cfg.log_every, cfg.checkpoint_every)
        self._next_due_step = min(cfg.total_steps, *((after // every + 1) * every for every in intervals))

    def evaluate(self) -> dict[str, float]:
        if self._eval_env is None:
            self._eval_env = make_env(self.cfg.env, seed=self.cfg.seed + EVAL_SEED_OFFSET,
                                      num_envs=self.train_cfg.eval_episodes)
        seed = self.cfg.seed + EVAL_SEED_OFFSET + self.eval_rounds * self.train_cfg.eval_episodes
        returns, lengths = evaluate(self.agent, self._eval_env, seed)
        self.eval_rounds += 1
        self.last_eval = {"eval/return_mean": float(returns.mean()), "eval/return_std": float(returns.std()),
                          "eval/length_mean": float(lengths.mean())}
        target = self.train_cfg.stop_at_return
        if target is not None and self.solved_at is None and self.last_eval["eval/return_mean"] >= target:
            self.solved_at = {"step": self.global_step, "elapsed_s": round(self.elapsed, 3)}
            log.info("step %d: eval return reached train.stop_at_return=%s; stopping", self.global_step, target)
        if self.last_eval["eval/return_mean"] > self.best_eval_return:
            self.best_eval_return = self.last_eval["eval/return_mean"]
            self.save_checkpoint("best", with_buffer=False)
        log.info("step %d: eval return %.1f +- %.1f over %d episodes", self.global_step,
                 returns.mean(), returns.std(), len(returns))
        return self.last_eval

    def write_row(self, with_eval: bool) -> None:
        now = time.perf_counter()
        sps = (self.global_step - self._row_step) / max(now - self._row_time, 1e-9)
        self._row_time, self._row_step = now, self.global_step
        row: dict[str, Any] = {"time/elapsed_s": round(self.elapsed, 3), "time/sps": round(sps, 1),
                               "rollout/episodes": self.episodes}
        if self._finished_returns:
            row["rollout/return_mean"] = float(np.mean(self._finished_returns))
            row["rollout/length_mean"] = float(np.mean(self._finished_lengths))
            self._finished_returns, self._finished_lengths = [], []
        row.update({f"train/{k}": float(v) for k, v in self.latest_update.items()})
        if with_eval:
            row.update(self.last_eval)
        self.metrics.log(self.global_step, row)
        self.progress.update(self.global_step - self.progress.n)
        postfix = {"sps": f"{sps:.0f}"}
        if self.last_eval:
            postfix["eval"] = f"{self.last_eval['eval/return_mean']:.1f}"
        self.progress.set_postfix(postfix, refresh=False)

    @property
    def elapsed(self) -> float:
        running = 0.0 if self.started is None else time.perf_counter() - self.started
        return self.elapsed_before + running

    # --- checkpoints and summary ----------------------------------------------------
    def state_dict(self, with_buffer: bool) -> dict[str, Any]:
        """Everything needed to continue exactly: agent, buffer, counters, RNG streams, env."""
        state = {
            "agent": self.agent.state_dict(),
            "runner": {"global_step": self.global_step, "eval_rounds": self.eval_rounds,
                       "best_eval_return": self.best_eval_return, "episodes": self.episodes,
                       "elapsed": self.elapsed, "finished_returns": list(self._finished_returns),
                       "finished_lengths": list(self._finished_lengths),
                       "latest_update": dict(self.latest_update), "solved_at": self.solved_at},
            "rng": {"torch": torch.get_rng_state(),
                    "action_space": self.env.action_space.np_random.bit_generator.state},
        }
        env_state = capture_env_state(self.env) if self.obs is not None else None
        if env_state is not None:
            state["env"] = {"state": env_state, "obs": torch.from_numpy(np.array(self.obs)),
                            "episode_return": torch.from_numpy(self._episode_return.copy()),
                            "episode_length": torch.from_numpy(self._episode_length.copy())}
            if self.actor_state is not None:
                state["env"]["actor_state"] = [s.clone() for s in self.actor_state]
        if with_buffer:
            state["buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        runner = state["runner"]
        self.global_step, self.eval_rounds = runner["global_step"], runner["eval_rounds"]
        self.best_eval_return, self.episodes = runner["best_eval_return"], runner["episodes"]
        self.elapsed_before = runner["elapsed"]
        self._finished_returns = list(runner["finished_returns"])
        self._finished_lengths = list(runner["finished_lengths"])
        self.latest_update = dict(runner["latest_update"])
        self.solved_at = runner.get("solved_at")
        torch.set_rng_state(state["rng"]["torch"])
        self.env.action_space.np_random.bit_generator.state = state["rng"]["action_space"]
        if "buffer" in state:
            self.buffer.load_state_dict(state["buffer"])
        if "env" in state:
            restore_env_state(self.env, state["env"]["state"])
            self._restored_obs = state["env"]["obs"].numpy().copy()
            self._episode_return[:] = state["env"]["episode_return"].numpy()
            self._episode_length[:] = state["env"]["episode_length"].numpy()
            self.actor_state = tuple(state["env"]["actor_state"]) if "actor_state" in state["env"] else None

    def save_checkpoint(self, name: str, with_buffer: bool | None = None) -> Path:
        if with_buffer is None:
            with_buffer = bool(self.cfg.checkpoint.save_buffer)
        path = self.run.save_checkpoint(name, self.state_dict(with_buffer))
        if name == "last":
            log.info("checkpoint %s at step %d (%.1f MB)", path, self.global_step, path.stat().st_size / 1e6)
        return path

    def summary(self, status: str, reason: str | None = None) -> dict[str, Any]:
        last = self.last_eval or {}
        elapsed = self.elapsed
        summary = {
            "status": status, "algo": self.agent.name, "env": self.cfg.env.id, "seed": self.cfg.seed,
            "global_step": self.global_step, "updates": getattr(self.agent, "updates", None),
            "eval_return_mean": last.get("eval/return_mean"), "eval_return_std": last.get("eval/return_std"),
            "best_eval_return_mean": self.best_eval_return if math.isfinite(self.best_eval_return) else None,
            "wall_time_s": round(elapsed, 3), "steps_per_second": round(self.global_step / max(elapsed, 1e-9), 1),
        }
        if self.train_cfg.stop_at_return is not None:
            summary["stop_at_return"] = self.train_cfg.stop_at_return
            summary["solved_at_step"] = self.solved_at and self.solved_at["step"]
            summary["solved_at_s"] = self.solved_at and self.solved_at["elapsed_s"]
        if reason:
            summary["reason"] = reason
        return summary

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.progress.close()
        for env in (self.env, self._eval_env):
            if env is not None:
                env.close()
