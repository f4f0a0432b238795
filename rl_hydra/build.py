"""Build a run from a composed config: `build_runner` puts its parts (the agent, where its experience
comes from, the settings its loop is told) into the one Runner, for every way a run starts (a launch, a
resume, verify's prefix, a distributed learner); and the process-wide settings a run holds while it
trains. Below both rl_hydra/training.py (one process) and rl_hydra/distributed/ (Ray actors and the
learner), so that imports only run downward."""

from __future__ import annotations

import contextlib
import functools
import inspect
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from rl_hydra import speed
from rl_hydra.algos.common import compile_pure_methods
from rl_hydra.buffers.device import build_on_device
from rl_hydra.config import run_updates
from rl_hydra.envs import make_env
from rl_hydra.errors import ClassMismatch, ConfigError
from rl_hydra.fit import algo_options, check_fit, import_class
from rl_hydra.loops.experience import Experience, LocalExperience
from rl_hydra.loops.runner import Runner
from rl_hydra.loops.settings import RunSettings
from rl_hydra.protocols import Agent, Capabilities
from rl_hydra.runs.rng import spawn_seeds
from rl_hydra.runs.run_dir import RunDirectory

# {"observation_space": ..., "action_space": ...}: what an agent and a buffer are built for
Spaces = dict[str, gym.Space]


def build(node: DictConfig, key: str, **kwargs: Any) -> Any:
    """`instantiate` with its errors turned into one ConfigError line naming the group."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as error:
        cause = error.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        detail = str(cause) if cause is not None else str(error).splitlines()[-1]
        raise ClassMismatch(f"cannot build {key} ({node.get('_target_')}): {detail}") from error


@dataclass(frozen=True)
class ProcessSettings:
    """The keys a run's process-wide settings come from (`torch_threads`, `flush_denormal`, `fast_paths`,
    `seed`): all that a Ray actor's process is told of them."""

    seed: int
    torch_threads: int
    flush_denormal: bool = True
    fast_paths: bool = True

    @classmethod
    def of(cls, cfg: DictConfig) -> ProcessSettings:
        return cls(
            seed=int(cfg.seed),
            torch_threads=int(cfg.torch_threads),
            flush_denormal=bool(cfg.flush_denormal),
            fast_paths=bool(cfg.fast_paths),
        )


class Holding:
    """How many process_settings are entered now (0 or 1: a nested one holds nothing)."""

    depth = 0


@contextlib.contextmanager
def process_settings(cfg: DictConfig | ProcessSettings) -> Iterator[None]:
    """A run's process-wide settings, undone when it ends, also on error: its torch CPU threads,
    whether denormal numbers are flushed to zero, and the seeds of Python's, numpy's and torch's
    global generators; and whether the speed layer's fast paths run (rl_hydra/speed).

    Entered inside another (a pack's members inside the pack's: rl_hydra/pack), it only seeds the
    generators, for the member's build: the outer one holds the settings, and puts them back.

    Flushing: Adam's moving averages of weights whose gradient is (nearly) always zero, e.g.
    behind dead ReLUs, decay into the denormal range, and every update then pays for the slow
    arithmetic on them (docs/benchmark.md)."""
    settings = cfg if isinstance(cfg, ProcessSettings) else ProcessSettings.of(cfg)
    if Holding.depth:  # a pack's member, inside the pack's own: it shares the settings and is seeded alone
        seed_everything(settings.seed)
        yield
        return
    threads, flushing = torch.get_num_threads(), flushes_denormals()
    rng = (
        random.getstate(),
        np.random.get_state(),
        torch.get_rng_state(),
        torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None,
    )
    Holding.depth += 1
    try:
        with speed.enabled(settings.fast_paths):
            speed.log_fallbacks()
            torch.set_num_threads(settings.torch_threads)
            torch.set_flush_denormal(settings.flush_denormal)
            seed_everything(settings.seed)
            yield
    finally:
        Holding.depth -= 1
        torch.set_num_threads(threads)
        torch.set_flush_denormal(flushing)
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        if rng[3] is not None:
            torch.cuda.set_rng_state_all(rng[3])


def flushes_denormals() -> bool:
    """Whether CPU float math flushes denormals now (torch has a setter, no getter)."""
    return float(torch.tensor(1e-39, dtype=torch.float32) * 1.0) == 0.0


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's global generators, from the run's own stream for them
    (runs/rng.py): the networks' initial weights draw from torch's."""
    global_seed = spawn_seeds(seed).torch
    random.seed(global_seed)
    np.random.seed(global_seed)
    torch.manual_seed(global_seed)


def layer_weights(node: Any) -> tuple[int, str]:
    """(how many weights the widths in a network node make at least, the key with the most): for
    each list of widths (hidden_sizes, head_sizes, an actor's and critics' below), the products of
    consecutive widths, and a recurrent core's hidden-to-hidden matrix (lstm_size squared). A lower
    bound of the network's size, read without building it (the input and output layers left out)."""
    total, largest, where = 0, 0, ""
    stack: list[tuple[str, Any]] = [("network", node)]
    while stack:
        name, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{name}.{key}", item) for key, item in value.items())
            continue
        widths = value if isinstance(value, list) else [value, value] if name.endswith(".lstm_size") else []
        if not all(type(width) is int for width in widths):
            continue
        weights = sum(a * b for a, b in zip(widths, widths[1:]))
        total += weights
        largest, where = (weights, name) if weights > largest else (largest, where)
    return total, where


