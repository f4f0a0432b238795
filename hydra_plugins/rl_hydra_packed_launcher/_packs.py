"""Group a batch of Hydra jobs into packs and train each pack in one process (rl_hydra/loops/pack.py).

A pack's members are jobs whose composed configs are equal but for `PACKABLE` keys: the seed and
scalar hyperparameters that change no tensor's shape. Each member goes through Hydra's `run_job` as the
basic launcher's job would (its directory, .hydra/ files, job id and number), with a task that builds
the run and takes its first step; the pack then trains every member to its end, and each job's return
is its run's, as if it had run alone.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from omegaconf import DictConfig, OmegaConf, open_dict

from rl_hydra.commands.launch import EXIT_CONFIG, fail
from rl_hydra.errors import BadArgument, ConfigError, MachineLimit

from ._remote import check_via, train_elsewhere

log = logging.getLogger(__name__)

# keys whose values may differ inside a pack: none changes a tensor's shape (item 3 of issue #76)
PACKABLE = (
    "seed",
    "algo.gamma",
    "algo.tau",
    "algo.target_update_every",
    "algo.exploration.*",
    "algo.initial_alpha",
    "algo.target_entropy",
    "algo.max_grad_norm",
    "algo.final_lr_fraction",
    "algo.optimizer.lr",
    "algo.*_optimizer.lr",
)


def check_launcher_keys(pack_size: Any, n_jobs: Any) -> None:
    """`hydra.launcher.pack_size` (null or an integer >= 1) and `n_jobs` (>= 1), or one error line."""
    for name, value, nullable in (("pack_size", pack_size, True), ("n_jobs", n_jobs, False)):
        if (value is None and nullable) or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            continue
        allowed = "an integer >= 1" + (" or null (every job of a group in one pack)" if nullable else "")
        fail(f"hydra.launcher.{name}={value} is out of range; expected {allowed}", EXIT_CONFIG)


@dataclass
class Job:
    index: int
    overrides: list[str]
    config: DictConfig  # the job's sweep config, with its hydra node


def packable(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in PACKABLE)


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of a plain container's leaves."""
    if isinstance(node, dict):
        found: dict[str, Any] = {}
        for name, value in node.items():
            found.update(leaves(value, f"{prefix}{name}."))
        return found
    return {prefix[:-1]: node}


def task_leaves(config: DictConfig) -> dict[str, Any]:
    task = OmegaConf.to_container(config, resolve=False)
    assert isinstance(task, dict)
    task.pop("hydra", None)
    return leaves(task)


def group_key(config: DictConfig) -> str:
    return json.dumps({k: v for k, v in task_leaves(config).items() if not packable(k)}, sort_keys=True, default=str)


def group(jobs: list[Job], pack_size: int | None) -> tuple[list[list[Job]], list[str]]:
    """The packs, in the order of their first jobs, and the keys that split the groups."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(group_key(job.config), []).append(job)
    firsts = [
        dict(o.lstrip("+~").split("=", 1) for o in members[0].overrides if "=" in o) for members in groups.values()
    ]
    splitting = sorted({k for f in firsts for k in f if not packable(k) and len({g.get(k) for g in firsts}) > 1})
    size = pack_size or max(len(members) for members in groups.values())
    packs = [members[i : i + size] for members in groups.values() for i in range(0, len(members), size)]
    return packs, splitting


def overridden(job: Job) -> dict[str, str]:
    """{key: value} of a job's overrides (`+key=value` and `key=value` alike)."""
    return dict(override.lstrip("+~").split("=", 1) for override in job.overrides if "=" in override)


def replay_bytes(config: DictConfig) -> int:
    """An upper bound on one member's replay memory. A transition buffer: its capacity times an
    observation twice (the next one too), the action, the reward and the flags. A sequence buffer
    (DRQN's): its capacity in chunks, each `sequence_length` + 1 observations, as many actions, rewards and
    flags, and the actor's state at the chunk's start (an LSTM's two vectors at most)."""
    from rl_hydra.envs import make_env

    env = make_env(config.env, seed=0)
    try:
        obs = env.single_observation_space
        obs_bytes = sum(space_bytes(space) for space in getattr(obs, "spaces", {"": obs}).values())
        step_bytes = space_bytes(env.single_action_space) + 16
    finally:
        env.close()
    capacity = int(config.buffer.capacity)
    if "sequence_length" not in config.buffer:
        return capacity * (2 * obs_bytes + step_bytes)
    length = int(config.buffer.sequence_length)
    state = 2 * 4 * int(config.network.lstm_size) if "lstm_size" in config.network else 0
    return capacity * ((length + 1) * obs_bytes + length * step_bytes + state)


def space_bytes(space: Any) -> int:
    import numpy as np

    shape = getattr(space, "shape", None) or (1,)
    return int(np.prod(shape)) * np.dtype(getattr(space, "dtype", None) or np.float32).itemsize


