"""The Hydra launcher class. Hydra's plugin scan imports this module on every start: what groups and
trains the packs (and torch) is imported only when a sweep launches."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf


class PackedLauncher(Launcher):
    """Launches a batch of jobs as packs: jobs whose configs differ only in packable keys share a pack
    of at most `pack_size` members; `n_jobs` packs train at once, here or each as one job of `via`
    (submitit, Ray). Each job's run directory, name and return value are what the basic launcher gives it."""

    def __init__(self, pack_size: int | None = None, n_jobs: int = 1, via: str = "local", executor: Any = None) -> None:
        from ._packs import check_launcher_keys

        check_launcher_keys(pack_size, n_jobs)  # one error line before anything is built
        self.pack_size, self.n_jobs, self.via = pack_size, n_jobs, via
        given = OmegaConf.to_container(executor, resolve=True) if OmegaConf.is_config(executor) else executor
        self.executor: dict[str, Any] = dict(given or {})  # type: ignore[arg-type]
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        self.sweep_before: tuple[bool, bytes | None] = (False, None)

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        sweep_dir = Path(str(config.hydra.sweep.dir))  # as it is before the sweeper writes multirun.yaml
        multirun = sweep_dir / "multirun.yaml"
        self.sweep_before = (sweep_dir.exists(), multirun.read_bytes() if multirun.is_file() else None)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        from ._packs import launch_packs

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        return launch_packs(self, job_overrides, initial_job_idx)
