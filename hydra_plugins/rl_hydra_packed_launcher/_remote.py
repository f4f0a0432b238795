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
        import ray

        options = dict(executor)
        address = options.pop("address", None)
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=True)
        remote = ray.remote(train).options(**options)

        def submit(pack: list) -> Any:
            return remote.remote(pack, context, task, state)

        def finished(running: dict[int, Any]) -> list[tuple[int, Any]]:
            ready, _ = ray.wait(list(running.values()), num_returns=1)
            return [(index, ray.get(ref)) for index, ref in running.items() if ref in ready]

    else:

        def submit(pack: list) -> Any:
            return executor.submit(train, pack, context, task, state)

        def finished(running: dict[int, Any]) -> list[tuple[int, Any]]:
            while not (done := [index for index, job in running.items() if job.done()]):
                time.sleep(0.2)
            return [(index, running[index].result()) for index in done]  # a failed job's error, raised here

    return at_most(n_jobs, packs, submit, finished)


def at_most(
    n_jobs: int,
    packs: list[list],
    submit: Callable[[list], Any],
    finished: Callable[[dict[int, Any]], list[tuple[int, Any]]],
) -> list[list]:
    """`submit` each pack, `n_jobs` running at most (submitit's local executor would start every job at once),
    `finished` waiting for one or more of them; the packs' returns in their order."""
    results: dict[int, list] = {}
    running: dict[int, Any] = {}
    waiting = list(enumerate(packs))
    while waiting or running:
        while waiting and len(running) < n_jobs:
            index, pack = waiting.pop(0)
            running[index] = submit(pack)
        for index, result in finished(running):
            results[index] = result
            del running[index]
    return [results[index] for index in range(len(packs))]
