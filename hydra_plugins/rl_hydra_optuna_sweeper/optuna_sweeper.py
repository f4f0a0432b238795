"""The Hydra sweeper class. Hydra's plugin scan imports this module on every start: the search itself
(and Optuna) is imported only when a sweep begins."""

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """Asks Optuna for `n_jobs` trials at a time, launches them as one batch of Hydra jobs, and tells
    Optuna each job's return value (None, NaN, a value that is not a number or an exception: the
    trial failed). With a storage the study continues where it stopped."""

    def __init__(
        self,
        sampler: Any,
        direction: Any,
        study_name: str | None,
        storage: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: dict[str, str] | None = None,
    ) -> None:
        from ._study import StudySweep

        self.search = StudySweep(
            sampler=sampler,
            direction=direction,
            study_name=study_name,
            storage=storage,
            n_trials=n_trials,
            n_jobs=n_jobs,
            max_failure_rate=max_failure_rate,
            params=params,
        )

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.search.setup(
            hydra_context=hydra_context,
            task_function=task_function,
            config=config,
            validate_batch=self.validate_batch_is_legal,
        )
        self.launcher = self.search.launcher

    def sweep(self, arguments: list[str]) -> Any:
        return self.search.sweep(arguments)
