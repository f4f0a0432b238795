"""MinAtar DQN (and QR-DQN, IQN, Rainbow) side by side with Stable-Baselines3 on the same network and
hyperparameters.

    python scripts/benchmarks/minatar_sb3.py                                       # DQN, 2 games x 3 seeds, 300k
    python scripts/benchmarks/minatar_sb3.py --algo dqn qr_dqn iqn --games Breakout SpaceInvaders
    python scripts/benchmarks/minatar_sb3.py --steps 3000 --seeds 1 --games Breakout --out /tmp/minatar_smoke
    python scripts/benchmarks/minatar_sb3.py --games Breakout --only-seeds 1 2     # seeds 1 and 2 of the 3
    python scripts/benchmarks/minatar_sb3.py --algo qr_dqn --quantiles 50 --sides ours   # ours only, 50 quantiles
    python scripts/benchmarks/minatar_sb3.py --algo rainbow --sides ours --games Breakout # Rainbow has no SB3 side
    python scripts/benchmarks/minatar_sb3.py --table-only                          # train nothing

MinAtar's DQN settings (Young & Tian 2019) with Adam: batch 32, replay 100k, one update per env
step, target sync every 1,000 updates, epsilon 1 -> 0.1 over the first 100k steps, 5k random
warm-up steps, Adam lr 1e-4, gamma 0.99, Huber loss. The network on both sides: one 3x3
convolution of 16 filters (stride 1, no padding), ReLU, 128 units, ReLU, one output per action
(QR-DQN: 200 quantiles per action; IQN: the 128 features times the cosine embedding, then the
output layer). Gradient norm clipped at 10 for DQN (SB3's default), not for QR-DQN
(sb3-contrib's default), IQN and Rainbow; Adam eps 1e-8 for DQN, 0.01 / batch for QR-DQN
(sb3-contrib's default, and the QR-DQN paper's), IQN and Rainbow (as Dopamine trains them).
Rainbow (ours only) is algo=rainbow's composition on the same schedule: C51 with 51 atoms on
[-10, 10], 3-step returns, prioritized replay (alpha 0.5, beta 0.4 -> 1), double Q, dueling
streams, and every Linear after the convolution noisy (sigma0 0.5), which replaces epsilon-greedy.

Both sides play the same env: our env=minatar's single env (MinAtar's gym env, our
MinAtarReset and ChannelsFirst wrappers: (C, 10, 10) bool grids), SB3 in a DummyVecEnv of it.
Each run is its own process with one torch thread; for each game, seed and algorithm, ours and
SB3's run back to back (SB3 first on odd seeds). Wall time is the whole run after imports
(torch, the library, MinAtar's): building, training and the final greedy evaluation of
--eval-episodes episodes (env i seeded seed + 1,000,000 + i on both sides, one episode per env).
Ours evaluates only at the end (train.eval_every = steps), writes metrics.csv and its final
checkpoints without the buffer, and keeps its run directory under <out>/runs/.

Resumable: each finished run leaves <out>/results/<side>_<algo>_<game>_<steps>_seed<S>.json and a rerun
skips it. The table, <out>/minatar_sb3.md, shows per (algo, game) the median over seeds of the
final evaluation's mean return, the median wall time, and the median of per-seed wall ratios.
IQN and Rainbow have no SB3 counterpart.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from self_workers import add_worker_arguments, run_worker, serve_worker  # noqa: E402
EVAL_SEED_OFFSET = 1_000_000   # rl_hydra.loops.evaluate: env i of the evaluation starts from seed + 1e6 + i
HP = {"batch": 32, "buffer": 100_000, "target_sync": 1000, "warmup": 5000, "eps_start": 1.0, "eps_end": 0.1,
      "eps_steps": 100_000, "lr": 1e-4, "gamma": 0.99, "hidden": 128, "quantiles": 200}
SB3_ALGOS = ("dqn", "qr_dqn")


def sides_to_train(algo: str, asked: list[str]) -> list[str]:
    """Of the sides asked for, those that have `algo`: ours always, SB3 only for SB3_ALGOS."""
    return [side for side in ("ours", "sb3") if side in asked and (side == "ours" or algo in SB3_ALGOS)]


def exploration_fraction(steps: int) -> float:
    return min(1.0, HP["eps_steps"] / steps)


def grad_norm(algo: str) -> float | None:
    return 10.0 if algo == "dqn" else None


def adam_eps(algo: str) -> float:
    return 1e-8 if algo == "dqn" else 0.01 / HP["batch"]   # QR-DQN and IQN: the papers' (and sb3-contrib's)


def our_overrides(job: dict) -> list[str]:
    algo, steps = job["algo"], job["steps"]
    network = ["network.head_hidden_sizes=[]"] if algo == "iqn" else []   # 128 features x phi -> output
    return [f"algo={algo}", "env=minatar", f"env.id=MinAtar/{job['game']}-v1",
            "network.encoder=minatar_cnn", f"network.hidden_sizes=[{HP['hidden']}]", *network,
            f"algo.optimizer.lr={HP['lr']}", f"++algo.optimizer.eps={adam_eps(algo)}", f"algo.gamma={HP['gamma']}",
            f"algo.batch_size={HP['batch']}", "algo.train_every=1", "algo.gradient_steps=1",
            f"algo.target_update_every={HP['target_sync']}", f"algo.learning_starts={job['warmup']}",
            f"algo.exploration.start={HP['eps_start']}", f"algo.exploration.end={HP['eps_end']}",
            f"algo.exploration.fraction={exploration_fraction(steps)}", "algo.final_lr_fraction=1.0",
            f"algo.max_grad_norm={'null' if grad_norm(algo) is None else grad_norm(algo)}",
            *([f"algo.num_quantiles={job['quantiles']}"] if algo == "qr_dqn" else []),
            f"buffer.capacity={HP['buffer']}", f"train.total_steps={steps}", f"train.eval_every={steps}",
            f"train.eval_episodes={job['eval_episodes']}", f"train.checkpoint_every={steps}",
            "train.progress=false", "logger=[]", "checkpoint.save_buffer=false", f"seed={job['seed']}",
            "device=cpu", "torch_threads=1"]


# --- workers: one run per process -------------------------------------------------------------
def import_minatar() -> None:
    """MinAtar's import takes seconds (it imports seaborn and scipy); both sides do it before
    the clock starts, with torch and the libraries."""
    importlib.import_module("minatar.gym")


def run_ours(job: dict) -> dict:
    from rl_hydra.api import train

    import_minatar()
    start = time.perf_counter()
    run = train(*our_overrides(job), run_dir=job["run_dir"])
    wall = time.perf_counter() - start
    summary = json.loads((Path(run.run_dir) / "summary.json").read_text())
    return {"wall_s": wall, "train_wall_s": summary["wall_time_s"], "eval_return": summary["eval_return_mean"],
            "status": summary["status"], "steps": summary["global_step"]}


def minatar_env(game: str):
    """Our env=minatar single env, as a function SB3's DummyVecEnv can call."""
    from rl_hydra.api import compose_train_config
    from rl_hydra.envs.make import env_factory

    return env_factory(compose_train_config("env=minatar", f"env.id=MinAtar/{game}-v1").env)


