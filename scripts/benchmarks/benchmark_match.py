"""How scripts/benchmarks/benchmark.py gives our runs and SB3's the same hyperparameters.

Settings are written in SB3's own names (as in rl-baselines3-zoo's hyperparams/*.yml);
`our_overrides` translates them to train.py overrides and `sb3_job` to SB3 keyword
arguments. The one semantic difference, what the target-sync interval counts, is
translated by `target_update_every`.
"""

from __future__ import annotations

import argparse

ENV_ID = "CartPole-v1"
EVAL_SEED_OFFSET = 1_000_000  # rl_hydra.loops.runner: evaluation episodes use seed + 1e6 + i

# rl-baselines3-zoo hyperparams/dqn.yml and qrdqn.yml, CartPole-v1, in SB3's own names
ZOO = {
    "dqn": dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                exploration_final_eps=0.04, net_arch=[256, 256], max_grad_norm=10.0),  # SB3 DQN default
    # the zoo sets no max_grad_norm for QR-DQN: sb3-contrib's default, None, does not clip
    "qr_dqn": dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                   target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                   exploration_final_eps=0.04, net_arch=[256, 256], n_quantiles=10, max_grad_norm=None),
}
PER_STEP = dict(train_freq=1, gradient_steps=1, batch_size=128)
BUDGETS = {"zoo": 50_000, "per_step": 20_000}  # env steps of each regime's runs


class Setting:
    """One algorithm and regime: SB3-named hyperparameters and a step budget."""

    def __init__(self, algo: str, regime: str, total_steps: int, hp: dict):
        self.algo, self.regime, self.total_steps, self.hp = algo, regime, total_steps, hp
        self.name = f"{algo} {regime}"

    @property
    def title(self) -> str:
        hp = self.hp
        return (f"{self.algo}, {self.regime}: {self.total_steps:,} steps, {hp['gradient_steps']} update(s) of "
                f"batch {hp['batch_size']} every {hp['train_freq']} step(s)")


def setting_for(algo: str, regime: str, total_steps: int) -> Setting:
    """`algo`'s zoo hyperparameters, with one update of batch 128 per step in the per_step regime."""
    return Setting(algo, regime, total_steps, {**ZOO[algo], **(PER_STEP if regime == "per_step" else {})})


def target_update_every(hp: dict, exact: bool = True) -> int:
    """SB3 syncs the target every `target_update_interval` *env steps*; ours counts *updates*.

    SB3's parameters only change inside a training phase (`gradient_steps` updates every
    `train_freq` steps) and its sync check runs once per env step, before the phase of that
    step. With train_freq >= interval a sync falls between any two phases, so the target
    used in a phase is the online net at the end of the previous one: ours is a sync every
    `gradient_steps` updates. With train_freq < interval (it must divide it) SB3 syncs every
    interval / train_freq phases, i.e. every that many * gradient_steps updates.

    exact=False also accepts an interval that train_freq does not divide: SB3 then syncs after
    alternately floor and ceil(interval / train_freq) phases, on average every
    interval / train_freq * gradient_steps updates, which is returned when it is a whole number
    (ours syncs at exactly that interval; the nearest one to SB3's).
    """
    interval, train_freq = hp["target_update_interval"], hp["train_freq"]
    if train_freq >= interval:
        return hp["gradient_steps"]
    if interval % train_freq:
        mean = interval * hp["gradient_steps"] / train_freq
        if exact or mean != int(mean):
            raise ValueError(f"target_update_interval={interval} is not a multiple of train_freq={train_freq}")
        return int(mean)
    return interval // train_freq * hp["gradient_steps"]


def expected_updates(hp: dict, total_steps: int) -> int:
    """Updates of our loop: gradient_steps at each multiple of train_freq from learning_starts on."""
    train_freq = hp["train_freq"]
    phases = [s for s in range(train_freq, total_steps + 1, train_freq) if s >= hp["learning_starts"]]
    return len(phases) * hp["gradient_steps"]


