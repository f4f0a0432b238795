"""The config schema: each node's keys declared once, as typed dataclasses (rl_hydra/schema/*.py).

Every group file names its node's schema first in its defaults list (`- /schema/algo/dqn@_here_`),
so that Hydra composes onto it and OmegaConf refuses a wrong type then; `validate_config` (the
launch calls it once) checks every declared range and choice. A node with no schema of its own,
such as one read back from a run directory's .hydra/config.yaml, is checked with the schema that
declares its `_target_`. `describe("algo.batch_size")` is a key's help and range, for messages.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import typing
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rl_hydra.errors import ConfigError
from rl_hydra.schema import algos, buffers, distributed, envs, loggers, networks, run
from rl_hydra.schema.keys import Range, check, check_rules, fields, not_a_list, schema_of, validate

__all__ = [
    "Range",
    "check",
    "describe",
    "integer_key",
    "register",
    "register_schemas",
    "validate_config",
]


def stored(*modules: Any) -> dict[tuple[str, str], type]:
    """(group, name) -> schema: each schema class of `modules` that names its place in Hydra's ConfigStore
    itself (`stored_as = "algo/dqn"`), which `- /schema/<group>/<name>@_here_` in a group file refers to."""
    found: dict[tuple[str, str], type] = {}
    for module in modules:
        for value in vars(module).values():
            where = vars(value).get("stored_as") if isinstance(value, type) else None  # its own, not a parent's
            if where is not None:
                group, _, name = where.rpartition("/")
                found[(group, name)] = value
    return found


STORED = stored(run, algos, networks, buffers, envs, loggers, distributed)

ALL_SCHEMAS = tuple(STORED.values())


def register_schemas() -> None:
    """Store every schema in Hydra's ConfigStore under schema/<group>/<name> (idempotent)."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    for (group, name), schema in STORED.items():
        store.store(group=f"schema/{group}".rstrip("/"), name=name, node=schema)


def register(schema: type) -> None:
    """Store a schema declared outside the package (an algorithm's own, with its `stored_as` and
    `targets`) where a group file's defaults list and the launch's validation find it: call it from a
    `hydra_plugins/<yours>/__init__.py` module, which Hydra imports before it composes."""
    from hydra.core.config_store import ConfigStore

    group, _, name = schema.stored_as.rpartition("/")  # type: ignore[attr-defined]
    STORED[(group, name)] = schema
    ConfigStore.instance().store(group=f"schema/{group}".rstrip("/"), name=name, node=schema)
    by_target().update(dict.fromkeys(getattr(schema, "targets", ()), schema))


@functools.cache
def by_target() -> dict[str, type]:
    return {target: schema for schema in ALL_SCHEMAS for target in getattr(schema, "targets", ())}


def schema_for(node: DictConfig) -> type | None:
    """The schema of a node: the one it was composed onto, else the one declaring its _target_."""
    typed = schema_of(node)
    if typed is not None:
        return typed
    target = node.get("_target_") if "_target_" in node else None
    return by_target().get(str(target)) if target is not None else None


def validate_config(cfg: DictConfig) -> None:
    """Check every declared key of a composed (or read back) run config; raise ConfigError."""
    walk(cfg, run.RunKeys, "")


def walk(node: DictConfig, schema: type | None, prefix: str) -> None:
    if prefix == "env.":  # also a key of another family (+env.eval_epsilon) or of a node read back
        validate_env(node)
    if schema is not None:
        validate(node, schema, prefix)
    declared = {field.name: field for field in dataclasses.fields(schema)} if schema is not None else {}
    if schema is not None and schema_of(node) is schema and prefix:  # a key added to a group's node with + (a typo)
        known = set(declared) | (ENV_KEYS if prefix == "env." else set())
        extra = sorted(str(name) for name in node.keys() if str(name) not in known)
        if extra:
            raise ConfigError(
                f"{prefix}{extra[0]} is not a key of {prefix[:-1] or 'the config'}; its keys: "
                f"{', '.join(n for n in declared if not n.startswith('_'))}"
            )
    hints = typing.get_type_hints(schema) if schema is not None else {}
    for name in [str(name) for name in node.keys()]:
        if OmegaConf.is_missing(node, name) or not isinstance(node[name], DictConfig):
            continue
        child = node[name]
        field = declared.get(name)
        hint = hints.get(name) if field is not None else None
        sub = (
            (field.metadata.get("schema") if field is not None else None)
            or (hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None)
            or schema_for(child)
            or (schema_by_name(name, child) if not prefix else None)
        )
        walk(child, sub, f"{prefix}{name}.")
    if schema is not None:  # across keys, once each key is in its own range
        check_rules(node, schema, prefix)