def check_widths_fit(cfg: DictConfig, agent_state: dict[str, Any], path: Any) -> None:
    """One RunError line unless the checkpoint's agent state holds at least the weights the config's
    widths make: a record whose config names wider layers than the network that saved it would
    build gigabytes (50 million units: 5.7 GB) before its shapes are compared with the checkpoint."""
    from rl_hydra.runs.checkpoint import tensors_once
    from rl_hydra.runs.errors import RunError

    needed, where = layer_weights(plain(cfg.network))
    held = sum(tensor.numel() for tensor in tensors_once(agent_state, path))
    if needed > held:
        raise RunError(
            f"checkpoint {path} holds {held:,} numbers in its agent's state, fewer than the {needed:,} weights "
            f"the config's widths make ({where}={shown_value(OmegaConf.select(cfg, where))}): the config is not "
            f"the one that saved it"
        )


def shown_value(value: Any) -> Any:
    return OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value


def pack_updates(fast_paths: bool, min_members: int | None = None) -> Callable[[Any], list[Any]]:
    """How a pack (rl_hydra/loops/pack.py) answers a round of its members' updates: with the fast paths
    on, one batched update where the members allow it (loops/pack_updates.py), the speed layer's stand-ins
    in place for its length as for an update alone; else each member's own update, one after another."""
    from rl_hydra.loops.pack import each_alone
    from rl_hydra.loops.pack_updates import PackedUpdates

    return speed.with_stand_ins(PackedUpdates(each_alone, min_members)) if fast_paths else each_alone


def build_agent(cfg: DictConfig, observation_space, action_space, device: torch.device) -> Agent:
    return AgentRecipe.of(cfg).build(observation_space, action_space, device)


@dataclass(frozen=True)
class AgentRecipe:
    """What an agent is built from, resolved to plain data: its algo node (as `agent_node` trims it),
    its network node, the run's budget and seed. A Ray actor gets this, not the run's config."""

    algo: dict
    network: dict
    total_steps: int
    seed: int

    @classmethod
    def of(cls, cfg: DictConfig) -> AgentRecipe:
        return cls(
            algo=plain(agent_node(cfg)), network=plain(cfg.network), total_steps=cfg.train.total_steps, seed=cfg.seed
        )

    def build(self, observation_space, action_space, device: torch.device) -> Agent:
        algo = OmegaConf.create(self.algo)
        speed.lean_adam_nodes(algo)  # torch's Adam built with the speed layer's lean step where it is on
        # the run's budget goes to an agent with a schedule over it (DQN's exploration and learning rate)
        budget = (
            {"total_steps": self.total_steps}
            if takes(import_class(algo._target_, "algo._target_"), "total_steps")
            else {}
        )
        agent = build(
            algo,
            "algo",
            observation_space=observation_space,
            action_space=action_space,
            network=build(OmegaConf.create(self.network), "network"),
            device=device,
            seed=spawn_seeds(self.seed).agent,
            **budget,
        )
        speed.attach(agent)  # the fast paths that stand in for parts of it (rl_hydra/speed)
        return agent


def takes(cls: type, keyword: str) -> bool:
    """Whether `cls(...)` takes `keyword`: its constructor names it, or hands **kwargs on to a base's that does."""
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters
        if keyword in parameters:
            return True
        if not any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters.values()):
            return False
    return False


def plain(node: DictConfig) -> dict:
    """A config node resolved to plain data (it travels to another process, or stands alone)."""
    value = OmegaConf.to_container(node, resolve=True)
    assert isinstance(value, dict)
    return value


RETURN_KEYS = ("n_step", "gamma")  # what discounted n-step returns are built from: one home per run


def agent_node(cfg: DictConfig) -> DictConfig:
    """cfg.algo as the agent is built from it: without `n_step` and `gamma` for a feed-forward agent,
    whose transition buffer builds the discounted returns (it gets both; the agent bootstraps with
    each batch's `discounts`). A recurrent agent gets them: it sums the returns over its sequences."""
    returns = [key for key in RETURN_KEYS if key in cfg.algo]
    if not returns or import_class(cfg.algo._target_, "algo._target_").capabilities.recurrent:
        return cfg.algo
    trimmed = cfg.copy()  # the whole config: interpolations in the algo node still resolve
    with open_dict(trimmed.algo):
        for key in returns:
            del trimmed.algo[key]
    return trimmed.algo


