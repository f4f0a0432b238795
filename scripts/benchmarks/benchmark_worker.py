"""One measurement of scripts/benchmarks/benchmark.py, run in a fresh process with one torch thread.

    python scripts/benchmarks/benchmark_worker.py '{"kind": "ours", "overrides": ["algo=dqn", ...]}'

The job is a JSON object; the result is printed as one JSON line after RESULT_MARK.
Kinds: probe (versions), ours (a run through rl_hydra.training.run), sb3 (the same run
with Stable-Baselines3 / sb3-contrib), floor (pure updates and pure env steps) and ensemble
(scripts/benchmarks/bench_ensemble.py's batched-versus-looped comparison).
"""

from __future__ import annotations

import collections
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
RESULT_MARK = "BENCHMARK_RESULT "


def timed_run(overrides: list[str]) -> tuple[object, dict]:
    """A whole run (build, train, the final greedy evaluation and checkpoints, as train.py does)
    and its agent. The result has the seconds spent inside the agent's updates too (a timer
    around each, ~0.2 us a call): the run's own updates, timed at the same moments as the run,
    whatever the machine's drift."""
    from loop_timers import wrap  # scripts/benchmarks/ is this script's directory, first on sys.path
    from rl_hydra import training
    from rl_hydra.api import compose_train_config

    cfg = compose_train_config(*overrides)
    totals, calls, built = collections.Counter(), collections.Counter(), []
    build_components = training.build_components

    def build_timed(*args, **kwargs):
        agent, env, buffer = build_components(*args, **kwargs)
        wrap(agent, "update", "update", totals, calls)
        built.append(agent)
        return agent, env, buffer

    training.build_components = build_timed  # run() looks it up in its module
    with tempfile.TemporaryDirectory() as run_dir:
        start = time.perf_counter()
        summary = training.run(cfg, run_dir)
        wall = time.perf_counter() - start
    return built[0], {"wall_s": wall, "steps": summary["global_step"], "updates": summary["updates"],
                      "update_s": totals["update"], "eval_return": summary["eval_return_mean"],
                      "solved_at_step": summary.get("solved_at_step")}


def run_ours(job: dict) -> dict:
    return timed_run(job["overrides"])[1]


def linear_schedule(spec: str):
    """The zoo's `lin_<lr>`: from lr at the start to 0 at the end (of SB3's progress_remaining)."""
    initial = float(spec.removeprefix("lin_"))
    return lambda progress_remaining: progress_remaining * initial


def run_sb3(job: dict) -> dict:
    """Build, learn and evaluate greedily on `eval_episodes` envs seeded like ours. wall_s is
    all three; build_s, learn_s and eval_s each part."""
    import gymnasium as gym
    from sb3_contrib import QRDQN
    from stable_baselines3 import DQN, SAC
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    algo_class = {"dqn": DQN, "qr_dqn": QRDQN, "sac": SAC}[job["algo"]]
    kwargs = dict(job["kwargs"])
    if isinstance(kwargs.get("learning_rate"), str):
        kwargs["learning_rate"] = linear_schedule(kwargs["learning_rate"])
    start = time.perf_counter()
    model = algo_class("MlpPolicy", job["env_id"], seed=job["seed"], device=job["device"], verbose=0, **kwargs)
    built = time.perf_counter()
    model.learn(total_timesteps=job["total_steps"])
    learned = time.perf_counter()
    eval_env = DummyVecEnv([lambda: Monitor(gym.make(job["env_id"]))] * job["eval_episodes"])
    eval_env.seed(job["eval_seed"])  # env i starts from eval_seed + i, as our evaluation does
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=job["eval_episodes"], deterministic=True,
                                 return_episode_rewards=True)
    end = time.perf_counter()
    return {"wall_s": end - start, "build_s": built - start, "learn_s": learned - built, "eval_s": end - learned,
            "steps": model.num_timesteps, "updates": model._n_updates,
            "eval_return": sum(returns) / len(returns), "eval_returns": [float(r) for r in returns]}


def pure_update_seconds(agent, obs_dim: int, updates: int, device: torch.device) -> float:
    """`updates` pure updates of the agent's network, loss and optimizer on one fixed batch
    (no sampling, acting, logging or target syncs)."""
    from rl_hydra.algos.common import optimizer_step
    from rl_hydra.buffers.replay import Batch

    size = agent.batch_size
    batch = Batch(obs=torch.randn(size, obs_dim, device=device),
                  actions=torch.randint(agent.num_actions, (size,), device=device),
                  rewards=torch.ones(size, device=device), next_obs=torch.randn(size, obs_dim, device=device),
                  terminated=torch.zeros(size, device=device), truncated=torch.zeros(size, device=device),
                  discounts=torch.full((size,), agent.gamma, device=device), weights=torch.ones(size, device=device),
                  indices=torch.arange(size, device=device))

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    sync()
    start = time.perf_counter()
    for _ in range(updates):
        loss, _, _ = agent.loss(batch)
        optimizer_step(agent.optimizer, loss, agent.params, agent.max_grad_norm)
    sync()
    return time.perf_counter() - start


def built_agent(cfg, device: torch.device):
    """The agent of a run's config and its observation size (call it inside process_settings,
    as the run builds it: seeded, with its threads and denormal mode)."""
    from rl_hydra.training import build_components

    agent, env, _ = build_components(cfg, device)
    env.close()
    return agent, env.single_observation_space.shape[0]


def run_floor(job: dict) -> dict:
    """`updates` pure updates (pure_update_seconds), then `env_steps` random-action env steps."""
    import gymnasium as gym

    from rl_hydra.api import compose_train_config
    from rl_hydra.training import process_settings

    device = torch.device(job["device"])
    cfg = compose_train_config(*job["overrides"])
    with process_settings(cfg):
        agent, obs_dim = built_agent(cfg, device)
        update_s = pure_update_seconds(agent, obs_dim, job["updates"], device)
        env = gym.make(job["env_id"])
        env.reset(seed=cfg.seed)
        env.action_space.seed(cfg.seed)
        start = time.perf_counter()
        for _ in range(job["env_steps"]):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
        env_s = time.perf_counter() - start
    optimizer = agent.optimizer
    return {"update_s": update_s, "env_s": env_s,
            "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__name__}"
                         f"(fused={optimizer.param_groups[0].get('fused')})"}


def run_ensemble(job: dict) -> dict:
    import bench_ensemble  # scripts/benchmarks/ is this script's directory, first on sys.path

    return bench_ensemble.compare(bench_ensemble.build_parser().parse_args(job["args"]))


def probe(job: dict) -> dict:
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("gymnasium", "stable_baselines3", "sb3_contrib"):
        try:
            versions[package] = version(package.replace("_", "-"))
        except PackageNotFoundError:
            versions[package] = None
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        cpu = names[0] if names else cpu
    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {**versions, "cpu": cpu, "cuda": cuda}


JOBS = {"ours": run_ours, "sb3": run_sb3, "floor": run_floor, "ensemble": run_ensemble, "probe": probe}


if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    torch.set_num_threads(1)
    print(RESULT_MARK + json.dumps(JOBS[job["kind"]](job)), flush=True)