def sb3_model(job: dict, env):
    """SB3's DQN or sb3-contrib's QR-DQN on `env` with MinAtar's network and settings."""
    import torch
    from sb3_contrib import QRDQN
    from stable_baselines3 import DQN
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarConv(BaseFeaturesExtractor):
        """(B, C, 10, 10) -> (B, 1024): 16 3x3 filters, stride 1, no padding, ReLU; the 128-unit
        layer and the output are SB3's own q-network MLP (net_arch=[128])."""

        def __init__(self, observation_space):
            super().__init__(observation_space, features_dim=16 * 8 * 8)
            self.conv = nn.Sequential(nn.Conv2d(observation_space.shape[0], 16, 3, stride=1), nn.ReLU(), nn.Flatten())

        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return self.conv(obs.float())

    algo = job["algo"]
    policy_kwargs = {"features_extractor_class": MinAtarConv, "net_arch": [HP["hidden"]],
                     "optimizer_kwargs": {"eps": adam_eps(algo)}}
    if algo == "qr_dqn":
        policy_kwargs["n_quantiles"] = job["quantiles"]
    return {"dqn": DQN, "qr_dqn": QRDQN}[algo](
        "MlpPolicy", env, learning_rate=HP["lr"], buffer_size=HP["buffer"], learning_starts=job["warmup"],
        batch_size=HP["batch"], tau=1.0, gamma=HP["gamma"], train_freq=1, gradient_steps=1,
        target_update_interval=HP["target_sync"], exploration_fraction=exploration_fraction(job["steps"]),
        exploration_initial_eps=HP["eps_start"], exploration_final_eps=HP["eps_end"],
        max_grad_norm=grad_norm(algo), policy_kwargs=policy_kwargs, seed=job["seed"], device="cpu", verbose=0)


