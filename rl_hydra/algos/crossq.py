"""CrossQ (Bhatt et al. 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity"): SAC without target networks, with batch
renormalization in the critics and the actor.

Each critic update passes the current pairs (s, a) and the next pairs (s', a' ~ pi(s')) through
the critics as ONE batch of 2B rows, so that the normalization's statistics are those of both
distributions together (the paper's point: normalized apart, the next pairs would look
out-of-distribution to the layers). The first half's Q-values are regressed onto a target built
from the second half's, detached; no target critic, no Polyak averaging. Wide critics (2,048
units), Adam with beta1 = 0.5, one actor (and temperature) update every `policy_delay` = 3 critic
updates, one update per env step, SAC's learned temperature.

Which passes update the statistics follows the paper's code and sb3-contrib: the joint critic
pass and the actor's pass in its own update do (training mode, networks/batch_renorm.py); the
next actions, the critics' Q for the actor's loss, acting (exploring or not) and evaluation use
the running statistics (inference mode, where the networks rest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.algos.common import bounded_box, make_optimizer, vector_features
from rl_hydra.algos.redq import REDQ, ensemble_mse
from rl_hydra.config import ConfigError
from rl_hydra.networks.actor_critic import SquashedGaussianActor
from rl_hydra.networks.batch_renorm import batch_statistics
from rl_hydra.networks.updates import optimizer_step
from rl_hydra.protocols import Batch, Capabilities


# --- the math -------------------------------------------------------------------------
def crossq_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: torch.Tensor | float,
) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * (min_i Q_i(s', a') - alpha * log pi(a' | s')), with Q_i the
    live critics' next-state values from the joint pass (no target network); the agent passes them
    detached, and its batch's `discounts` (B,) as gamma."""
    # rewards, terminated, next_log_prob: (B,); next_q: (B, N); alpha: (); gamma: (B,) or ()
    next_value = next_q.min(dim=1).values - alpha * next_log_prob  # (B,)
    return rewards + gamma * (1.0 - terminated) * next_value  # (B,)


