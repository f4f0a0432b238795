"""A run directory is data, never code. Its .hydra/config.yaml names Python callables (`_target_`)
that building the run would call, so whatever reads a run directory (evaluate, load_run, verify,
resume) reads its config through `read_config`, which refuses, before anything is built, a config
that names a callable the project does not trust:

- the targets rl_hydra's own config tree (conf/) names, and the classes of its algorithms,
  networks, buffers and env wrappers (rl_hydra.algos/networks/buffers/envs);
- torch's optimizers (subclasses of torch.optim.Optimizer in torch.optim);
- gymnasium's observation, action and reward wrappers listed in GYMNASIUM_WRAPPERS (none that
  writes files or opens windows).

A user who means to open runs built from their own code extends the list for one command with
the environment variable RL_HYDRA_TRUST (comma-separated: `mypkg.` trusts a module and all below
it, `mypkg.nets.MyNet` one target), or `trust=` in the Python API. Interpolations may use only
rl_hydra's own resolvers (`${oc.env:...}` would read this machine's environment into the run).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import CONF_DIR
from rl_hydra.runs.run_dir import RunDirectory, RunError

TRUST_VARIABLE = "RL_HYDRA_TRUST"
COMPONENT_PACKAGES = ("rl_hydra.algos.", "rl_hydra.networks.", "rl_hydra.buffers.", "rl_hydra.envs.")
GYMNASIUM_WRAPPERS = frozenset(
    {
        "AtariPreprocessing",
        "FrameStackObservation",
        "TimeLimit",
        "ClipAction",
        "RescaleAction",
        "ClipReward",
        "NormalizeObservation",
        "NormalizeReward",
        "GrayscaleObservation",
        "ResizeObservation",
        "ReshapeObservation",
        "FlattenObservation",
        "DtypeObservation",
        "RescaleObservation",
        "MaxAndSkipObservation",
        "StickyAction",
        "FilterObservation",
        "TimeAwareObservation",
        "DelayObservation",
        "RecordEpisodeStatistics",
    }
)
RESOLVER = re.compile(r"\$\{\s*([\w.\-]+)\s*:")  # `${name:` opens a resolver call; `${a.b}` is a reference


class UntrustedConfig(RunError):
    """A run directory's config that names a callable the project does not trust."""


@functools.lru_cache(maxsize=1)
def conf_targets() -> frozenset[str]:
    """Every `_target_` that rl_hydra's own config files name."""
    found = re.compile(r"^\s*(?:-\s*)?_target_:\s*([\w.]+)", re.M)
    return frozenset(target for path in CONF_DIR.rglob("*.yaml") for target in found.findall(path.read_text()))


def user_trusted(extra: Iterable[str] = ()) -> tuple[str, ...]:
    """What the user trusts beyond the project's list: RL_HYDRA_TRUST and `extra`."""
    names = [name.strip() for name in os.environ.get(TRUST_VARIABLE, "").split(",")]
    return tuple(name for name in (*names, *extra) if name)


def is_trusted(target: str, extra: Iterable[str] = ()) -> bool:
    """Whether building `target` is allowed. Names are checked as text first, so that nothing
    outside the trusted packages is even imported to find out."""
    if target in conf_targets():
        return True
    if any(target == name or (name.endswith(".") and target.startswith(name)) for name in user_trusted(extra)):
        return True
    module, _, name = target.rpartition(".")
    if target.startswith(COMPONENT_PACKAGES):  # a class defined there, not one it imports
        found = _attribute(module, name)
        return inspect.isclass(found) and found.__module__.startswith("rl_hydra.")
    if module == "gymnasium.wrappers":
        return name in GYMNASIUM_WRAPPERS
    if module == "torch.optim":
        import torch

        found = _attribute(module, name)
        return inspect.isclass(found) and issubclass(found, torch.optim.Optimizer)
    return False


def _attribute(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


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


def strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, value) of every string in a plain config tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from strings(value, f"{path}[{index}]")
    elif isinstance(node, str):
        yield path, node


def check_trusted(cfg: DictConfig | dict, source: str | Path, extra: Iterable[str] = ()) -> None:
    """Raise UntrustedConfig, naming the key and the target, for the first callable in `cfg` that
    is not trusted or the first interpolation that calls a resolver other than rl_hydra's own."""
    tree = OmegaConf.to_container(cfg, resolve=False) if OmegaConf.is_config(cfg) else cfg
    for key, target in targets(tree):
        if not isinstance(target, str) or not is_trusted(target, extra):
            raise UntrustedConfig(
                f"{source} names {key}={target}, which a run directory may not build (nothing was "
                f"run); if you trust the code it names, allow it with {TRUST_VARIABLE}={target} "
                f"(docs/runs.md, 'Opening someone else's run')"
            )
    env_id = (tree.get("env") or {}).get("id") if isinstance(tree, dict) else None
    if isinstance(env_id, str) and ":" in env_id:  # gymnasium imports `module` of `module:Env-v0`
        module = env_id.split(":", 1)[0]
        if not any(f"{module}.".startswith(name) or module == name for name in ("rl_hydra.", *user_trusted(extra))):
            raise UntrustedConfig(
                f"{source} names env.id={env_id}, whose module {module} gymnasium would import; "
                f"a run directory may not (nothing was run); if you trust it, allow it with "
                f"{TRUST_VARIABLE}={module}."
            )
    for key, text in strings(tree):
        for resolver in RESOLVER.findall(text):
            if not resolver.startswith("rl_hydra."):
                raise UntrustedConfig(
                    f"{source} has {key}={text}, an interpolation through the {resolver} resolver, "
                    f"which a run directory may not use (only rl_hydra.* resolvers and references)"
                )


def load_yaml(path: Path) -> DictConfig:
    """A YAML file of a run directory as a config, or one RunError line saying what is wrong with it."""
    try:
        cfg = OmegaConf.load(path)
    except Exception as error:  # noqa: BLE001 - a YAML, encoding or OmegaConf error: the file is damaged
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RunError(f"{path} cannot be read as a config ({type(error).__name__}: {first})") from None
    if not isinstance(cfg, DictConfig) or not cfg:
        raise RunError(f"{path} is {'empty' if not cfg else 'not a mapping of keys'}: not a run's config")
    return cfg


def read_config(directory: RunDirectory, extra: Iterable[str] = ()) -> DictConfig:
    """The config a run directory records, read as data: one RunError line for a missing, damaged
    or foreign file, UntrustedConfig for one that names code the project does not trust."""
    path = directory.recorded_config
    if not directory.path.is_dir():
        raise RunError(f"run directory {directory.path} does not exist")
    if not path.is_file():
        raise RunError(f"{directory.path} is not a run directory (no .hydra/config.yaml)")
    cfg = load_yaml(path)
    check_trusted(cfg, path, extra)
    for key in ("env", "train", "algo"):
        if not isinstance(cfg.get(key), DictConfig):
            raise RunError(f"{path} has no {key} section: not a run's config")
    return cfg
