"""Shared helpers: compose the real configs and run tiny trainings in-process."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = ROOT / "conf"

# tiny budgets that keep every in-process run to a few seconds
TINY = [
    "train.total_steps=300",
    "train.eval_every=150",
    "train.eval_episodes=2",
    "train.checkpoint_every=150",
    "train.log_every=50",
    "train.progress=false",
    "device=cpu",
]


def compose_config(*overrides: str) -> DictConfig:
    """The config `python train.py <overrides>` would run, without Hydra's run-dir keys (a value of
    the wrong type for its schema: one ConfigError line, as on the command line)."""
    from hydra.errors import HydraException

    from rl_hydra.errors import ConfigError
    from rl_hydra.schema import type_refusal

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        try:
            return compose(config_name="train", overrides=list(overrides))
        except HydraException as error:
            refused = type_refusal(error.__cause__)
            if refused is None:
                raise
            raise ConfigError(refused) from None


def buffer_keys(option: str, **overrides) -> dict:
    """The keys conf/buffer/<option>.yaml gives its class, but capacity and device (a test gives its
    own size; the run hands the buffer its resolved device), with `overrides`: the buffers' keys have
    no Python defaults either."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(compose_config(f"buffer={option}").buffer, resolve=True)
    for key in ("_target_", "capacity", "device"):
        node.pop(key, None)
    return {**node, **overrides}


def from_the_run(returns: bool = True, **overrides) -> dict:
    """What a run hands a buffer besides its own keys (buffer_keys), as a test builds one by hand: one env,
    the CPU, seed 0 and, for a transition buffer (`returns`), one-step returns at gamma 0.99; with `overrides`."""
    given = {"num_envs": 1, "device": "cpu", "seed": 0} | ({"n_step": 1, "gamma": 0.99} if returns else {})
    return {**given, **overrides}


def algo_keys(option: str, **overrides) -> dict:
    """The keys conf/algo/<option>.yaml gives its class (no preset; not its optimizer, and not
    n_step and gamma, which a feed-forward agent never gets) and what a run hands it (the CPU, seed 0), with
    `overrides`: what a test that builds an agent by hand passes, since the algorithms' keys have no Python
    defaults."""
    return {"device": "cpu", "seed": 0, **_algo_keys(option), **overrides}


@functools.cache
def _algo_keys(option: str) -> dict:
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(compose_config(f"algo={option}", "~algo_env").algo, resolve=True)
    recurrent = get_class(node.pop("_target_")).capabilities.recurrent
    for key in ("optimizer", *(() if recurrent else ("n_step", "gamma"))):
        node.pop(key, None)
    return node


def network_keys(option: str, **overrides) -> dict:
    """The keys conf/network/<option>.yaml gives its class (`redq.actor`, `redq.critic`: one part of
    an actor-critic file), without `_target_` and `_partial_`, with `overrides`: what a test that
    builds a network by hand passes, since the networks' keys have no Python defaults."""
    import copy

    return {**copy.deepcopy(_network_keys(option)), **overrides}


@functools.cache
def _network_keys(option: str) -> dict:
    from omegaconf import OmegaConf

    name, _, part = option.partition(".")
    node = OmegaConf.to_container(compose_config(f"network={name}", "~algo_env").network, resolve=True)
    node = node[part] if part else node
    for key in ("_target_", "_partial_"):
        node.pop(key, None)
    return node


def env_overrides(group: str) -> list[str]:
    """`env=<group>`, with an id for env=gym (whose env.id is required)."""
    return [f"env={group}", *(["env.id=MountainCar-v0"] if group == "gym" else [])]


def batch_of(space, n: int, seed: int | None = 0):
    """n observations of `space` as the vector env gives them: an array, or a dict of arrays (the
    space seeded with `seed` first; None draws on from where it is)."""
    if seed is not None:
        space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    if isinstance(samples[0], dict):
        return {key: np.stack([np.asarray(s[key]) for s in samples]) for key in samples[0]}
    return np.stack([np.asarray(s) for s in samples])


