"""rl-hydra: a Hydra-configured launcher for off-policy deep RL.

from rl_hydra import train, load_run
run = train("algo=iqn", "env=cartpole", "train.total_steps=5000")
runs = sweep("algo=dqn", "seed=0,1,2", sweep_dir="outputs/seeds")   # the seeds in one process
run = load_run("outputs/2026-01-01/12-00-00-000000_iqn_cartpole")
action = run.predict(observation)
verdict = verify_run("outputs/...")   # re-run its first steps and compare with its record
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rl_hydra.commands.api import compose_train_config, sweep, train
    from rl_hydra.commands.run import Run, load_run
    from rl_hydra.verify import verify_run

__all__ = ["Run", "compose_train_config", "load_run", "sweep", "train", "verify_run"]
_HOMES = {
    "Run": "rl_hydra.commands.run",
    "load_run": "rl_hydra.commands.run",
    "compose_train_config": "rl_hydra.commands.api",
    "train": "rl_hydra.commands.api",
    "sweep": "rl_hydra.commands.api",
    "verify_run": "rl_hydra.verify",
}


def __getattr__(name: str) -> Any:
    # imported on first use: `python train.py -m ...` starts without torch in the launching process
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'rl_hydra' has no attribute {name!r}")
