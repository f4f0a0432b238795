"""A finished (or stopped) run, loaded back from its directory alone."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig

from rl_hydra.algos.common import is_raw_pixels
from rl_hydra.config import resolve_device
from rl_hydra.envs import make_env
from rl_hydra.errors import BadArgument
from rl_hydra.loops.evaluate import evaluate
from rl_hydra.loops.settings import eval_epsilon
from rl_hydra.runs.run_dir import RunDirectory, RunError, check_fits, check_optimizer_state, misfit
from rl_hydra.runs.trust import read_config
from rl_hydra.schema.evaluate import CHECKPOINTS
from rl_hydra.spaces import shape_of


class Run:
    """`cfg`, `agent`, `summary`, plus `predict` and `evaluate`, for one run directory."""

    def __init__(self, path: str | Path, checkpoint: str = "best", device: str = "cpu", trust: Iterable[str] = ()):
        from rl_hydra.build import build_agent, check_widths_fit

        self.path = Path(path)
        self.directory = RunDirectory(self.path)
        if checkpoint not in CHECKPOINTS:
            raise BadArgument(f"checkpoint={checkpoint!r} is not allowed; choose one of: {', '.join(CHECKPOINTS)}")
        # data, never code: only targets the project trusts (or `trust`: rl_hydra/runs/trust.py) are built
        self.cfg: DictConfig = read_config(self.directory, trust)
        self.checkpoint = checkpoint
        self.device = resolve_device(device)
        state = self.directory.load_checkpoint(checkpoint, map_location=self.device)
        check_widths_fit(self.cfg, state["agent"], self.directory.checkpoints / f"{checkpoint}.pt")
        env = make_env(self.cfg.env, seed=0, num_envs=1, vectorization="sync")  # its spaces and wrappers
        assert isinstance(env, gym.vector.SyncVectorEnv)
        self.observation_space = env.single_observation_space
        self.agent = build_agent(self.cfg, env.single_observation_space, env.single_action_space, self.device)
        # how the env turns gymnasium's Dict or Tuple observations into a flat dict of parts (its
        # observation wrappers, innermost first, ObservationParts last): predict takes either
        self.observation_wrappers = [
            layer for layer in reversed(list(_wrappers(env.envs[0]))) if isinstance(layer, gym.ObservationWrapper)
        ]
        env.close()
        path = self.directory.checkpoints / f"{checkpoint}.pt"
        check_fits(self.agent.state_dict(), state["agent"], path, "agent")
        try:
            self.agent.load_state_dict(state["agent"])
        except (KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError) as error:
            raise RunError(
                f"checkpoint {checkpoint}.pt of {self.path} does not fit its config ({misfit(error)})"
            ) from None
        check_optimizer_state(self.agent, path)
        self.step = state["runner"]["global_step"]

    @property
    def run_dir(self) -> Path:
        """The run directory (the same as `path`)."""
        return self.path

    @property
    def summary(self) -> dict[str, Any] | None:
        return self.directory.read_summary()

    @property
    def provenance(self) -> dict[str, Any] | None:
        """What made the run (provenance.json: {"sessions": [...]}, one per launch that trained it),
        or None for a run made before it was recorded."""
        from rl_hydra.runs import provenance

        return provenance.read(self.directory)

    @property
    def recurrent(self) -> bool:
        return bool(self.agent.capabilities.recurrent)

    def predict(self, obs, state: Any = None, deterministic: bool = True):
        """Actions for one observation (obs_dim,) or a batch (n, obs_dim) (frames: (C, H, W) or
        (n, C, H, W); a Discrete env's index or indices; for a Dict or Tuple env, a dict of its
        parts as the run's env gives them, one or a batch, or one observation as gymnasium's env
        gives it, which the run's observation wrappers turn into parts, text dropped).

        Feed-forward agents return the actions; recurrent agents return
        (actions, state): pass the state back with the next observation. An observation of another
        shape, or of a dtype that does not cast to the space's (a float for an index), raises one
        ValueError line naming the shape and dtype the run takes.
        """

        def checked(value: Any, part: gym.Space, name: str) -> tuple[np.ndarray, bool]:
            """(`value` as an array, whether it is one observation), or one ValueError line."""
            shape, dtype = shape_of(part), np.dtype(part.dtype) if part.dtype is not None else None
            batch = f"({', '.join(['n', *map(str, shape)])}{',' if not shape else ''})"
            wanted = f"expected shape {shape} for one observation or {batch} for a batch" + (
                f", of dtype {dtype}" if dtype is not None else ""
            )
            try:
                array = np.asarray(value)
            except ValueError:  # a ragged sequence
                raise ValueError(f"predict: {name} is a ragged sequence, not an array; {wanted}") from None
            fits = array.shape == shape or (array.ndim == len(shape) + 1 and array.shape[1:] == shape)
            if not fits or (dtype is not None and not np.can_cast(array.dtype, dtype, casting="same_kind")):
                raise ValueError(
                    f"predict: {name} of shape {array.shape} and dtype {array.dtype} does not fit this run's "
                    f"observations ({self.cfg.env.id}); {wanted}"
                )
            return array, array.ndim == len(shape)

        space = self.observation_space
        if isinstance(space, gym.spaces.Dict):
            if not isinstance(obs, dict) or set(obs) != set(space.spaces):  # one as gymnasium's env gives it
                for wrapper in self.observation_wrappers:
                    obs = wrapper.observation(obs)
            parts = {key: checked(obs[key], part, f"obs[{key!r}]") for key, part in space.spaces.items()}
            obs = {key: array for key, (array, _) in parts.items()}
            single = next(iter(parts.values()))[1]
            sizes = {1 if one else len(array) for array, one in parts.values()}
            if len(sizes) > 1 or any(one != single for _, one in parts.values()):
                shapes = ", ".join(f"{key!r}: {array.shape}" for key, array in obs.items())
                raise ValueError(f"predict: the parts of obs ({shapes}) are not all one observation or one batch")
            batch = {k: v[None] for k, v in obs.items()} if single else obs
        else:
            obs, single = checked(obs, space, "obs")
            if isinstance(space, gym.spaces.Box) and not is_raw_pixels(obs):
                obs = obs.astype(np.float32, copy=False)
            batch = obs[None] if single else obs
        with torch.no_grad():
            actions, state = self.agent.act(batch, state, explore=not deterministic)
        actions = actions[0] if single else actions
        return (actions, state) if self.recurrent else actions

    def export(self, path: str | Path | None = None, format: str = "onnx") -> Path:
        """The greedy policy as one file (`format`: onnx, torchscript or torch_export) that acts as
        `predict` does: observation in, the env's action out, checked against predict before it is
        written to `path` (default `<run>/export/policy_<checkpoint>.<ext>`), which it returns
        (rl_hydra/commands/policy_export.py; docs/export.md)."""
        from rl_hydra.commands.policy_export import export_run

        return export_run(self, format, path)

    def evaluate(self, episodes: int = 10, seed: int = 0, render_mode: str | None = None) -> dict[str, Any]:
        """Greedy episodes on fresh envs built from the run's own config, stepped in this process (a
        record never chooses how many processes opening it starts; sync and async step the same)."""
        env = make_env(self.cfg.env, seed=seed, num_envs=episodes, render_mode=render_mode, vectorization="sync")
        try:
            returns, lengths = evaluate(self.agent, env, seed, epsilon=eval_epsilon(self.cfg.env))
        finally:
            env.close()
        return {
            "returns": returns.tolist(),
            "lengths": lengths.tolist(),
            "return_mean": float(returns.mean()),
            "return_std": float(returns.std()),
            "episodes": episodes,
            "seed": seed,
        }


def _wrappers(env: gym.Env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def load_run(path: str | Path, checkpoint: str = "best", device: str = "cpu", trust: Iterable[str] = ()) -> Run:
    """The run in `path`. Its config builds only the callables the project trusts, and those named
    in `trust` or RL_HYDRA_TRUST (`mypkg.` for a module and all below it; rl_hydra/runs/trust.py)."""
    return Run(path, checkpoint=checkpoint, device=device, trust=trust)
