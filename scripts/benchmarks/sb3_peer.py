"""The peer side of scripts/benchmarks/benchmark.py: one Stable-Baselines3 / sb3-contrib run, or one
SBX run (SB3's port to JAX), from a spec.

    {"algo": "dqn" | "qr_dqn" | "sac" | "crossq" | "tqc" | "td3" | "droq", "policy": "MlpPolicy" | "CnnPolicy",
     "lib": "sb3" (default) | "sbx" (SBX's DQN, SAC, TD3, TQC, CrossQ; droq: its SAC with dropout_rate and layer_norm),
     "kwargs": {...},
     "policy_kwargs": {...}, "extractor": "minatar_cnn" (optional), "steps": N, "window": [start, end] (optional),
     "action_noise": {"kind": "normal" | "ornstein-uhlenbeck", "std": s} (optional: the Zoo's noise_type, noise_std),
     "curve": {"every": K, "episodes": n} (optional: our run's train.eval_every and train.eval_episodes),
     "env": {"gym": id} | {"ours": [env overrides]} | {"atari": id, "num_envs": N, "subprocesses": bool}}

`run(spec, seed, eval_episodes, device)` builds, learns and evaluates greedily on `eval_episodes`
envs, env i seeded seed + 1,000,000 + i as our first evaluation round seeds them. Wall time is all
three; `window` asks for the steps/s between those two env steps as well. With `curve` it evaluates
as our loop does instead: every K env steps and at the end, n episodes a round, round r on seeds
seed + 1,000,000 + r * n + i; the curve is the rounds' mean returns, the last the final evaluation.
An SBX run also reports `compile_s`: the seconds JAX spent tracing, lowering and compiling (its
compile events), which its wall time includes.
"""

from __future__ import annotations

import statistics
import time


def lr_schedule(value):
    """The Zoo's `lin_<lr>`: from lr at the start to 0 at the end (of SB3's progress_remaining)."""
    if isinstance(value, str):
        initial = float(value.removeprefix("lin_"))
        return lambda progress_remaining: progress_remaining * initial
    return value


def keywords(spec: dict) -> dict:
    """The class's keyword arguments: the spec's, the Zoo's lin_<lr> made a schedule. A learning rate the
    spec leaves out is the class's own default (CrossQ's 1e-3, TQC's 3e-4, ...), which zoo.SB3_DEFAULTS
    and zoo.SBX_DEFAULTS hold and our config is checked against."""
    kwargs = dict(spec["kwargs"])
    if "learning_rate" in kwargs:
        kwargs["learning_rate"] = lr_schedule(kwargs["learning_rate"])
    return kwargs


def env_maker(env: dict, seed: int):
    """A function making one gymnasium env: by id; our env group's own (id, kwargs and wrappers of
    the composed config); or SB3's Atari preprocessing set as ours is (a vector env, then)."""
    import gymnasium as gym

    if "gym" in env:
        return lambda: gym.make(env["gym"])
    if "ours" in env:
        from hydra.utils import instantiate

        from rl_hydra.commands.api import compose_train_config

        cfg = compose_train_config(*env["ours"]).env
        if cfg.id.startswith("MinAtar/"):
            import minatar.gym

            minatar.gym.register_envs()

        def make():
            made = gym.make(cfg.id, **cfg.get("kwargs", {}))
            for wrapper in cfg.get("wrappers") or []:
                made = instantiate(wrapper)(made)
            return made

        return make
    import ale_py
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack, VecTransposeImage

    gym.register_envs(ale_py)
    # ALE emits every frame (the wrapper skips 4); sticky actions and the episode limit as ours
    atari = make_atari_env(
        env["atari"],
        n_envs=env.get("num_envs", 1),
        seed=seed,
        vec_env_cls=SubprocVecEnv if env.get("subprocesses") else DummyVecEnv,
        # forked before CUDA starts, so the workers know ALE's ids
        vec_env_kwargs={"start_method": "fork"} if env.get("subprocesses") else None,
        env_kwargs={
            "frameskip": 1,
            "repeat_action_probability": 0.25,
            "full_action_space": False,
            "max_num_frames_per_episode": 108000,
        },
        wrapper_kwargs={
            "noop_max": 30,
            "frame_skip": 4,
            "screen_size": 84,
            "terminal_on_life_loss": False,
            "clip_reward": True,
        },
    )
    return VecTransposeImage(VecFrameStack(atari, n_stack=4))


