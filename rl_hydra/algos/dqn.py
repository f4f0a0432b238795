"""DQN (Mnih et al. 2015): epsilon-greedy Q-learning from replay with a target network.

Subclasses (QR-DQN, IQN, C51) replace `make_network`, `action_values` and `loss`; everything
else, exploration, target syncs, optimisation and checkpoints, is shared from here. The Rainbow
parts plug in from outside: n-step returns and prioritized replay come with the batch
(`discounts`, `weights`; `loss` hands back per-sample priorities), dueling and noisy layers are
network options; with noisy layers the noise explores and epsilon-greedy is off.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn

from rl_hydra.algos.common import (
    LinearSchedule,
    make_optimizer,
    observation_tensor,
    optimizer_step,
    require_discrete,
    update_target,
)
from rl_hydra.losses import q_learning_targets, td_loss, weighted_mean
from rl_hydra.networks.noisy import has_noisy_layers, noise_disabled, resample_noise
from rl_hydra.protocols import Batch, Capabilities, Observation, ObservationTensor, Update
from rl_hydra.spaces import network_input, num_rows

log = logging.getLogger(__name__)


def argmax_actions(action_values: Callable[[ObservationTensor], torch.Tensor], obs: ObservationTensor) -> np.ndarray:
    """argmax_a action_values(obs)[b, a] for each row b: obs (n, ...) -> actions (n,)."""
    with torch.no_grad():
        values = action_values(obs)  # (n, A)
    if values.is_cpu:  # the same first index of the maximum, without torch's per-op dispatch
        return values.numpy().argmax(axis=1)
    return values.argmax(dim=1).cpu().numpy()


class DQN:
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="discrete", network="rl_hydra.networks.mlp.QNetwork", n_step=True, prioritized=True
    )
    metric_names: ClassVar[tuple[str, ...]] = ("loss", "q_value_mean", "target_mean", "td_error_mean", "epsilon")
    name: ClassVar[str] = "dqn"
    compiled_methods: ClassVar[tuple[str, ...]] = ("loss",)  # what `compile=true` wraps in torch.compile
    # the method giving the loss from (batch, *loss_draws(batch)), drawing nothing of its own: what a pack's
    # batched update maps over its members (rl_hydra/loops/pack_updates.py)
    pure_loss: ClassVar[str] = "loss"

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        network: Callable[..., nn.Module],
        optimizer: Callable[..., torch.optim.Optimizer],
        *,
        total_steps: int,
        device: str | torch.device,
        seed: int,
        batch_size: int,
        learning_starts: int,
        train_every: int,
        gradient_steps: int,
        target_update_every: int,
        tau: float,
        double_q: bool,
        max_grad_norm: float | None,
        exploration: DictConfig | dict,
        final_lr_fraction: float,
        loss: str | None,
    ):
        # the keys have no defaults here: their values are the config's (conf/algo/base/dqn.yaml). `loss`
        # is DQN's own key (algo/dqn.yaml); a subclass whose `loss` method replaces the TD loss passes None.
        # algo.gamma and algo.n_step go to the transition buffer, which discounts the returns: the
        # loss bootstraps with each batch's `discounts`
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.train_every = train_every
        self.gradient_steps = gradient_steps
        self.target_update_every = target_update_every
        self.tau = tau
        self.double_q = double_q
        self.loss_kind = loss
        self.max_grad_norm = max_grad_norm
        self.epsilon_schedule = LinearSchedule(
            exploration["start"], exploration["end"], exploration["fraction"] * total_steps
        )
        # the learning rate decays linearly to final_lr_fraction * lr at the end of training
        self.lr_factor = LinearSchedule(1.0, final_lr_fraction, total_steps - self.learning_starts)

        self.observation = network_input(observation_space)  # a vector's size, or the space (frames, indices, parts)
        self.num_actions = require_discrete(action_space, self.name)
        self.q_net = self.make_network(network).to(self.device)
        self.noisy = has_noisy_layers(self.q_net)
        if self.noisy:
            log.info("network.noisy=true: the noisy layers explore; epsilon-greedy is off")
            self.epsilon_schedule = LinearSchedule(0.0, 0.0, 1.0)
        self.target_net = copy.deepcopy(self.q_net).requires_grad_(False)
        self.params = list(self.q_net.parameters())
        self.optimizer = make_optimizer(optimizer, self.params, self.device)
        self.base_lrs = [group["lr"] for group in self.optimizer.param_groups]
        self.rng = np.random.default_rng(seed)
        self.explore_steps = 0  # env steps acted with exploration (after warm-up)
        self.updates = 0

    # --- what subclasses change ------------------------------------------------
    def make_network(self, network: Callable[..., nn.Module]) -> nn.Module:
        return network(self.observation, self.num_actions)

    def action_values(self, obs: ObservationTensor) -> torch.Tensor:
        """Values used to pick the greedy action: (B, obs_dim) (or a dict of parts) -> (B, A)."""
        return self.q_net(obs)

    def loss_draws(self, batch: Batch) -> tuple[torch.Tensor, ...]:  # noqa: ARG002
        """The random numbers `loss` takes, drawn from the agent's own generators: none for DQN."""
        return ()

    def loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(the importance-weighted batch loss (), each sample's new priority (B,), metrics)."""
        with torch.no_grad():
            next_q_target = self.target_net(batch.next_obs)  # (B, A)
            next_q_online = self.q_net(batch.next_obs) if self.double_q else None  # (B, A)
            targets = q_learning_targets(
                batch.rewards, batch.terminated, next_q_target, batch.discounts, next_q_online
            )  # (B,)
        q_taken = self.q_net(batch.obs).gather(1, batch.actions[:, None]).squeeze(1)  # (B,)
        assert self.loss_kind is not None, "a subclass with a loss of its own overrides this method"
        loss = weighted_mean(td_loss(q_taken, targets, self.loss_kind, reduction="none"), batch.weights)
        td_error = (targets - q_taken).detach().abs()  # (B,) the priority
        return (
            loss,
            td_error,
            {"q_value_mean": q_taken.detach().mean(), "target_mean": targets.mean(), "td_error_mean": td_error.mean()},
        )

    # --- the agent protocol -------------------------------------------------------
    @property
    def epsilon(self) -> float:
        # warm-up steps are random in the loop, so the schedule starts counting after them
        return self.epsilon_schedule(self.learning_starts + self.explore_steps)

    def explore_rows(self, n: int) -> np.ndarray:
        """Which of `n` rows act at random (probability epsilon); counts the n exploring steps."""
        random_rows = self.rng.random(n) < self.epsilon
        self.explore_steps += n
        return random_rows

    def randomize(self, actions: np.ndarray, random_rows: np.ndarray) -> np.ndarray:
        """`actions` with the rows in `random_rows` replaced by uniform random actions."""
        # no size-0 draw: most steps explore on no row
        if count := np.count_nonzero(random_rows):
            actions[random_rows] = self.rng.integers(self.num_actions, size=count)
        return actions

    def act(self, obs: Observation, state: Any = None, *, explore: bool) -> tuple[np.ndarray, Any]:
        if not explore:
            with noise_disabled(self.q_net) if self.noisy else contextlib.nullcontext():  # deterministic
                return self.greedy_actions(obs, explore=False), state
        n = num_rows(obs)
        random_rows = self.explore_rows(n)
        if np.count_nonzero(random_rows) == n:  # skip the forward pass
            return self.rng.integers(self.num_actions, size=n), state
        if self.noisy:
            resample_noise(self.q_net)  # fresh noise for every acting step, as Fortunato et al. act
        return self.randomize(self.greedy_actions(obs, explore=True), random_rows), state

    def greedy_actions(self, obs: Observation, explore: bool) -> np.ndarray:  # noqa: ARG002
        """argmax_a of `action_values` for each row of `obs` (n, ...) -> (n,)."""
        return argmax_actions(self.action_values, observation_tensor(obs, self.device))

    def update(self, batch: Batch) -> Update:
        if self.lr_factor.start != self.lr_factor.end:
            factor = self.lr_factor(self.explore_steps)
            for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs):
                group["lr"] = base_lr * factor
        loss, priorities, step_metrics = self.gradient_step(batch)
        self.updates += 1
        if self.updates % self.target_update_every == 0:
            update_target(self.target_net, self.q_net, self.tau)
        # epsilon: a float, no tensor to build
        return Update({"loss": loss, **step_metrics, "epsilon": self.epsilon}, priorities)

    def gradient_step(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """One optimizer step on the batch's loss; (loss, priorities, metrics) as `loss` gives them.
        It reads the batch and the weights and changes the weights, the optimizer state and the noise
        only: tensors, never a Python value."""
        if self.noisy:  # fresh noise for each update, drawn apart for the online and the target network
            resample_noise(self.q_net)
            resample_noise(self.target_net)
        loss, priorities, metrics = self.loss(batch)
        optimizer_step(self.optimizer, loss, self.params, self.max_grad_norm)
        return loss.detach(), priorities, metrics

    def state_dict(self) -> dict:
        return {
            "q_net": self.q_net.state_dict(),
            "target_net": self.target_net.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "explore_steps": self.explore_steps,
            "updates": self.updates,
            "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict) -> None:
        self.q_net.load_state_dict(state["q_net"])
        self.target_net.load_state_dict(state["target_net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.explore_steps, self.updates = state["explore_steps"], state["updates"]
        self.rng.bit_generator.state = state["rng"]
