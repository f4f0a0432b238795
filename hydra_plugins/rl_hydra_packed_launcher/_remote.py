"""Where a pack trains (`hydra.launcher.via`): in this process, in `n_jobs` worker processes of this
machine, or as one job of a launcher that exists: a submitit job (SLURM, or submitit's local
processes) or a Ray task. Whichever, a pack is one job to it (one GPU a pack on a GPU sweep), at most
`n_jobs` at once, and it returns each member's JobReturn as the basic launcher's job would."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rl_hydra.errors import BadArgument, NotInstalled

VIA = ("local", "submitit_local", "submitit_slurm", "ray")
# a Ray task's options that a user may set (ray.remote's); `address` is where ray.init connects
RAY_KEYS = ("address", "num_cpus", "num_gpus", "memory", "resources")
# what a pack trains: (pack, hydra context, task, Hydra's singletons) -> [(job index, JobReturn)]
TrainPack = Callable[[list, Any, Any, dict], list]


def check_via(via: Any, executor: dict[str, Any], on_gpu: bool, folder: Path) -> Any:
    """The submitit executor or Ray options for `via` with `executor`'s parameters (a GPU each when the
    sweep trains on one and none is asked), or a ConfigError naming the bad value: before anything is built."""
    if via not in VIA:
        raise BadArgument(f"hydra.launcher.via={via} is not a choice; choose one of: {', '.join(VIA)}")
    if via == "local":
        if executor:
            raise BadArgument(
                f"hydra.launcher.executor={executor} is for via=submitit_local, submitit_slurm or ray; "
                "via=local takes n_jobs only"
            )
        return None
    if via == "ray":
        unknown = sorted(set(executor) - set(RAY_KEYS))
        if unknown:
            raise BadArgument(
                f"hydra.launcher.executor.{unknown[0]} is not a Ray task option; choose from: {', '.join(RAY_KEYS)}"
            )
        try:
            import ray  # noqa: F401
        except ImportError:
            raise NotInstalled('hydra.launcher.via=ray needs Ray: pip install -e ".[ray]"') from None
        return {"num_gpus": 1, **executor} if on_gpu else dict(executor)
    try:
        import submitit
    except ImportError:
        raise NotInstalled(f'hydra.launcher.via={via} needs submitit: pip install -e ".[submitit]"') from None
    existed = folder.exists()  # submitit makes its folder at once: a refused command takes it back
    try:
        executor_ = submitit.AutoExecutor(folder=folder / "%j", cluster=via.removeprefix("submitit_"))
        executor_.update_parameters(**({"gpus_per_node": 1, **executor} if on_gpu else executor))
    except (NameError, AssertionError, TypeError, RuntimeError) as error:  # submitit says which parameter
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        message = str(error).splitlines()[0]
        raise BadArgument(f"hydra.launcher.via={via} executor={executor}: {message}") from None
    return executor_


def train_elsewhere(
    via: str, executor: Any, packs: list[list], n_jobs: int, train: TrainPack, context: Any, task: Any, state: dict
) -> list[list]:
    """Each pack trained as one job of `via`, at most `n_jobs` at once; their returns in the packs' order."""
    if via == "ray":
        return on_ray(executor, packs, n_jobs, train, context, task, state)
    done: dict[int, list] = {}
    running: dict[int, Any] = {}
    waiting = list(enumerate(packs))
    while waiting or running:
        while waiting and len(running) < n_jobs:  # submitit's local executor would start every job at once
            index, pack = waiting.pop(0)
            running[index] = executor.submit(train, pack, context, task, state)
        finished = [index for index, job in running.items() if job.done()]
        for index in finished:
            done[index] = running.pop(index).result()  # a failed job's error, raised here
        if not finished:
            time.sleep(0.2)
    return [done[index] for index in range(len(packs))]


def on_ray(options: dict, packs: list[list], n_jobs: int, train: TrainPack, context: Any, task: Any, state: dict):
    import ray

    options = dict(options)
    address = options.pop("address", None)
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=True)
    remote = ray.remote(train).options(**options)
    refs: dict[Any, int] = {}
    done: dict[int, list] = {}
    waiting = list(enumerate(packs))
    while waiting or refs:
        while waiting and len(refs) < n_jobs:
            index, pack = waiting.pop(0)
            refs[remote.remote(pack, context, task, state)] = index
        ready, _ = ray.wait(list(refs), num_returns=1)
        for ref in ready:
            done[refs.pop(ref)] = ray.get(ref)
    return [done[index] for index in range(len(packs))]
