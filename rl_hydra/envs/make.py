"""Vector environments built from an `env` config group."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from rl_hydra.choices import ENV_EXTRAS
from rl_hydra.config import plain_dict
from rl_hydra.envs.learning import learning_signal
from rl_hydra.envs.vector import vector_env
from rl_hydra.envs.wrappers import ObservationParts, needs_parts
from rl_hydra.errors import ClassMismatch, ConfigError, EnvMismatch, NotInstalled

log = logging.getLogger(__name__)


def install_hint(extra: str) -> str:
    return f'pip install -e ".[{extra}]"'


def require_extra(extra: str, env_id: str) -> None:
    """The extra's modules are installed, or one line names the pip command."""
    modules = ENV_EXTRAS[extra]  # one of them: the schema's choice
    for module in (modules,) if isinstance(modules, str) else modules:
        if importlib.util.find_spec(module) is None:
            raise NotInstalled(
                f"env.id={env_id} needs the {extra} extra ({module} is not installed): {install_hint(extra)}"
            )


def check_extra(env_cfg: DictConfig) -> None:
    """The env group's install extra (`env.extra`) is installed, or one line names the pip command."""
    if env_cfg.extra is not None:
        require_extra(env_cfg.extra, env_cfg.id)


def _register_ale() -> None:
    import ale_py

    gym.register_envs(ale_py)


def _register_minatar() -> None:
    import minatar.gym

    minatar.gym.register_envs()


def _import(module: str) -> Callable[[], object]:
    return lambda: importlib.import_module(module)  # the package registers its ids on import


# id namespaces whose package registers its ids only when imported or asked: namespace -> (extra, register)
NAMESPACES: dict[str, tuple[str, Callable[[], object]]] = {
    "ALE": ("atari", _register_ale),
    "MinAtar": ("minatar", _register_minatar),
}
# the same for ids that begin with a prefix: popgym-RepeatPreviousEasy-v0, MiniGrid-Empty-5x5-v0
PREFIXES = {
    "popgym-": ("popgym", _import("popgym")),
    "MiniGrid-": ("minigrid", _import("minigrid")),
    "BabyAI-": ("minigrid", _import("minigrid")),
}


def register_namespace(env_id: str) -> None:
    """Ids such as ALE/Pong-v5, MinAtar/Breakout-v1, popgym-... or MiniGrid-... register
    themselves: the package is loaded and registers its ids (or one line names the extra to install)."""
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    prefix: str | None
    if namespace in NAMESPACES:
        prefix, (extra, register) = namespace + "/", NAMESPACES[namespace]
    else:
        prefix = next((prefix for prefix in PREFIXES if env_id.startswith(prefix)), None)
        if prefix is None:
            return
        extra, register = PREFIXES[prefix]
    require_extra(extra, env_id)
    if not any(name.startswith(prefix) for name in gym.registry):
        register()


def check_env_id(env_id: str) -> None:
    """A registered id (ALE/... and MinAtar/... register themselves), or gymnasium's `module:EnvId`
    form whose module registers EnvId on import."""
    register_namespace(env_id)
    name = env_id
    if ":" in env_id:
        module, name = env_id.split(":", 1)
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise NotInstalled(f"env.id={env_id!r}: cannot import its module {module!r} ({error})") from None
    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.6)
    hint = f"did you mean: {', '.join(close)}?" if close else "e.g. CartPole-v1, Acrobot-v1, Pendulum-v1"
    where = f" by module {env_id.split(':')[0]!r}" if ":" in env_id else ""
    raise NotInstalled(f"env.id={env_id!r} is not a registered gymnasium environment{where}; {hint}")


def missing_dependency(env_id: str, error: Exception) -> str:
    """One line for an env whose package is missing (env=gym has no `extra` to check ahead)."""
    message = str(error).splitlines()[0] if str(error) else type(error).__name__
    for extra, modules in ENV_EXTRAS.items():
        if any(module.lower() in message.lower() for module in ((modules,) if isinstance(modules, str) else modules)):
            return f"env.id={env_id} needs the {extra} extra ({message}): {install_hint(extra)}"
    return f"env.id={env_id} cannot be made: {message}"


