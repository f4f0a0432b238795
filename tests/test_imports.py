"""Imports point one way: each module imports only from its own layer or the layers below it
(storage at the bottom, the entry points at the top), so no package cycles come back."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rl_hydra"

# bottom to top; a module belongs to the first entry that is its name or a package above it
LAYERS = [
    ["config", "protocols", "losses", "speed"],                   # contracts, pure functions, the speed layer
    ["networks", "buffers", "envs", "runs"],                       # building blocks; runs/: the run directory's storage
    ["algos", "loggers"],
    ["loops"],
    ["fit", "training"],                                           # build a run and hand it to a loop
    ["launch"],                                                    # the one way a run starts
    ["api", "run", "report", "video", "verify", "suite", "sweep_report", "resume", "cli", "__init__"],   # what users call
]


def layer_of(module: str) -> int:
    first = module.split(".")[1] if "." in module else "__init__"
    for level, names in enumerate(LAYERS):
        if first in names:
            return level
    raise AssertionError(f"rl_hydra.{first} is in no layer of tests/test_imports.py: add it where it belongs")


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every `rl_hydra` import in the file, those inside functions included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rl_hydra"):
            names = [f"{node.module}.{alias.name}" if node.module == "rl_hydra" else node.module
                     for alias in node.names]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.startswith("rl_hydra")]
    return found


def test_no_module_imports_from_a_layer_above_its_own():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = "rl_hydra." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        module = module.removesuffix(".__init__") if path.name == "__init__.py" and path.parent != PACKAGE else module
        own = layer_of(module if path.parent != PACKAGE or path.name != "__init__.py" else "rl_hydra")
        for line, imported in imports_of(path):
            if imported.split(".")[1:2] == ["conf"]:
                continue
            if layer_of(imported) > own:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {imported}")
    assert not upward, "imports that point up:\n" + "\n".join(upward)
