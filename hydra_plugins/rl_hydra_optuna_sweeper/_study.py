"""The search: Hydra's sweep syntax to Optuna distributions, and the ask / launch / tell loop.

Imported when a sweep with this sweeper starts (Hydra's plugin scan skips modules named `_*`).
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import optuna
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn
from hydra.errors import CompactHydraException
from hydra.types import HydraContext, TaskFunction
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, Trial, TrialState

log = logging.getLogger(__name__)

# sampler targets walked as a grid by the sweeper itself (Optuna's GridSampler stops the study from
# inside tell(), which only works within study.optimize)
GRID_SAMPLERS = ("optuna.samplers.GridSampler", "optuna.samplers._grid.GridSampler")
# user attribute of a trial whose job was stopped (Ctrl-C, SIGTERM): it does not count as finished, and
# its parameters are queued again, so the same command asks them first (the job resumes its run)
INTERRUPTED = "interrupted"


@dataclass
class SearchedKey:
    """A searched key: its distribution and, for a categorical one, the override text of each choice."""

    key: str
    spec: str  # as written: tag(log, interval(1e-4, 1e-2))
    distribution: BaseDistribution
    texts: list[str] | None = None  # categorical: Hydra's text for each choice (a list, a quoted string)

    def override(self, value: Any) -> str:
        """The job's override for the value Optuna picked."""
        if isinstance(self.distribution, CategoricalDistribution):
            assert self.texts is not None
            choices = self.distribution.choices
            index = next(
                (i for i, choice in enumerate(choices) if type(choice) is type(value) and choice == value), None
            )
            if index is None:
                raise CompactHydraException(f"{self.key}: {value!r} is not one of {self.spec}")
            return f"{self.key}={self.texts[index]}"
        if isinstance(self.distribution, IntDistribution):
            return f"{self.key}={int(value)}"
        return f"{self.key}={float(value)!r}"  # the shortest text that reads back as the same float


def searched_key(override: Override, grid: bool = False) -> SearchedKey:
    """choice(...) / a,b / glob(...): categorical; range(...): integers or floats on a step (its stop
    excluded, as in Hydra); interval(a, b): floats, int(interval(a, b)): integers; tag(log, ...): a log
    scale. For a grid every key is categorical, its values in the order written."""
    key = override.get_key_element()
    spec = override.input_line.split("=", 1)[1].strip() if override.input_line else str(override.value())
    sweep = override.value()
    log_scale = "log" in getattr(sweep, "tags", ())
    if isinstance(sweep, IntervalSweep):
        if grid:
            raise CompactHydraException(
                f"{key}={spec}: the grid sampler needs a list of values for every "
                "searched key (choice(...) or range(...)), not an interval"
            )
        start, end = sweep.start, sweep.end
        assert start is not None and end is not None  # interval(a, b) has both ends
        if isinstance(start, int) and isinstance(end, int):
            return SearchedKey(key, spec, IntDistribution(start, end, log=log_scale))
        return SearchedKey(key, spec, FloatDistribution(float(start), float(end), log=log_scale))
    values: list[Any] = list(override.sweep_iterator())  # whatever Hydra parsed: told apart below
    if not values:
        raise CompactHydraException(f"{key}={spec} has no values")
    if isinstance(sweep, RangeSweep) and not grid:
        step = abs(sweep.step)
        if log_scale and step != 1:
            raise CompactHydraException(f"{key}={spec}: a log scale needs a range with step 1")
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return SearchedKey(key, spec, IntDistribution(min(values), max(values), log=log_scale, step=int(step)))
        if log_scale:
            raise CompactHydraException(f"{key}={spec}: a log scale needs an integer range, or an interval")
        return SearchedKey(key, spec, FloatDistribution(float(min(values)), float(max(values)), step=float(step)))
    texts = list(override.sweep_string_iterator())
    # Optuna keeps None, bools, numbers and strings; a list or dict choice is kept as its override text
    choices = [v if v is None or isinstance(v, (bool, int, float, str)) else t for v, t in zip(values, texts)]
    return SearchedKey(key, spec, CategoricalDistribution(choices), texts)


