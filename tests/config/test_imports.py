"""Imports point one way: each module imports only from its own floor or the floors below it
(contracts at the bottom, the entry points at the top; scripts/house.py draws them), and no
modules import each other."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from house import (  # noqa: E402
    LAYERS,
    PACKAGE,
    READ_LIKE_PAPERS,
    READING_BUDGET,
    circles,
    floor_of,
    import_graph,
    reading_set,
    room,
    runtime_nodes,
    upward,
)


def test_every_room_of_the_package_is_on_a_floor():
    unplaced = sorted({room(module) for module in import_graph()} - {name for rooms in LAYERS for name in rooms})
    assert not unplaced, f"rooms on no floor of scripts/house.py's LAYERS (add each where it belongs): {unplaced}"


@pytest.mark.parametrize("module", READ_LIKE_PAPERS)
def test_importing_an_algorithm_loads_only_what_it_reads(module):
    loaded = reading_set(module)
    assert "rl_hydra.speed" not in loaded and "rl_hydra.config" not in loaded and "rl_hydra.envs" not in loaded
    assert len(loaded) <= READING_BUDGET["modules"], sorted(loaded)
    assert sum(loaded.values()) <= READING_BUDGET["lines"], loaded


def test_no_module_imports_from_a_floor_above_its_own():
    assert not upward(import_graph()), "imports that point up:\n" + "\n".join(upward(import_graph()))


def test_the_upward_finder_counts_an_import_from_above_inside_a_function():
    graph = {"rl_hydra.loops.runner": {"rl_hydra.training": 12}, "rl_hydra.training": {"rl_hydra.loops": 3}}
    assert upward(graph) == ["rl_hydra.loops.runner:12 imports rl_hydra.training"]
    assert floor_of("rl_hydra.commands.cli") == len(LAYERS) - 1


# --- no circles -------------------------------------------------------------------------------
# Floors allow imports within a floor; a circle there (a function-level import included) is still a
# tangle. Neither rooms nor modules form one (issue #67: training and distributed used to import
# each other). An import under `if TYPE_CHECKING:` never runs: not counted.


def test_the_circle_finder_finds_a_circle_through_any_length():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_two_rooms_import_each_other():
    graph: dict[str, set[str]] = {}
    for module, imported in import_graph().items():
        graph.setdefault(room(module), set()).update(room(other) for other in imported if room(other) != room(module))
    assert not circles(graph), f"rooms that import each other: {circles(graph)}"


def test_no_two_modules_import_each_other_through_any_path():
    assert not circles(import_graph()), f"modules that import each other: {circles(import_graph())}"


def test_an_import_for_type_checking_only_is_not_a_runtime_import():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\nimport c")
    names = [alias.name for node in runtime_nodes(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert names == ["b", "c"]


# --- no private doors into Hydra --------------------------------------------------------------
# Hydra is pinned below 1.4; its private modules and attributes are where an upgrade breaks first.
# The scan covers the package and the project's own Optuna sweeper: the plugin needs none either.

OWN_PLUGINS = {"rl_hydra_optuna_sweeper", "rl_hydra_packed_launcher", "rl_hydra_schema"}  # this project's
HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}  # config keys, public
DOTTED = re.compile(r"hydra(_plugins)?(\.\w+)+")
NAMED_ATTRIBUTE = {"getattr", "setattr", "hasattr", "delattr"}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__")) and name not in HYDRA_KEYS


def hydras(module: str) -> bool:
    """Whether a dotted module name is Hydra's: hydra.*, or a plugin in hydra_plugins/ not this project's."""
    top, _, rest = module.partition(".")
    return top == "hydra" or (top == "hydra_plugins" and rest.split(".")[0] not in OWN_PLUGINS)


def private_hydra_module(module: str) -> bool:
    return hydras(module) and any(private(part) for part in module.split(".")[1:])


def absolute(node: ast.ImportFrom, module: str) -> str:
    """The module a `from ... import` names, a relative one resolved from `module` (the file's dotted name)."""
    if not node.level:
        return node.module or ""
    package = module.split(".")[: -node.level]
    return ".".join([*package, *([node.module] if node.module else [])])


def root(node: ast.AST) -> str | None:
    """The name an expression starts from: GlobalHydra in `GlobalHydra.instance().hydra`."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def bindings(tree: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) for every name a value is given to: assignments, `with ... as`, `for`; a tuple
    assigned a tuple, element by element."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs = [(node.optional_vars, node.context_expr)]
        elif isinstance(node, (ast.For, ast.comprehension)):
            pairs = [(node.target, node.iter)]
        else:
            continue
        for target, value in pairs:
            if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
                yield from zip(target.elts, value.elts)
            else:
                yield target, value


def hydra_objects(tree: ast.AST, module: str) -> set[str]:
    """The names in a file that hold something of Hydra's: imported from it, given a value that
    starts from one of those, or an argument annotated with one of its types."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names if hydras(alias.name)}
        elif isinstance(node, ast.ImportFrom) and hydras(absolute(node, module)):
            names |= {alias.asname or alias.name for alias in node.names}
    while True:
        held = {target.id for target, value in bindings(tree) if isinstance(target, ast.Name) and root(value) in names}
        held |= {
            node.arg
            for node in ast.walk(tree)
            if isinstance(node, ast.arg)
            and node.annotation is not None
            and any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node.annotation))
        }
        if held <= names:
            return names
        names |= held


