"""The sweeper's config (`hydra/sweeper=optuna`) and its samplers (`hydra/sweeper/sampler=tpe|random|...`).

Hydra's plugin scan imports this module on every start, so it imports nothing from Optuna. A
sampler's keys left null are not passed: Optuna's own default applies, whichever version is
installed (optuna >= 4).
"""

import importlib.util
import sys
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class SamplerConf:
    """What every sampler config has: the keys a preset sets stay valid whichever sampler the command
    line picks (hydra/sweeper/sampler=random); one that the sampler does not take is left out, in a log line."""

    _target_: str = MISSING
    seed: int | None = None
    n_startup_trials: int | None = None  # trials drawn at random before the model (TPE: 10)


@dataclass
class TPESamplerConf(SamplerConf):
    """optuna.samplers.TPESampler (the default)."""

    _target_: str = "optuna.samplers.TPESampler"
    n_ei_candidates: int | None = None
    multivariate: bool | None = None
    group: bool | None = None
    constant_liar: bool | None = None  # count the trials still running as bad (batches of n_jobs)


@dataclass
class RandomSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.RandomSampler"


@dataclass
class GridSamplerConf(SamplerConf):
    """Every combination of the searched values once, in the order Hydra's basic sweeper would run
    them (the sweeper walks the grid itself; every searched key needs a choice() or range())."""

    _target_: str = "optuna.samplers.GridSampler"


@dataclass
class CmaEsSamplerConf(SamplerConf):
    """optuna.samplers.CmaEsSampler (needs `pip install cmaes`)."""

    _target_: str = "optuna.samplers.CmaEsSampler"
    sigma0: float | None = None
    x0: dict[str, Any] | None = None
    popsize: int | None = None
    use_separable_cma: bool | None = None
    with_margin: bool | None = None
    lr_adapt: bool | None = None


@dataclass
class NSGAIISamplerConf(SamplerConf):
    """optuna.samplers.NSGAIISampler (several objectives)."""

    _target_: str = "optuna.samplers.NSGAIISampler"
    population_size: int | None = None
    mutation_prob: float | None = None
    crossover_prob: float | None = None
    swapping_prob: float | None = None


@dataclass
class QMCSamplerConf(SamplerConf):
    _target_: str = "optuna.samplers.QMCSampler"
    qmc_type: str | None = None
    scramble: bool | None = None


@dataclass
class GPSamplerConf(SamplerConf):
    """optuna.samplers.GPSampler (needs scipy and torch)."""

    _target_: str = "optuna.samplers.GPSampler"
    deterministic_objective: bool | None = None


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.rl_hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    defaults: list[Any] = field(default_factory=lambda: [{"sampler": "tpe"}])
    _recursive_: bool = False  # the sweeper builds the sampler itself (from its keys that are set)

    sampler: Any = MISSING
    # minimize | maximize, or a list of them for a task that returns one value per objective
    direction: Any = "minimize"
    study_name: str | None = None
    # null: the study lives in memory. sqlite:///optuna.db (relative to the working directory) keeps
    # it: the same command again continues the study up to n_trials finished trials in all
    storage: str | None = None
    n_trials: int = 20  # finished trials the study should hold (failed ones count)
    n_jobs: int = 2  # trials asked for at a time: one batch for the launcher
    max_failure_rate: float = 0.0  # stop once more than this fraction of this command's trials failed
    # key: value in Hydra's override syntax; choice(...) / a,b,c, range(...), interval(...),
    # tag(log, ...) and int(...) are searched, a plain value is passed to every trial as it is
    params: dict[str, str] | None = None


SAMPLERS = {
    "tpe": TPESamplerConf,
    "random": RandomSamplerConf,
    "grid": GridSamplerConf,
    "cmaes": CmaEsSamplerConf,
    "nsgaii": NSGAIISamplerConf,
    "qmc": QMCSamplerConf,
    "gp": GPSamplerConf,
}

store = ConfigStore.instance()
store.store(group="hydra/sweeper", name="optuna", node=OptunaSweeperConf, provider="rl_hydra")
for name, node in SAMPLERS.items():
    store.store(group="hydra/sweeper/sampler", name=name, node=node, provider="rl_hydra")

if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None:
    # both register hydra/sweeper=optuna and its samplers: which one wins depends on import order
    sys.stderr.write(
        "warning: hydra-optuna-sweeper is installed beside rl-hydra's own Optuna sweeper and "
        "registers the same names (hydra/sweeper=optuna); uninstall it: "
        "pip uninstall hydra-optuna-sweeper\n"
    )
