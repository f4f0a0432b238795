"""The actor-critic core that SAC, REDQ, TQC, TD3 and CrossQ share (each algorithm's file holds
only its paper's update).

`ActorCritic` sets up what every one of them has: the observation features, an actor that
squashes into the action box, an ensemble of critics, the Polyak-averaged copies of the networks
named in `target_networks`, one optimizer per network, the agent's generator, its counters and
its state. `SoftActorCritic` adds SAC's maximum-entropy part (a stochastic actor, the learned
temperature alpha, gSDE's held exploration noise) and the update REDQ and TQC share: the critics
on every call, the actor and alpha on the 1st, (1 + d)-th, ... call.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.algos.common import (
    bounded_box,
    make_optimizer,
    observation_tensor,
    optimizer_step,
    update_target,
    vector_features,
)
from rl_hydra.losses import temperature_loss
from rl_hydra.networks.actor_critic import SquashedGaussianActor
from rl_hydra.protocols import Batch, Observation, Update, restore_generator

NetworkFactories = Mapping[str, Callable[..., nn.Module]]
OptimizerFactory = Callable[..., torch.optim.Optimizer]


def frozen_copy(network: nn.Module) -> nn.Module:
    """A target network: a copy that no gradient reaches, moved only by Polyak averaging."""
    return copy.deepcopy(network).requires_grad_(False)


class ActorCritic:
    """Features, actor, critic ensemble, targets, optimizers, generator, counters and state: no update."""

    name: ClassVar[str]
    target_networks: ClassVar[tuple[str, ...]] = ("critic",)  # each gets a frozen `<name>_target` copy
    tau: float  # the targets' Polyak rate (agents without targets have none)

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        network: NetworkFactories,
        actor_optimizer: OptimizerFactory,
        critic_optimizer: OptimizerFactory,
        *,
        critic_shape: tuple[int, ...],
        device: str | torch.device,
        seed: int,
        batch_size: int,
        learning_starts: int,
        train_every: int,
        gradient_steps: int,
        policy_delay: int,
        max_grad_norm: float | None,
    ):
        """`critic_shape`: what the critic factory takes after the input size, (N,) critics or
        TQC's (N, M) quantile critics."""
        self.device = torch.device(device)
        box = bounded_box(action_space, self.name)
        self.action_dim = box.shape[0]
        # indices and bits become one vector (one-hot, floats) before the actor and the critics; None: a Box vector
        self.observation_encoder, self.observation_dim = vector_features(observation_space, self.name, self.device)
        self.ensemble_size = critic_shape[0]
        self.batch_size, self.learning_starts, self.train_every = batch_size, learning_starts, train_every
        self.gradient_steps, self.policy_delay, self.max_grad_norm = gradient_steps, policy_delay, max_grad_norm

        self.actor = network["actor"](self.observation_dim, box.low, box.high).to(self.device)
        self.critic = network["critic"](self.observation_dim + self.action_dim, *critic_shape).to(self.device)
        self.targets = {name: frozen_copy(getattr(self, name)) for name in self.target_networks}
        for name, target in self.targets.items():
            setattr(self, f"{name}_target", target)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_optimizer = make_optimizer(actor_optimizer, self.actor_params, self.device)
        self.critic_optimizer = make_optimizer(critic_optimizer, self.critic_params, self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.updates = 0
        # the actor's metrics between its (delayed) updates are those of its last update
        self.last_actor_metrics: dict[str, torch.Tensor] = {}

    def features(self, obs):
        """The vector the actor and the critics read: `obs` itself (a Box vector), or its parts
        one-hot and side by side (B, obs_dim)."""
        return obs if self.observation_encoder is None else self.observation_encoder(obs)

    def step_critics(self, loss: torch.Tensor) -> None:
        optimizer_step(self.critic_optimizer, loss, self.critic_params, self.max_grad_norm)

    def step_actor(self, loss: torch.Tensor) -> None:
        optimizer_step(self.actor_optimizer, loss, self.actor_params, self.max_grad_norm)

    def update_targets(self) -> None:
        """Each target network tau of the way toward its online network."""
        for name, target in self.targets.items():
            update_target(target, getattr(self, name), self.tau)

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            **{f"{name}_target": target.state_dict() for name, target in self.targets.items()},
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "updates": self.updates,
            "generator": self.generator.get_state(),
            "last_actor_metrics": dict(self.last_actor_metrics),
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        for name, target in self.targets.items():
            target.load_state_dict(state[f"{name}_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.updates = state["updates"]
        restore_generator(self.generator, state["generator"])
        self.last_actor_metrics = dict(state["last_actor_metrics"])


class SoftActorCritic(ActorCritic):
    """SAC's maximum-entropy agent: the squashed Gaussian actor, alpha, gSDE, and the update REDQ and TQC share."""

    metric_names: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss", "alpha", "q_mean", "entropy")
    actor: SquashedGaussianActor  # network.actor: the capabilities' class (checked by fit)
    # each algorithm's own, pure (compile=true): (batch, *critic_draws, alpha) -> (loss, Q-values or quantiles)
    critic_loss: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    # (obs, noise, alpha) -> (loss, log pi (B,)): what its actor ascends
    actor_loss: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        network: NetworkFactories,
        actor_optimizer: OptimizerFactory,
        critic_optimizer: OptimizerFactory,
        alpha_optimizer: OptimizerFactory,
        *,
        initial_alpha: float,
        learn_alpha: bool,
        target_entropy: float | str,
        gsde_resample_every: int,
        **keys: Any,
    ):
        super().__init__(observation_space, action_space, network, actor_optimizer, critic_optimizer, **keys)
        self.learn_alpha = learn_alpha
        self.target_entropy = -float(self.action_dim) if target_entropy == "auto" else float(target_entropy)
        self.log_alpha = torch.tensor(float(np.log(initial_alpha)), device=self.device, requires_grad=learn_alpha)
        self.alpha_optimizer = make_optimizer(alpha_optimizer, [self.log_alpha], self.device)
        # gSDE (network.actor.gsde): each env's exploration matrix, held between resamples
        self.gsde_resample_every = gsde_resample_every
        self.exploration_noise: torch.Tensor | None = None  # (n, F, A) standard normal; None: draw anew
        self.explore_steps = 0

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()  # ()

    # --- acting -------------------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: Observation, state: Any = None, *, explore: bool) -> tuple[np.ndarray, Any]:
        """Env-scale float32 actions (n, A): sampled when exploring, else tanh of the mean."""
        obs_t = self.features(observation_tensor(obs, self.device))
        if explore:
            unit = self.actor.sample(obs_t, self.generator, noise=self.held_exploration_noise(len(obs)))[0]
        else:
            unit = self.actor.mode(obs_t)
        return self.actor.to_env(unit).cpu().numpy().astype(np.float32, copy=False), state

    def held_exploration_noise(self, num_envs: int) -> torch.Tensor | None:
        """gSDE's exploration matrices (num_envs, F, A), drawn after each training phase and every
        `gsde_resample_every` env steps, and held in between; None without gSDE (fresh noise every step)."""
        if not getattr(self.actor, "gsde", False):  # an actor of one's own may not know gSDE
            return None
        due = self.gsde_resample_every > 0 and self.explore_steps % self.gsde_resample_every == 0
        if self.exploration_noise is None or len(self.exploration_noise) != num_envs or due:
            self.exploration_noise = torch.randn(
                (num_envs, *self.actor.noise_shape(num_envs)), generator=self.generator, device=self.device
            )
        self.explore_steps += 1
        return self.exploration_noise

    def standard_normal(self, batch_size: int) -> torch.Tensor:
        """Noise for `batch_size` reparameterised actions, from the agent's generator: (B, A), or
        gSDE's one (F, A) matrix for the batch."""
        shape = (
            self.actor.noise_shape(batch_size) if hasattr(self.actor, "noise_shape") else (batch_size, self.action_dim)
        )
        return torch.randn(shape, generator=self.generator, device=self.device)

    # --- the update ---------------------------------------------------------------------
    def update(self, batch: Batch) -> Update:
        self.exploration_noise = None  # gSDE: the next env step explores with a new matrix
        metrics = self.update_critics(batch)
        if self.updates % self.policy_delay == 0:  # the 1st, (1 + d)-th, ... update
            self.last_actor_metrics = self.update_actor_and_alpha(self.features(batch.obs))
        self.updates += 1
        return Update({**metrics, **self.last_actor_metrics, "alpha": self.alpha})

    def critic_draws(self, batch_size: int) -> tuple[torch.Tensor, ...]:
        """The random draws `critic_loss` takes after the batch: the next actions' noise (B, A) or gSDE's (F, A)."""
        return (self.standard_normal(batch_size),)

    def update_critics(self, batch: Batch) -> dict[str, torch.Tensor]:
        # the random draws happen here, so that critic_loss is a pure function (compile=true)
        draws = self.critic_draws(batch.rewards.shape[0])
        critic_loss, values = self.critic_loss(batch, *draws, self.alpha)  # (), (B, N) or (B, N, M)
        self.step_critics(critic_loss)
        self.update_targets()
        return {"critic_loss": critic_loss.detach(), "q_mean": values.detach().mean()}

    def update_actor_and_alpha(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        actor_loss, log_prob = self.actor_loss(obs, self.standard_normal(obs.shape[0]), self.alpha)
        self.step_actor(actor_loss)
        log_prob = log_prob.detach()
        if self.learn_alpha:
            alpha_loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy)
            optimizer_step(self.alpha_optimizer, alpha_loss, [self.log_alpha], None)
        return {"actor_loss": actor_loss.detach(), "entropy": -log_prob.mean()}

    # --- the state ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            **super().state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "exploration_noise": self.exploration_noise,
            "explore_steps": self.explore_steps,
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        noise = state.get("exploration_noise")  # absent from checkpoints made before gSDE
        self.exploration_noise = None if noise is None else noise.to(self.device)
        self.explore_steps = state.get("explore_steps", 0)
