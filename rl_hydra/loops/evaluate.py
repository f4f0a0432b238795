"""Greedy evaluation: rollouts shared by the loops and the run tools, and the in-training
Evaluator (its own env, seeds that never repeat, the best return, the early stop)."""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium.vector import VectorEnv

from rl_hydra.loops.monitor import StopRequested

log = logging.getLogger(__name__)


# an evaluation episode's steps at most where the env sets no time limit, so that a greedy policy
# that walks into a wall for ever still ends: 108,000, Atari's 30 minutes of play at 60 frames a second
EVAL_STEP_CAP = 108_000


@torch.no_grad()
def evaluate(
    agent,
    env: VectorEnv,
    seed: int,
    epsilon: float = 0.0,
    should_stop: Callable[[], bool] | None = None,
    max_steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run one greedy episode in each of the env's copies; returns (returns, lengths).

    One episode per copy (rather than the first N to finish) keeps short episodes
    from being over-represented. Recurrent agents get `state=None` at the start.
    Returns are the game's own score over full games: the env group's learning-only
    transforms (`env.learning`: clipped rewards, a lost life as terminal) do not apply here.
    With `epsilon` > 0 each action is a random one with that probability (the env group's
    `eval_epsilon`: Atari's 0.05, as Mnih et al. 2015 evaluate, so that a policy that never
    presses FIRE cannot stall an episode until its time limit), drawn from `seed`.
    `should_stop` is asked after every step: when it says yes, StopRequested abandons the episodes.
    An episode still running after `max_steps` steps (default: the env's time limit where
    make_env knows it and it is longer than EVAL_STEP_CAP, else EVAL_STEP_CAP) is cut there,
    with a warning: its return is what it had scored.
    """
    n = env.num_envs
    max_steps = max_steps or max(EVAL_STEP_CAP, getattr(env, "time_limit", None) or 0)
    # one seed per env, as gymnasium's vector envs take them (VectorEnv's signature says int)
    obs, _ = env.reset(seed=[seed + i for i in range(n)])  # type: ignore[arg-type]
    state = None
    returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
    running = np.ones(n, dtype=bool)
    if epsilon > 0:
        rng, random_actions = np.random.default_rng(seed), copy.deepcopy(env.single_action_space)
        random_actions.seed(seed)
    for _ in range(max_steps):
        actions, state = agent.act(obs, state, explore=False)
        if epsilon > 0 and (random_rows := np.flatnonzero(rng.random(n) < epsilon)).size:
            actions = np.array(actions)  # a copy: the agent's own array stays as it was
            for i in random_rows:
                actions[i] = random_actions.sample()
        obs, rewards, terminated, truncated, _ = env.step(actions)
        returns += rewards * running
        lengths += running
        running &= ~(terminated | truncated)
        if should_stop is not None and should_stop():
            raise StopRequested
        if not running.any():
            break
    else:
        log.warning(
            "evaluation: %d of %d episodes had not ended after %d steps (the env sets no time limit): "
            "cut there, with the return they had; env.max_episode_steps=N ends them sooner",
            running.sum(),
            n,
            max_steps,
        )
    return returns, lengths


class Evaluator:
    """`train.eval_episodes` greedy episodes (acting at random with probability `epsilon`, the env's
        `eval_epsilon`) on a separate env made by `make_env(seed=, num_envs=)`, each round on new seeds
    (`seed`: the run's evaluation stream, runs/rng.py, apart from its training envs').

        Tracks the best mean return (a new best is what `checkpoints/best.pt` keeps) and when a
        round first reached `train.stop_at_return`."""

    def __init__(
        self,
        make_env: Callable[..., VectorEnv],
        seed: int,
        episodes: int,
        stop_at_return: float | None,
        epsilon: float = 0.0,
    ):
        self.make_env, self.seed, self.episodes, self.stop_at_return = make_env, seed, episodes, stop_at_return
        self.epsilon = epsilon
        self.env: VectorEnv | None = None
        self.rounds = 0
        self.best_return = -math.inf
        self.last: dict[str, float] | None = None
        self.solved_at: dict[str, float] | None = None  # {"step", "elapsed_s"} of the first round at the target

    def run(self, agent, step: int, elapsed: float, should_stop: Callable[[], bool] | None = None) -> bool:
        """Evaluate `agent`; returns whether this round set a new best. StopRequested (from
        `should_stop`) abandons the round and leaves the evaluator as it was before it."""
        if self.env is None:
            self.env = self.make_env(seed=self.seed, num_envs=self.episodes)
        returns, lengths = evaluate(
            agent,
            self.env,
            self.seed + self.rounds * self.episodes,
            epsilon=self.epsilon,
            should_stop=should_stop,
        )
        self.rounds += 1
        mean = float(returns.mean())
        self.last = {
            "eval/return_mean": mean,
            "eval/return_std": float(returns.std()),
            "eval/length_mean": float(lengths.mean()),
        }
        log.info("step %d: eval return %.1f +- %.1f over %d episodes", step, mean, returns.std(), len(returns))
        if self.stop_at_return is not None and self.solved_at is None and mean >= self.stop_at_return:
            self.solved_at = {"step": step, "elapsed_s": round(elapsed, 3)}
            log.info("step %d: eval return reached train.stop_at_return=%s; stopping", step, self.stop_at_return)
        improved = mean > self.best_return
        self.best_return = max(self.best_return, mean)
        return improved

    def state_dict(self) -> dict[str, Any]:
        return {
            "eval_rounds": self.rounds,
            "best_eval_return": self.best_return,
            "solved_at": self.solved_at,
            "last_eval": self.last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds, self.best_return = state["eval_rounds"], state["best_eval_return"]
        self.solved_at = state.get("solved_at")
        self.last = state.get("last_eval")  # a run resumed at its end still reports its final evaluation

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