def our_overrides(setting: Setting, seed: int, args: argparse.Namespace, compile_update: bool = False) -> list[str]:
    """train.py overrides that give our run exactly SB3's hyperparameters (no preset applies)."""
    hp, steps = setting.hp, setting.total_steps
    overrides = [
        f"algo={setting.algo}", "env=cartpole", "~algo_env", f"seed={seed}", f"device={args.device}",
        "torch_threads=1", f"compile={str(compile_update).lower()}", "env.num_envs=1",
        f"train.total_steps={steps}", f"train.eval_every={steps}", f"train.checkpoint_every={steps}",
        f"train.eval_episodes={args.eval_episodes}", "train.progress=false", "train.stop_at_return=null",
        f"algo.optimizer.lr={hp['learning_rate']}", f"algo.batch_size={hp['batch_size']}",
        f"buffer.capacity={hp['buffer_size']}", f"algo.learning_starts={hp['learning_starts']}",
        f"algo.gamma={hp['gamma']}", f"algo.train_every={hp['train_freq']}",
        f"algo.gradient_steps={hp['gradient_steps']}", f"algo.target_update_every={target_update_every(hp)}",
        "algo.tau=1.0", "algo.double_q=false", "algo.final_lr_fraction=1.0", "algo.exploration.start=1.0",
        f"algo.exploration.end={hp['exploration_final_eps']}",
        f"algo.exploration.fraction={hp['exploration_fraction']}",
        f"algo.max_grad_norm={'null' if hp['max_grad_norm'] is None else hp['max_grad_norm']}",
        f"network.hidden_sizes=[{','.join(map(str, hp['net_arch']))}]", "network.activation=relu",
    ]
    if "n_quantiles" in hp:
        # sb3-contrib's QR-DQN gives Adam eps = 0.01 / batch_size (the QR-DQN paper's value)
        overrides += [f"algo.num_quantiles={hp['n_quantiles']}", "algo.kappa=1.0",
                      f"++algo.optimizer.eps={0.01 / hp['batch_size']}"]
    else:
        overrides += ["algo.loss=huber"]
    return overrides


def sb3_job(setting: Setting, seed: int, args: argparse.Namespace, env_id: str = ENV_ID) -> dict:
    """benchmark_worker's job for SB3's run of `setting` (algo dqn, qr_dqn or sac) on `env_id`."""
    hp = dict(setting.hp)
    policy_kwargs = {"net_arch": hp.pop("net_arch")}
    for key in ("n_quantiles", "log_std_init"):   # the policy's, not the algorithm's
        if key in hp:
            policy_kwargs[key] = hp.pop(key)
    dqn_family = {"tau": 1.0, "exploration_initial_eps": 1.0} if setting.algo in ("dqn", "qr_dqn") else {}
    kwargs = {**hp, **dqn_family, "policy_kwargs": policy_kwargs}
    return {"kind": "sb3", "algo": setting.algo, "env_id": env_id, "kwargs": kwargs, "seed": seed,
            "device": args.device, "total_steps": setting.total_steps, "eval_episodes": args.eval_episodes,
            "eval_seed": seed + EVAL_SEED_OFFSET}


def preset_overrides(seed: int, args: argparse.Namespace) -> list[str]:
    """Our default DQN CartPole preset, as a user runs it (eval every 2,500 steps, stop at 500)."""
    budget = [f"train.total_steps={args.solve_steps}"] if args.solve_steps else []
    return ["algo=dqn", "env=cartpole", f"seed={seed}", f"device={args.device}", "torch_threads=1",
            "train.progress=false", *budget]


def redq_overrides(args: argparse.Namespace, device: str, compile_update: bool) -> list[str]:
    """conf/algo/redq.yaml and network/redq.yaml as they are (G = 20), without the Pendulum preset."""
    steps = args.redq_steps
    return ["algo=redq", "env=pendulum", "~algo_env", f"seed={args.seed}", f"device={device}", "torch_threads=1",
            f"compile={str(compile_update).lower()}", f"train.total_steps={steps}", f"train.eval_every={steps}",
            f"train.checkpoint_every={steps}", f"train.eval_episodes={args.eval_episodes}",
            "train.progress=false", f"algo.learning_starts={args.redq_learning_starts}"]
