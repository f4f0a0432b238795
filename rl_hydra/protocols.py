"""The contract between an algorithm, a replay buffer and the training loops.

The loops (rl_hydra/loops/) own the env, the buffer, when to update, evaluation, logging and
checkpoints; an agent owns its networks, optimizers and math. This page is everything the
loops, the Runner and the run tools read from either side, so an algorithm's author reads
it instead of the loop code. `tests/config/test_protocols.py` checks every shipped agent and buffer
against it. How to add one: docs/extending.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Protocol, TypeAlias, runtime_checkable

import numpy as np
import torch

Observation: TypeAlias = "np.ndarray | dict[str, np.ndarray]"
"""What `Agent.act` takes: a batch of observations (num_envs, ...), or a dict of parts
{part: (num_envs, ...)} of a Dict or Tuple observation (rl_hydra/spaces.py)."""

ObservationTensor: TypeAlias = "torch.Tensor | dict[str, torch.Tensor]"
"""The same on the agent's device (algos/common.py observation_tensor), as its networks read it."""


class Update(NamedTuple):
    """What `Agent.update` returns."""

    metrics: Mapping[str, Any]
    """`metric_names` -> float or 0-d tensor (tensors are read lazily: a NaN or inf in any of them
    stops the run with TrainingDiverged)."""

    priorities: torch.Tensor | None = None
    """(B,) the batch's new priorities, from an agent whose `capabilities.prioritized`; else None."""


class Batch(NamedTuple):
    """What a transition buffer's `sample_batches` yields and a feed-forward agent's `update` takes."""

    obs: torch.Tensor  # (B, *obs_shape) float32, uint8 / bool as the env produced them, or integer
    # indices (Discrete, MultiDiscrete); a Dict observation: {part: (B, *shape)}
    actions: torch.Tensor  # (B,) int64 for Discrete, (B, action_dim) float32 for Box
    rewards: torch.Tensor  # (B,) float32: the n-step discounted sum r_t + ... + gamma^(k-1) r_(t+k-1)
    next_obs: torch.Tensor  # (B, *obs_shape) the observation to bootstrap from, the real one at truncation
    terminated: torch.Tensor  # (B,) float32, 1 where the episode ended in a terminal state (no bootstrap)
    truncated: torch.Tensor  # (B,) float32, 1 where a time limit cut the episode
    discounts: torch.Tensor  # (B,) float32 gamma^k: the bootstrap value's discount after the k rewards summed
    weights: torch.Tensor  # (B,) float32 importance weights of the samples (1 under uniform replay)
    indices: torch.Tensor  # (B,) int64 the rows sampled (a prioritized buffer updates their priorities)


class SequenceBatch(NamedTuple):
    """What a sequence buffer's `sample_batches` yields and a recurrent agent's `update` takes."""

    obs: torch.Tensor  # (L + 1, B, *obs_shape): obs[t + 1] is the real next observation of step t
    # (a dict of such tensors for a Dict observation: rl_hydra/spaces.py)
    actions: torch.Tensor  # (L, B) int64 for Discrete
    rewards: torch.Tensor  # (L, B) float32
    terminated: torch.Tensor  # (L, B) float32, 1 where the episode ended in a terminal state
    mask: torch.Tensor  # (L, B) float32, 1 on real steps, 0 on padding after the episode's end
    episode_start: torch.Tensor  # (B,) bool, the chunk's first step is its episode's first step
    state: tuple[torch.Tensor, ...]  # each (B, ...): the actor's state before the chunk's first step
    weights: torch.Tensor | None = None  # (B,) importance weights of a prioritized draw (R2D2); None: uniform


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm works with, declared once on its class (`Agent.capabilities`). The checks
    made before a run is built (rl_hydra/fit.py), their one-line errors and the tests read it; a
    subclass that changes one takes its parent's with `dataclasses.replace`."""

    actions: str
    """"discrete" (a Discrete action space) or "continuous" (a 1-d Box)."""

    network: str | Mapping[str, str] = field(hash=False)
    """The network class it builds on (the `_target_` of the network group; a subclass fits too),
    or {part: class} for a network of several parts (SAC and REDQ: actor, critic)."""

    recurrent: bool = False
    """True: the recurrent loop runs it (it carries a state through acting) with a sequence buffer;
    False: the off-policy loop with a transition buffer."""

    n_step: bool = False
    """Accepts algo.n_step > 1: a transition buffer builds the returns (Batch.discounts), a
    recurrent agent sums them over its own sequences.

    The discount has one home per run, whoever builds the returns: `algo.gamma` and `algo.n_step`
    go to the transition buffer of a feed-forward agent, which never gets them and bootstraps with
    `Batch.discounts` (gamma^k, gamma for one-step returns), and to a recurrent agent itself, whose
    sequence buffer stores the rewards as they came (rl_hydra/training.py hands them out)."""

    prioritized: bool = False
    """`update` also returns "priorities", each sample's new replay priority (B,) (its own per-sample
    loss: |TD error| for DQN), and weights its loss by `Batch.weights`: buffer=prioritized fits."""


