"""rl-hydra's Optuna sweeper (hydra_plugins/rl_hydra_optuna_sweeper, `hydra/sweeper=optuna`): Hydra's
own test battery for sweepers, Hydra's sweep syntax as Optuna distributions, failed and interrupted
trials, a study that continues from SQLite, and a real search with train.py (slow)."""

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.errors import CompactHydraException
from hydra.plugins.sweeper import Sweeper
from hydra.test_utils.launcher_common_tests import BatchedSweeperTestSuite, IntegrationTestSuite

from tests.conftest import TINY, run_cli

optuna = pytest.importorskip("optuna", reason='needs the optuna extra: pip install -e ".[optuna]"')

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from hydra_plugins.rl_hydra_optuna_sweeper._study import search_space  # noqa: E402
from hydra_plugins.rl_hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper  # noqa: E402

SWEEPER = ["hydra/sweeper=optuna", "hydra/launcher=basic"]


# -- Hydra's battery ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "launcher_name, overrides",
    [
        # the grid sampler asks every combination once, in the basic sweeper's order, n_jobs at a time
        pytest.param(
            "basic",
            [
                "hydra/sweeper=optuna",
                "hydra/sweeper/sampler=grid",
                "hydra.sweeper.n_jobs=2",
                "hydra.sweeper.n_trials=6",
                "hydra.job.chdir=true",
            ],
            id="grid",
        ),
        pytest.param(
            "basic",
            [
                "hydra/sweeper=optuna",
                "hydra/sweeper/sampler=grid",
                "hydra.sweeper.n_jobs=2",
                "hydra.sweeper.n_trials=100",
                "hydra.job.chdir=true",
            ],
            id="grid_shorter_than_n_trials",
            marks=pytest.mark.slow,
        ),
    ],
)
# the battery checks each job's files in its working directory, which it expects to be the job's own
# (Hydra's default before version_base 1.2): hydra.job.chdir=true says so whatever version_base an
# earlier import of an @hydra.main module (rl_hydra.commands.cli) left set for the process
@pytest.mark.filterwarnings("ignore:Future Hydra versions will no longer change working directory")
class TestOptunaSweeperBatches(BatchedSweeperTestSuite):
    pass


@pytest.mark.slow  # eleven Python processes, each importing Hydra and Optuna: about 20 s
@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [
        # the battery's apps return nothing, which this sweeper tells Optuna as a failed trial
        pytest.param(
            {},
            [
                "-m",
                *SWEEPER,
                "hydra.sweeper.n_trials=1",
                "hydra.sweeper.n_jobs=1",
                "hydra.sweeper.max_failure_rate=1.0",
                "hydra/hydra_logging=disabled",
                "hydra/job_logging=disabled",
            ],
            id="optuna_sweeper_basic_launcher",
        ),
    ],
)
class TestOptunaSweeperIntegration(IntegrationTestSuite):
    pass


def test_hydra_discovers_the_sweeper():
    # Hydra's scan imports the plugin modules afresh: compare names, not classes
    found = [f"{plugin.__module__}.{plugin.__name__}" for plugin in Plugins.instance().discover(Sweeper)]
    assert f"{OptunaSweeper.__module__}.{OptunaSweeper.__name__}" in found


def test_the_installed_package_brings_the_sweeper_to_any_directory(tmp_path):
    """Hydra scans the hydra_plugins namespace: the install must put the plugin there (pyproject's
    packages.find), editable installs included, not only the checkout's directory."""
    code = (
        "from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
        "print([f'{p.__module__}.{p.__name__}' for p in Plugins.instance().discover(Sweeper)])"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    found = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "hydra_plugins.rl_hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper" in found


# -- the search space --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, distribution",
    [
        ("k=choice(1,2)", CategoricalDistribution([1, 2])),
        ("k=a,b", CategoricalDistribution(["a", "b"])),
        ("k=range(1,4)", IntDistribution(1, 3)),  # range's stop is excluded, as in Hydra
        ("k=range(0,10,step=2)", IntDistribution(0, 8, step=2)),
        ("k=range(0.5,2.5,0.5)", FloatDistribution(0.5, 2.0, step=0.5)),
        ("k=interval(1,5)", FloatDistribution(1.0, 5.0)),
        ("k=int(interval(1,5))", IntDistribution(1, 5)),
        ("k=tag(log, interval(1e-4, 1e-2))", FloatDistribution(1e-4, 1e-2, log=True)),
        ("k=tag(log, int(interval(1, 64)))", IntDistribution(1, 64, log=True)),
        ("k=tag(log, range(1, 9))", IntDistribution(1, 8, log=True)),
        ("k=choice([64,64],[128])", CategoricalDistribution(["[64,64]", "[128]"])),  # lists kept as their text
    ],
)
def test_hydra_sweep_syntax_becomes_an_optuna_distribution(line, distribution):
    (entry,) = search_space([line], OverridesParser.create(), grid=False).values()
    assert entry.distribution == distribution


