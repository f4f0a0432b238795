"""Config checks shared by every entry point.

Every check raises `ConfigError` with one line naming the key, the bad value and
what is allowed; the CLI prints that line and exits with status 2.
"""

from __future__ import annotations

import contextlib
import decimal
import fnmatch
import functools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

from rl_hydra.errors import ConfigError
from rl_hydra.schema import integer_key, register_schemas, validate_config

if TYPE_CHECKING:
    import torch

CONF_DIR = Path(__file__).resolve().parent / "conf"  # ships with the package; a link to ./conf in a checkout


# --- composing with Hydra ---------------------------------------------------------------
@contextlib.contextmanager
def hydra_scope(config_dir: Path = CONF_DIR) -> Iterator[None]:
    """A Hydra scope of its own for Hydra's compose API, with `config_dir` as the primary config
    directory (version_base 1.3). It nests (hydra.initialize_config_dir alone refuses to inside a
    running Hydra app) and leaves Hydra's global state as it found it: the same GlobalHydra, version
    base and job runtime objects, holding what they held before."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import JobRuntime
    from hydra.version import VersionBase

    global_hydra, version, job = GlobalHydra.instance(), VersionBase.instance(), JobRuntime.instance()
    outer = global_hydra.hydra, version.getbase(), job.conf
    global_hydra.clear()  # initialize refuses to run over an initialized Hydra
    job.conf = job.conf.copy()  # and names its job in the copy
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            yield
    finally:
        GlobalHydra.set_instance(global_hydra)  # initialize leaves a copy of it in its place
        global_hydra.hydra, version.version_base, job.conf = outer


@functools.cache
def compose_option(group: str, option: str) -> DictConfig:
    """conf/<group>/<option>.yaml as Hydra composes it on its own, its defaults list followed:
    `compose_option("algo", "c51").algo._target_`, `compose_option("env", "cartpole_novel").env.id`
    (read-only; cached). Works inside a running Hydra app too (hydra_scope). A missing option
    raises Hydra's MissingConfigException."""
    from hydra import compose

    with hydra_scope():
        cfg = compose(config_name=f"{group}/{option}")
    OmegaConf.set_readonly(cfg, True)
    return cfg


# --- env groups, presets and run names ---------------------------------------------------
ENV_ALIASES = {"cartpole_novel": "cartpole_no_velocity"}  # old names that still work, not shown as choices


@functools.cache
def group_env(choice: str) -> DictConfig | None:
    """An env group's config (following its defaults list), or None where there is no such group."""
    from hydra.errors import MissingConfigException

    try:
        return compose_option("env", choice).env
    except MissingConfigException:
        return None


def group_env_id(choice: str) -> str | None:
    """The `id` an env group sets, or None (env=gym: `???`; no such group)."""
    env = group_env(choice)
    return None if env is None or OmegaConf.is_missing(env, "id") else env.id


def group_id_patterns(choice: str) -> tuple[str, ...]:
    """The patterns of ids an env group is made for (its `ids`, e.g. MiniGrid-*), or ()."""
    env = group_env(choice)
    return () if env is None or "ids" not in env else tuple(env.ids)  # a family group's key (FamilyEnvKeys)


def env_groups_for(env_id: str) -> list[str]:
    """The env groups (conf/env/*.yaml) that run `env_id`, for messages: those that set it, else
    those made for a family of ids it belongs to (`ids`), the narrowest family first."""
    names = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))
    exact = [name for name in names if group_env_id(name) == env_id]
    if exact:
        return exact
    families = []  # (the longest matching pattern's length, the group)
    for name in names:
        matching = [len(pattern) for pattern in group_id_patterns(name) if fnmatch.fnmatchcase(env_id, pattern)]
        if matching:
            families.append((-max(matching), name))
    return [name for _, name in sorted(families)]


def env_label(env_id: str) -> str:
    """A file-name-safe name for an env id: `ALE/Pong-v5` -> `ALE-Pong-v5`, `pkg.mod:Corridor-v0` -> `Corridor-v0`."""
    return re.sub(r"[^\w.-]+", "-", str(env_id).split(":")[-1]).strip("-") or "env"


def run_env_name(choice: str, env_id: str) -> str:
    """The env part of a run directory's name: the env group's name while it runs the id it was
    written for (`cartpole`), else the id actually run (`env=gym env.id=MountainCar-v0` -> `MountainCar-v0`)."""
    return choice if group_env_id(choice) == env_id else env_label(env_id)


def run_updates(total_steps: Any, learning_starts: Any, train_every: Any, gradient_steps: Any) -> int:
    """How many updates a run makes: `gradient_steps` per training phase, one phase every
    `train_every` env steps after `learning_starts` (at least 1)."""
    phases = (int(total_steps) - int(learning_starts)) // max(int(train_every), 1)
    return max(phases * int(gradient_steps), 1)


def register_resolvers() -> None:
    """`${rl_hydra.env_name:<env choice>,<env.id>}`, used by hydra.run.dir in conf/train.yaml
    (Hydra's own node: a run's config holds no resolver call, so that its record is plain data)."""
    if not OmegaConf.has_resolver("rl_hydra.env_name"):
        OmegaConf.register_new_resolver("rl_hydra.env_name", run_env_name)