def run_sb3(job: dict) -> dict:
    import torch
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    import_minatar()
    torch.set_num_threads(1)
    make = minatar_env(job["game"])   # composing our env config is not SB3's cost
    start = time.perf_counter()
    model = sb3_model(job, DummyVecEnv([lambda: Monitor(make())]))
    learn_start = time.perf_counter()
    model.learn(total_timesteps=job["steps"])
    learn_s = time.perf_counter() - learn_start
    episodes = job["eval_episodes"]
    eval_env = DummyVecEnv([lambda: Monitor(make())] * episodes)
    eval_env.seed(job["seed"] + EVAL_SEED_OFFSET)   # env i: seed + 1e6 + i, as ours
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True,
                                 return_episode_rewards=True)
    return {"wall_s": time.perf_counter() - start, "learn_s": learn_s, "eval_return": statistics.mean(returns),
            "eval_returns": [float(r) for r in returns], "steps": model.num_timesteps, "updates": model._n_updates}


WORKERS = {"ours": run_ours, "sb3": run_sb3}


# --- the driver --------------------------------------------------------------------------------
def label(algo: str, quantiles: int) -> str:
    """The algo as results and the table name it: QR-DQN with other than 200 quantiles, e.g. qr_dqn50."""
    return f"{algo}{quantiles}" if algo == "qr_dqn" and quantiles != HP["quantiles"] else algo


def result_path(out: Path, side: str, algo: str, game: str, steps: int, seed: int) -> Path:
    return out / "results" / f"{side}_{algo}_{game}_{steps}_seed{seed}.json"


def run_one(side: str, job: dict, out: Path) -> None:
    name = label(job["algo"], job["quantiles"])
    path = result_path(out, side, name, job["game"], job["steps"], job["seed"])
    if path.exists():
        print(f"skip {path.name}: done", flush=True)
        return
    if side == "ours":
        run_dir = out / "runs" / f"{name}_{job['game']}_{job['steps']}" / f"seed_{job['seed']}"
        job = {**job, "run_dir": str(run_dir)}
        shutil.rmtree(job["run_dir"], ignore_errors=True)   # an unfinished run of this script: start again
    print(f"{side} {name} {job['game']} seed {job['seed']} ...", flush=True)
    result = {**job, "side": side, **run_worker(__file__, side, job), "host": platform.node(),
              "load": os.getloadavg()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"  return {result['eval_return']:.2f}, wall {result['wall_s']:.0f} s", flush=True)


def fmt(x, digits: int = 1) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def median(values):
    return statistics.median(values) if values else None