def search_space(lines: Sequence[str], parser: OverridesParser, grid: bool) -> dict[str, str | SearchedKey]:
    """key -> the fixed override passed to every trial, or the searched key. A later line for the same key
    replaces an earlier one (the command line after hydra.sweeper.params)."""
    overrides = {override.get_key_element(): override for override in parser.parse_overrides(list(lines))}
    space: dict[str, str | SearchedKey] = {}
    for key, override in overrides.items():
        if override.is_sweep_override():
            space[key] = searched_key(override, grid)
        elif override.is_delete() and override.value() is None:
            space[key] = key  # ~key
        else:
            space[key] = f"{key}={override.get_value_element_as_str()}"
    return space


def directions_of(direction: Any) -> list[str]:
    names = list(direction) if isinstance(direction, (list, tuple, ListConfig)) else [direction]
    names = [getattr(name, "name", name) for name in names]  # a StudyDirection or an Enum
    if not names or not all(isinstance(name, str) and name.lower() in ("minimize", "maximize") for name in names):
        raise CompactHydraException(
            f"hydra.sweeper.direction={direction}: give minimize or maximize, or a list "
            "of them (one per value the task returns)"
        )
    return [name.lower() for name in names]


def values_of(result: JobReturn, n_objectives: int) -> tuple[list[float] | None, str, Exception | None]:
    """The values to tell Optuna, or (None, why the trial failed, the job's exception if it raised one)."""
    try:
        value = result.return_value
    except Exception as error:  # noqa: BLE001 - the job raised it; Hydra keeps it in the JobReturn
        return None, f"{type(error).__name__}: {error}", error
    if value is None:
        return None, "the task returned None", None
    many = isinstance(value, (list, tuple, ListConfig))
    raw = list(value) if many else [value]
    if len(raw) != n_objectives or (many and n_objectives == 1):
        return None, f"the task returned {value!r}, {n_objectives} value(s) expected (one per direction)", None
    try:
        values = [float(v) for v in raw]
    except (TypeError, ValueError):
        return None, f"the task returned {value!r}, not a number", None
    if any(math.isnan(v) for v in values):
        return None, f"the task returned {value!r}", None
    return values, "", None


def counts(trial: FrozenTrial) -> bool:
    """Whether a trial counts towards n_trials: finished, and not stopped midway."""
    return trial.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
        trial.state == TrialState.FAIL and not trial.user_attrs.get(INTERRUPTED, False)
    )