def available_bytes() -> int:
    try:
        with open("/proc/meminfo") as meminfo:
            line = next(line for line in meminfo if line.startswith("MemAvailable:"))
        return int(line.split()[1]) * 1024
    except (OSError, StopIteration):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def check_packs(packs: list[list[Job]], n_jobs: int) -> None:
    """Refuse, before anything is built: members asking for different devices; packs whose replay
    (`n_jobs` of the largest at once) would not fit in this machine's free memory."""
    devices = sorted({str(job.config.device) for pack in packs for job in pack})
    if len(devices) > 1:
        raise BadArgument(
            f"device={','.join(devices)}: the packed launcher trains a sweep on one device; "
            "sweep device in commands of its own"
        )
    largest = max(packs, key=lambda pack: len(pack) * replay_bytes(pack[0].config))
    member, at_once = replay_bytes(largest[0].config), min(n_jobs, len(packs))
    total, free = len(largest) * member * at_once, available_bytes()
    if total > free:
        members, first = len(largest), largest[0].config
        fits = max(1, int(free / max(member, 1) / at_once))
        raise MachineLimit(
            f"hydra.launcher.pack_size: a pack of {members} members of buffer.capacity={first.buffer.capacity} "
            f"needs about {total / 2**30:.1f} GiB of replay ({min(n_jobs, len(packs))} at once), this machine has "
            f"{free / 2**30:.1f} GiB free; give hydra.launcher.pack_size={fits} or less"
        )


def launch_packs(launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> list[JobReturn]:
    setup_globals()
    config, context = launcher.config, launcher.hydra_context
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    jobs = []
    for offset, overrides in enumerate(job_overrides):
        index = initial_job_idx + offset
        sweep_config = context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = index
            sweep_config.hydra.job.num = index
        jobs.append(Job(index, list(overrides), sweep_config))
    packs, splitting = group(jobs, launcher.pack_size)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    try:
        check_packs(packs, launcher.n_jobs)
        on_gpu = str(jobs[0].config.device).startswith("cuda")
        executor = check_via(launcher.via, launcher.executor, on_gpu, sweep_dir / ".submitit")
    except ConfigError as error:
        undo_sweep_dir(sweep_dir, *launcher.sweep_before)
        fail(str(error), EXIT_CONFIG)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    sizes = "+".join(str(len(pack)) for pack in packs)
    why = f"; {', '.join(splitting)} {'splits' if len(splitting) == 1 else 'split'} them" if splitting else ""
    log.info(f"Launching {len(jobs)} jobs as {len(packs)} pack(s) of {sizes} member(s){why}")
    for job in jobs:
        log.info(f"\t#{job.index} : {' '.join(filter_overrides(job.overrides))}")
    task, state = launcher.task_function, Singleton.get_state()
    if launcher.via != "local":
        n_jobs, train = launcher.n_jobs, train_pack_in_worker
        done = train_elsewhere(launcher.via, executor, packs, n_jobs, train, context, task, state)
    elif launcher.n_jobs == 1 or len(packs) == 1:
        done = [train_pack(pack, context, task) for pack in packs]
    else:
        from joblib import Parallel, delayed

        done = Parallel(n_jobs=launcher.n_jobs, backend="loky")(
            delayed(train_pack_in_worker)(pack, context, task, state) for pack in packs
        )
    returns = {ret_index: ret for pack in done for ret_index, ret in pack}
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return [returns[job.index] for job in jobs]


def undo_sweep_dir(sweep_dir: Path, existed: bool, multirun: bytes | None) -> None:
    """Put the sweep directory back as it was before this command: the sweeper has written multirun.yaml."""
    if not existed:
        shutil.rmtree(sweep_dir, ignore_errors=True)
    elif multirun is not None:
        (sweep_dir / "multirun.yaml").write_bytes(multirun)
    else:
        (sweep_dir / "multirun.yaml").unlink(missing_ok=True)


def train_pack_in_worker(pack: list[Job], context: Any, task: Any, state: dict) -> list[tuple[int, JobReturn]]:
    setup_globals()
    Singleton.set_state(state)
    return train_pack(pack, context, task)


def job_name(job: Job) -> str:
    """The job directory's name, as run_job will make it (hydra.sweep.subdir, resolved for this job)."""
    HydraConfig.instance().set_config(job.config)
    return str(job.config.hydra.sweep.subdir)


def train_pack(pack: list[Job], context: Any, task: Any) -> list[tuple[int, JobReturn]]:
    """Each member started through run_job, then the pack trained; each job's return, by its index."""
    from rl_hydra.build import ProcessSettings, pack_updates, process_settings
    from rl_hydra.loops import pack as packing
    from rl_hydra.runs.provenance import Pack

    first = pack[0].config
    configure_log(first.hydra.job_logging, first.hydra.verbose)  # once: a member's train.log is its own handler
    with process_settings(ProcessSettings.of(first)):  # the pack's; each member's build seeds its own
        members, returns = [], []
        names = [job_name(job) for job in pack]
        for index, job in enumerate(pack):
            HydraConfig.instance().set_config(job.config)

            def member(cfg: DictConfig, name: str = names[index], index: int = index) -> packing.Member:
                Pack.current = {"size": len(pack), "member": index, "members": names}  # its provenance says so
                try:
                    return packing.start(name, task.steps(cfg))  # the run built, its first step taken
                finally:
                    Pack.current = None

            ret = run_job(
                hydra_context=context,
                task_function=member,
                config=job.config,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
                configure_logging=False,
            )
            members.append(ret.return_value)
            returns.append((job.index, ret))
        packing.run_pack(members, pack_updates(first.fast_paths))
    for (_, ret), started in zip(returns, members, strict=True):
        if started.error is not None:
            ret.status, ret.return_value = JobStatus.FAILED, started.error
        else:
            ret.status, ret.return_value = JobStatus.COMPLETED, started.result
    return returns