@pytest.mark.parametrize(
    "line, value, override, read_back",
    [
        ("k=tag(log, interval(1e-4, 1e9))", 0.001, "k=0.001", 0.001),
        ("k=tag(log, interval(1e-4, 1e9))", 1e9, "k=1000000000.0", 1e9),
        ("k=int(interval(1, 5))", 3, "k=3", 3),
        ("k=choice([64,64],[128])", "[64,64]", "k=[64,64]", [64, 64]),
        ("k=choice('x,y', z)", "x,y", "k=x\\,y", "x,y"),
        ("k=choice(true, 1)", True, "k=True", True),
        ("k=choice(true, 1)", 1, "k=1", 1),
        ("+k=choice(0.5, 1)", 0.5, "+k=0.5", 0.5),
    ],
)
def test_a_value_optuna_picks_becomes_the_jobs_override(line, value, override, read_back):
    (entry,) = search_space([line], OverridesParser.create(), grid=False).values()
    assert entry.override(value) == override
    parsed = OverridesParser.create().parse_override(override).value()
    assert parsed == read_back and type(parsed) is type(read_back)


def test_fixed_values_pass_through_and_the_command_line_replaces_a_preset_key():
    space = search_space(
        ["a=choice(1,2)", "b=interval(0,1)", "c=3", "~d", "a=5", "b=choice(0.1,0.2)"],
        OverridesParser.create(),
        grid=True,
    )
    assert space["a"] == "a=5" and space["c"] == "c=3" and space["~d"] == "~d"
    assert space["b"].distribution == CategoricalDistribution([0.1, 0.2])  # the interval is gone: a grid works


@pytest.mark.parametrize(
    "line, grid, message",
    [
        ("k=interval(0,1)", True, "the grid sampler needs a list of values"),
        ("k=tag(log, range(0.5, 2.5, 0.5))", False, "a log scale needs a range with step 1"),
        ("k=tag(log, float(range(1, 4)))", False, "a log scale needs an integer range"),
        ("k=range(3, 1)", False, "has no values"),
    ],
)
def test_a_search_space_optuna_cannot_take_is_one_line(line, grid, message):
    with pytest.raises(CompactHydraException, match=message):
        search_space([line], OverridesParser.create(), grid=grid)


# -- searches in-process: Hydra's test app (foo, bar), a task function of our own ----------------------


@dataclass
class Search:
    batches: list  # of JobReturns, one list per batch
    results: dict | None  # optimization_results.yaml
    job_dirs: list[str]


def run_search(runner, tmp_path, *overrides, task=lambda cfg: float(cfg["+x"] if "+x" in cfg else cfg.x)):
    """A multirun of Hydra's test app (its sweep directory is gone afterwards) with this sweeper."""
    sweep = runner(
        calling_file=None,
        calling_module="hydra.test_utils.a_module",
        task_function=task,
        config_path="configs",
        config_name="compose.yaml",
        temp_dir=tmp_path / "sweep",
        overrides=[*SWEEPER, "hydra.sweeper.n_jobs=2", "hydra.job.chdir=false", *overrides],
    )
    with sweep:
        sweep_dir = tmp_path / "sweep"
        results = sweep_dir / "optimization_results.yaml"
        return Search(
            sweep.returns,
            yaml.safe_load(results.read_text()) if results.exists() else None,
            sorted(p.name for p in sweep_dir.iterdir() if p.is_dir()),
        )


def logged(capsys, caplog) -> str:
    """The sweeper's log lines: pytest holds them until the first job sets up Hydra's logging, which
    writes them to stdout."""
    return caplog.text + capsys.readouterr().out


def study_of(tmp_path, name="study"):
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'optuna.db'}")


def storage(tmp_path, name="study"):
    return [f"hydra.sweeper.storage=sqlite:///{tmp_path / 'optuna.db'}", f"hydra.sweeper.study_name={name}"]


