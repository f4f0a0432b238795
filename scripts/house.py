"""The drawing of the house: rl_hydra's rooms (the first name under the package) on their floors,
the import arrows between rooms, the arrows that point up a floor, and the circles (modules that
import each other through any path, imports inside functions included). tests/config/test_imports.py
holds the package to its figures: 0 upward, 0 circles.

    python scripts/house.py                     # this checkout
    python scripts/house.py --package PATH      # another checkout's rl_hydra/ (e.g. a git worktree)
    python scripts/house.py --reading rl_hydra.algos.tqc   # what importing a module loads: modules, lines
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rl_hydra"

# floors, bottom to top: a module lives on the floor of its room (the first name under rl_hydra)
LAYERS = [
    ["errors", "choices", "schema", "config", "protocols", "spaces", "losses"],  # contracts, pure functions
    ["networks", "buffers", "envs", "runs"],  # building blocks; runs/: the run directory's storage
    ["algos", "loggers"],
    ["speed"],  # the fast paths, attached to a built run from outside (speed.attach)
    ["loops"],
    ["fit", "build"],  # a run's parts built from its config
    ["distributed"],  # Ray actors and replay shards, and the learner that drives a Runner over them
    ["training"],  # one run: built and handed to a loop, or to distributed
    ["commands", "verify", "__init__"],  # what users call: the CLI, the API, launch, reports, resume
]


def room(module: str) -> str:
    """`rl_hydra.loops.runner` -> `loops`; the package itself -> `__init__`."""
    return module.split(".")[1] if "." in module else "__init__"


def floor_of(module: str) -> int | None:
    return next((level for level, rooms in enumerate(LAYERS) if room(module) in rooms), None)


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if path.name == "__init__.py" else parts)


def runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree` but those under `if TYPE_CHECKING:`, whose imports never run."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            yield from (n for child in node.orelse for n in [child, *runtime_nodes(child)])
            continue
        yield node
        yield from runtime_nodes(node)


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """Each rl_hydra module -> {module it imports: the first line importing it} (`from a import b`:
    a.b where b is a module; the config folder, data, is left out)."""
    paths = {module_name(path, package): path for path in sorted(package.rglob("*.py"))}

    def nearest(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        imported: dict[str, int] = {}
        for node in runtime_nodes(ast.parse(path.read_text())):
            targets: list[str | None] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rl_hydra"):
                full = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [name if name in paths else nearest(node.module) for name in full]
            elif isinstance(node, ast.Import):
                targets = [nearest(alias.name) for alias in node.names if alias.name.startswith("rl_hydra")]
            for found in targets:
                if found and found != module and room(found) != "conf":
                    imported.setdefault(found, getattr(node, "lineno", 0))
        graph[module] = imported
    return graph


def circles(graph: dict[str, set[str]] | dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    """`module:line imports other` for each import of a module on a higher floor than its own."""
    found = []
    for module, imported in sorted(graph.items()):
        for other, line in sorted(imported.items()):
            mine, theirs = floor_of(module), floor_of(other)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module}:{line} imports {other}")
    return found


def lines_of(package: Path, name: str) -> int:
    paths = [package / f"{name}.py"] if (package / f"{name}.py").is_file() else list((package / name).rglob("*.py"))
    return sum(len(path.read_text().splitlines()) for path in paths)


def draw(package: Path) -> str:
    graph = import_graph(package)
    rooms = sorted({room(module) for module in graph})
    arrows = {(room(m), room(o)) for m, imported in graph.items() for o in imported if room(m) != room(o)}
    placed = {name for rooms_ in LAYERS for name in rooms_}
    out = []
    for level in reversed(range(len(LAYERS))):
        here = [name for name in LAYERS[level] if name in rooms]
        out.append(f"floor {level}: " + "  ".join(f"{name} ({lines_of(package, name)})" for name in here))
    unplaced = [name for name in rooms if name not in placed]
    if unplaced:
        out.append("on no floor: " + "  ".join(f"{name} ({lines_of(package, name)})" for name in unplaced))
    room_graph: dict[str, set[str]] = {}
    for a, b in arrows:
        room_graph.setdefault(a, set()).add(b)
    up, module_circles = upward(graph), circles(graph)
    out += [
        f"rooms {len(rooms)}, arrows between rooms {len(arrows)}, upward {len(up)}, "
        f"circles of rooms {len(circles(room_graph))}, circles of modules {len(module_circles)}",
        *(f"  up: {line}" for line in up),
        *(f"  circle: {' -> '.join(group)}" for group in module_circles),
    ]
    return "\n".join(out)


# what `import rl_hydra.algos.<name>` may load at most: an algorithm reads like its paper, not its framework
READING_BUDGET = {"modules": 12, "lines": 1500}
READ_LIKE_PAPERS = ("rl_hydra.algos.tqc", "rl_hydra.algos.sac", "rl_hydra.algos.iqn", "rl_hydra.algos.dqn")


def reading_set(module: str) -> dict[str, int]:
    """{rl_hydra module: its lines} that importing `module` loads, measured in a fresh interpreter."""
    code = (
        f"import importlib, json, sys; importlib.import_module({module!r}); "
        "print(json.dumps({name: sum(1 for _ in open(m.__file__)) for name, m in sys.modules.items() "
        "if name.split('.')[0] == 'rl_hydra' and getattr(m, '__file__', None)}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE.parent)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, default=PACKAGE, help="an rl_hydra/ folder (default: this one)")
    parser.add_argument("--reading", nargs="+", metavar="MODULE", help="print what importing each module loads")
    args = parser.parse_args()
    if args.reading:
        for module in args.reading:
            loaded = reading_set(module)
            print(f"{module}: {len(loaded)} modules, {sum(loaded.values())} lines: {', '.join(sorted(loaded))}")
        return
    print(draw(args.package.resolve()))


if __name__ == "__main__":
    main()
