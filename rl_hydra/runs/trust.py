"""A run directory is data, never code. Whatever opens one (evaluate, load_run, verify, resume)
reads its config through `read_config`, which is built so that nothing in the file can compute:

1. the YAML is read as plain data (runs/data.py: no aliases, tags, resolvers; bounded size and
   depth), and references (`${env.id}`) are resolved by hand, every other interpolation refused;
2. each `_target_` must be one that the schema of its place declares: an algorithm class at
   `algo`, a network's at `network`, an optimizer in an algorithm's optimizer keys, a logger's
   under `logger`, a wrapper's in `env.wrappers` (rl_hydra/schema/); nowhere else may one appear;
3. the whole config is then typed and checked by the same schemas as a launch (types, ranges,
   choices, unknown keys refused), and what comes out holds no interpolation at all.

A user who means to open runs built from their own code names it with RL_HYDRA_TRUST for one
command (comma-separated whole names: `mypkg` trusts the module mypkg and all below it,
`mypkg.nets.MyNet` that one target), or `trust=` in the Python API.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rl_hydra.runs import data
from rl_hydra.runs.errors import RunError

if TYPE_CHECKING:
    from rl_hydra.runs.run_dir import RunDirectory

TRUST_VARIABLE = "RL_HYDRA_TRUST"
TORCH_OPTIMIZERS = ("Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam")
OPTIMIZERS = ("rl_hydra.speed.adam", *(f"torch.optim.{name}" for name in TORCH_OPTIMIZERS))
# the text an earlier version recorded for the prioritized buffer's default (a resolver call): the
# same default is now `beta_steps: auto`, which the record then means
LEGACY_BETA_STEPS = (
    "${rl_hydra.updates:${train.total_steps},${algo.learning_starts},${algo.train_every},${algo.gradient_steps}}"
)


class UntrustedConfig(RunError):
    """A run directory's config that names a callable its place does not declare."""