def joint_pass(
    critic: nn.Module, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, next_actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Q(s, a) and Q(s', a') (B, N) each from ONE training-mode pass over the 2B rows: the batch
    renormalization statistics (and their running update) are those of both halves together."""
    batch_size = obs.shape[0]
    with batch_statistics(critic):
        q_both = critic(torch.cat([obs, next_obs]), torch.cat([actions, next_actions]))  # (2B, N)
    q_values, next_q = q_both.split(batch_size)  # (B, N) each
    return q_values, next_q


# --- the agent ----------------------------------------------------------------------------
class CrossQ(REDQ):
    """Acting (the squashed Gaussian, gSDE's held noise), the temperature and the noise draws are
    REDQ's (algos/redq.py); the constructor, the updates and the state are CrossQ's own, as it has
    no target critics. Its networks rest in inference mode, so REDQ's `act` acts on the running
    statistics, exploring or not."""

    name: ClassVar[str] = "crossq"
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="continuous",
        network={
            "actor": "rl_hydra.networks.crossq.BatchRenormActor",
            "critic": "rl_hydra.networks.crossq.BatchRenormCriticEnsemble",
        },
    )
    metric_names: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss", "alpha", "q_mean", "entropy")
    compiled_methods: ClassVar[tuple[str, ...]] = ()  # its losses update the normalization statistics in place
    tensor_only_step: ClassVar[tuple[str, ...]] = ()  # its update counts the delayed actor steps in Python
    actor: SquashedGaussianActor  # network.actor: BatchRenormActor (the capabilities)

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        network: Mapping[str, Callable[..., nn.Module]],
        actor_optimizer: Callable[..., torch.optim.Optimizer],
        critic_optimizer: Callable[..., torch.optim.Optimizer],
        alpha_optimizer: Callable[..., torch.optim.Optimizer],
        *,
        total_steps: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        ensemble_size: int = 2,
        batch_size: int = 256,
        learning_starts: int = 100,
        train_every: int = 1,
        gradient_steps: int = 1,
        policy_delay: int = 3,
        initial_alpha: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | str = "auto",
        max_grad_norm: float | None = None,
        gsde_resample_every: int = -1,
    ):
        del total_steps  # CrossQ has no schedule over the run
        self.device = torch.device(device)
        box = bounded_box(action_space, self.name)
        self.action_dim = box.shape[0]
        self.observation_encoder, self.observation_dim = vector_features(observation_space, self.name, self.device)
        # the keys' ranges: rl_hydra/schema/algos.py (CrossQKeys)
        self.ensemble_size, self.batch_size, self.policy_delay = ensemble_size, batch_size, policy_delay
        self.learning_starts, self.train_every, self.gradient_steps = learning_starts, train_every, gradient_steps
        self.learn_alpha, self.max_grad_norm = learn_alpha, max_grad_norm
        self.target_entropy = -float(self.action_dim) if target_entropy == "auto" else float(target_entropy)
        if gsde_resample_every != -1 and not (isinstance(gsde_resample_every, int) and gsde_resample_every >= 1):
            raise ConfigError(
                f"algo.gsde_resample_every={gsde_resample_every!r} is out of range; expected -1 (a new "
                f"matrix after each training phase only) or an integer >= 1"
            )
        self.gsde_resample_every = gsde_resample_every

        actor = network["actor"](self.observation_dim, box.low, box.high)
        self.actor = cast(SquashedGaussianActor, actor.to(self.device))
        self.critic = network["critic"](self.observation_dim + self.action_dim, self.ensemble_size).to(self.device)
        self.log_alpha = torch.tensor(float(np.log(initial_alpha)), device=self.device, requires_grad=self.learn_alpha)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_optimizer = make_optimizer(actor_optimizer, self.actor_params, self.device)
        self.critic_optimizer = make_optimizer(critic_optimizer, self.critic_params, self.device)
        self.alpha_optimizer = make_optimizer(alpha_optimizer, [self.log_alpha], self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.exploration_noise: torch.Tensor | None = None  # gSDE's (n, F, A) matrices; None: draw anew
        self.explore_steps = 0
        self.updates = 0
        # the actor's metrics between its (delayed) updates are those of its last update
        self.last_actor_metrics: dict[str, torch.Tensor] = {}

    # --- the update -----------------------------------------------------------------------
    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.exploration_noise = None  # gSDE: the next env step explores with a new matrix
        metrics = self.update_critics(batch)
        self.updates += 1
        if self.updates % self.policy_delay == 0:  # the d-th, 2d-th, ... update (as the paper's code, sb3-contrib)
            self.last_actor_metrics = self.update_actor_and_alpha(self.features(batch.obs))
        return {**metrics, **self.last_actor_metrics, "alpha": self.alpha}

    def update_critics(self, batch: Batch) -> dict[str, torch.Tensor]:
        next_noise = self.standard_normal(batch.rewards.shape[0])  # (B, A) or gSDE's (F, A)
        critic_loss, q_values = self.critic_loss(batch, next_noise, self.alpha)  # (), (B, N)
        optimizer_step(self.critic_optimizer, critic_loss, self.critic_params, self.max_grad_norm)
        return {"critic_loss": critic_loss.detach(), "q_mean": q_values.detach().mean()}

    def critic_loss(  # type: ignore[override]  # no ensemble subset: every critic is used
        self, batch: Batch, next_noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The critics' summed MSE to the CrossQ target, and their Q-values (B, N)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():  # a' from the actor's running statistics
            next_actions, next_log_prob = self.actor.sample(next_obs, noise=next_noise)  # (B, A), (B,)
        q_values, next_q = joint_pass(
            self.critic, obs, self.actor.from_env(batch.actions), next_obs, next_actions
        )  # (B, N) each
        targets = crossq_target(
            batch.rewards, batch.terminated, next_q.detach(), next_log_prob, alpha, batch.discounts
        )  # (B,)
        return ensemble_mse(q_values, targets), q_values

    def actor_loss(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a | s) - min_i Q_i(s, a)], the actor's pass updating its statistics and the
        critics' on their running ones; and log pi (B,)."""
        with batch_statistics(self.actor):
            actions, log_prob = self.actor.sample(obs, noise=noise)  # (B, A), (B,)
        q_value = self.critic(obs, actions, frozen=True).min(dim=1).values  # (B,)
        return (alpha * log_prob - q_value).mean(), log_prob

    # --- the state ------------------------------------------------------------------------
    def target_state(self) -> dict:
        """No target networks: REDQ's state without them (the networks' state_dicts hold the
        normalization layers' running statistics)."""
        return {}

    def load_target_state(self, state: dict) -> None:
        pass