def private_hydra_uses(source: str, module: str) -> list[str]:
    """'line: what' for each private Hydra module imported or named in a string (a logger's name),
    and each private attribute of something Hydra's: an imported name, a variable or argument
    holding one of its objects, or `self` in a subclass of one of its classes (an attribute the
    class does not set itself)."""
    tree = ast.parse(source)
    hydra_names = hydra_objects(tree, module)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if private_hydra_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and hydras(imported := absolute(node, module)):
            found += [
                f"{node.lineno}: from {imported} import {a.name}"
                for a in node.names
                if private_hydra_module(f"{imported}.{a.name}")
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOTTED.fullmatch(node.value):
            found += [f"{node.lineno}: {node.value!r}"] if private_hydra_module(node.value) else []
        elif isinstance(node, ast.Attribute) and private(node.attr) and root(node.value) in hydra_names:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in NAMED_ATTRIBUTE
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and private(node.args[1].value)
            and root(node.args[0]) in hydra_names
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ClassDef) and any(root(base) in hydra_names for base in node.bases):
            found += inherited_private(node)
    return found


def inherited_private(cls: ast.ClassDef) -> list[str]:
    """`self._name` in a subclass of a Hydra class where the class neither sets nor defines `_name`."""
    own = {node.name for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own |= {target.id for target, _ in bindings(cls) if isinstance(target, ast.Name)}
    own |= {
        target.attr
        for target, _ in bindings(cls)
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
    }
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and private(node.attr)
        and node.attr not in own
    ]


def test_no_module_uses_a_private_hydra_module_or_attribute():
    found = []
    for folder in (PACKAGE, ROOT / "hydra_plugins"):
        for path in sorted(folder.rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found += [f"{path.relative_to(ROOT)}:{use}" for use in private_hydra_uses(path.read_text(), module)]
    assert not found, "private Hydra modules or attributes (use Hydra's public API):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "from hydra._internal.utils import get_args_parser",
        "import hydra._internal.utils",
        "from hydra._internal import utils",
        "from hydra_plugins.hydra_joblib_launcher import _core",
        "logging.getLogger('hydra_plugins.hydra_joblib_launcher._core')",
        "from hydra.core.singleton import Singleton\nSingleton._instances.clear()",
        "import hydra.core.singleton as s\ns.Singleton._instances",
        "from hydra.core.singleton import Singleton\ngetattr(Singleton, '_instances')",
        "from hydra.version import _UNSPECIFIED_",
        "from hydra.core.global_hydra import GlobalHydra\nloader = GlobalHydra.instance().config_loader()\nloader._x",
        "from hydra.core.global_hydra import GlobalHydra\na, b = GlobalHydra.instance(), 1\na._x",
        "from hydra.core.override_parser.types import Override\ndef f(o: list[Override]):\n    return o[0]._x",
        "from hydra.plugins.sweeper import Sweeper\nclass S(Sweeper):\n    def f(self):\n        return self._launcher",
    ],
)
def test_the_scan_finds_each_kind_of_private_hydra_use(source):
    assert private_hydra_uses(source, "rl_hydra.example"), source


@pytest.mark.parametrize(
    "source",
    [
        "from ._study import StudySweep",  # the project's own plugin's module
        "from hydra import compose\ncfg = compose(config_name='train')\ncfg.algo._target_",  # a config key
        "from hydra.plugins.sweeper import Sweeper\nclass S(Sweeper):\n    def f(self):\n        self._n = 1\n"
        "        return self._n",
        "from hydra.core.global_hydra import GlobalHydra\nGlobalHydra.instance().hydra.__class__",
    ],
)
def test_the_scan_leaves_public_and_own_names_alone(source):
    assert not private_hydra_uses(source, "hydra_plugins.rl_hydra_optuna_sweeper.optuna_sweeper"), source
