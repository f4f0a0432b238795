"""Private torch, numpy and gymnasium API is used in one place, the speed layer (rl_hydra/speed), and
not at all under `fast_paths=false`: an upgrade that moves such a name breaks a fast path, which
falls back, and nothing else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rl_hydra import speed
from rl_hydra.speed import cuda_graph, foreach, host_memory, lean_adam, numpy_mirror, vector_env
from rl_hydra.training import run
from tests.conftest import CONF_DIR, TINY, compose_config

PACKAGE = Path(speed.__file__).resolve().parents[1]
SPEED = PACKAGE / "speed"

# names with a leading underscore that their library documents as public
DOCUMENTED = {
    "_exit",  # os._exit
    "_fields",
    "_replace",
    "_asdict",
    "_make",
    "_field_defaults",
}  # a namedtuple's own API

# private names read outside the speed layer, each with the reason it is not one of its fast paths
ALLOWED = {
    ("envs/state.py", "_elapsed_steps"): "exact resume restores TimeLimit's step count, which gymnasium keeps private",
}


def is_private(name: str) -> bool:
    """`_x`, not `__x__` (Python's own protocol), `_x_` (Hydra's reserved config keys: `_target_`) nor a
    documented name."""
    return name.startswith("_") and not name.startswith("__") and not name.endswith("_") and name not in DOCUMENTED


def private_accesses(source: str) -> list[tuple[int, str]]:
    """(line, name) for each private attribute of another object than `self` or `cls`, read, written or
    named in getattr/setattr/hasattr/delattr, and each private module imported."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                found.append((node.lineno, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and is_private(node.args[1].value)
        ):
            found.append((node.lineno, node.args[1].value))
        elif isinstance(node, ast.ImportFrom) and node.level == 0:  # not our own package's relative imports
            names = [*node.module.split("."), *(alias.name for alias in node.names)]
            found += [(node.lineno, name) for name in names if is_private(name)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, part) for alias in node.names for part in alias.name.split(".") if is_private(part)]
    return sorted(found)


def test_the_scan_finds_private_attributes_getattr_names_and_private_modules():
    source = (
        "import torch._dynamo\nfrom gymnasium.vector import _x\nnorms = torch._foreach_norm(grads)\n"
        "v = tensor._version\nw = getattr(env, '_elapsed_steps', 0)\nself._mine = cfg.algo._target_\n"
    )
    assert private_accesses(source) == [
        (1, "_dynamo"),
        (2, "_x"),
        (3, "_foreach_norm"),
        (4, "_version"),
        (5, "_elapsed_steps"),
    ]


def test_no_private_api_is_used_outside_the_speed_layer():
    used = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if SPEED in path.parents:
            continue
        where = path.relative_to(PACKAGE).as_posix()
        used += [
            f"rl_hydra/{where}:{line} uses {name}"
            for line, name in private_accesses(path.read_text())
            if (where, name) not in ALLOWED
        ]
    assert not used, (
        "private API outside rl_hydra/speed (move it behind the seam, with a plain fallback):\n" + "\n".join(used)
    )


def test_every_allowed_exception_is_still_there():
    for where, name in ALLOWED:
        assert name in {n for _, n in private_accesses((PACKAGE / where).read_text())}, f"{where}: {name} is gone"


# --- fast_paths=false --------------------------------------------------------------------------------
class PrivateApiCalled(BaseException):
    """Raised by every entry into code that rests on private API; a BaseException, so that no
    `except Exception` on the way (a probe, a graph recording) takes it for a fallback."""


def forbid(name: str):
    def called(*args, **kwargs):
        raise PrivateApiCalled(name)

    return called


@pytest.fixture
def private_api_forbidden():
    """Every way into private API that the speed layer has, made to raise: the probes, the lean Adam,
    the mirror's walks, huge pages, the lean vector env, CUDA graphs, the foreach calls."""
    speed.forget_probes()
    with pytest.MonkeyPatch.context() as patch:
        for name in speed.PROBES:
            patch.setitem(speed.PROBES, name, forbid(f"the {name} probe"))
        patch.setattr(lean_adam.LeanAdam, "__init__", forbid("LeanAdam"))
        patch.setattr(lean_adam, "FUSED_ADAM", forbid("torch._fused_adam_"))
        for name in ("numpy_forward", "forward_tree", "answer", "view"):
            patch.setattr(numpy_mirror, name, forbid(f"numpy_mirror.{name}"))
        for name in ("zeros", "zeros_like", "relocate", "relocate_storage"):
            patch.setattr(host_memory, name, forbid(f"host_memory.{name}"))
        patch.setattr(vector_env.LeanSyncVectorEnv, "__init__", forbid("LeanSyncVectorEnv"))
        patch.setattr(vector_env, "lean", forbid("vector_env.lean"))
        patch.setattr(cuda_graph.Step, "__init__", forbid("cuda_graph.Step"))
        patch.setattr(cuda_graph.GraphedStep, "__init__", forbid("cuda_graph.GraphedStep"))
        for name in foreach.NAMES:
            patch.setitem(foreach.FOREACH, name, forbid(f"torch.{name}"))
        stand_ins = tuple(
            (name, module, attribute, forbid(f"the fast {attribute}")) for name, module, attribute, _ in speed.STAND_INS
        )
        patch.setattr(speed, "STAND_INS", stand_ins)
        yield
    speed.forget_probes()


ENV_FOR = {
    "redq": "pendulum",
    "sac": "pendulum",
    "tqc": "pendulum",
    "td3": "pendulum",
    "droq": "pendulum",
    "crossq": "pendulum",
}
ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))


def tiny_run(algo: str, *overrides: str) -> list[str]:
    return [
        f"algo={algo}",
        f"env={ENV_FOR.get(algo, 'cartpole')}",
        *TINY,
        "algo.learning_starts=100",
        "algo.train_every=10",
        "algo.gradient_steps=2",
        "algo.batch_size=16",
        *overrides,
    ]


@pytest.mark.parametrize("algo", ALGOS)
def test_fast_paths_false_trains_every_algorithm_without_private_api(algo, private_api_forbidden, tmp_path):
    summary = run(compose_config(*tiny_run(algo, "fast_paths=false", "algo.max_grad_norm=1.0")), tmp_path)
    assert summary["updates"] > 0


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn"])
def test_the_forbidden_entries_are_those_a_fast_run_takes(algo, private_api_forbidden, monkeypatch, tmp_path):
    """The same run with its fast paths on (their probes taken as passed) stops at the first entry."""
    monkeypatch.setattr(speed, "failures", dict)
    with pytest.raises(PrivateApiCalled) as called:
        run(compose_config(*tiny_run(algo)), tmp_path)
    assert "probe" not in str(called.value)
