"""TD3 (Fujimoto et al. 2018): Twin Delayed Deep Deterministic policy gradient.

A deterministic actor mu(s) and two critics. Three changes to DDPG, each against
overestimation or variance: clipped double Q (the target takes the min of both target
critics), target policy smoothing (the target action is mu'(s') plus clipped Gaussian
noise, so that the target averages Q over nearby actions), and delayed updates (the actor
and every target network move once per `policy_delay` critic updates). The actor ascends
the first critic. Exploration adds Gaussian (or Ornstein-Uhlenbeck) noise to mu(s). The set-up, the
target networks and the state are the family's (algos/actor_critic.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from rl_hydra.algos.actor_critic import ActorCritic
from rl_hydra.algos.common import observation_tensor
from rl_hydra.losses import bellman_target, ensemble_mse
from rl_hydra.networks.actor_critic import DeterministicActor
from rl_hydra.protocols import Batch, Capabilities, Observation, Update


# --- the math -------------------------------------------------------------------------
def smoothed_target_action(
    next_actions: torch.Tensor, noise: torch.Tensor, noise_std: float, noise_clip: float
) -> torch.Tensor:
    """a~' = clip(mu'(s') + clip(sigma * eps, -c, c), -1, 1): target policy smoothing in the unit box."""
    # next_actions, noise (standard normal): (B, A)
    return (next_actions + (noise_std * noise).clamp(-noise_clip, noise_clip)).clamp(-1.0, 1.0)  # (B, A)


def ornstein_uhlenbeck_step(
    previous: torch.Tensor, noise: torch.Tensor, std: float, theta: float, dt: float
) -> torch.Tensor:
    """x' = x + theta * (0 - x) * dt + std * sqrt(dt) * eps: temporally correlated exploration noise
    (mean 0, as SB3's OrnsteinUhlenbeckActionNoise)."""
    # previous, noise (standard normal): (n, A)
    return previous - theta * previous * dt + std * math.sqrt(dt) * noise  # (n, A)


# --- the agent ----------------------------------------------------------------------------
class TD3(ActorCritic):
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
    target_networks: ClassVar[tuple[str, ...]] = ("actor", "critic")
    actor: DeterministicActor
    actor_target: DeterministicActor
    critic_target: nn.Module

    def __init__(
        self,
        *args: Any,
        tau: float,
        target_policy_noise: float,
        target_noise_clip: float,
        action_noise: Mapping[str, Any],
        **keys: Any,
    ):
        """`*args`, `**keys`: the family's (algos/actor_critic.py); the keys' ranges: rl_hydra/schema/algos.py."""
        self.tau, self.target_policy_noise, self.target_noise_clip = tau, target_policy_noise, target_noise_clip
        noise = action_noise  # its keys: rl_hydra/schema/algos.py (ActionNoiseKeys)
        self.noise_kind, self.noise_std = noise["kind"], float(noise["std"])
        self.noise_theta, self.noise_dt = float(noise["theta"]), float(noise["dt"])
        super().__init__(*args, critic_shape=(2,), **keys)  # twin critics
        self.first_critic = torch.zeros(1, dtype=torch.int64, device=self.device)  # the actor ascends Q_1

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

    def update(self, batch: Batch) -> Update:
        # the random draws happen here, so that critic_loss is a pure function (compile=true)
        smoothing = torch.randn(
            (batch.rewards.shape[0], self.action_dim), generator=self.generator, device=self.device
        )  # (B, A)
        critic_loss, q_values = self.critic_loss(batch, smoothing)  # (), (B, 2)
        self.step_critics(critic_loss)
        self.updates += 1
        if self.updates % self.policy_delay == 0:  # the d-th, 2d-th, ... update: actor, then both targets
            actor_loss = self.actor_loss(self.features(batch.obs))
            self.step_actor(actor_loss)
            self.update_targets()
            self.last_actor_metrics = {"actor_loss": actor_loss.detach()}
        return Update(
            {"critic_loss": critic_loss.detach(), "q_mean": q_values.detach().mean(), **self.last_actor_metrics}
        )

    def critic_loss(self, batch: Batch, smoothing: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both critics' summed MSE to r + gamma * (1 - terminated) * min_i Q'_i(s', a~'), a~' the smoothed
        target action; and their Q-values (B, 2). `smoothing`: standard normal draws (B, A)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():
            next_actions = smoothed_target_action(
                self.actor_target(next_obs), smoothing, self.target_policy_noise, self.target_noise_clip
            )  # (B, A)
            next_q = self.critic_target(next_obs, next_actions)  # (B, 2)
            targets = bellman_target(
                batch.rewards, batch.terminated, next_q.min(dim=1).values, batch.discounts
            )  # (B,) clipped double Q
        q_values = self.critic(obs, self.actor.from_env(batch.actions))  # (B, 2)
        return ensemble_mse(q_values, targets), q_values

    def actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """-E[Q_1(s, mu(s))]: the deterministic policy gradient through the first critic."""
        q_first = self.critic(obs, self.actor(obs), members=self.first_critic, frozen=True)  # (B, 1)
        return -q_first.mean()