def build_runner(
    cfg: DictConfig,
    run_dir: str | Path | RunDirectory,
    device: torch.device,
    stop_after: int | None = None,
    remote: Callable[[Agent, Spaces], Experience] | None = None,
) -> Runner:
    """The run `cfg` describes, ready to train into `run_dir` (its config validated: rl_hydra/config.py).
    Its experience is this process's env and buffer, or what `remote(agent, spaces)` gives (a
    distributed learner's actors and replay). `stop_after`: the Runner ends there (verify's prefix)."""
    if remote is None:
        agent, env, buffer = build_components(cfg, device)
        experience: Experience = LocalExperience(env, buffer)
    else:
        env = make_env(cfg.env, seed=spawn_seeds(cfg.seed).env)
        agent, spaces, _ = fitted_agent(cfg, env, device)
        env.close()  # it told the spaces; the actors make their own
        experience = remote(agent, spaces)
    return Runner(run_settings(cfg, agent), agent, experience, run_dir, stop_after)


def build_components(cfg: DictConfig, device: torch.device) -> tuple[Agent, Any, Any]:
    """(agent, env, buffer) of a run in this process: what its Runner is given, for a caller that
    drives them itself (a benchmark, a test)."""
    env = lean_env(cfg.env, seed=spawn_seeds(cfg.seed).env)
    agent, spaces, capabilities = fitted_agent(cfg, env, device)
    return agent, env, build_buffer(cfg, spaces, env.num_envs, device, capabilities)


def lean_env(env_cfg: DictConfig, **options: Any) -> Any:
    """make_env's vector env, with the speed layer's step where it has one (rl_hydra/speed)."""
    return speed.lean_envs(make_env(env_cfg, **options))


def fitted_agent(cfg: DictConfig, env: Any, device: torch.device) -> tuple[Agent, Spaces, Capabilities]:
    """The agent for `env`'s spaces, once the config's groups are known to fit them (rl_hydra/fit.py),
    compiled with `compile=true`; the spaces, and its capabilities."""
    spaces: Spaces = {"observation_space": env.single_observation_space, "action_space": env.single_action_space}
    capabilities = check_fit(cfg, env.single_action_space, lambda group: cfg_choice(cfg, group))
    agent = build_agent(cfg, **spaces, device=device)
    if cfg.compile:
        compile_agent(agent)
    return agent, spaces, capabilities


def build_buffer(cfg: DictConfig, spaces: Spaces, num_envs: int, device: torch.device, capabilities: Capabilities):
    """The replay buffer, for `num_envs` envs. A transition buffer builds the discounted n-step returns;
    a recurrent agent sums them over its sequences."""
    seed = spawn_seeds(cfg.seed).buffer
    returns = {} if capabilities.recurrent else {"n_step": cfg.algo.n_step, "gamma": cfg.algo.gamma}
    if cfg.buffer.get("beta_steps") == "auto":  # prioritized replay anneals beta over the run's updates
        returns["beta_steps"] = run_updates(
            cfg.train.total_steps, cfg.algo.learning_starts, cfg.algo.train_every, cfg.algo.gradient_steps
        )
    buffer = build_on_device(
        lambda storage: build(
            cfg.buffer,
            "buffer",
            **spaces,
            num_envs=num_envs,
            device=storage,
            seed=seed,
            **returns,
        ),
        cfg.buffer.device,
        device,
    )
    speed.attach_buffer(buffer)  # its CPU storage in huge pages where the speed layer can
    return buffer


def cfg_choice(cfg: DictConfig, group: str) -> str:
    """The group's option name as chosen (`prioritized`), else (a config composed outside Hydra's
    app) the algorithm's `name`, or the class name of the group's _target_."""
    if HydraConfig.initialized():
        choice = HydraConfig.get().runtime.choices.get(group)
        if choice:
            return str(choice)
    target = OmegaConf.select(cfg, f"{group}._target_")
    if target is None:
        return f"<{group}>"
    with contextlib.suppress(Exception):
        if group == "algo":
            agent_class: Any = get_class(target)
            return str(agent_class.name)  # an agent class's ClassVar, if it has one
    return str(target).rsplit(".", 1)[-1]


def run_settings(cfg: DictConfig, agent: Agent) -> RunSettings:
    """What the loop is told of the run (the config stops here): its schedule, evaluation and loggers."""
    make_eval_env = functools.partial(lean_env, cfg.env, say_time_limit=False)  # the training env's build said it
    return RunSettings.from_config(cfg, make_eval_env=make_eval_env, algo_name=agent.name)


def compiles(agent_or_class) -> bool:
    """Whether `compile=true` applies: the agent declares pure `compiled_methods` and is not
    recurrent (torch.compile would leave the LSTM of a recurrent loss eager)."""
    return bool(getattr(agent_or_class, "compiled_methods", ())) and not agent_or_class.capabilities.recurrent


def compile_agent(agent: Agent) -> None:
    """`compile=true`: torch.compile the agent's pure loss functions (see compile_pure_methods)."""
    if not compiles(agent):
        raise ClassMismatch(
            f"compile=true is not supported by algo={agent.name}; it works with algo={', '.join(algos_that_compile())}"
        )
    compile_pure_methods(agent)


def algos_that_compile() -> list[str]:
    """The algo options (conf/algo/*.yaml) whose agent class compiles."""
    return [name for name, agent_class in algo_options().items() if compiles(agent_class)]
