"""TD3 (Fujimoto et al. 2018): Twin Delayed Deep Deterministic policy gradient.

A deterministic actor mu(s) and two critics. Three changes to DDPG, each against
overestimation or variance: clipped double Q (the target takes the min of both target
critics), target policy smoothing (the target action is mu'(s') plus clipped Gaussian
noise, so that the target averages Q over nearby actions), and delayed updates (the actor
and every target network move once per `policy_delay` critic updates). The actor ascends
the first critic. Exploration adds Gaussian (or Ornstein-Uhlenbeck) noise to mu(s).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rl_hydra.algos.common import bounded_box, make_optimizer, observation_tensor, vector_features
from rl_hydra.algos.redq import ensemble_mse
from rl_hydra.networks.updates import optimizer_step, update_target
from rl_hydra.protocols import Batch, Capabilities, Observation
from rl_hydra.runs.rng import restore_generator


# --- the math -------------------------------------------------------------------------
def smoothed_target_action(
    next_actions: torch.Tensor, noise: torch.Tensor, noise_std: float, noise_clip: float
) -> torch.Tensor:
    """a~' = clip(mu'(s') + clip(sigma * eps, -c, c), -1, 1): target policy smoothing in the unit box."""
    # next_actions, noise (standard normal): (B, A)
    return (next_actions + (noise_std * noise).clamp(-noise_clip, noise_clip)).clamp(-1.0, 1.0)  # (B, A)


def smoothed_target(
    rewards: torch.Tensor, terminated: torch.Tensor, next_q: torch.Tensor, discounts: torch.Tensor | float
) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * min_i Q'_i(s', a~'), with a~' the smoothed target action."""
    # rewards, terminated: (B,); next_q: (B, 2) both target critics at (s', a~'); discounts: (B,) or ()
    return rewards + discounts * (1.0 - terminated) * next_q.min(dim=1).values  # (B,)


def ornstein_uhlenbeck_step(
    previous: torch.Tensor, noise: torch.Tensor, std: float, theta: float, dt: float
) -> torch.Tensor:
    """x' = x + theta * (0 - x) * dt + std * sqrt(dt) * eps: temporally correlated exploration noise
    (mean 0, as SB3's OrnsteinUhlenbeckActionNoise)."""
    # previous, noise (standard normal): (n, A)
    return previous - theta * previous * dt + std * math.sqrt(dt) * noise  # (n, A)


# --- the agent ----------------------------------------------------------------------------
class TD3:
    name: ClassVar[str] = "td3"
    # one-step targets, uniform replay
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="continuous",
        network={
            "actor": "rl_hydra.networks.actor_critic.DeterministicActor",
            "critic": "rl_hydra.networks.actor_critic.CriticEnsemble",
        },
    )
    metric_names: ClassVar[tuple[str, ...]] = ("critic_loss", "q_mean", "actor_loss")
    compiled_methods: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss")  # what `compile=true` wraps
    tensor_only_step: ClassVar[tuple[str, ...]] = ()  # its update counts the delayed actor steps in Python

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        network: Mapping[str, Callable[..., Any]],
        actor_optimizer: Callable[..., torch.optim.Optimizer],
        critic_optimizer: Callable[..., torch.optim.Optimizer],
        *,
        total_steps: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        tau: float = 0.005,
        batch_size: int = 256,
        learning_starts: int = 25000,
        train_every: int = 1,
        gradient_steps: int = 1,
        policy_delay: int = 2,
        target_policy_noise: float = 0.2,
        target_noise_clip: float = 0.5,
        action_noise: Mapping[str, Any],
        max_grad_norm: float | None = None,
    ):
        del total_steps  # TD3 has no schedule over the run
        self.device = torch.device(device)
        action_space = bounded_box(action_space, self.name)
        self.action_dim = action_space.shape[0]
        self.observation_encoder, self.observation_dim = vector_features(observation_space, self.name, self.device)
        self.tau = tau
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.train_every = train_every
        self.gradient_steps = gradient_steps
        self.policy_delay = policy_delay
        self.target_policy_noise = target_policy_noise
        self.target_noise_clip = target_noise_clip
        self.max_grad_norm = max_grad_norm
        noise = action_noise  # its keys: rl_hydra/schema/algos.py (ActionNoiseKeys)
        self.noise_kind, self.noise_std = noise["kind"], float(noise["std"])
        self.noise_theta, self.noise_dt = float(noise["theta"]), float(noise["dt"])

        self.actor = network["actor"](self.observation_dim, action_space.low, action_space.high).to(self.device)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = network["critic"](self.observation_dim + self.action_dim, 2).to(self.device)  # twin critics
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_optimizer = make_optimizer(actor_optimizer, self.actor_params, self.device)
        self.critic_optimizer = make_optimizer(critic_optimizer, self.critic_params, self.device)
        self.first_critic = torch.zeros(1, dtype=torch.int64, device=self.device)  # the actor ascends Q_1
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.updates = 0
        # the actor's metrics between its (delayed) updates are those of its last update
        self.last_actor_metrics: dict[str, torch.Tensor] = {}

    def features(self, obs):
        """The vector the actor and the critics read (see REDQ.features)."""
        return obs if self.observation_encoder is None else self.observation_encoder(obs)

    # --- the agent protocol -------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: Observation, state: Any = None, *, explore: bool) -> tuple[np.ndarray, Any]:
        """Env-scale float32 actions (n, A): mu(s) plus exploration noise, clipped to the box, when exploring."""
        unit = self.actor(self.features(observation_tensor(obs, self.device)))  # (n, A)
        if explore:
            noise, state = self.exploration_noise(unit.shape, state)
            unit = (unit + noise).clamp(-1.0, 1.0)  # (n, A)
        return self.actor.to_env(unit).cpu().numpy().astype(np.float32, copy=False), state

    def exploration_noise(self, shape: torch.Size, state: Any) -> tuple[torch.Tensor, Any]:
        """(Gaussian N(0, std^2) per action, None), or (the next value of each env's Ornstein-Uhlenbeck
        process, that value as the state the loop carries to the next step: (ou,), None at rest)."""
        draw = torch.randn(shape, generator=self.generator, device=self.device)  # (n, A)
        if self.noise_kind == "gaussian":
            return self.noise_std * draw, None
        previous = torch.zeros_like(draw) if state is None else state[0]  # (n, A)
        ou = ornstein_uhlenbeck_step(previous, draw, self.noise_std, self.noise_theta, self.noise_dt)
        return ou, (ou,)

    def reset_state(self, state: tuple[torch.Tensor, ...], episode_start: np.ndarray) -> tuple[torch.Tensor, ...]:
        """Each env whose episode just ended starts its Ornstein-Uhlenbeck process at rest (0)."""
        (ou,) = state  # (n, A)
        ended = torch.as_tensor(episode_start, dtype=torch.bool, device=ou.device)[:, None]  # (n, 1)
        return (ou.masked_fill(ended, 0.0),)

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        # the random draws happen here, so that critic_loss is a pure function (compile=true)
        smoothing = torch.randn(
            (batch.rewards.shape[0], self.action_dim), generator=self.generator, device=self.device
        )  # (B, A)
        critic_loss, q_values = self.critic_loss(batch, smoothing)  # (), (B, 2)
        optimizer_step(self.critic_optimizer, critic_loss, self.critic_params, self.max_grad_norm)
        self.updates += 1
        if self.updates % self.policy_delay == 0:  # the d-th, 2d-th, ... update: actor, then both targets
            actor_loss = self.actor_loss(self.features(batch.obs))
            optimizer_step(self.actor_optimizer, actor_loss, self.actor_params, self.max_grad_norm)
            update_target(self.critic_target, self.critic, self.tau)
            update_target(self.actor_target, self.actor, self.tau)
            self.last_actor_metrics = {"actor_loss": actor_loss.detach()}
        return {"critic_loss": critic_loss.detach(), "q_mean": q_values.detach().mean(), **self.last_actor_metrics}

    def critic_loss(self, batch: Batch, smoothing: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both critics' summed MSE to the clipped double-Q target at the smoothed target action, and
        their Q-values (B, 2); `smoothing`: standard normal draws (B, A)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():
            next_actions = smoothed_target_action(
                self.actor_target(next_obs), smoothing, self.target_policy_noise, self.target_noise_clip
            )  # (B, A)
            next_q = self.critic_target(next_obs, next_actions)  # (B, 2)
            targets = smoothed_target(batch.rewards, batch.terminated, next_q, batch.discounts)  # (B,)
        q_values = self.critic(obs, self.actor.from_env(batch.actions))  # (B, 2)
        return ensemble_mse(q_values, targets), q_values

    def actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """-E[Q_1(s, mu(s))]: the deterministic policy gradient through the first critic."""
        q_first = self.critic(obs, self.actor(obs), members=self.first_critic, frozen=True)  # (B, 1)
        return -q_first.mean()

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "actor_target": self.actor_target.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "updates": self.updates,
            "generator": self.generator.get_state(),
            "last_actor_metrics": dict(self.last_actor_metrics),
        }

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.updates = state["updates"]
        restore_generator(self.generator, state["generator"])
        self.last_actor_metrics = dict(state["last_actor_metrics"])
