"""Per-call cost of the pieces of the training loop's hot path, each next to the plain code it replaces.

    python scripts/benchmarks/bench_hot_path.py                 # 9 interleaved rounds, medians in microseconds
    python scripts/benchmarks/bench_hot_path.py --rounds 3 --calls 200

  act       DQN's epsilon-greedy act at batch 1 (epsilon 0.04): the numpy mirror on the CPU
            weights against the torch forward it replaces
  env step  LeanSyncVectorEnv.step against gymnasium's SyncVectorEnv (SAME_STEP), one CartPole;
            the bare env (gym.make) is the floor
  adam      LeanAdam.step against torch.optim.Adam(fused=True).step on the zoo's 2x256 Q-network
  sampling  one zoo training phase's 128 batches of 64 from 50k CartPole transitions:
            ReplayBuffer.sample_batches (one gather) against 128 sample calls
  quantile  the quantile Huber loss and its backward at QR-DQN's MountainCar and Acrobot shapes (batch 128,
            25 x 25 quantile pairs): losses.quantile_huber_loss (gradient in closed form) against autograd
            through the pairwise terms, the code it replaced
  update    a whole update (loss, backward, clipping, optimizer step) of DQN and QR-DQN at batch 64, and of
            QR-DQN at batch 128 with 25 quantiles (the presets') and 170 (the Zoo's for LunarLander)

Each round times every candidate once, in turn, so drifting load falls on all alike; one
torch thread, as in the runs. Figures are medians over rounds and the ratio of medians.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rl_hydra.algos.common import optimizer_step  # noqa: E402
from rl_hydra.algos.dqn import DQN  # noqa: E402
from rl_hydra.algos.qr_dqn import QRDQN  # noqa: E402
from rl_hydra.buffers.replay import Batch, ReplayBuffer  # noqa: E402
from rl_hydra.speed.vector_env import LeanSyncVectorEnv  # noqa: E402
from rl_hydra.losses import quantile_huber_loss  # noqa: E402
from rl_hydra.networks.mlp import QNetwork  # noqa: E402
from rl_hydra.networks.quantile import QuantileNetwork  # noqa: E402
from rl_hydra.speed.lean_adam import LeanAdam  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def make_agent(algo_class, network, optimizer, batch_size: int = 64, **kwargs):
    """The algorithm with its config's keys (they have no Python defaults), at batch 64."""
    from omegaconf import OmegaConf

    from rl_hydra.api import compose_train_config

    keys = OmegaConf.to_container(compose_train_config(f"algo={algo_class.name}", "~algo_env").algo, resolve=True)
    for key in ("_target_", "optimizer", "n_step"):
        keys.pop(key, None)
    env = gym.make("CartPole-v1")
    return algo_class(env.observation_space, env.action_space, functools.partial(network, hidden_sizes=[256, 256]),
                      optimizer, total_steps=50_000, **{**keys, "batch_size": batch_size, "max_grad_norm": 10.0,
                                                        **kwargs})


def random_batch(size: int = 64) -> Batch:
    return Batch(obs=torch.randn(size, 4), actions=torch.randint(2, (size,)), rewards=torch.ones(size),
                 next_obs=torch.randn(size, 4), terminated=torch.zeros(size), truncated=torch.zeros(size),
                 discounts=torch.full((size,), 0.99), weights=torch.ones(size), indices=torch.arange(size))