def build_wrappers(env_cfg: DictConfig) -> list[Callable[[gym.Env], gym.Env]]:
    """`env.wrappers`, each entry a `_partial_` factory built from its `_target_`; an entry that
    cannot be built is one ConfigError naming it and its target."""
    wrappers = []
    for k, node in enumerate(env_cfg.wrappers or []):
        target = node._target_  # each entry has one: the schema's check (validate_wrappers)
        try:
            wrappers.append(instantiate(node))
        except InstantiationException as error:
            cause = error.__cause__
            why = (
                missing_target(str(target))
                if isinstance(cause, ImportError) or cause is None
                else f"cannot be built ({type(cause).__name__}: {str(cause).splitlines()[0] if str(cause) else ''})"
            )
            raise ClassMismatch(f"env.wrappers[{k}]._target_={target} {why}") from None
    return wrappers


def missing_target(target: str) -> str:
    """Why `target` (module.name) cannot be found, for a message: its module does not import, or lacks the name."""
    module, _, name = target.rpartition(".")
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 - any import failure is the reason given
        return f"cannot be imported ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    return f"does not exist (module {module} has no {name})"


def time_limit(env_cfg: DictConfig) -> int | None:
    """The steps an episode may last, where the config or the env says: `env.max_episode_steps`;
    else the env's own limit (gymnasium's registration); else, for an env with none, the group's
    `env.fallback_max_episode_steps` (env=gym's), or a ConfigError where that is null. None: no
    limit known, where the group has no fallback because its env ends its episodes itself (ALE's
    frame limit, MiniGrid's max_steps, POPGym's tasks, MinAtar's games)."""
    if env_cfg.max_episode_steps is not None:
        return env_cfg.max_episode_steps
    own = registered_time_limit(env_cfg.id)
    if own is not None or "fallback_max_episode_steps" not in env_cfg:
        return own
    if env_cfg.fallback_max_episode_steps is None:
        raise EnvMismatch(
            f"env.id={env_cfg.id} has no time limit of its own, so an episode could last for ever, and "
            f"env.fallback_max_episode_steps=null gives it none: give env.max_episode_steps=N"
        )
    return int(env_cfg.fallback_max_episode_steps)  # its range: rl_hydra/schema/envs.py


def registered_time_limit(env_id: str) -> int | None:
    """The time limit gymnasium registers for `env_id`, or None (none registered; an unknown id).
    For gymnasium's `module:EnvId` form, EnvId's, once the module is imported (it registers EnvId):
    gymnasium's registry knows EnvId alone, and asked for the whole id it answers none, which would
    replace the env's own limit by env=gym's fallback."""
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)  # check_env_id names a module that does not import
        return gym.spec(name).max_episode_steps
    except (gym.error.Error, ImportError):
        return None


