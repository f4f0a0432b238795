"""DRQN (Hausknecht & Stone 2015) trained on stored-state sequences with burn-in (R2D2, Kapturowski et al. 2019).

Q-learning over fixed-length chunks: the recurrent core unrolls each chunk from the hidden
state the actor had at its first step, and every real step t gets the target
r_t + gamma * Q_target(o_{t+1}, h_{t+1}) from the target network unrolled the same
way. Exploration, target syncs, the optimizer step and checkpoints are DQN's.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from rl_hydra.algos.common import observation_tensor
from rl_hydra.algos.dqn import DQN
from rl_hydra.losses import (
    inverse_value_rescale,
    masked_mean,
    masked_td_loss,
    q_learning_targets,
    value_rescale,
)
from rl_hydra.networks.recurrent import RecurrentQNetwork
from rl_hydra.protocols import Capabilities, Observation, SequenceBatch
from rl_hydra.spaces import num_rows


def n_step_returns(
    rewards: torch.Tensor, mask: torch.Tensor, gamma: float, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each step t: the discounted sum of the up to n rewards r_t.. that lie on real steps of
    the chunk, the discount gamma^h for the bootstrap value (h = how many were summed), and the
    index t + h - 1 of the last summed step, whose next observation the bootstrap value is of."""
    # rewards, mask: (T, B); mask is 1 on a prefix of each chunk (its real steps)
    returns, horizon = torch.zeros_like(rewards), torch.zeros_like(rewards)  # (T, B)
    for k in range(n):
        later_rewards = F.pad(rewards[k:], (0, 0, 0, k))  # (T, B): r_{t+k}
        later_mask = F.pad(mask[k:], (0, 0, 0, k))  # (T, B)
        returns += gamma**k * later_rewards * later_mask
        horizon += later_mask
    steps = torch.arange(len(rewards), device=rewards.device)[:, None]  # (T, 1)
    last = (steps + horizon.long() - 1).clamp(min=0)  # (T, B)
    return returns, gamma**horizon, last


def time_slice(obs, steps: slice):
    """Steps `steps` of a sequence of observations (T, B, ...), or of each of its parts."""
    return {key: part[steps] for key, part in obs.items()} if isinstance(obs, dict) else obs[steps]


class DRQN(DQN):
    name: ClassVar[str] = "drqn"
    # its sequence buffer is uniform; it sums n-step returns over its own sequences
    capabilities: ClassVar[Capabilities] = Capabilities(
        actions="discrete", network="rl_hydra.networks.recurrent.RecurrentQNetwork", recurrent=True, n_step=True
    )
    q_net: RecurrentQNetwork  # network: the capabilities' class (checked by fit)

    def __init__(self, *args: Any, gamma: float, burn_in: int, n_step: int, value_rescaling: bool, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # its sequence buffer stores the rewards as they came: the discount is applied here, in `loss`
        self.gamma = gamma
        self.burn_in = burn_in
        self.n_step = n_step
        self.value_rescaling = value_rescaling

    # --- the hidden state ---------------------------------------------------------
    def initial_state(self, num_envs: int):
        return self.q_net.initial_state(num_envs)

    def reset_state(self, state, episode_start: np.ndarray):
        return self.q_net.reset_state(state, episode_start)

    def act(self, obs: Observation, state: Any = None, *, explore: bool) -> tuple[np.ndarray, Any]:
        """Greedy (or epsilon-greedy) actions and the next state; `state=None` is the initial state.
        The network always runs, even for random actions, so the state follows every observation."""
        n = num_rows(obs)
        if state is None:
            state = self.initial_state(n)
        with torch.no_grad():
            values, state = self.q_net.act(observation_tensor(obs, self.device), state)
        actions = values.argmax(dim=1).cpu().numpy()
        if explore:
            actions = self.randomize(actions, self.explore_rows(n))
        return actions, state

    # --- the sequence loss --------------------------------------------------------------
    def unroll(self, batch: SequenceBatch) -> torch.Tensor:
        """Online values over the chunk, (L + 1, B, A). The first `burn_in` steps only refresh
        the stored state: no gradient flows back through them, except in chunks that open an
        episode, whose initial state is exact (zeros) and whose first steps are trained on."""
        if self.burn_in == 0:
            return self.q_net(batch.obs, batch.state)[0]
        head, state = self.q_net(time_slice(batch.obs, slice(None, self.burn_in)), batch.state)  # (burn_in, B, A)
        opens = batch.episode_start[:, None]  # (B, 1)
        state = tuple(torch.where(opens, s, s.detach()) for s in state)  # (B, H) each
        tail, _ = self.q_net(time_slice(batch.obs, slice(self.burn_in, None)), state)  # (L + 1 - burn_in, B, A)
        return torch.cat([head, tail])  # (L + 1, B, A)

    def counted(self, batch: SequenceBatch) -> torch.Tensor:
        """The steps the loss learns from (L, B): real steps, those in the burn-in only in chunks
        that open an episode."""
        counted = batch.mask.clone()  # (L, B)
        counted[: self.burn_in] *= batch.episode_start.float()
        return counted

    # its batches are SequenceBatches where DQN's are Batches: the recurrent loop and buffer hand them out
    def loss(
        self,
        batch: SequenceBatch,  # type: ignore[override]
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """(the batch loss, each step's |TD error| (L, B), 0 where not counted, metrics). A sequence
        replay that draws by priority makes each sequence's priority of its steps' errors and
        weights each sequence's loss (rl_hydra/distributed: R2D2); the uniform sequence buffer
        ignores the errors and gives no weights. With `value_rescaling` the network learns
        h(Q): targets are h(R + gamma^n h^-1(Q_target(s', a*))), R2D2's rule."""
        counted = self.counted(batch)  # (L, B)
        q_values = self.unroll(batch)  # (L + 1, B, A)
        q_taken = q_values[:-1].gather(2, batch.actions[..., None]).squeeze(2)  # (L, B)
        with torch.no_grad():
            returns, discounts, last = n_step_returns(batch.rewards, batch.mask, self.gamma, self.n_step)  # (L, B)
            at_last = last[..., None].expand(-1, -1, self.num_actions)  # (L, B, A)
            next_q_target = self.target_net(batch.obs, batch.state)[0][1:].gather(0, at_last)  # (L, B, A)
            if self.value_rescaling:  # back to returns; the argmax is h's too (h is increasing)
                next_q_target = inverse_value_rescale(next_q_target)
            next_q_online = q_values[1:].detach().gather(0, at_last) if self.double_q else None  # (L, B, A)
            targets = q_learning_targets(
                returns.flatten(),
                batch.terminated.gather(0, last).flatten(),
                next_q_target.flatten(0, 1),
                discounts.flatten(),
                None if next_q_online is None else next_q_online.flatten(0, 1),
            )
            targets = targets.view_as(q_taken)  # (L, B)
            if self.value_rescaling:
                targets = value_rescale(targets)
        assert self.loss_kind is not None  # algo.loss: DRQN's own key
        loss = masked_td_loss(q_taken, targets, counted, self.loss_kind, batch.weights)
        td_error = (targets - q_taken).detach().abs() * counted  # (L, B)
        return (
            loss,
            td_error,
            {
                "q_value_mean": masked_mean(q_taken.detach(), counted),
                "target_mean": masked_mean(targets, counted),
                "td_error_mean": masked_mean(td_error, counted),
            },
        )