def flaky(cfg):
    """What a job can end with: None (rl_hydra's failed run), an exception, NaN, a value."""
    if cfg.x < 0.2:
        return None
    if cfg.x < 0.4:
        raise RuntimeError("the env crashed")
    return math.nan if cfg.x < 0.6 else float(cfg.x)


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_failed_trials_are_told_failed_and_the_search_goes_on(hydra_sweep_runner, tmp_path, capsys, caplog):
    caplog.set_level("INFO")  # the sweeper logs before any job sets up Hydra's logging
    search = run_search(
        hydra_sweep_runner,
        tmp_path,
        "hydra/sweeper/sampler=grid",
        "+x=choice(0.1,0.3,0.5,0.9)",
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.max_failure_rate=1.0",
        "hydra.sweeper.direction=maximize",
        *storage(tmp_path),
        task=flaky,
    )
    assert [(t.params["+x"], t.state) for t in study_of(tmp_path).trials] == [
        (0.1, TrialState.FAIL),
        (0.3, TrialState.FAIL),
        (0.5, TrialState.FAIL),
        (0.9, TrialState.COMPLETE),
    ]
    output = logged(capsys, caplog)
    assert "Trial 0 failed: the task returned None" in output
    assert "Trial 1 failed: RuntimeError: the env crashed" in output
    assert "Trial 2 failed: the task returned nan" in output
    assert search.results == {"name": "optuna", "best_params": {"+x": 0.9}, "best_value": 0.9}


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_more_failures_than_max_failure_rate_stop_the_search(hydra_sweep_runner, tmp_path):
    with pytest.raises(
        CompactHydraException,
        match=r"1 of the 1 trials launched by this command failed, more than "
        r"hydra.sweeper.max_failure_rate=0.0; the first: trial 0: the "
        r"task returned None",
    ):
        run_search(
            hydra_sweep_runner,
            tmp_path,
            "hydra/sweeper/sampler=grid",
            "+x=choice(0.1,0.9)",
            "hydra.sweeper.n_jobs=1",
            *storage(tmp_path),
            task=flaky,
        )
    assert [t.state for t in study_of(tmp_path).trials] == [TrialState.FAIL]


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_the_same_command_continues_the_study_up_to_n_trials_in_all(hydra_sweep_runner, tmp_path):
    args = ["+x=interval(0,1)", "hydra.sweeper.sampler.seed=0", *storage(tmp_path)]
    first = run_search(hydra_sweep_runner, tmp_path, *args, "hydra.sweeper.n_trials=2")
    assert [len(batch) for batch in first.batches] == [2]
    before = [(t.number, t.params, t.value) for t in study_of(tmp_path).trials]

    second = run_search(hydra_sweep_runner, tmp_path, *args, "hydra.sweeper.n_trials=3")
    trials = study_of(tmp_path).trials
    assert [len(batch) for batch in second.batches] == [1]
    assert [(t.number, t.params, t.value) for t in trials[:2]] == before
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    # the sampler's seed moves on with the study: not the first command's draws again
    assert trials[2].params["+x"] not in {params["+x"] for _, params, _ in before}
    # job numbers follow the trial numbers: the second command's job has a directory of its own
    assert [r.hydra_cfg.hydra.job.num for r in second.batches[0]] == [2]
    assert second.job_dirs == ["2"]  # (the runner empties the sweep directory after each command)

    assert run_search(hydra_sweep_runner, tmp_path, *args, "hydra.sweeper.n_trials=3").batches == []
    assert len(study_of(tmp_path).trials) == 3


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_grid_continues_where_it_stopped(hydra_sweep_runner, tmp_path):
    args = ["hydra/sweeper/sampler=grid", "+x=choice(1,2)", "+y=range(2)", *storage(tmp_path)]
    run_search(hydra_sweep_runner, tmp_path, *args, "hydra.sweeper.n_trials=2")
    second = run_search(hydra_sweep_runner, tmp_path, *args, "hydra.sweeper.n_trials=100")
    assert [r.overrides for batch in second.batches for r in batch] == [["+x=2", "+y=0"], ["+x=2", "+y=1"]]
    assert [(t.params["+x"], t.params["+y"]) for t in study_of(tmp_path).trials] == [(1, 0), (1, 1), (2, 0), (2, 1)]


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_trials_stopped_by_ctrl_c_are_asked_again_by_the_same_command(hydra_sweep_runner, tmp_path):
    stops = [0.3]

    def stopped_once(cfg):
        if cfg.x in stops:
            stops.remove(cfg.x)
            raise SystemExit(130)  # what rl_hydra's job does on Ctrl-C or SIGTERM, after its checkpoint
        return float(cfg.x)

    args = [
        "hydra/sweeper/sampler=grid",
        "+x=choice(0.1,0.3,0.5)",
        "hydra.sweeper.n_jobs=1",
        "hydra.sweeper.n_trials=3",
        *storage(tmp_path),
    ]
    with pytest.raises(SystemExit):
        run_search(hydra_sweep_runner, tmp_path, *args, task=stopped_once)
    trials = study_of(tmp_path).trials
    assert [(t.params.get("+x"), t.state.name, t.user_attrs) for t in trials] == [
        (0.1, "COMPLETE", {}),
        (0.3, "FAIL", {"interrupted": True}),
        (None, "WAITING", {}),
    ]

    again = run_search(hydra_sweep_runner, tmp_path, *args, task=stopped_once)
    assert [r.overrides for batch in again.batches for r in batch] == [["+x=0.3"], ["+x=0.5"]]
    assert [(t.params["+x"], t.state.name) for t in study_of(tmp_path).trials] == [
        (0.1, "COMPLETE"),
        (0.3, "FAIL"),
        (0.3, "COMPLETE"),
        (0.5, "COMPLETE"),
    ]


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_several_directions_save_the_pareto_front(hydra_sweep_runner, tmp_path):
    search = run_search(
        hydra_sweep_runner,
        tmp_path,
        "hydra/sweeper/sampler=grid",
        "+x=choice(1,2,3)",
        "hydra.sweeper.direction=[minimize,maximize]",
        "hydra.sweeper.n_trials=3",
        task=lambda cfg: [cfg.x, -abs(cfg.x - 2)],
    )
    assert sorted(s["params"]["+x"] for s in search.results["solutions"]) == [1, 2]


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_preset_sampler_key_another_sampler_does_not_take_is_left_out(hydra_sweep_runner, tmp_path, capsys, caplog):
    caplog.set_level("INFO")  # the sweeper logs before any job sets up Hydra's logging
    run_search(
        hydra_sweep_runner,
        tmp_path,
        "hydra/sweeper/sampler=random",
        "hydra.sweeper.sampler.seed=1",
        "hydra.sweeper.sampler.n_startup_trials=4",
        "+x=interval(0,1)",
        "hydra.sweeper.n_trials=1",
    )
    assert "RandomSampler takes no n_startup_trials: left out" in logged(capsys, caplog)