def schema_by_name(group: str, node: DictConfig) -> type | None:
    """The schema of a group node without a `_target_` (distributed's), read back untyped from a run
    directory: the option its `name` says, or, for a name the group lacks, the first option's (which
    then refuses the name, listing the group's options)."""
    options = [schema for (g, _), schema in STORED.items() if g == group]
    if "_target_" in node or "name" not in node or not options:
        return None
    if not all("name" in {field.name for field in dataclasses.fields(schema)} for schema in options):
        return None
    return STORED.get((group, str(node.get("name"))), options[0])


ENV_KEYS = {field.name for schema in envs.ENV_SCHEMAS for field in dataclasses.fields(schema)}


def validate_env(node: DictConfig) -> None:
    for name in [str(name) for name in node.keys()]:
        schema = next((s for s in envs.ENV_SCHEMAS if name in {f.name for f in dataclasses.fields(s)}), None)
        if schema is not None:
            rule = dict((n, r) for n, r, _ in fields(schema))[name]
            if rule is not None and not OmegaConf.is_missing(node, name):
                check(node[name], f"env.{name}", rule)
    validate_learning(node)
    validate_envpool(node)
    validate_wrappers(node)  # after the env's own keys, which its wrappers may interpolate (${env.actions})


def integer_key(full_key: str) -> bool:
    """Whether every schema that may declare `full_key` types it an integer or a list of integers
    (`train.total_steps`, `algo.batch_size`, `network.actor.hidden_sizes`): a group's node may be any
    of its options' schemas, and a part left untyped (an actor-critic's `actor`) any of its group's."""
    *parents, name = full_key.split(".")
    candidates: list[type] = [run.RunKeys]
    group = parents[0] if parents else ""
    for part in parents:
        found: list[type] = []
        for schema in candidates:
            field = next((f for f in dataclasses.fields(schema) if f.name == part), None)
            if field is None:
                continue
            hint = typing.get_type_hints(schema).get(part)
            sub = field.metadata.get("schema") or (
                hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None
            )
            found += [sub] if sub is not None else [s for (g, _), s in STORED.items() if g == group]
        candidates = list(dict.fromkeys(found))
    rules = [rule for schema in candidates for field_name, rule, _ in fields(schema) if field_name == name]
    return bool(rules) and all(rule is not None and rule.kind == "integer" for rule in rules)


@functools.lru_cache(maxsize=1)
def wrapper_schemas() -> dict[str, type]:
    return {target: schema for schema in envs.WRAPPER_SCHEMAS for target in schema.targets}


def validate_learning(env: DictConfig) -> None:
    """`env.learning`, a node of the minatar and atari groups that any env may be given with +: only
    its keys, each a choice."""
    learning = env.learning if "learning" in env and not OmegaConf.is_missing(env, "learning") else None
    if not isinstance(learning, DictConfig):
        return
    declared = [field.name for field in dataclasses.fields(envs.LearningKeys)]
    unknown = sorted(str(name) for name in learning.keys() if str(name) not in declared)
    if unknown:
        raise ConfigError(f"env.learning.{unknown[0]} is not a key; choose from: {', '.join(declared)}")
    validate(learning, envs.LearningKeys, "env.learning.")


def validate_envpool(env: DictConfig) -> None:
    """EnvPool runs Atari's games, configured as the atari group is (rl_hydra/envs/vector.py)."""
    if "vectorization" not in env or OmegaConf.is_missing(env, "vectorization") or env.vectorization != "envpool":
        return
    env_id = str(env.id) if "id" in env and not OmegaConf.is_missing(env, "id") else "???"
    if not env_id.startswith("ALE/") or "preprocessing" not in env or env.preprocessing is None:
        raise ConfigError(
            f"env.vectorization=envpool runs env=atari ids (ALE/<Game>-v5), not env.id={env_id}; "
            "use env.vectorization=async for other envs"
        )


def validate_wrappers(env: DictConfig) -> None:
    """Each wrapper of `env.wrappers` that a schema declares holds only its keys, in their ranges
    (a frame stack's size scales memory); a user's own wrapper is left to its class."""
    wrappers = env.get("wrappers") if not OmegaConf.is_missing(env, "wrappers") and "wrappers" in env else None
    if not isinstance(wrappers, ListConfig):
        return
    for index, wrapper in enumerate(wrappers):
        if not isinstance(wrapper, DictConfig) or wrapper.get("_target_") is None:
            raise ConfigError(
                f"env.wrappers[{index}]={wrapper} names no _target_; an entry is "
                f"{{_target_: <a wrapper class or function>, _partial_: true, <its arguments>}}"
            )
        schema = wrapper_schemas().get(str(wrapper._target_))
        if schema is None:
            continue
        where = f"env.wrappers[{index}]."
        declared = [field.name for field in dataclasses.fields(schema)]
        extra = [str(name) for name in wrapper.keys() if str(name) not in declared]
        if extra:
            raise ConfigError(
                f"{where}{extra[0]} is not a key of {wrapper._target_}; its keys: "
                f"{', '.join(n for n in declared if not n.startswith('_'))}"
            )
        validate(wrapper, schema, where)


