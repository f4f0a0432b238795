"""An acting process (a Ray actor): its own envs, its own epsilon, the learner's weights pulled at the
start of every round of `weights_every` env steps, and its experience sent to its replay shard.

What it sends is cut by the project's own buffers, kept small here: a transition buffer builds the
n-step returns (rl_hydra/buffers/replay.py), a sequence buffer the chunks with their stored
recurrent state (rl_hydra/buffers/sequence.py). Each batch's initial priorities are the agent's own
loss terms under the weights the actor holds (Ape-X), for sequences R2D2's eta * max + (1 - eta) * mean.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, cast

import numpy as np
import torch
from omegaconf import OmegaConf

from rl_hydra import speed
from rl_hydra.algos.common import LinearSchedule
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from rl_hydra.build import process_settings
from rl_hydra.distributed.parts import ActorParts
from rl_hydra.distributed.replay import as_arrays
from rl_hydra.distributed.settings import sequence_priorities
from rl_hydra.envs import make_env
from rl_hydra.loops.rollout import Rollout
from rl_hydra.runs.rng import spawn_seeds


def network_weights(agent) -> dict[str, dict[str, torch.Tensor]]:
    """What an actor needs of the learner: its online and target networks' weights, on the host."""
    return {
        name: {key: value.detach().cpu().clone() for key, value in getattr(agent, name).state_dict().items()}
        for name in ("q_net", "target_net")
    }