@runtime_checkable
class Agent(Protocol):
    """An off-policy agent. Built by `instantiate(cfg.algo, observation_space=..., action_space=...,
    network=<the network group's factory>, device=..., total_steps=..., seed=...)`, the algo node
    without `n_step` and `gamma` unless it is recurrent (Capabilities.n_step); the constructor
    checks what only it can check (action space kind, key ranges) and raises ConfigError."""

    name: ClassVar[str]
    """The algorithm's short name, used in messages ("algo=dqn needs a discrete action space")
    and in summary.json when the run's config choice is unknown."""

    capabilities: ClassVar[Capabilities]
    """What it works with: action space, network, buffers, n-step returns (see Capabilities)."""

    metric_names: ClassVar[tuple[str, ...]]
    """The keys of every dict `update` returns; they become the `train/<name>` columns of
    metrics.csv, fixed when the run starts."""

    compiled_methods: ClassVar[tuple[str, ...]]
    """Names of pure tensor methods that `compile=true` wraps in torch.compile (random draws made
    by the caller and passed in); empty: the agent does not support compile=true."""

    device: torch.device
    """Where its networks live; a CPU agent's update metrics are checked for NaN at once."""

    learning_starts: int
    """Env steps of uniformly random actions before the first update."""

    train_every: int
    """Env steps between training phases (a vector step of n envs counts n)."""

    gradient_steps: int
    """Updates per training phase, each on a freshly sampled batch."""

    batch_size: int
    """Transitions (or sequences, for a recurrent agent) per sampled batch."""

    updates: int
    """Updates made so far; restored on resume. Divergence errors and summary.json name it."""

    def act(self, obs: Observation, state: Any = None, *, explore: bool) -> tuple[np.ndarray, Any]:
        """Actions (num_envs, ...) for a batch of observations (num_envs, ...), or for a dict of parts
        {part: (num_envs, ...)} of a Dict or Tuple observation (rl_hydra/spaces.py).

        `explore=True` while training (epsilon-greedy, a sampled policy, ...; the agent keeps its own
        exploration schedule and RNG), `explore=False` for greedy evaluation and predict, where it
        must be deterministic for a given input. `state` is a recurrent agent's state, or a
        feed-forward agent's exploration process per env (TD3's Ornstein-Uhlenbeck noise); None at
        an episode's start. An agent that returns a state other than None is also CarriesState;
        others return it unchanged."""

    def update(self, batch: Any) -> Update:
        """One gradient step on a batch from the buffer's `sample_batches`; owns its schedules and
        target syncs. Returns its metrics and, when `capabilities.prioritized`, the batch's new
        priorities (the Runner hands them to a prioritized buffer)."""

    def state_dict(self) -> dict:
        """Everything needed to continue exactly: weights, target networks, optimizers, counters,
        RNG states. Tensors and plain data only (checkpoints load with weights_only=True)."""

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""