def user_trusted(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """What the user trusts beyond the schemas: RL_HYDRA_TRUST and `extra`, as whole dotted names."""
    names = [name.strip() for name in os.environ.get(TRUST_VARIABLE, "").split(",")]
    return tuple(name.strip().rstrip(".") for name in (*names, *extra) if name.strip().rstrip("."))


def trusted_by_user(name: str, extra: Iterable[str] = ()) -> bool:
    """`name` (a target or a module) is one the user named, or lies in a module they named: whole
    dotted parts only (`th` does not trust `this`, `mypkg.Net` does not trust `mypkg.NetX`)."""
    return any(name == trusted or name.startswith(f"{trusted}.") for trusted in user_trusted(extra))


@functools.cache
def declared_targets() -> dict[str, frozenset[str]]:
    """{place: the targets its schemas declare}: the only callables a record may name there."""
    from rl_hydra import schema
    from rl_hydra.schema.envs import WRAPPER_SCHEMAS

    def of(group: str) -> frozenset[str]:
        return frozenset(t for (g, _), s in schema.STORED.items() if g == group for t in getattr(s, "targets", ()))

    return {
        "algo": of("algo"),
        "network": of("network"),
        "buffer": of("buffer"),
        "logger": of("logger"),
        "optimizer": frozenset(OPTIMIZERS),
        "wrapper": frozenset(t for s in WRAPPER_SCHEMAS for t in s.targets),
    }


def place_of(path: tuple[Any, ...]) -> str | None:
    """Which kind of component the node at `path` may be (None: no component may be built there)."""
    if path == ("algo",):
        return "algo"
    if len(path) == 2 and path[0] == "algo":
        return "optimizer"
    if path[:1] == ("network",):
        return "network"
    if path == ("buffer",):
        return "buffer"
    if len(path) == 2 and path[0] == "logger":
        return "logger"
    if len(path) == 3 and path[:2] == ("env", "wrappers") and isinstance(path[2], int):
        return "wrapper"
    return None


def is_trusted(target: str, place: str | None, extra: Iterable[str] = ()) -> bool:
    """Whether a record may build `target` at a place of that kind: declared there by the schemas,
    or named by the user. Text only: nothing is imported to find out."""
    return (place is not None and target in declared_targets()[place]) or trusted_by_user(target, extra)


def targets(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every `_target_` in a plain config tree (dicts and lists)."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "_target_":
                yield where, value
            else:
                yield from targets(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from targets(value, f"{path}[{index}]")


def check_targets(tree: Any, source: Path, extra: Iterable[str] = (), path: tuple[Any, ...] = ()) -> None:
    """Raise UntrustedConfig, naming the key and the target, for the first `_target_` that its
    place does not declare (and the user did not trust)."""
    if isinstance(tree, dict):
        if "_target_" in tree:
            target, place = tree["_target_"], place_of(path)
            if not isinstance(target, str) or not is_trusted(target, place, extra):
                where = data.dotted((*path, "_target_"))
                allowed = ", ".join(sorted(declared_targets()[place])) if place else "none here"
                raise UntrustedConfig(
                    f"{source} names {where}={target}, which a run directory may not build (nothing was run; "
                    f"the schema allows {allowed}); if you trust the code it names, allow it with "
                    f"{TRUST_VARIABLE}={target} (docs/runs.md, 'Opening someone else's run')"
                )
        for key, value in tree.items():
            check_targets(value, source, extra, (*path, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            check_targets(value, source, extra, (*path, index))


def check_env_id(tree: dict[str, Any], source: Path, extra: Iterable[str] = ()) -> None:
    """gymnasium imports `module` of an id `module:Env-v0`: only a module the user trusts."""
    env_id = tree["env"].get("id")
    if isinstance(env_id, str) and ":" in env_id:
        module = env_id.split(":", 1)[0]
        if not trusted_by_user(module, extra):
            raise UntrustedConfig(
                f"{source} names env.id={env_id}, whose module {module} gymnasium would import; "
                f"a run directory may not (nothing was run); if you trust it, allow it with {TRUST_VARIABLE}={module}"
            )
    kwargs = tree["env"].get("kwargs")
    if isinstance(kwargs, dict) and kwargs.get("render_mode") is not None:
        raise RunError(
            f"{source} has env.kwargs.render_mode={kwargs['render_mode']!r}: how a run is shown is chosen "
            f"by the command that opens it, never by the record"
        )


def read_config_data(path: Path, directory: RunDirectory | None = None) -> dict[str, Any]:
    """A recorded config as plain data with its references resolved (nothing else: runs/data.py;
    in a run's `directory`, read by its handle)."""
    tree = data.load_yaml(path, directory)
    if not isinstance(tree, dict) or not tree:
        raise RunError(f"{path} is {'empty' if not tree else 'not a mapping of keys'}: not a run's config")
    buffer = tree.get("buffer")
    if isinstance(buffer, dict) and buffer.get("beta_steps") == LEGACY_BETA_STEPS:
        buffer["beta_steps"] = "auto"
    tree = data.resolve_references(tree, path)
    data.check_no_interpolation(tree, path)
    return tree


def typed_config(tree: dict[str, Any], source: Path) -> DictConfig:
    """The config typed and checked as a launch's: each node merged onto the schema its `_target_`
    (its name, for `distributed`; its keys, for `env`) declares, then every range checked."""
    from rl_hydra import schema
    from rl_hydra.config import check_required
    from rl_hydra.errors import ConfigError
    from rl_hydra.schema import run as run_schema

    try:
        nodes = {}
        for group in ("algo", "network", "buffer", "env", "distributed"):
            node = tree.get(group)
            if isinstance(node, dict):
                keys = schema_of_node(group, node)
                nodes[group] = OmegaConf.merge(OmegaConf.structured(keys), node) if keys else OmegaConf.create(node)
        top = {key: value for key, value in tree.items() if key not in nodes}
        cfg = OmegaConf.merge(OmegaConf.structured(run_schema.RunKeys), top)
        assert isinstance(cfg, DictConfig)
        for group, node in nodes.items():
            setattr(cfg, group, node)
        check_required(cfg)
        schema.validate_config(cfg)
    except OmegaConfBaseException as error:
        raise RunError(f"{source}: {schema.type_refusal(error) or refusal(error)}") from None
    except ConfigError as error:
        raise RunError(f"{source}: {error}") from None
    return cfg


def schema_of_node(group: str, node: dict[str, Any]) -> type | None:
    """The schema a group's node read back is typed with (None: validated untyped, a user's class)."""
    from rl_hydra import schema
    from rl_hydra.schema.envs import ENV_SCHEMAS

    if group == "env":  # the narrowest env schema holding every key the node has
        fitting = [s for s in ENV_SCHEMAS if set(node) <= {f.name for f in dataclasses.fields(s)}]
        return min(fitting, key=lambda s: len(dataclasses.fields(s)), default=None) or ENV_SCHEMAS[-1]
    if group == "distributed":
        return schema.schema_by_name(group, OmegaConf.create(node))
    return schema.by_target().get(str(node.get("_target_")))


def refusal(error: OmegaConfBaseException) -> str:
    """One line for OmegaConf's refusal of a record's key: an unknown key names the node's keys."""
    key = getattr(error, "full_key", None) or getattr(error, "key", None)
    owner = getattr(error, "object_type", None)
    first = str(error).splitlines()[0] if str(error) else type(error).__name__
    if key and isinstance(owner, type) and dataclasses.is_dataclass(owner) and "not in" in first:
        known = ", ".join(f.name for f in dataclasses.fields(owner) if not f.name.startswith("_"))
        return f"{key} is not a key of a {owner.__name__[: -len('Keys')] or owner.__name__} node; its keys: {known}"
    return f"{key}: {first}" if key else first


def read_config(directory: RunDirectory, extra: Iterable[str] = ()) -> DictConfig:
    """The config a run directory records, read as data and checked as a launch's: one RunError
    line for a missing, damaged, foreign or out-of-range file, UntrustedConfig for one that names
    code its schema does not declare."""
    path = directory.recorded_config
    if not directory.path.is_dir():
        raise RunError(f"run directory {directory.path} does not exist")
    if not path.is_file():
        raise RunError(f"{directory.path} is not a run directory (no .hydra/config.yaml)")
    directory.check_links()  # links out or in a loop, FIFOs: refused before any file is opened
    tree = read_config_data(path, directory)
    for key in ("env", "train", "algo"):
        if not isinstance(tree.get(key), dict):
            raise RunError(f"{path} has no {key} section: not a run's config")
    for group in ("algo", "buffer"):  # the parts a run always builds from a class its schema names
        if isinstance(tree.get(group), dict) and "_target_" not in tree[group]:
            raise RunError(f"{path} has no {group}._target_: not a run's config (it names the class to build)")
    check_targets(tree, path, extra)
    check_env_id(tree, path, extra)
    return typed_config(tree, path)


def read_value(value: Any, source: Path, key: str, extra: Iterable[str] = ()) -> Any:
    """A config value a record holds elsewhere (provenance's config changes), held to the same
    rules: plain data, no interpolation, no `_target_` but where its key's place declares one."""
    data.check_no_interpolation(value, source, (key,))
    check_targets(value, source, extra, tuple(key.split(".")))
    return value