register_resolvers()
register_schemas()  # the schemas (rl_hydra/schema) the group files compose onto


def check_preset(cfg: DictConfig) -> None:
    """A tuned preset (conf/algo_env/) runs only on the env id it was tuned for (a pattern such
    as MinAtar/*-v1 for a preset of a whole suite)."""
    preset = cfg.preset
    if not preset or preset.get("env_id") is None or fnmatch.fnmatchcase(cfg.env.id, preset.env_id):
        return
    groups = [g for g in env_groups_for(cfg.env.id) if g not in ENV_ALIASES]
    gym = f"env=gym env.id={cfg.env.id} (the algorithm's defaults)"
    own_group = groups and group_env_id(groups[0]) == cfg.env.id
    instead = (
        f"env={groups[0]} (with its own preset, if any), {gym}"
        if own_group
        else f"env={groups[0]} env.id={cfg.env.id}"
        if groups  # a group made for the id's family (its ids)
        else gym
    )
    raise ConfigError(
        f"algo_env={preset.name} is tuned for env.id={preset.env_id}, not {cfg.env.id}; "
        f"choose {instead}, or ~algo_env to drop the preset"
    )


def flat_config(cfg: Any) -> dict[str, Any]:
    """{"algo.gamma": 0.99, ...}: the leaves of a config by dotted key (lists and empty dicts as
    whole values), interpolations left as written."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            flat[prefix[:-1]] = node

    walk(OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg, "")
    return flat


def plain_dict(node: DictConfig, resolve: bool = True) -> dict[str, Any]:
    """A config node as a plain dict of plain values, for a library that takes keyword arguments or a
    dict (its keys are strings, as in the YAML files, though OmegaConf's types allow others)."""
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=resolve))


# a number in scientific notation as Hydra's grammar reads one: 1e3, 2.5E+4, 1_000e0 (Hydra makes it a float)
SCIENTIFIC = re.compile(r"(?<![\w.'\"])[+-]?(?:\d(?:_?\d)*(?:\.\d*)?|\.\d+)[eE][+-]?\d+(?![\w.])")


def integral(text: str) -> str:
    """`1e3` -> `1000`, `[1e2,2.5e2]` -> `[100,250]`: each number in scientific notation in `text` that
    is an exact integer, written as that integer; any other (1e-3, 1.25e0) as it was."""

    def written(match: re.Match) -> str:
        number = decimal.Decimal(match.group().replace("_", ""))
        if number.adjusted() > 100 or number != number.to_integral_value():  # 1e400 is a float's inf
            return match.group()
        return str(int(number))

    return SCIENTIFIC.sub(written, text)


def integral_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides with each integer key's (one the schema types an integer, rl_hydra/schema)
    exactly integral numbers in scientific notation written as integers: `train.total_steps=1e6`, as
    RL budgets are written, is 1000000, where Hydra would read a float its integer key refuses. Other
    keys, and numbers that are not integers (`train.total_steps=1.5`), are left for the checks to name."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    overrides = list(overrides)
    if not any(SCIENTIFIC.search(override) for override in overrides):
        return overrides
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except (HydraException, ValueError):  # composing refuses them, in one line
        return overrides
    written = []
    for text, override in zip(overrides, parsed):
        element = override.get_key_element()  # the key with its +, ++ or ~
        if not override.is_delete() and text.startswith(f"{element}=") and integer_key(override.key_or_group):
            text = f"{element}={integral(text[len(element) + 1 :])}"
        written.append(text)
    return written


def resolve_device(name: Any) -> torch.device:
    """Map the `device` key (auto | cpu | cuda[:N]) to a torch.device that exists."""
    import torch  # here, not at the top: the launcher process of a sweep never needs torch

    if not isinstance(name, str) or not (name in ("auto", "cpu") or name.split(":")[0] == "cuda"):
        raise ConfigError(f"device={name!r} is not allowed; choose one of: auto, cpu, cuda")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device={name!r} but CUDA is not available on this machine "
            f"(torch {torch.__version__}); use device=cpu or device=auto"
        )
    return torch.device(name)


# how to give a required key (`???` in its group) that a command line left out
REQUIRED_EXAMPLES = {"env.id": "e.g. env=gym env.id=MountainCar-v0"}


def check_required(cfg: DictConfig) -> None:
    """Refuse a config with a required key (`???`, such as env=gym's env.id) not given. Nothing is
    resolved (OmegaConf.missing_keys would resolve `${hydra:...}`, which only a running job can)."""
    for key in sorted(key for key, value in flat_config(cfg).items() if value == "???"):
        raise ConfigError(
            f"{key} is required here (it is ??? in the chosen groups); {REQUIRED_EXAMPLES.get(key, f'give {key}=...')}"
        )


def validate_run_config(cfg: DictConfig) -> None:
    """The one check of a composed config, before anything is built: no required key left `???`,
    every key in the range its schema declares (rl_hydra/schema), then what only the whole config
    shows: a device that exists, an env id, a preset on the env it was tuned for."""
    check_required(cfg)
    validate_config(cfg)
    resolve_device(cfg.device)
    if not isinstance(cfg.env.id, str) or not cfg.env.id:
        raise ConfigError(f"env.id={cfg.env.id!r} must be a gymnasium environment id such as CartPole-v1")
    check_preset(cfg)