def skip_without_env_extra(*overrides: str) -> None:
    """Skip the test unless the install extra of the composed env group (`env.extra`: box2d,
    mujoco, atari, minatar) is installed; the reason is the one line a run would print."""
    from rl_hydra.envs.make import check_extra
    from rl_hydra.errors import ConfigError

    try:
        check_extra(compose_config(*overrides).env)
    except ConfigError as error:
        pytest.skip(str(error))


def run_training(run_dir: Path, *overrides: str) -> dict:
    """Train in-process through rl_hydra.training.run, the code path train.py takes."""
    from rl_hydra.config import validate_run_config
    from rl_hydra.training import run

    cfg = compose_config(*overrides)
    validate_run_config(cfg)  # as the launch does, once
    return run(cfg, run_dir)


def play_at_random(env, buffer, steps: int, seed: int | None = None) -> None:
    """`steps` vector steps of random actions in `env`, each transition added to `buffer`."""
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        actions = env.action_space.sample()
        next_obs, rewards, terminated, truncated, _ = env.step(actions)
        buffer.add(obs, actions, rewards, next_obs, terminated, truncated)
        obs = next_obs


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    """metrics.csv without its wall-clock columns (time/*): what a same-seed run reproduces exactly."""
    import csv

    with open(run_dir / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]


def stop_at(monkeypatch, step: int) -> None:
    """The run gets a stop request during the vector step that reaches `step`, as after SIGTERM:
    it stops there, before what falls due at that step (the resumed run does that first)."""
    from rl_hydra.loops.runner import Runner

    record_step = Runner.record_step

    def stop_once_reached(self):
        if self.global_step + self.local.env.num_envs >= step:
            self.stop_requested = True
        record_step(self)

    monkeypatch.setattr(Runner, "record_step", stop_once_reached)


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 300, script: str = "train.py", env: dict | None = None):
    """`python <script> args...` in a subprocess; `env`: variables added (a PYTHONPATH is put first)."""
    added = dict(env or {})
    if "PYTHONPATH" in added:
        added["PYTHONPATH"] = os.pathsep.join(p for p in (added["PYTHONPATH"], os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", **added}
    return subprocess.run(
        [sys.executable, str(ROOT / script), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(autouse=True)
def root_logger_as_it_was():
    """Hydra's job logging, run in-process (an @hydra.main app, a sweeper's battery), leaves its
    handlers on the root logger, bound to that test's captured stdout: every test gets the root
    logger back as it found it, so a later test does not log to a closed stream."""
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


MUJOCO_LOG = "MUJOCO_LOG.TXT"  # where MuJoCo writes its warnings: the working directory, unless told


@pytest.fixture(autouse=True, scope="session")
def mujoco_log_in_a_temporary_folder(tmp_path_factory):
    """MuJoCo 4 warns about gymnasium's HalfCheetah model (a deprecated attribute) in MUJOCO_LOG.TXT in
    the working directory: the tests' MuJoCo writes it to a temporary folder instead, and the session
    fails at its end if the repository root got one (a test's subprocess writes where it runs)."""
    import importlib.util

    def stamp():
        path = ROOT / MUJOCO_LOG
        return path.stat().st_mtime_ns if path.exists() else None

    before = stamp()
    config = None
    if importlib.util.find_spec("mujoco") is not None:
        import mujoco

        config = mujoco.MjLogConfig.get()
        logfile = config.logfile
        config.logfile = str(tmp_path_factory.mktemp("mujoco") / MUJOCO_LOG)
        config.set()
    yield
    if config is not None:
        config.logfile = logfile
        config.set()
    assert stamp() == before, f"a test wrote {ROOT / MUJOCO_LOG}: MuJoCo writes it to the working directory"


@pytest.fixture
def compose_cfg():
    return compose_config


# a tiny DQN run that makes a few updates: trained once per test module, copied for each test to alter
QUICK = [*TINY, "algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from rl_hydra import train

    path = tmp_path_factory.mktemp("runs") / "dqn"
    train(*QUICK, run_dir=path)
    return path


@pytest.fixture
def run_dir(trained, tmp_path):
    import shutil

    return shutil.copytree(trained, tmp_path / "run")