# -- train.py --------------------------------------------------------------------------------------


@pytest.mark.slow  # two train.py processes, three tiny trials: about 20 s
def test_a_train_py_search_keeps_its_study_in_sqlite_and_the_same_command_adds_trials(tmp_path):
    db = f"sqlite:///{tmp_path / 'optuna.db'}"
    shared = ["train.progress", "device", *(arg.split("=")[0] for arg in TINY), "hparams_search"]
    args = [
        "-m",
        "+hparams_search=dqn_cartpole",
        *TINY,
        f"hydra.sweeper.storage={db}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(sorted(set(shared)))}]",
    ]

    def search(n_trials: int) -> list:
        result = run_cli(*args, f"hydra.sweeper.n_trials={n_trials}", timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        return optuna.load_study(study_name="dqn_cartpole", storage=db).trials

    first = search(2)
    assert [t.state for t in first] == [TrialState.COMPLETE] * 2
    assert set(first[0].params) == {"algo.optimizer.lr", "algo.exploration.fraction", "algo.gamma", "algo.batch_size"}
    summaries = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/summary.json")}
    assert len(summaries) == 2 and all(s["status"] == "completed" for s in summaries.values())
    assert sorted(t.value for t in first) == sorted(s["eval_return_mean"] for s in summaries.values())
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert results["best_value"] == max(t.value for t in first)

    trials = search(3)  # the same command with one more trial: the study goes on
    assert [(t.params, t.value) for t in trials[:2]] == [(t.params, t.value) for t in first]
    assert len(trials) == 3 and trials[2].state == TrialState.COMPLETE
    assert trials[2].params not in [t.params for t in first]
    assert len(list((tmp_path / "sweep").glob("*/summary.json"))) == 3
