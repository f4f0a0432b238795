"""MinAtar's DQN settings (Young & Tian 2019, with Adam) on our side and on SB3's, for benchmark.py's
`minatar` set: batch 32, replay 100k, one update per env step, target sync every 1,000 updates,
epsilon 1 -> 0.1 over the first 100k steps, 5k random warm-up steps, lr 1e-4, gamma 0.99, Huber
loss, on MinAtar's network (16 3x3 filters, 128 units). Gradient norm clipped at 10 for DQN (SB3's
default), not for QR-DQN, IQN and Rainbow; Adam eps 1e-8 for DQN, 0.01 / batch for the others (the
papers' and sb3-contrib's). The presets `conf/algo_env/<algo>_minatar.yaml` hold the same values
(tests/envs/test_env_groups.py). IQN and Rainbow have no SB3 counterpart.
"""

from __future__ import annotations

HP = {
    "batch": 32,
    "buffer": 100_000,
    "target_sync": 1000,
    "warmup": 5000,
    "eps_start": 1.0,
    "eps_end": 0.1,
    "eps_steps": 100_000,
    "lr": 1e-4,
    "gamma": 0.99,
    "hidden": 128,
    "quantiles": 200,
}
SB3_ALGOS = ("dqn", "qr_dqn")


def exploration_fraction(steps: int) -> float:
    return min(1.0, HP["eps_steps"] / steps)


def grad_norm(algo: str) -> float | None:
    return 10.0 if algo == "dqn" else None


def adam_eps(algo: str) -> float:
    return 1e-8 if algo == "dqn" else 0.01 / HP["batch"]


def our_overrides(job: dict) -> list[str]:
    """job: algo, game, steps, warmup, quantiles, eval_episodes, seed."""
    algo, steps = job["algo"], job["steps"]
    network = ["network.head_hidden_sizes=[]"] if algo == "iqn" else []  # 128 features x phi -> output
    return [
        f"algo={algo}",
        "env=minatar",
        f"env.id=MinAtar/{job['game']}-v1",
        "network.encoder=minatar_cnn",
        f"network.hidden_sizes=[{HP['hidden']}]",
        *network,
        f"algo.optimizer.lr={HP['lr']}",
        f"++algo.optimizer.eps={adam_eps(algo)}",
        f"algo.gamma={HP['gamma']}",
        f"algo.batch_size={HP['batch']}",
        "algo.train_every=1",
        "algo.gradient_steps=1",
        f"algo.target_update_every={HP['target_sync']}",
        f"algo.learning_starts={job['warmup']}",
        f"algo.exploration.start={HP['eps_start']}",
        f"algo.exploration.end={HP['eps_end']}",
        f"algo.exploration.fraction={exploration_fraction(steps)}",
        "algo.final_lr_fraction=1.0",
        f"algo.max_grad_norm={'null' if grad_norm(algo) is None else grad_norm(algo)}",
        *([f"algo.num_quantiles={job['quantiles']}"] if algo == "qr_dqn" else []),
        f"buffer.capacity={HP['buffer']}",
        f"train.total_steps={steps}",
        f"train.eval_every={steps}",
        f"train.eval_episodes={job['eval_episodes']}",
        f"train.checkpoint_every={steps}",
        "train.progress=false",
        "logger=[]",
        "checkpoint.save_buffer=false",
        f"seed={job['seed']}",
        "device=cpu",
        "torch_threads=1",
    ]


def peer_spec(job: dict) -> dict | None:
    """SB3's DQN or sb3-contrib's QR-DQN on our env=minatar env, with MinAtar's network; None for the others."""
    algo = job["algo"]
    if algo not in SB3_ALGOS:
        return None
    policy_kwargs = {
        "net_arch": [HP["hidden"]],
        "optimizer_kwargs": {"eps": adam_eps(algo)},
        **({"n_quantiles": job["quantiles"]} if algo == "qr_dqn" else {}),
    }
    kwargs = dict(
        learning_rate=HP["lr"],
        buffer_size=HP["buffer"],
        learning_starts=job["warmup"],
        batch_size=HP["batch"],
        tau=1.0,
        gamma=HP["gamma"],
        train_freq=1,
        gradient_steps=1,
        target_update_interval=HP["target_sync"],
        exploration_fraction=exploration_fraction(job["steps"]),
        exploration_initial_eps=HP["eps_start"],
        exploration_final_eps=HP["eps_end"],
        max_grad_norm=grad_norm(algo),
    )
    return {
        "algo": algo,
        "policy": "MlpPolicy",
        "extractor": "minatar_cnn",
        "kwargs": kwargs,
        "policy_kwargs": policy_kwargs,
        "steps": job["steps"],
        "env": {"ours": ["env=minatar", f"env.id=MinAtar/{job['game']}-v1"]},
    }