class StudySweep:
    def __init__(
        self,
        *,
        sampler: Any,
        direction: Any,
        study_name: str | None,
        storage: str | None,
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        params: Any,
    ) -> None:
        if n_trials < 0 or n_jobs < 1:
            raise CompactHydraException(
                f"hydra.sweeper: n_trials={n_trials} and n_jobs={n_jobs}; n_trials must be 0 or more, n_jobs 1 or more"
            )
        self.sampler_config = sampler
        self.directions = directions_of(direction)
        self.study_name = study_name
        self.storage = storage
        self.n_trials = n_trials
        self.n_jobs = n_jobs
        self.max_failure_rate = max_failure_rate
        self.params = params or {}
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.validate_batch: Callable[[Sequence[Sequence[str]]], None] | None = None

    def setup(
        self,
        *,
        hydra_context: HydraContext,
        task_function: TaskFunction,
        config: DictConfig,
        validate_batch: Callable[[Sequence[Sequence[str]]], None],
    ) -> None:
        self.hydra_context = hydra_context
        self.config = config
        self.validate_batch = validate_batch
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    # -- the study -------------------------------------------------------------------------------

    def sampler_kwargs(self) -> dict[str, Any]:
        if self.sampler_config is None:
            return {"_target_": "optuna.samplers.TPESampler"}
        config = self.sampler_config
        if isinstance(config, DictConfig):
            config = OmegaConf.to_container(config, resolve=True)
        return {key: value for key, value in dict(config).items() if value is not None}

    def is_grid(self) -> bool:
        return self.sampler_kwargs().get("_target_") in GRID_SAMPLERS

    def open_study(self) -> optuna.Study:
        kwargs = self.sampler_kwargs()
        study = optuna.create_study(
            study_name=self.study_name,
            storage=self.storage,
            directions=self.directions,  # type: ignore[arg-type]  # directions_of checked them
            sampler=optuna.samplers.RandomSampler(),
            load_if_exists=True,
        )
        stored = [d.name.lower() for d in study.directions]
        if stored != self.directions:
            raise CompactHydraException(
                f"the study {study.study_name} in {self.storage} has direction(s) "
                f"{stored}, not {self.directions}: give another hydra.sweeper.study_name"
            )
        if self.is_grid():
            return study  # its sampler is never asked: every grid trial is enqueued
        study.sampler = self.make_sampler(kwargs, len(study.get_trials(deepcopy=False)))
        return study

    @staticmethod
    def make_sampler(kwargs: dict[str, Any], trials_in_study: int) -> optuna.samplers.BaseSampler:
        """The sampler from its config keys that are set, less those it does not take (a preset's
        n_startup_trials with hydra/sweeper/sampler=random), in a log line."""
        target = get_object(kwargs["_target_"])
        parameters: Mapping[str, inspect.Parameter]
        try:
            parameters = inspect.signature(target).parameters
        except (TypeError, ValueError):  # no signature to read: pass every key
            parameters = {}
        if parameters and not any(p.kind == p.VAR_KEYWORD for p in parameters.values()):
            unused = [key for key in kwargs if not key.startswith("_") and key not in parameters]
            if unused:
                log.info(f"{getattr(target, '__name__', target)} takes no {', '.join(unused)}: left out")
                kwargs = {key: value for key, value in kwargs.items() if key not in unused}
        if kwargs.get("seed") is not None and trials_in_study:
            # seeded as in the first command, the sampler would draw that command's random trials again
            kwargs["seed"] += trials_in_study
            log.info(f"sampler seed {kwargs['seed']}: the configured seed + the {trials_in_study} trials in the study")
        return instantiate(kwargs)

    def grid(self, study: optuna.Study, space: dict[str, str | SearchedKey]) -> Iterator[dict[str, Any]]:
        """The grid's points in the order Hydra's basic sweeper runs them, less those in the study."""
        searched = [entry for entry in space.values() if isinstance(entry, SearchedKey)]
        keys = [entry.key for entry in searched]
        seen = {
            tuple(t.params[k] for k in keys)
            for t in study.get_trials(deepcopy=False)
            if all(k in t.params for k in keys)
        }
        # a grid's keys are all categorical (searched_key), each with its values in the order written
        choices = [entry.distribution.choices for entry in searched]  # type: ignore[attr-defined]
        points = product(*choices)
        size = math.prod(len(values) for values in choices)
        log.info(f"grid of {size} points, {len(seen)} of them in the study already")
        for point in points:
            if point not in seen:
                yield dict(zip(keys, point))

    # -- the sweep -------------------------------------------------------------------------------

    def sweep(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        assert self.config is not None and self.hydra_context is not None and self.validate_batch is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        lines = [f"{key}={'null' if value is None else value}" for key, value in self.params.items()]
        grid = self.is_grid()
        space = search_space([*lines, *arguments], parser, grid)
        searched = {key: entry for key, entry in space.items() if isinstance(entry, SearchedKey)}
        distributions = {key: entry.distribution for key, entry in searched.items()}

        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")

        study = self.open_study()
        trials_before = study.get_trials(deepcopy=False)
        finished = sum(counts(t) for t in trials_before)
        to_ask = max(0, self.n_trials - finished)
        where = self.storage or "in memory"
        log.info(
            f"Optuna study {study.study_name} ({where}), {'/'.join(self.directions)}, sampler "
            f"{type(study.sampler).__name__ if not grid else 'grid'}: {finished} of {self.n_trials} trials "
            f"finished, asking for {to_ask}, {self.n_jobs} at a time"
        )
        for entry in searched.values():
            log.info(f"  {entry.key}: {entry.spec}")
        running = sum(t.state == TrialState.RUNNING for t in trials_before)
        if running:
            log.warning(
                f"{running} trial(s) of the study are RUNNING (in another process, or left by one that was "
                "killed); they do not count towards n_trials"
            )
        points = self.grid(study, space) if grid else None

        returns: list[Sequence[JobReturn]] = []
        told = failed = 0
        first_reason, first_error = "", None
        while to_ask > 0:
            trials = self.ask(study, distributions, min(self.n_jobs, to_ask), points)
            if not trials:
                log.info("every point of the grid has been asked")
                break
            to_ask -= len(trials)
            batch = [
                [entry if isinstance(entry, str) else entry.override(trial.params[key]) for key, entry in space.items()]
                for trial in trials
            ]
            try:
                self.validate_batch(batch)
            except Exception:
                for trial in trials:
                    study.tell(trial, state=TrialState.FAIL)
                raise
            try:
                results = self.launcher.launch(batch, initial_job_idx=trials[0].number)
            except BaseException:  # Ctrl-C, SIGTERM, a launcher that failed
                self.put_back(study, trials)
                raise
            for trial, result in zip(trials, results):
                values, reason, error = values_of(result, len(self.directions))
                told += 1
                if values is None:
                    failed += 1
                    log.warning(f"Trial {trial.number} failed: {reason}")
                    study.tell(trial, state=TrialState.FAIL)
                    if failed == 1:
                        first_reason, first_error = f"trial {trial.number}: {reason}", error
                else:
                    study.tell(trial, values if len(values) > 1 else values[0])
                    log.info(
                        f"Trial {trial.number} finished: {values if len(values) > 1 else values[0]}"
                        + (
                            f" (best so far: trial {study.best_trial.number}, {study.best_value})"
                            if len(values) == 1
                            else ""
                        )
                    )
            returns.append(results)
            if failed / told > self.max_failure_rate:
                self.report(study, sweep_dir)
                raise CompactHydraException(
                    f"{failed} of the {told} trials launched by this command failed, more than hydra.sweeper."
                    f"max_failure_rate={self.max_failure_rate}; the first: {first_reason}"
                ) from first_error
        self.report(study, sweep_dir)
        return returns

    def ask(
        self,
        study: optuna.Study,
        distributions: dict[str, BaseDistribution],
        n: int,
        points: Iterator[dict[str, Any]] | None,
    ) -> list[Trial]:
        trials = []
        for _ in range(n):
            if points is not None:
                point = next(points, None)
                if point is not None:
                    study.enqueue_trial(point)
                elif not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                    break
            trials.append(study.ask(distributions))
        return trials

    def put_back(self, study: optuna.Study, trials: list[Trial]) -> None:
        """Trials whose jobs were stopped: failed, marked interrupted, and (with a storage) queued again."""
        for trial in trials:
            trial.set_user_attr(INTERRUPTED, True)
            study.tell(trial, state=TrialState.FAIL)
            if self.storage is not None:
                study.enqueue_trial(trial.params)
        numbers = ", ".join(str(t.number) for t in trials)
        again = "; the same command asks them again first" if self.storage is not None else ""
        log.warning(f"trial(s) {numbers} stopped before they finished: marked failed ({INTERRUPTED}){again}")

    def report(self, study: optuna.Study, sweep_dir: Path) -> None:
        completed = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not completed:
            log.warning(f"no trial of the study {study.study_name} has completed: no best parameters")
            return
        if len(self.directions) == 1:
            best = study.best_trial
            log.info(f"Best parameters: {best.params}")
            log.info(f"Best value: {best.value}")
            results: dict[str, Any] = {"name": "optuna", "best_params": best.params, "best_value": best.value}
        else:
            pareto = study.best_trials
            log.info(f"{len(pareto)} Pareto-optimal trial(s):")
            for trial in pareto:
                log.info(f"  {trial.params} -> {trial.values}")
            results = {"name": "optuna", "solutions": [{"params": t.params, "values": t.values} for t in pareto]}
        OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