def table(out: Path, args) -> str:
    lines = ["# MinAtar: rl-hydra against Stable-Baselines3 (`scripts/benchmarks/minatar_sb3.py`)", "",
             f"{args.steps:,} steps; return: the final greedy evaluation's mean over {args.eval_episodes} "
             f"episodes; every column a median over the seeds found; wall: build + train + final evaluation, "
             f"one torch thread; ratio: median of per-seed ours / SB3 wall.", "",
             "| algo | game | seeds | ours return | SB3 return | ours wall (s) | SB3 wall (s) | ours / SB3 wall "
             "| per seed: ours, SB3 return |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for algo in (label(a, args.quantiles) for a in args.algo):
        for game in args.games:
            paths = {side: {s: result_path(out, side, algo, game, args.steps, s) for s in range(args.seeds)}
                     for side in ("ours", "sb3")}
            rows = {side: {s: json.loads(p.read_text()) for s, p in paths[side].items() if p.exists()}
                    for side in paths}
            ours, sb3 = rows["ours"], rows["sb3"]
            if not ours and not sb3:
                continue
            ratios = [ours[s]["wall_s"] / sb3[s]["wall_s"] for s in ours if s in sb3]
            per_seed = "; ".join(f"{fmt(ours.get(s, {}).get('eval_return'), 2) or '-'}, "
                                 f"{fmt(sb3.get(s, {}).get('eval_return'), 2) or '-'}" for s in range(args.seeds))
            lines.append(f"| {algo} | {game} | {max(len(ours), len(sb3))} "
                         f"| {fmt(median([r['eval_return'] for r in ours.values()]), 2)} "
                         f"| {fmt(median([r['eval_return'] for r in sb3.values()]), 2)} "
                         f"| {fmt(median([r['wall_s'] for r in ours.values()]), 0)} "
                         f"| {fmt(median([r['wall_s'] for r in sb3.values()]), 0)} | {fmt(median(ratios), 2)} "
                         f"| {per_seed} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", nargs="+", default=["Breakout", "SpaceInvaders"],
                        help="MinAtar games: Asterix Breakout Freeway Seaquest SpaceInvaders")
    parser.add_argument("--algo", nargs="+", default=["dqn"], choices=("dqn", "qr_dqn", "iqn", "rainbow"))
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0 .. N-1")
    parser.add_argument("--only-seeds", type=int, nargs="+",
                        help="train only these of the seeds (e.g. the ones another machine has not run); "
                             "the table still shows every seed whose results are found")
    parser.add_argument("--steps", type=int, default=300_000)
    parser.add_argument("--quantiles", type=int, default=HP["quantiles"],
                        help="QR-DQN's quantiles on both sides (200, the paper's and sb3-contrib's default; "
                             "other counts are named e.g. qr_dqn50 in the results)")
    parser.add_argument("--sides", nargs="+", default=["ours", "sb3"], choices=("ours", "sb3"),
                        help="which side(s) to train (IQN and Rainbow have no SB3 side)")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "minatar_sb3")
    parser.add_argument("--learning-starts", type=int, default=HP["warmup"],
                        help="random warm-up steps (MinAtar's 5000; lower only for smoke tests)")
    parser.add_argument("--table-only", action="store_true", help="write the table from the results found")
    add_worker_arguments(parser, WORKERS)
    args = parser.parse_args()
    if serve_worker(args, WORKERS):
        return
    outside = sorted(set(args.only_seeds or []) - set(range(args.seeds)))
    if outside:
        parser.error(f"--only-seeds {' '.join(map(str, outside))}: --seeds {args.seeds} runs seeds 0 to {args.seeds - 1}")
    sideless = [algo for algo in args.algo if not sides_to_train(algo, args.sides)]
    if sideless:
        parser.error(f"--algo {' '.join(sideless)}: no SB3 side to train; add --sides ours")

    if not args.table_only:
        for seed in (s for s in range(args.seeds) if args.only_seeds is None or s in args.only_seeds):
            for game in args.games:
                for algo in args.algo:
                    job = {"algo": algo, "game": game, "seed": seed, "steps": args.steps, "quantiles": args.quantiles,
                           "warmup": args.learning_starts, "eval_episodes": args.eval_episodes}
                    sides = sides_to_train(algo, args.sides)
                    for side in (sides if seed % 2 == 0 else sides[::-1]):
                        run_one(side, job, args.out)
    text = table(args.out, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "minatar_sb3.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
