"""REDQ (Chen et al. 2021): Randomized Ensembled Double Q-learning for continuous actions.

SAC with an ensemble of N critics and many updates per env step. Each critic update
regresses all N critics onto one target built from the min over a fresh random subset
of M target critics; the actor ascends the mean over all N critics. The temperature
alpha is learned toward a target entropy (default -action_dim). SAC itself is the case
N = M = 2, G = 1 with the actor on the min of both critics (algos/sac.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.algos.common import bounded_box, make_optimizer, observation_tensor, vector_features
from rl_hydra.config import ConfigError
from rl_hydra.networks.actor_critic import SquashedGaussianActor
from rl_hydra.networks.updates import optimizer_step, update_target
from rl_hydra.protocols import Batch, Capabilities, Observation
from rl_hydra.runs.rng import restore_generator


# --- the math -------------------------------------------------------------------------
def sample_subset(
    ensemble_size: int, subset_size: int, generator: torch.Generator | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """M distinct critic indices in [0, N), drawn without replacement: (M,) int64."""
    return torch.randperm(ensemble_size, generator=generator, device=device)[:subset_size]


def redq_target(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    next_q_subset: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: torch.Tensor | float,
) -> torch.Tensor:
    """y = r + gamma * (1 - terminated) * (min_{i in subset} Q'_i(s', a') - alpha * log pi(a' | s')); the
    agent passes its batch's `discounts` (B,) as gamma."""
    # rewards, terminated, next_log_prob: (B,); next_q_subset: (B, M); alpha: (); gamma: (B,) or ()
    next_value = next_q_subset.min(dim=1).values - alpha * next_log_prob  # (B,)
    return rewards + gamma * (1.0 - terminated) * next_value  # (B,)


def actor_q_value(q_values: torch.Tensor, reduction: str) -> torch.Tensor:
    """What the actor ascends: the mean over the critics (REDQ) or their min (SAC's clipped double Q)."""
    # q_values: (B, N)
    return q_values.mean(dim=1) if reduction == "mean" else q_values.min(dim=1).values  # (B,)


def ensemble_mse(q_values: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Sum over critics of each critic's mean squared error to the shared target."""
    # q_values: (B, N); targets: (B,)
    return (q_values - targets[:, None]).pow(2).mean(dim=0).sum()  # ()


# --- the agent ----------------------------------------------------------------------------
class REDQ:
    name: ClassVar[str] = "redq"
    # one-step targets, uniform replay
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="continuous",
        network={
            "actor": "rl_hydra.networks.actor_critic.SquashedGaussianActor",
            "critic": "rl_hydra.networks.actor_critic.CriticEnsemble",
        },
    )
    metric_names: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss", "alpha", "q_mean", "entropy")
    compiled_methods: ClassVar[tuple[str, ...]] = ("critic_loss", "actor_loss")  # what `compile=true` wraps
    tensor_only_step: ClassVar[tuple[str, ...]] = ()  # its update counts the delayed actor steps in Python
    actor: SquashedGaussianActor

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
        ensemble_size: int = 10,
        subset_size: int = 2,
        tau: float = 0.005,
        batch_size: int = 256,
        learning_starts: int = 5000,
        train_every: int = 1,
        gradient_steps: int = 20,
        policy_delay: int = 20,
        initial_alpha: float = 1.0,
        learn_alpha: bool = True,
        target_entropy: float | str = "auto",
        max_grad_norm: float | None = None,
        actor_q: str = "mean",
        gsde_resample_every: int = -1,
    ):
        del total_steps  # REDQ has no schedule over the run
        self.device = torch.device(device)
        action_space = bounded_box(action_space, self.name)
        self.action_dim = action_space.shape[0]
        # indices and bits become one vector (one-hot, floats) before the actor and the critics; None: a Box vector
        self.observation_encoder, self.observation_dim = vector_features(observation_space, self.name, self.device)
        self.ensemble_size = ensemble_size
        if subset_size > ensemble_size:
            raise ConfigError(
                f"algo.subset_size={subset_size} is out of range; expected an integer >= 1 and <= "
                f"algo.ensemble_size={ensemble_size}"
            )
        self.subset_size = subset_size
        self.tau = tau
        self.batch_size = batch_size
        self.learning_starts = learning_starts
        self.train_every = train_every
        self.gradient_steps = gradient_steps
        self.policy_delay = policy_delay
        self.learn_alpha = learn_alpha
        self.actor_q = actor_q
        self.target_entropy = (
            -float(self.action_dim) if target_entropy == "auto" else float(target_entropy)
        )  # auto or a number: the schema's check
        self.max_grad_norm = max_grad_norm

        actor = network["actor"](self.observation_dim, action_space.low, action_space.high).to(self.device)
        self.actor = cast(SquashedGaussianActor, actor)  # network.actor: the capabilities' class (checked by fit)
        self.critic = self.make_critic(network["critic"]).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(initial_alpha)), device=self.device, requires_grad=self.learn_alpha)
        self.actor_params = list(self.actor.parameters())
        self.critic_params = list(self.critic.parameters())
        self.actor_optimizer = make_optimizer(actor_optimizer, self.actor_params, self.device)
        self.critic_optimizer = make_optimizer(critic_optimizer, self.critic_params, self.device)
        self.alpha_optimizer = make_optimizer(alpha_optimizer, [self.log_alpha], self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        # gSDE (network.actor.gsde): each env's exploration matrix, held between resamples
        if gsde_resample_every != -1 and not (isinstance(gsde_resample_every, int) and gsde_resample_every >= 1):
            raise ConfigError(
                f"algo.gsde_resample_every={gsde_resample_every!r} is out of range; expected -1 (a new "
                f"matrix after each training phase only) or an integer >= 1"
            )
        self.gsde_resample_every = gsde_resample_every
        self.exploration_noise: torch.Tensor | None = None  # (n, F, A) standard normal; None: draw anew
        self.explore_steps = 0
        self.updates = 0
        # the actor's metrics between its (delayed) updates are those of its last update
        self.last_actor_metrics: dict[str, torch.Tensor] = {}

    def make_critic(self, factory: Callable[..., nn.Module]) -> nn.Module:
        """The critic ensemble over (observation, action) vectors (TQC's also takes its quantile count)."""
        return factory(self.observation_dim + self.action_dim, self.ensemble_size)

    def features(self, obs):
        """The vector the actor and the critics read: `obs` itself (a Box vector), or its parts
        one-hot and side by side (B, obs_dim)."""
        return obs if self.observation_encoder is None else self.observation_encoder(obs)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()  # ()

    # --- the agent protocol -------------------------------------------------------------
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

    def update(self, batch: Batch) -> dict[str, torch.Tensor]:
        self.exploration_noise = None  # gSDE: the next env step explores with a new matrix
        metrics = self.update_critics(batch)
        if self.updates % self.policy_delay == 0:  # the 1st, (1 + d)-th, ... update
            self.last_actor_metrics = self.update_actor_and_alpha(self.features(batch.obs))
        self.updates += 1
        return {**metrics, **self.last_actor_metrics, "alpha": self.alpha}

    def update_critics(self, batch: Batch) -> dict[str, torch.Tensor]:
        # the random draws happen here, so that critic_loss is a pure function (compile=true)
        next_noise = self.standard_normal(batch.rewards.shape[0])  # (B, A) or gSDE's (F, A)
        subset = sample_subset(self.ensemble_size, self.subset_size, self.generator, self.device)  # (M,)
        critic_loss, q_values = self.critic_loss(batch, next_noise, subset, self.alpha)  # (), (B, N)
        optimizer_step(self.critic_optimizer, critic_loss, self.critic_params, self.max_grad_norm)
        update_target(self.critic_target, self.critic, self.tau)
        return {"critic_loss": critic_loss.detach(), "q_mean": q_values.detach().mean()}

    def critic_loss(
        self, batch: Batch, next_noise: torch.Tensor, subset: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The ensemble's summed MSE to the REDQ target, and the critics' Q-values (B, N)."""
        obs, next_obs = self.features(batch.obs), self.features(batch.next_obs)  # (B, obs_dim) each
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(next_obs, noise=next_noise)  # (B, A), (B,)
            next_q = self.critic_target(next_obs, next_actions, members=subset)  # (B, M)
            targets = redq_target(
                batch.rewards, batch.terminated, next_q, next_log_prob, alpha, batch.discounts
            )  # (B,)
        q_values = self.critic(obs, self.actor.from_env(batch.actions))  # (B, N)
        return ensemble_mse(q_values, targets), q_values

    def update_actor_and_alpha(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        actor_loss, log_prob = self.actor_loss(obs, self.standard_normal(obs.shape[0]), self.alpha)
        optimizer_step(self.actor_optimizer, actor_loss, self.actor_params, self.max_grad_norm)
        log_prob = log_prob.detach()
        if self.learn_alpha:
            alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
            optimizer_step(self.alpha_optimizer, alpha_loss, [self.log_alpha], None)
        return {"actor_loss": actor_loss.detach(), "entropy": -log_prob.mean()}

    def actor_loss(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a | s) - Q(s, a)] with a = tanh(mean + std * noise) and Q the mean (or min)
        over the critics, and log pi (B,)."""
        actions, log_prob = self.actor.sample(obs, noise=noise)  # (B, A), (B,)
        q_value = actor_q_value(self.critic(obs, actions, frozen=True), self.actor_q)  # (B,)
        return (alpha * log_prob - q_value).mean(), log_prob

    def standard_normal(self, batch_size: int) -> torch.Tensor:
        """Noise for `batch_size` reparameterised actions, from the agent's generator: (B, A), or
        gSDE's one (F, A) matrix for the batch."""
        shape = (
            self.actor.noise_shape(batch_size) if hasattr(self.actor, "noise_shape") else (batch_size, self.action_dim)
        )
        return torch.randn(shape, generator=self.generator, device=self.device)

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            **self.target_state(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "updates": self.updates,
            "generator": self.generator.get_state(),
            "last_actor_metrics": dict(self.last_actor_metrics),
            "exploration_noise": self.exploration_noise,
            "explore_steps": self.explore_steps,
        }

    def target_state(self) -> dict:
        """The target critics' part of the state (CrossQ has none)."""
        return {"critic_target": self.critic_target.state_dict()}

    def load_target_state(self, state: dict) -> None:
        self.critic_target.load_state_dict(state["critic_target"])

    def load_state_dict(self, state: dict) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.load_target_state(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.updates = state["updates"]
        restore_generator(self.generator, state["generator"])
        self.last_actor_metrics = dict(state["last_actor_metrics"])
        noise = state.get("exploration_noise")  # absent from checkpoints made before gSDE
        self.exploration_noise = None if noise is None else noise.to(self.device)
        self.explore_steps = state.get("explore_steps", 0)
