"""Each key is declared once, in rl_hydra/schema (type, default, range, help): no constructor keeps a
default of its own for it, no YAML file sets a key no schema declares or repeats its help in a
comment, and no module outside the schema holds a second list of its allowed values."""

from __future__ import annotations

import ast
import collections
import dataclasses
import re
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import DictConfig

from rl_hydra.schema import ALL_SCHEMAS, schema_for
from rl_hydra.schema.keys import fields
from tests.conftest import CONF_DIR, compose_config

PACKAGE = Path(__file__).resolve().parents[2] / "rl_hydra"
GROUPS = ("algo", "network", "buffer")
# a constructor argument the build gives in place of the key's value: buffer.device (auto | cpu | cuda)
# is resolved to the device the storage is made on (rl_hydra/buffers/device.py)
HANDED_OVER = {"device"}
CONTINUOUS = ("redq", "sac", "tqc", "td3", "crossq", "droq")


def declared(schema: type) -> set[str]:
    return {field.name for field in dataclasses.fields(schema)}


def python_defaults(target: type) -> dict:
    """The keyword defaults of a class's constructor, its parents' included (subclasses pass **kwargs on)."""
    import inspect

    found = {}
    for klass in reversed(target.__mro__):
        init = klass.__dict__.get("__init__")
        if init is not None:
            found.update(
                {
                    name: p.default
                    for name, p in inspect.signature(init).parameters.items()
                    if p.default is not inspect.Parameter.empty
                }
            )
    return found


def constructor_declarations(group_prefix: str) -> collections.Counter:
    """`algo.num_atoms` -> how many places declare its default: 1 for the schema, one more for each
    class the schema declares the keys of whose constructor gives it a default too."""
    counts: collections.Counter = collections.Counter()
    for schema in ALL_SCHEMAS:
        for target in getattr(schema, "targets", ()):
            if not target.startswith(group_prefix):
                continue
            defaults = python_defaults(get_class(target))
            for name in declared(schema) - HANDED_OVER:
                where = f"{target}.{name}"
                counts[where] += 1 + (name in defaults)
    return counts


@pytest.mark.parametrize(
    "package",
    [
        "rl_hydra.algos",
        "rl_hydra.networks",
        "rl_hydra.buffers",
    ],
)
def test_a_constructor_keeps_no_default_of_a_key_the_schema_declares(package):
    counts = constructor_declarations(package)
    assert counts, package
    twice = {key: count for key, count in counts.items() if count != 1}
    assert twice == {}, f"declared twice (schema and constructor): {sorted(twice)}"


def group_nodes():
    for group in GROUPS:
        for path in sorted((CONF_DIR / group).glob("*.yaml")):
            extra = (
                ["env=pendulum"]
                if group == "algo" and path.stem in ("redq", "sac", "tqc", "td3", "crossq", "droq")
                else []
            )
            yield group, path.stem, extra


@pytest.mark.parametrize("group, option, extra", list(group_nodes()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_key_a_group_file_sets_is_declared_by_a_schema(group, option, extra):
    cfg = compose_config(f"{group}={option}", "~algo_env", *extra)
    node = cfg[group]
    parts = [node] if "_target_" in node else [v for v in node.values() if isinstance(v, DictConfig)]
    for part in parts:
        schema = schema_for(part)
        assert schema is not None, f"{group}={option}: {part.get('_target_')} has no schema"
        undeclared = sorted(str(name) for name in part.keys() if str(name) not in declared(schema))
        assert undeclared == [], f"{group}={option} sets keys no schema declares: {undeclared}"


def helps() -> dict[str, set[str]]:
    found: dict[str, set[str]] = collections.defaultdict(set)
    for schema in ALL_SCHEMAS:
        for name, _, help in fields(schema):
            if help:
                found[name].add(help.strip().lower())
    return found


COMMENTED = re.compile(r"^\s*(\w+):[^#]*#\s*(.+)$")


CONF_PARTS = sorted({path.relative_to(CONF_DIR).parts[0] for path in CONF_DIR.rglob("*.yaml")})


@pytest.mark.parametrize("part", CONF_PARTS)
def test_no_yaml_comment_repeats_its_keys_help(part):
    """A YAML file sets values; a comment says why a file picks its value, not what the key means."""
    known, repeated = helps(), []
    for path in sorted((CONF_DIR / part).rglob("*.yaml") if (CONF_DIR / part).is_dir() else [CONF_DIR / part]):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = COMMENTED.match(line)
            if match and any(match.group(2).strip().lower().startswith(h) for h in known.get(match.group(1), ())):
                repeated.append(f"{path.relative_to(CONF_DIR)}:{number}: {line.strip()}")
    assert repeated == [], "\n".join(repeated)


def choice_lists() -> set[tuple[str, ...]]:
    lists = set()
    for schema in ALL_SCHEMAS:
        for _, rule, _ in fields(schema):
            if (
                rule is not None
                and rule.choices
                and all(isinstance(c, str) for c in rule.choices)
                and len(rule.choices) > 1
            ):
                lists.add(tuple(rule.choices))
    return lists


def test_no_module_outside_the_schema_holds_a_second_list_of_allowed_values():
    wanted, found = choice_lists(), []
    assert ("auto", "flat", "nature_cnn", "minatar_cnn", "grid_cnn") in wanted
    for path in sorted(PACKAGE.rglob("*.py")):
        if "schema" in path.relative_to(PACKAGE).parts or path == PACKAGE / "choices.py":  # the schema's words
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            elif isinstance(node, ast.Dict):
                items = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            else:
                continue
            if len(items) > 1 and any(set(items) == set(choices) for choices in wanted):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {items}")
    assert found == [], found


def test_evaluate_yaml_sets_exactly_the_keys_its_schema_declares_and_is_checked_by_it():
    from omegaconf import OmegaConf

    from rl_hydra.commands.report import parse_args
    from rl_hydra.errors import ConfigError
    from rl_hydra.schema.evaluate import EvaluateKeys

    path = CONF_DIR / "evaluate.yaml"
    assert set(OmegaConf.load(path)) == declared(EvaluateKeys)
    with pytest.raises(ConfigError, match=r"^episodes=0 is out of range; expected an integer >= 1 and <= 1000$"):
        parse_args(["run_dir=x", "episodes=0"], path)
    with pytest.raises(ConfigError, match=r"^episodes='many' is not an integer"):
        parse_args(["run_dir=x", "episodes=many"], path)
