"""What the step-for-step comparisons of our continuous updates with SB3's / sb3-contrib's share:
the peer's layers in order, made-up batches on MountainCarContinuous's spaces (actions already in
[-1, 1], as SB3's replay holds them), and serving those batches to the peer's `train`.
"""

from __future__ import annotations

import math

import torch

from rl_hydra.protocols import Batch

BATCH = 32


def linear_layers(module: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]


def made_up_batches(count: int, size: int = BATCH) -> list[Batch]:
    """`count` batches of 2-d observations and 1-d actions, a fifth of them terminal."""
    g = torch.Generator().manual_seed(0)
    return [
        Batch(
            obs=torch.randn(size, 2, generator=g),
            actions=2 * torch.rand(size, 1, generator=g) - 1,
            rewards=torch.randn(size, generator=g),
            next_obs=torch.randn(size, 2, generator=g),
            terminated=(torch.rand(size, generator=g) < 0.2).float(),
            truncated=torch.zeros(size),
            discounts=torch.full((size,), 0.99),
            weights=torch.ones(size),
            indices=torch.arange(size),
        )
        for _ in range(count)
    ]


def sb3_squashed_gaussian_log_prob(pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """SB3's log pi(tanh(u)): its tanh correction log(1 - tanh(u)^2 + 1e-6) where ours is exact (they part
    where the action saturates, by up to tens of nats)."""
    z = (pre_tanh - mean) * torch.exp(-log_std)  # (B, A)
    gaussian = -0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)  # (B, A)
    return (gaussian - torch.log(1 - torch.tanh(pre_tanh) ** 2 + 1e-6)).sum(dim=-1)  # (B,)


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


def copy_layers(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    """Their linear layers' weights and biases into ours, in order."""
    with torch.no_grad():
        for ours_layer, their_layer in zip(linear_layers(ours), linear_layers(theirs), strict=True):
            ours_layer.weight.copy_(their_layer.weight)
            ours_layer.bias.copy_(their_layer.bias)


def assert_layers_equal(ours: torch.nn.Module, theirs: torch.nn.Module, atol: float) -> None:
    for ours_layer, their_layer in zip(linear_layers(ours), linear_layers(theirs), strict=True):
        torch.testing.assert_close(ours_layer.weight, their_layer.weight, rtol=0, atol=atol)


def stacked_head(theirs) -> tuple[torch.Tensor, torch.Tensor]:
    """SB3's SAC-family mu and log_std layers as our one head ([mean | log_std]): weight, bias."""
    return (torch.cat([theirs.mu.weight, theirs.log_std.weight]), torch.cat([theirs.mu.bias, theirs.log_std.bias]))


def copy_squashed_gaussian_actor(ours, theirs) -> None:
    """SB3's SAC-family actor into ours: its latent_pi's layers into our body's, its mu and log_std
    layers stacked into our head."""
    copy_layers(ours.body, theirs.latent_pi)
    weight, bias = stacked_head(theirs)
    with torch.no_grad():
        ours.head.weight.copy_(weight)
        ours.head.bias.copy_(bias)


def assert_squashed_gaussian_actor_equal(ours, theirs, atol: float) -> None:
    assert_layers_equal(ours.body, theirs.latent_pi, atol)
    torch.testing.assert_close(ours.head.weight, stacked_head(theirs)[0], rtol=0, atol=atol)


def copy_critics(pairs) -> None:
    """Each peer critic's `q_networks` into our ensemble's members, weights transposed; `pairs`:
    (our CriticEnsemble, their critic)."""
    with torch.no_grad():
        for ours, theirs in pairs:
            for member, q_net in enumerate(theirs.q_networks):
                for layer, their_layer in enumerate(linear_layers(q_net)):
                    ours.weights[layer][member].copy_(their_layer.weight.T)
                    ours.biases[layer][member, 0].copy_(their_layer.bias)


def assert_critics_equal(pairs, atol: float) -> None:
    for ours, theirs in pairs:
        for member, q_net in enumerate(theirs.q_networks):
            for layer, their_layer in enumerate(linear_layers(q_net)):
                torch.testing.assert_close(ours.weights[layer][member], their_layer.weight.T, rtol=0, atol=atol)