def env_factory(env_cfg: DictConfig, render_mode: str | None = None) -> Callable[[], gym.Env]:
    """A function that makes one env of the config: `gym.make(env.id, **env.kwargs)` with its
    time limit (`time_limit`), then each of `env.wrappers` in order, then, for a Dict or Tuple
    observation, `ObservationParts` (a flat dict of parts; text dropped unless `env.keep_text`)."""
    check_extra(env_cfg)
    check_env_id(env_cfg.id)
    kwargs = plain_dict(env_cfg.kwargs) if env_cfg.kwargs else {}
    wrappers = build_wrappers(env_cfg)
    keep_text = "keep_text" in env_cfg and bool(env_cfg.keep_text)  # env=gym's key (rl_hydra/schema/envs.py)
    max_episode_steps = time_limit(env_cfg)

    def factory() -> gym.Env:
        try:
            # render_mode only when asked for: some envs (POPGym's) take no such argument
            rendering: dict[str, Any] = {} if render_mode is None else {"render_mode": render_mode}
            env = gym.make(env_cfg.id, max_episode_steps=max_episode_steps, **rendering, **kwargs)
        except gym.error.DependencyNotInstalled as error:
            raise NotInstalled(missing_dependency(env_cfg.id, error)) from None
        except TypeError as error:  # a keyword the env's constructor does not take
            if not kwargs:
                raise
            raise EnvMismatch(
                f"env.kwargs={kwargs} does not fit env.id={env_cfg.id} ({str(error).splitlines()[0]})"
            ) from None
        for k, wrap in enumerate(wrappers):
            try:
                env = wrap(env)
            except ConfigError:  # our own wrappers name the key themselves (env.actions=...)
                raise
            except (ValueError, TypeError) as error:  # a wrapper library's own check of its arguments
                raise EnvMismatch(
                    f"env.wrappers[{k}] ({env_cfg.wrappers[k]._target_}) does not fit: {str(error).splitlines()[0]}"
                ) from None
        if needs_parts(env.observation_space):
            env = ObservationParts(env, keep_text=keep_text)
        return env

    return factory


def make_env(
    env_cfg: DictConfig,
    seed: int,
    num_envs: int | None = None,
    render_mode: str | None = None,
    vectorization: str | None = None,
    say_time_limit: bool = True,
) -> VectorEnv:
    """A seeded vector env of `num_envs` copies (default `env.num_envs`), stepped as
    `vectorization` (default `env.vectorization`: sync, async or envpool; envs/vector.py) says.

    Autoreset is SAME_STEP: when an episode ends, `step` already returns the
    first observation of the next one, and the real final observation is in
    `info["final_obs"]`, so a truncated transition can bootstrap from it.
    `env.learning` is the group's learning-only transform (envs/learning.py), or None;
    `env.time_limit` the steps an episode may last, where known (`time_limit`). Where that is
    the group's fallback, the log says so (unless not `say_time_limit`: the same run's second env).
    """
    num_envs = num_envs or env_cfg.num_envs
    env = vector_env(env_cfg, [env_factory(env_cfg, render_mode)] * num_envs, seed, render_mode, vectorization)
    # gymnasium's VectorEnv types the seed an int; its vector envs (and EnvPoolAtari) take one per env
    obs, info = env.reset(seed=[seed + i for i in range(num_envs)])  # type: ignore[arg-type]
    env.action_space.seed(seed)
    env.seeded_reset = (obs, info)  # type: ignore[attr-defined]  # the loop starts from it: one reset, not two
    limit = time_limit(env_cfg)
    # the run's own attributes on gymnasium's env (the loops read them with getattr)
    env.learning = learning_signal(env_cfg, num_envs, info)  # type: ignore[attr-defined]
    env.time_limit = limit  # type: ignore[attr-defined]
    if (
        say_time_limit
        and limit is not None
        and env_cfg.max_episode_steps is None
        and registered_time_limit(env_cfg.id) is None
    ):
        log.info(
            "env.id=%s has no time limit of its own: an episode ends after %d steps "
            "(env.fallback_max_episode_steps; env.max_episode_steps=N sets another)",
            env_cfg.id,
            limit,
        )
    return env


def final_observations(next_obs, done, info: dict[str, Any]):
    """next_obs with the rows of finished episodes replaced by their real last observation (for
    a dict of parts, in each part)."""
    if not np.count_nonzero(done):  # cheaper than .any() on a small array, and this runs every step
        return next_obs
    if isinstance(next_obs, dict):
        real = {key: part.copy() for key, part in next_obs.items()}
        for i in done.nonzero()[0]:
            for key, part in real.items():
                part[i] = info["final_obs"][i][key]
        return real
    real = next_obs.copy()
    for i in done.nonzero()[0]:
        real[i] = info["final_obs"][i]
    return real