class CarriesState(Protocol):
    """An agent whose `act` returns a state to carry to the next step (a recurrent state, TD3's
    Ornstein-Uhlenbeck noise): the loop hands each env's back to it as that env's episode ends."""

    def reset_state(self, state: tuple[torch.Tensor, ...], episode_start: np.ndarray) -> tuple[torch.Tensor, ...]:
        """`state` with the rows of envs whose episode just ended set back to the initial state."""


@runtime_checkable
class RecurrentAgent(Agent, CarriesState, Protocol):
    """An agent with `capabilities.recurrent`: the recurrent loop threads its state through acting."""

    burn_in: int
    """Leading steps of each sampled sequence that only refresh the stored state (no loss)."""

    def initial_state(self, num_envs: int) -> tuple[torch.Tensor, ...]:
        """The state at an episode's start, for `num_envs` envs."""


@runtime_checkable
class Buffer(Protocol):
    """A replay buffer. Built by `instantiate(cfg.buffer, observation_space=..., action_space=...,
    num_envs=..., device=..., seed=...)`, a transition buffer also with `n_step=algo.n_step,
    gamma=algo.gamma`: the discount's one home for a feed-forward agent (Capabilities.n_step).
    Stores what the env produced and samples batches on the agent's device. A
    transition buffer's batches are `rl_hydra.buffers.replay.Batch`es: n-step rewards, the
    observation to bootstrap from, the discount gamma^k actually used, importance weights and the
    rows drawn."""

    recurrent: ClassVar[bool]
    """True for a sequence buffer (recurrent agents), False for a transition buffer; it must equal
    the agent's `capabilities.recurrent` (checked when the run is built)."""

    def __len__(self) -> int:
        """How many samples (transitions or sequences) can be drawn now; 0 skips a training phase."""

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        *args: Any,
    ) -> None:
        """Store one vector step: rows of (num_envs, ...). `next_obs` is the real last observation
        of an episode that ended. A sequence buffer also takes the actor's state before the step."""

    def sample_batches(self, batch_size: int, count: int) -> Iterable[Any]:
        """`count` batches of `batch_size` for one training phase, drawn as `count` calls of a single
        sample would draw them (same RNG stream), possibly gathered in one go."""

    def state_dict(self) -> dict:
        """The stored data and RNG state (tensors and plain data), saved with checkpoint.save_buffer."""

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned."""


@runtime_checkable
class SequenceBuffer(Buffer, Protocol):
    """What the recurrent loop reads beyond `Buffer`."""

    sequence_length: int
    """Steps per stored chunk."""

    stride: int
    """Steps between the starts of consecutive chunks of one env."""

    def start_episodes(self) -> None:
        """Every env starts a fresh episode: no chunk carries over (a run's start, or a resume
        that could not restore the env)."""


@runtime_checkable
class PrioritizedBuffer(Buffer, Protocol):
    """A buffer that draws samples by priority (buffer=prioritized). The loop hands it each update's
    "priorities" before it draws the next batch, so its `sample_batches` draws lazily."""

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """New priorities (B,) for the rows `indices` (B,) of a batch it sampled (`Batch.indices`)."""


# --- the state_dict contract: a generator's state restores on any device ---------------------
def restore_generator(generator: torch.Generator, state: torch.Tensor) -> None:
    """`generator.set_state(state)`; a state saved on another kind of device (a GPU run's,
    predicted with or resumed on a CPU, or back) belongs to another algorithm, so the generator
    is seeded from it instead: the draws go on deterministically, though not as they would have there.
    A state is a byte tensor on the CPU for every generator: a checkpoint loaded onto the GPU
    (load_run(..., device="cuda")) brings it back first."""
    state = state.cpu()
    if state.numel() == generator.get_state().numel():
        generator.set_state(state)
    else:
        generator.manual_seed(int.from_bytes(hashlib.sha256(state.numpy().tobytes()).digest()[:8], "little"))