class Actor:
    """One actor; `collect` acts one round and reports what it did."""

    def __init__(
        self,
        parts: ActorParts,
        index: int,
        epsilon: float | None,
        seed: int,
        send_every: int,
        eta: float,
        prioritized: bool,
    ):
        self.settings = contextlib.ExitStack()  # the actor process's threads, denormals, seeds and speed paths
        self.settings.enter_context(process_settings(dataclasses.replace(parts.process, seed=seed)))
        self.index, self.send_every, self.eta = index, send_every, eta
        self.prioritized = prioritized
        seeds = spawn_seeds(seed)  # the actor's streams: its torch and agent ones are spawned where they are seeded
        self.env = make_env(OmegaConf.create(parts.env), seed=seeds.env, say_time_limit=False)
        observation_space, action_space = self.env.single_observation_space, self.env.single_action_space
        recipe = dataclasses.replace(parts.agent, seed=seed)
        self.agent = cast(Any, recipe.build(observation_space, action_space, device=torch.device("cpu")))
        # None: the agent's own schedule, on the run's env steps (each round says where the run is)
        self.own_schedule = epsilon is None
        if epsilon is not None and not getattr(self.agent, "noisy", False):  # noisy layers explore by themselves
            self.agent.epsilon_schedule = LinearSchedule(epsilon, epsilon, 1.0)
        self.recurrent = self.agent.capabilities.recurrent
        n = self.env.num_envs
        self.rollout = Rollout(self.env)
        self.rollout.start()
        self.version = -1  # the learner's update count of the weights acted with (-1: its initial ones)
        if self.recurrent:
            assert parts.sequence_length is not None and parts.stride is not None  # the sequence buffer's
            self.capacity = 2 * (send_every + n) + 8  # chunks cut between two sends, and then some
            self.local: Any = SequenceBuffer(
                self.capacity,
                parts.sequence_length,
                parts.stride,
                observation_space,
                action_space,
                num_envs=n,
                device="cpu",  # the actor's staging, sent on to the shards
                seed=seeds.buffer,
                share_frames=False,
            )
            self.rollout.actor_state = self.agent.initial_state(n)
            self.local.start_episodes()
            self.first_unsent, self.unsent, self.last_pos = 0, 0, 0
        else:
            self.local = ReplayBuffer(
                2 * (send_every + (parts.n_step + 1) * n),
                observation_space,
                action_space,
                num_envs=n,
                device="cpu",  # the actor's staging, sent on to the shards
                seed=seeds.buffer,
                n_step=parts.n_step,
                gamma=parts.gamma,
                share_frames=False,
            )
            self.rows_added = self.rows_sent = 0
        speed.attach_buffer(self.local)  # its staging in huge pages, as the learner's buffer (rl_hydra/speed)

    def ready(self) -> int:
        """Transitions (sequences) cut and not sent yet."""
        if self.recurrent:
            return self.unsent
        return self.rows_added - self.local.lookahead * self.local.num_envs - self.rows_sent

    def collect(self, weights: dict | None, version: int, steps: int, shard: Any, run_step: int = 0) -> dict[str, Any]:
        """Act `steps` env steps (whole vector steps) with `weights` (None: those held), sending to `shard`
        as it goes, the run being at env step `run_step`; returns the round's steps, finished episodes,
        the weights' version and its seconds."""
        started = time.perf_counter()
        self.start_round(weights, version, run_step)
        self.shard, sends, taken = shard, [], 0
        while taken < steps:
            self.step()
            taken += self.env.num_envs
            if self.ready() >= self.send_every:
                sends.append(self.send())
        if self.ready():
            sends.append(self.send())
        import ray

        ray.get(sends)  # stored before the round ends: an actor never runs ahead of its shard
        episodes = self.rollout.episodes
        returns, lengths = episodes.finished_returns, episodes.finished_lengths
        episodes.finished_returns, episodes.finished_lengths = [], []
        return {
            "actor": self.index,
            "steps": taken,
            "returns": returns,
            "lengths": lengths,
            "version": self.version,
            "seconds": time.perf_counter() - started,
        }

    def start_round(self, weights: dict | None, version: int, run_step: int) -> None:
        """The learner's weights (None: those held), and on the agent's own schedule, the run's step."""
        if self.own_schedule:
            self.agent.explore_steps = max(0, run_step - self.agent.learning_starts)
        if weights is not None:
            for name, state in weights.items():
                getattr(self.agent, name).load_state_dict(state)
            self.version = version

    def step(self) -> None:
        rollout, agent = self.rollout, self.agent
        assert rollout.obs is not None
        if self.recurrent:
            state = rollout.actor_state
            actions, next_state = agent.act(rollout.obs, state, explore=True)
            step = rollout.step(actions)
            self.local.add(step.obs, step.actions, step.rewards, step.next_obs, step.terminated, step.truncated, state)
            rollout.actor_state = agent.reset_state(next_state, step.done)
            self.unsent += (self.local.pos - self.last_pos) % self.capacity
            self.last_pos = self.local.pos
        else:
            actions, _ = agent.act(rollout.obs, explore=True)
            step = rollout.step(actions)
            self.local.add(step.obs, step.actions, step.rewards, step.next_obs, step.terminated, step.truncated)
            self.rows_added += len(step.rewards)

    @torch.no_grad()
    def send(self) -> Any:
        """The cut transitions (sequences) and their priorities to the shard; the call's ref."""
        priorities: np.ndarray | None = None
        if self.recurrent:
            rows = torch.from_numpy((self.first_unsent + np.arange(self.unsent)) % self.capacity)
            batch = self.local.batch_at(rows)
            _, td_errors, _ = self.agent.loss(batch)  # (L, B)
            priorities = sequence_priorities(td_errors, self.agent.counted(batch), self.eta).numpy()  # (B,)
            self.first_unsent, self.unsent = (self.first_unsent + self.unsent) % self.capacity, 0
        else:
            end = self.rows_added - self.local.lookahead * self.local.num_envs
            rows = torch.from_numpy(np.arange(self.rows_sent, end) % self.local.capacity)
            batch = self.local.batch_at(rows)
            if self.prioritized:
                priorities = self.agent.loss(batch)[1].numpy()  # (B,)
            self.rows_sent = end
        return self.shard.add.remote(as_arrays(batch), priorities)

    def pid(self) -> int:
        import os

        return os.getpid()

    def close(self) -> None:
        self.env.close()
        self.settings.close()
