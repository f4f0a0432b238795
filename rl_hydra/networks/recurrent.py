"""The recurrent Q-network of DRQN (Hausknecht & Stone 2015): MLP encoder, LSTM or GRU core, Q head."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_hydra.choices import CELLS
from rl_hydra.networks.encoders import make_encoder
from rl_hydra.networks.layers import mlp
from rl_hydra.protocols import ObservationTensor

# The core's state, each tensor (B, lstm_size): (h, c) for an LSTM, (h,) for a GRU. Batch first,
# so rows can be stored and reset per env.
State = tuple[torch.Tensor, ...]


class RecurrentQNetwork(nn.Module):
    """Q(o_1..o_t, .): a sequence (T, B, obs_dim) and a state -> values (T, B, num_actions) and the next state.
    Observations of other spaces (T, B, *shape), or a dict of parts, are encoded as QNetwork's are."""

    def __init__(
        self,
        observation: int | gym.Space,
        num_actions: int,
        *,
        encoder_sizes: Sequence[int],
        lstm_size: int,
        head_sizes: Sequence[int],
        activation: str,
        encoder: str,
        discrete_embedding: int | None,
        cell: str,
    ):
        super().__init__()
        self.lstm_size = lstm_size
        self.cell = cell
        # the Box encoders read (N, *shape) and are folded over the time axis here; the others
        # (indices, a Dict of parts) take any leading axes themselves
        self.observation_shape = (
            (observation,)
            if isinstance(observation, int)
            else tuple(observation.shape)
            if isinstance(observation, gym.spaces.Box)
            else None
        )
        # frames or grids: a CNN (networks/encoders.py) before the MLP encoder; None for vectors
        self.observation_encoder, features = make_encoder(observation, encoder, discrete_embedding)
        self.encoder = mlp(features, None, encoder_sizes, activation)
        self.core = getattr(nn, CELLS[cell])(encoder_sizes[-1] if encoder_sizes else features, lstm_size)
        self.head = mlp(lstm_size, num_actions, head_sizes, activation)
        self.register_load_state_dict_pre_hook(rename_lstm)

    def initial_state(self, batch: int) -> State:
        """The state before an episode's first observation: zeros."""
        last = cast(nn.Linear, self.head[-1])  # torch types an indexed Sequential as any Module
        zeros = torch.zeros(batch, self.lstm_size, device=last.weight.device)
        return (zeros, zeros.clone()) if self.cell == "lstm" else (zeros,)

    def reset_state(self, state: State, episode_start: np.ndarray | torch.Tensor) -> State:
        """`state` with the rows where a new episode starts replaced by the initial state."""
        if not episode_start.any():
            return state
        start = torch.as_tensor(episode_start, dtype=torch.bool, device=state[0].device)[:, None]  # (B, 1)
        fresh = self.initial_state(len(start))
        return tuple(torch.where(start, f, s) for f, s in zip(fresh, state))  # (B, H) each

    def features(self, obs: ObservationTensor) -> torch.Tensor:
        """(..., *observation_shape) -> (..., E): the CNN (if any) over every step, then the MLP."""
        if self.observation_encoder is not None:
            if self.observation_shape is None:
                obs = self.observation_encoder(obs)  # (..., F)
            else:
                assert isinstance(obs, torch.Tensor)  # a Box's observations: one tensor
                leading = obs.shape[: obs.dim() - len(self.observation_shape)]
                obs = self.observation_encoder(obs.reshape(-1, *self.observation_shape)).reshape(*leading, -1)
        return self.encoder(obs)

    def forward(self, obs: ObservationTensor, state: State) -> tuple[torch.Tensor, State]:
        features = self.features(obs)  # (T, B, E)
        layered = tuple(s[None].contiguous() for s in state)  # (1, B, H) each
        outputs, layered = self.core(features, layered if self.cell == "lstm" else layered[0])  # (T, B, H)
        layered = layered if self.cell == "lstm" else (layered,)
        return self.head(outputs), tuple(s[0] for s in layered)  # (T, B, A), (B, H) each

    def act(self, obs: ObservationTensor, state: State) -> tuple[torch.Tensor, State]:
        """One step while collecting: obs (B, obs_dim) -> values (B, num_actions) and the next state.

        The same weights as `forward`, through the single-step cell kernel: on CPU it costs a
        fraction of a length-1 `nn.LSTM` (or `nn.GRU`) call, and acting runs it at every env step.
        """
        core, features = self.core, self.features(obs)
        weights = core.weight_ih_l0, core.weight_hh_l0, core.bias_ih_l0, core.bias_hh_l0
        if self.cell == "lstm":
            state = torch.lstm_cell(features, state, *weights)  # (h, c): (B, H) each
        else:
            state = (torch.gru_cell(features, state[0], *weights),)  # (h,): (B, H)
        return self.head(state[0]), state  # (B, A)


def rename_lstm(module, state_dict, prefix, *_) -> None:  # noqa: ARG001
    """Checkpoints written before `network.cell` named the core `lstm`: their keys load into `core`."""
    for key in [k for k in state_dict if k.startswith(prefix + "lstm.")]:
        state_dict[prefix + "core." + key[len(prefix) + 5 :]] = state_dict.pop(key)
