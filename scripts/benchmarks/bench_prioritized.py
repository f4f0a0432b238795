"""Per-update cost of prioritized replay (buffer=prioritized) against uniform replay (buffer=replay).

    python scripts/benchmarks/bench_prioritized.py                  # 7 interleaved rounds, medians in microseconds
    python scripts/benchmarks/bench_prioritized.py --rounds 3 --calls 500 --capacity 50000

  sampling  what one update costs the buffer: PrioritizedReplayBuffer.sample (sum-tree descent,
            importance weights) + update_priorities, against ReplayBuffer.sample, with each sum
            tree: numpy's and the compiled one (numba; skipped where it is not installed), and the
            compiled tree alone (its draw and update, the floor of any prioritized buffer built on
            it); batches of 32
            and 64 from `--capacity` stored rows (full buffers, random priorities), with
            CartPole's observations (4 floats) and larger ones (84 floats), and from
            `--frame-capacity` rows of Atari frames (4 x 84 x 84 stacks, one frame stored per row)
  update    a whole DQN update step on CartPole (the dqn_cartpole preset's network): sample,
            agent.update and, prioritized, update_priorities, against sample and agent.update

Each round times every candidate once, in turn, so drifting load falls on all alike; one torch
thread, as in the runs. Figures are medians over rounds of the microseconds per call, in CPU
time (process_time: what the calls cost, also on a machine busy with other work) and in wall
time, and the ratios of each prioritized median to the uniform one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from rl_hydra.api import compose_train_config  # noqa: E402
from rl_hydra.buffers import compiled_sum_tree  # noqa: E402
from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer  # noqa: E402
from rl_hydra.buffers.replay import ReplayBuffer  # noqa: E402
from rl_hydra.training import build_agent  # noqa: E402

CHUNK = 1000  # rows per add while filling
TREES = ("numpy", "numba") if compiled_sum_tree.numba is not None else ("numpy",)  # buffer.sum_tree


def filled(buffer_class, capacity: int, obs_dim: int, **kwargs):
    """A full buffer of random transitions; a prioritized one also gets random priorities."""
    obs_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    buffer = buffer_class(capacity, obs_space, gym.spaces.Discrete(2), num_envs=1, seed=0, **kwargs)
    rng = np.random.default_rng(0)
    for _ in range(0, capacity, CHUNK):
        obs = rng.normal(size=(CHUNK, obs_dim)).astype(np.float32)
        buffer.add(obs, rng.integers(2, size=CHUNK), rng.normal(size=CHUNK).astype(np.float32), obs,
                   rng.random(CHUNK) < 0.01, np.zeros(CHUNK, bool))
    if hasattr(buffer, "update_priorities"):
        rows = torch.arange(capacity)
        buffer.update_priorities(rows, torch.from_numpy(rng.exponential(size=capacity)))
    return buffer


def filled_with_frames(buffer_class, capacity: int):
    """A full buffer of Atari-shaped observations ((4, 84, 84) uint8 stacks of random frames,
    one frame stored per row), added one step at a time as an env produces them."""
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    buffer = buffer_class(capacity, space, gym.spaces.Discrete(6), num_envs=1, seed=0)
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (capacity + 4, 84, 84), dtype=np.uint8)
    for t in range(capacity):
        buffer.add(frames[None, t : t + 4], np.array([t % 6]), np.zeros(1, np.float32), frames[None, t + 1 : t + 5],
                   np.zeros(1, bool), np.zeros(1, bool))
    if hasattr(buffer, "update_priorities"):
        buffer.update_priorities(torch.arange(len(buffer)), torch.from_numpy(rng.exponential(size=len(buffer))))
    return buffer


def per_call_us(fn, calls: int) -> tuple[float, float]:
    """(wall, CPU) microseconds per call; CPU time leaves out the time this process waited for a core."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls * 1e6, (time.process_time() - cpu) / calls * 1e6