def minatar_cnn():
    """MinAtar's convolution (16 3x3 filters, stride 1, no padding, ReLU) as SB3's features extractor:
    (B, C, 10, 10) -> (B, 1024); SB3's own q-network MLP adds the 128 units and the output."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarConv(BaseFeaturesExtractor):
        def __init__(self, observation_space):
            super().__init__(observation_space, features_dim=16 * 8 * 8)
            self.conv = nn.Sequential(nn.Conv2d(observation_space.shape[0], 16, 3, stride=1), nn.ReLU(), nn.Flatten())

        def forward(self, obs):
            return self.conv(obs.float())

    return MinAtarConv


def action_noise(noise: dict, action_dim: int):
    """The Zoo's noise_type and noise_std as SB3's action noise object (std per action dimension)."""
    import numpy as np
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    kind = {"normal": NormalActionNoise, "ornstein-uhlenbeck": OrnsteinUhlenbeckActionNoise}[noise["kind"]]
    return kind(mean=np.zeros(action_dim), sigma=noise["std"] * np.ones(action_dim))


COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


def classes(lib: str) -> dict:
    """The peer's class for each algo name: SB3 / sb3-contrib's, or SBX's (DroQ is its SAC)."""
    if lib == "sbx":
        from sbx import DQN, SAC, TD3, TQC, CrossQ

        return {"dqn": DQN, "sac": SAC, "droq": SAC, "td3": TD3, "tqc": TQC, "crossq": CrossQ}
    from sb3_contrib import QRDQN, TQC, CrossQ
    from stable_baselines3 import DQN, SAC, TD3

    return {"dqn": DQN, "qr_dqn": QRDQN, "sac": SAC, "crossq": CrossQ, "tqc": TQC, "td3": TD3}


def compile_timer() -> dict:
    """{"s": seconds}: JAX's compile events summed from now on."""
    import jax

    total = {"s": 0.0}

    def listen(event: str, duration: float, **_) -> None:
        if event in COMPILE_EVENTS:
            total["s"] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    return total


def run(spec: dict, seed: int, eval_episodes: int, device: str, eval_seed: int) -> dict:
    """One run of the peer; its evaluations start from `eval_seed`, our run's evaluation stream
    (rl_hydra/runs/rng.py), so that both sides evaluate from the same initial states."""
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    marks: dict[int, float] = {}
    window = spec.get("window") or []
    curve = spec.get("curve")
    curve_steps: list[int] = []
    curve_returns: list[float] = []

    def evaluate(env, env_seed: int) -> list[float]:
        env.seed(env_seed)  # env i starts from env_seed + i
        returns, _ = evaluate_policy(
            model, env, n_eval_episodes=env.num_envs, deterministic=True, return_episode_rewards=True
        )
        return [float(r) for r in returns]

    class Marks(BaseCallback):
        # _on_step runs after each vector step, before that step's training phase: the vector
        # step before it is the one our loop has finished when it logs that step
        def _on_step(self) -> bool:
            finished = self.num_timesteps - self.training_env.num_envs
            if finished in window:
                marks[finished] = time.perf_counter()
            if curve and self.num_timesteps % curve["every"] == 0 and self.num_timesteps < spec["steps"]:
                rounds = len(curve_steps)
                returns = evaluate(curve_env, eval_seed + rounds * curve["episodes"])
                curve_steps.append(self.num_timesteps)
                curve_returns.append(statistics.mean(returns))
            return True

    lib = spec.get("lib", "sb3")
    compiled = compile_timer() if lib == "sbx" else None
    algo_class = classes(lib)[spec["algo"]]
    make = env_maker(spec["env"], seed)
    if curve:
        curve_env = DummyVecEnv([lambda: Monitor(make())] * curve["episodes"])
    policy_kwargs = dict(spec.get("policy_kwargs") or {})
    if spec.get("extractor") == "minatar_cnn":
        policy_kwargs["features_extractor_class"] = minatar_cnn()
    kwargs = keywords(spec)
    start = time.perf_counter()
    env = make if "atari" in spec["env"] else DummyVecEnv([lambda: Monitor(make())])
    if spec.get("action_noise"):
        kwargs["action_noise"] = action_noise(spec["action_noise"], env.action_space.shape[0])
    model = algo_class(spec["policy"], env, seed=seed, device=device, verbose=0, policy_kwargs=policy_kwargs, **kwargs)
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's own leaves an empty /tmp/SB3-<time> a run
    learn_start = time.perf_counter()
    model.learn(total_timesteps=spec["steps"], callback=Marks())
    learn_s = time.perf_counter() - learn_start
    result = {"learn_s": learn_s, "steps": model.num_timesteps, "updates": model._n_updates}
    if window:
        result["window_sps"] = (window[1] - window[0]) / (marks[window[1]] - marks[window[0]])
    if "atari" not in spec["env"]:
        if curve:  # the final evaluation is the next round, as in our loop
            returns = evaluate(curve_env, eval_seed + len(curve_steps) * curve["episodes"])
        else:
            returns = evaluate(DummyVecEnv([lambda: Monitor(make())] * eval_episodes), eval_seed)
        result.update(eval_return=statistics.mean(returns), eval_returns=returns)
        if curve:
            result["curve"] = {
                "steps": [*curve_steps, model.num_timesteps],
                "returns": [*curve_returns, result["eval_return"]],
            }
    result["wall_s"] = time.perf_counter() - start
    if compiled is not None:
        result["compile_s"] = compiled["s"]
    return result
