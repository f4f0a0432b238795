"""The Python API: train a run from overrides, exactly as the CLI would, and get it back."""

from __future__ import annotations

from pathlib import Path

from hydra import compose
from omegaconf import DictConfig, OmegaConf, open_dict

from rl_hydra.commands.launch import launch
from rl_hydra.commands.run import Run, load_run
from rl_hydra.config import hydra_scope, integral_overrides
from rl_hydra.errors import BadArgument
from rl_hydra.schema import type_refusal


def compose_train_config(*overrides: str) -> DictConfig:
    """The config `python train.py <overrides>` runs (Hydra's compose API, same files)."""
    return _compose(overrides)[0]


def _compose(overrides) -> tuple[DictConfig, DictConfig]:
    """(the run's config, the part of Hydra's own node a run directory keeps: the run directory,
    the group choices and the overrides, an integer key's 1e3 written 1000 as the CLI writes it)."""
    from hydra.errors import HydraException

    overrides = integral_overrides(overrides)
    with hydra_scope():  # also from inside a running Hydra app, whose state it leaves as it was
        try:
            cfg = compose(config_name="train", overrides=list(overrides), return_hydra_config=True)
        except HydraException as error:  # a value of the wrong type, a key or option that does not exist
            raise BadArgument(type_refusal(error.__cause__) or str(error).splitlines()[0]) from None
        except OverflowError as error:  # a float key given an integer past a float's range
            raise BadArgument(type_refusal(error) or str(error).splitlines()[0]) from None
        hydra_cfg = OmegaConf.create(
            {
                "run": {"dir": cfg.hydra.run.dir},
                "runtime": {"choices": OmegaConf.to_container(cfg.hydra.runtime.choices)},
                "overrides": {"task": list(overrides)},
            }
        )
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, hydra_cfg


def train(*overrides: str, run_dir: str | Path | None = None, checkpoint: str = "best") -> Run:
    """Train with CLI-style overrides into a new run directory (where `python train.py` would put
    it: `hydra.run.dir`) or `run_dir`, and load it back (`Run.run_dir` says where). Prints the
    run directory when it starts and when it ends.

    >>> run = train("algo=iqn", "env=cartpole", "train.total_steps=5000")
    >>> run.predict([0.0, 0.0, 0.0, 0.0])
    """
    cfg, hydra_cfg = _compose(overrides)
    run_dir = Path(run_dir if run_dir is not None else hydra_cfg.run.dir)
    print(f"rl-hydra: training into {run_dir}")
    summary = launch(cfg, run_dir, overrides=list(hydra_cfg.overrides.task), hydra_cfg=hydra_cfg)
    print(
        f"rl-hydra: {summary['status']} at step {summary['global_step']}, eval return "
        f"{summary['eval_return_mean']}; run directory: {run_dir}"
    )
    return load_run(run_dir, checkpoint=checkpoint, trust=named_code(cfg))


def named_code(cfg: DictConfig) -> list[str]:
    """The callables (and an env id's module) a config this process composed names: this process
    trusts them, since its caller chose them (rl_hydra/runs/trust.py)."""
    from rl_hydra.runs.trust import targets

    found = [str(target) for _, target in targets(OmegaConf.to_container(cfg, resolve=False))]
    env_id = str(OmegaConf.select(cfg, "env.id", default=""))
    return found + ([env_id.split(":", 1)[0]] if ":" in env_id else [])


def sweep(*overrides: str, sweep_dir: str | Path, packed: bool = True, checkpoint: str = "best") -> list[Run]:
    """`python train.py -m <overrides>` into `sweep_dir` (the seeds in one process, hydra/launcher=packed,
    unless `packed=False`), then each finished job's run, in the order of their directories. A refused
    sweep raises BadArgument with its error line; a sweep some of whose jobs failed returns the others.

    >>> runs = sweep("algo=dqn", "seed=0,1,2", "train.total_steps=5000", sweep_dir="outputs/my_sweep")
    """
    import json
    import subprocess
    import sys

    launcher = ["hydra/launcher=packed"] if packed else []
    command = [
        sys.executable,
        "-m",
        "rl_hydra.commands.cli",
        "-m",
        *overrides,
        *launcher,
        f"hydra.sweep.dir={sweep_dir}",
    ]
    done = subprocess.run(command, stderr=subprocess.PIPE, text=True)
    sys.stderr.write(done.stderr)
    if done.returncode == 2:
        lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
        raise BadArgument(lines[-1].removeprefix("error: ") if lines else f"the sweep exited {done.returncode}")
    finished = [
        path.parent
        for path in sorted(Path(sweep_dir).glob("*/summary.json"))
        if json.loads(path.read_text()).get("status") == "completed"
    ]
    return [load_run(run_dir, checkpoint=checkpoint) for run_dir in finished]