def sampling_candidates(capacity: int, obs_dim: int | None, batch_size: int) -> dict:
    """obs_dim None: Atari frames (filled_with_frames)."""
    if obs_dim is None:
        uniform = filled_with_frames(ReplayBuffer, capacity)
        prioritized = {tree: filled_with_frames(partial(PrioritizedReplayBuffer, sum_tree=tree, beta_steps=100_000), capacity)
                       for tree in TREES}
    else:
        uniform = filled(ReplayBuffer, capacity, obs_dim)
        prioritized = {tree: filled(partial(PrioritizedReplayBuffer, sum_tree=tree, beta_steps=100_000), capacity, obs_dim)
                       for tree in TREES}
    new_priorities = torch.rand(batch_size)  # what an update hands back (B,)

    def prioritized_sample(buffer):
        batch = buffer.sample(batch_size)
        buffer.update_priorities(batch.indices, new_priorities)

    errors, rng = new_priorities.numpy(), np.random.default_rng(0)

    def tree_alone(tree):  # the sum tree's own share: the draw and the update, no rows gathered, no tensors
        rows, _ = tree.draw_stratified(rng.random(batch_size), 0.4)
        tree.update_priorities(rows, errors, 1e-6, 0.5)

    return {"uniform": lambda: uniform.sample(batch_size),
            **{f"prioritized, {tree} tree": partial(prioritized_sample, buffer) for tree, buffer in prioritized.items()},
            **({"compiled tree alone": partial(tree_alone, prioritized["numba"].tree)} if "numba" in prioritized else {})}


def update_candidates(capacity: int, batch_size: int) -> dict:
    cfg = compose_train_config("algo=dqn", "env=cartpole", f"algo.batch_size={batch_size}", "device=cpu")
    env = gym.make("CartPole-v1")
    agents = [build_agent(cfg, env.observation_space, env.action_space, torch.device("cpu"))
              for _ in range(1 + len(TREES))]
    uniform = filled(ReplayBuffer, capacity, 4)
    prioritized = [filled(partial(PrioritizedReplayBuffer, sum_tree=tree, beta_steps=100_000), capacity, 4) for tree in TREES]

    def uniform_step():
        agents[0].update(uniform.sample(batch_size))

    def prioritized_step(buffer, agent):
        batch = buffer.sample(batch_size)
        buffer.update_priorities(batch.indices, agent.update(batch)["priorities"])

    return {"uniform": uniform_step, **{f"prioritized, {tree} tree": partial(prioritized_step, buffer, agent)
                                        for tree, buffer, agent in zip(TREES, prioritized, agents[1:])}}


def timed(name: str, candidates: dict, rounds: int, calls: int) -> None:
    for fn in candidates.values():  # warm up (and compile)
        per_call_us(fn, max(1, calls // 10))
    times = {key: [] for key in candidates}
    for _ in range(rounds):
        for key, fn in candidates.items():
            times[key].append(per_call_us(fn, calls))
    print(name, flush=True)
    for clock, column in (("cpu", 1), ("wall", 0)):
        medians = {key: statistics.median(t[column] for t in times[key]) for key in candidates}
        print(f"  {clock:<4} " + "   ".join(f"{key} {us:7.1f} us" + ("" if key == "uniform" else
                                           f" ({us / medians['uniform']:.2f}x)") for key, us in medians.items()),
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--capacity", type=int, default=100_000, help="rows stored (a full buffer)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=1000, help="calls per candidate and round")
    parser.add_argument("--update-calls", type=int, default=300, help="calls per round of the whole update")
    parser.add_argument("--frame-capacity", type=int, default=20_000,
                        help="rows of the Atari-frame buffers (7 KB each)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.capacity} rows, {args.rounds} rounds, median microseconds per call; torch {torch.__version__}, "
          f"numpy {np.__version__}, 1 torch thread")
    for obs_dim in (4, 84):
        for batch_size in (32, 64):
            timed(f"sampling, obs ({obs_dim},), batch {batch_size}", sampling_candidates(args.capacity, obs_dim, batch_size),
                  args.rounds, args.calls)
    for batch_size in (32, 64):
        timed(f"sampling, Atari frames, batch {batch_size}",
              sampling_candidates(args.frame_capacity, None, batch_size), args.rounds, args.calls // 4)
    for batch_size in (32, 64):
        timed(f"DQN update step, batch {batch_size}", update_candidates(args.capacity, batch_size),
              args.rounds, args.update_calls)


if __name__ == "__main__":
    main()