def describe(full_key: str) -> str | None:
    """`algo.batch_size: samples per update; expected an integer >= 1 and <= ...`, for a key some
    schema declares (the first that does, by its last name and group), else None."""
    group, _, name = full_key.rpartition(".")
    head = group.split(".")[0] if group else ""
    candidates = [schema for (g, _), schema in STORED.items() if g == head] or list(ALL_SCHEMAS)
    if not group:
        candidates = [run.RunKeys]
    elif group == "train":
        candidates = [run.TrainKeys]
    for schema in candidates:
        for field_name, rule, help in fields(schema):
            if field_name == name and help:
                return f"{full_key}: {help}" + (f"; {rule.allowed()}" if rule and rule.kind != "any" else "")
    return None


def type_refusal(error: BaseException | None) -> str | None:
    """One line for OmegaConf's refusal of a value of the wrong type while Hydra composes
    (`algo.batch_size=abc`), naming the key, the value and what its schema allows; None for any
    other error. An integral float for an integer key (`1e5`) is told the integer to give."""
    from omegaconf.errors import ValidationError

    if isinstance(error, OverflowError):  # OmegaConf's float() of a huge integer: its key on a line of the message
        found = re.search(r"full_key: (\S+)", str(error))
        owner_name = re.search(r"object_type=(\w+)", str(error))
        owner = next((s for s in ALL_SCHEMAS if owner_name and s.__name__ == owner_name.group(1)), None)
        if found is None or owner is None:
            return None
        name = found.group(1).rsplit(".", 1)[-1]
        rule = {n: r for n, r, _ in fields(owner)}.get(name)
        return f"{found.group(1)}=<a number too large for a float> is not a finite number" + (
            f"; {rule.allowed()}" if rule is not None else ""
        )
    if not isinstance(error, ValidationError) or not getattr(error, "full_key", None):
        return None
    full_key, value, owner = str(error.full_key), getattr(error, "value", None), getattr(error, "object_type", None)
    name = str(full_key.rsplit(".", 1)[-1]).split("[")[0]
    rules = (
        {n: (rule, help) for n, rule, help in fields(owner)}
        if isinstance(owner, type) and dataclasses.is_dataclass(owner)
        else {}
    )
    if not rules:  # a list's item: the rule is its list's, one level up
        return f"{full_key}={shown_value(value)} has the wrong type; {str(error).splitlines()[0]}"
    rule, help = rules.get(name, (None, ""))
    if rule is not None and rule.each and not isinstance(value, (list, tuple)):  # network.hidden_sizes=64
        return not_a_list(full_key, value, rule) + (f" ({help})" if help else "")
    allowed = rule.allowed() if rule is not None and rule.kind != "any" else f"expected {owner_type(owner, name)}"  # type: ignore[arg-type]
    hint = ""
    if (
        rule is not None
        and rule.kind == "integer"
        and isinstance(value, float)
        and value.is_integer()
        and rule.refuses(int(value)) is None
    ):
        hint = f" (give {int(value)})"
    why = "is not allowed" if rule is not None and rule.kind == "choice" else f"is not {kind_word(rule)}{hint}"
    return f"{full_key}={shown_value(value)} {why}; {allowed}" + (f" ({help})" if help else "")


def shown_value(value: Any) -> str:
    from rl_hydra.schema.keys import shown

    return shown(value)


def kind_word(rule: Range | None) -> str:
    kind = rule.kind if rule is not None else "any"
    return {"integer": "an integer", "number": "a number"}.get(kind, "of the key's type")


def owner_type(owner: type, name: str) -> str:
    hint = typing.get_type_hints(owner).get(name)
    return getattr(hint, "__name__", str(hint))


def key_lines(cfg: DictConfig) -> list[str]:
    """`algo.batch_size: samples ... per update; expected an integer >= 1 ...`: each key of a
    composed config that a schema declares, with its help and range (for `--help`)."""
    lines: list[str] = []

    def visit(node: DictConfig, schema: type | None, prefix: str) -> None:
        declared = {name: (rule, help) for name, rule, help in fields(schema)} if schema is not None else {}
        for name in [str(name) for name in node.keys()]:
            child = None if OmegaConf.is_missing(node, name) else node[name]
            if isinstance(child, DictConfig):
                hint = typing.get_type_hints(schema).get(name) if schema is not None else None
                field = next((f for f in dataclasses.fields(schema) if f.name == name), None) if schema else None
                sub = (
                    (field.metadata.get("schema") if field is not None else None)
                    or (hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None)
                    or schema_of(child)
                )
                visit(child, sub, f"{prefix}{name}.")
            elif name in declared and declared[name][1] and not name.startswith("_"):
                rule, help = declared[name]
                allowed = f"; {rule.allowed(brief=True)}" if rule is not None and rule.kind != "any" else ""
                lines.append(f"{prefix}{name}: {help}{allowed}")

    visit(cfg, schema_of(cfg) or run.RunKeys, "")
    return lines
