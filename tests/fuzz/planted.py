"""An attacker's module, named by mutated run directories: importing it, or calling what it
defines, leaves a line in the file that $RL_HYDRA_FUZZ_MARK names. Opening a run directory must
never import it (the fuzzer's audit hook also refuses the import)."""

from __future__ import annotations

import os

import gymnasium as gym


def mark(what: str) -> None:
    path = os.environ.get("RL_HYDRA_FUZZ_MARK")
    if path:
        with open(path, "a") as f:
            f.write(f"{what}\n")


def X(*args, **kwargs):
    """A `_target_`: leaves a mark when built."""
    mark("tests.fuzz.planted.X called")
    return None


class Env(gym.Env):
    """An env id `tests.fuzz.planted:Env-v0` reaches."""

    def __init__(self, render_mode=None):
        mark("tests.fuzz.planted.Env built")
        raise RuntimeError("planted env")


mark("tests.fuzz.planted imported")
if "Env-v0" not in gym.registry:
    gym.register("Env-v0", entry_point=Env)