def autograd_quantile_huber_loss(quantiles: torch.Tensor, targets: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
    """The quantile Huber loss (kappa 1) as autograd differentiates it term by term: (B,)."""
    u = targets[:, None, :] - quantiles[:, :, None]                                    # (B, N, N')
    huber = torch.nn.functional.huber_loss(u, torch.zeros_like(u), reduction="none")   # (B, N, N')
    weight = torch.where(u < 0, 1.0 - taus[:, None], taus[:, None])                    # (B, N, N')
    return (weight * huber).sum(dim=(1, 2)) / u.shape[2]                               # (B,)


def quantile_loss_backward(loss_fn) -> callable:
    quantiles, targets = torch.randn(128, 25, requires_grad=True), torch.randn(128, 25)
    taus, weights = (2 * torch.arange(25) + 1) / 50, torch.rand(128)
    return lambda: (weights * loss_fn(quantiles, targets, taus)).mean().backward()


def candidates() -> dict[str, dict[str, callable]]:
    lean = functools.partial(LeanAdam, lr=2.3e-3)
    plain = functools.partial(torch.optim.Adam, lr=2.3e-3, fused=True)

    dqn = make_agent(DQN, QNetwork, lean)
    dqn.explore_steps = 10**6  # exploration decayed to its end: the greedy path on most steps
    obs = np.random.default_rng(0).normal(size=(1, 4)).astype(np.float32)
    torch_only = make_agent(DQN, QNetwork, lean)
    torch_only.load_state_dict(dqn.state_dict())
    torch_only.action_values = torch_only.action_values  # an instance attribute: act skips the numpy mirror

    ours_env = LeanSyncVectorEnv([lambda: gym.make("CartPole-v1")])
    gym_env = SyncVectorEnv([lambda: gym.make("CartPole-v1")], autoreset_mode=AutoresetMode.SAME_STEP)
    bare = gym.make("CartPole-v1")
    for env in (ours_env, gym_env, bare):
        env.reset(seed=0)
    actions = np.zeros(1, dtype=np.int64)

    def bare_step():
        _, _, terminated, truncated, _ = bare.step(0)
        if terminated or truncated:
            bare.reset()

    def optimizer_steps(factory):
        net = QNetwork(4, 2, [256, 256])
        optimizer = factory(net.parameters())
        net(torch.randn(64, 4)).sum().backward()
        optimizer.step()  # creates the state
        return optimizer.step

    env = gym.make("CartPole-v1")
    buffer = ReplayBuffer(100_000, env.observation_space, env.action_space)
    rng = np.random.default_rng(0)
    for _ in range(50):  # 50k transitions
        obs_rows = rng.normal(size=(1000, 4)).astype(np.float32)
        buffer.add(obs_rows, rng.integers(2, size=1000), np.ones(1000), obs_rows, np.zeros(1000, bool),
                   np.zeros(1000, bool))

    def update(algo_class, network, batch_size: int = 64, **kwargs):
        agent, batch = make_agent(algo_class, network, lean, batch_size, **kwargs), random_batch(batch_size)

        def one():
            loss, _, _ = agent.loss(batch)
            optimizer_step(agent.optimizer, loss, agent.params, agent.max_grad_norm)
        return one

    return {
        "act": {"numpy forward": lambda: dqn.act(obs, explore=True),
                "torch forward": lambda: torch_only.act(obs, explore=True)},
        "env step": {"LeanSyncVectorEnv": lambda: ours_env.step(actions),
                     "gymnasium SyncVectorEnv": lambda: gym_env.step(actions), "bare env": bare_step},
        "adam": {"LeanAdam": optimizer_steps(lean), "torch Adam(fused=True)": optimizer_steps(plain)},
        "sampling": {"sample_batches(64, 128)": lambda: list(buffer.sample_batches(64, 128)),
                     "128 x sample(64)": lambda: [buffer.sample(64) for _ in range(128)]},
        "quantile": {"closed-form gradient": quantile_loss_backward(
                         functools.partial(quantile_huber_loss, reduction="none")),
                     "autograd, term by term": quantile_loss_backward(autograd_quantile_huber_loss)},
        "update": {"DQN": update(DQN, QNetwork),
                   "QR-DQN (10 quantiles)": update(QRDQN, QuantileNetwork, num_quantiles=10),
                   # the quantile count of QR-DQN's presets against the Zoo's for LunarLander
                   "QR-DQN (25, batch 128)": update(QRDQN, QuantileNetwork, 128, num_quantiles=25),
                   "QR-DQN (170, batch 128)": update(QRDQN, QuantileNetwork, 128, num_quantiles=170)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=1000, help="calls per candidate per round (updates: a tenth)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    groups = candidates()
    times = {(group, name): [] for group, fns in groups.items() for name in fns}
    for _ in range(args.rounds):
        for group, fns in groups.items():
            calls = max(args.calls // 10, 1) if group in ("update", "adam", "sampling", "quantile") else args.calls
            for name, fn in fns.items():
                per_call_us(fn, max(calls // 10, 1))  # warm up
                times[group, name].append(per_call_us(fn, calls))
    print(f"median of {args.rounds} rounds, microseconds per call (torch {torch.__version__}, one thread)")
    for group, fns in groups.items():
        first = statistics.median(times[group, next(iter(fns))])
        for name in fns:
            value = statistics.median(times[group, name])
            print(f"  {group:9s} {name:26s} {value:9.1f} us   {value / first:5.2f}x the first")


if __name__ == "__main__":
    main()
