"""What the step-for-step comparisons of our continuous updates with SB3's / sb3-contrib's share:
the peer's layers in order, made-up batches on MountainCarContinuous's spaces (actions already in
[-1, 1], as SB3's replay holds them), and serving those batches to the peer's `train`.
"""

from __future__ import annotations

import torch

from rl_hydra.protocols import Batch

BATCH = 32


def linear_layers(module: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def made_up_batches(count: int) -> list[Batch]:
    """`count` batches of 2-d observations and 1-d actions, a fifth of them terminal."""
    g = torch.Generator().manual_seed(0)
    return [Batch(obs=torch.randn(BATCH, 2, generator=g), actions=2 * torch.rand(BATCH, 1, generator=g) - 1,
                  rewards=torch.randn(BATCH, generator=g), next_obs=torch.randn(BATCH, 2, generator=g),
                  terminated=(torch.rand(BATCH, generator=g) < 0.2).float(), truncated=torch.zeros(BATCH),
                  discounts=torch.full((BATCH,), 0.99), weights=torch.ones(BATCH), indices=torch.arange(BATCH))
            for _ in range(count)]


def serve(peer, batches: list[Batch]) -> None:
    """The peer's replay buffer hands out `batches` in order; its logger writes nowhere."""
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    queue = iter(batches)

    def sample(*_, **__):
        b = next(queue)
        return ReplayBufferSamples(b.obs, b.actions, b.next_obs, b.terminated[:, None], b.rewards[:, None])

    peer.replay_buffer.sample = sample
    peer.set_logger(configure(None, [""]))


def copy_critics(agent, peer, names: tuple[str, str] = ("critic", "critic_target")) -> None:
    """The peer's critics (`q_networks`) into our ensembles' members, weights transposed."""
    with torch.no_grad():
        for name, theirs in zip(names, (peer.critic, peer.critic_target)):
            for member, q_net in enumerate(theirs.q_networks):
                for layer, their_layer in enumerate(linear_layers(q_net)):
                    getattr(agent, name).weights[layer][member].copy_(their_layer.weight.T)
                    getattr(agent, name).biases[layer][member, 0].copy_(their_layer.bias)


def assert_critics_equal(agent, peer, atol: float, names: tuple[str, str] = ("critic", "critic_target")) -> None:
    for name, theirs in zip(names, (peer.critic, peer.critic_target)):
        for member, q_net in enumerate(theirs.q_networks):
            for layer, their_layer in enumerate(linear_layers(q_net)):
                torch.testing.assert_close(getattr(agent, name).weights[layer][member], their_layer.weight.T,
                                           rtol=0, atol=atol)
