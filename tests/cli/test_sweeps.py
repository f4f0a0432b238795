"""Sweeps: joblib in parallel, jobs that fail alone, re-launches that skip and resume,
Optuna presets, and the submitit and Ray launchers (each skipped when its extra is missing)."""

import csv
import importlib.util
import json
import re
import shutil

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rl_hydra.commands.launch import RunFailed, launch
from rl_hydra.loops.runner import StopRequested
from rl_hydra.runs.names import job_dir_name
from rl_hydra.training import run
from tests.conftest import CONF_DIR, TINY, compose_config, run_cli, stop_at
from tests.runs.test_run_record import cli

UPDATES = ["algo.learning_starts=100", "algo.train_every=10", "algo.gradient_steps=2"]
CRASHING_ENV = "[{_target_:tests.helpers.RaiseAfter,_partial_:true,steps:120}]"
PRESETS = sorted(p.stem for p in (CONF_DIR / "hparams_search").glob("*.yaml"))


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def short_names(*constant_keys: str) -> str:
    """Leave the keys every job shares out of the job directory names: each is named by what differs (seed=0)."""
    keys = [
        "train.progress",
        "device",
        "train.total_steps",
        "train.eval_every",
        "train.eval_episodes",
        "train.checkpoint_every",
        "train.log_every",
        *(u.split("=")[0] for u in UPDATES),
        *constant_keys,
    ]
    return f"hydra.job.config.override_dirname.exclude_keys=[{','.join(keys)}]"


def sweep(sweep_dir, *args: str, timeout: float = 300, failed: int = 0) -> str:
    """Run `train.py -m` with tiny budgets, expecting `failed` jobs to fail; returns its console output."""
    result = run_cli("-m", *args, *TINY, f"hydra.sweep.dir={sweep_dir}", timeout=timeout)
    assert result.returncode == (1 if failed else 0), result.stderr[-3000:]
    closing = [line for line in result.stderr.splitlines() if " jobs failed " in line]
    assert len(closing) == (1 if failed else 0), result.stderr[-3000:]
    if failed:
        assert closing[0].startswith(f"error: {failed} of "), closing
    return result.stdout + result.stderr


def summaries(sweep_dir) -> dict[str, dict]:
    """Job directory name -> its summary.json."""
    return {p.parent.name: json.loads(p.read_text()) for p in sweep_dir.glob("*/summary.json")}


def test_joblib_trains_two_seeds_at_once_each_with_one_torch_thread(tmp_path):
    probe = (
        "env.wrappers=[{_target_:tests.helpers.RecordTorchThreads,_partial_:true,"
        "path:'${hydra:runtime.output_dir}/torch_threads.txt'}]"
    )
    output = sweep(
        tmp_path, "seed=0,1", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", probe, short_names("env.wrappers")
    )
    assert "launching 2 jobs, 2 at a time" in output
    runs = summaries(tmp_path)
    assert sorted(runs) == ["seed=0", "seed=1"]
    assert all(s["status"] == "completed" and s["global_step"] == 300 for s in runs.values())
    assert [(tmp_path / name / "torch_threads.txt").read_text() for name in sorted(runs)] == ["1", "1"]


def test_failing_jobs_end_alone_and_the_sweep_aggregate_lists_them(tmp_path, monkeypatch):
    """One healthy job among three that fail: a diverging lr, an env that raises, and both."""
    from rl_hydra.commands.report import main as evaluate_main

    output = sweep(
        tmp_path,
        "algo.optimizer.lr=1e-3,1e9",
        f"env.wrappers=[],{CRASHING_ENV}",
        "algo.max_grad_norm=null",
        "algo.loss=mse",
        *UPDATES,
        short_names("algo.max_grad_norm", "algo.loss"),
        failed=3,
    )
    runs = summaries(tmp_path)
    healthy = [name for name, s in runs.items() if s["status"] == "completed"]
    assert healthy == ["algo.optimizer.lr=0.001,env.wrappers=[]"], output[-3000:]
    assert runs[healthy[0]]["global_step"] == 300
    assert "non-finite loss" in runs["algo.optimizer.lr=1000000000.0,env.wrappers=[]"]["reason"]
    # past 80 characters, a job directory's name keeps the overrides that fit and a hash of them all
    long_name = next(name for name in runs if name.startswith("algo.optimizer.lr=0.001-and-1-more-"))
    assert len(long_name) <= 80
    recorded = yaml.safe_load((tmp_path / long_name / ".hydra" / "overrides.yaml").read_text())
    assert "env.wrappers=[{_target_:tests.helpers.RaiseAfter,_partial_:True,steps:120}]" in recorded  # all of them
    crashed = runs[long_name]
    assert (crashed["status"], crashed["reason"]) == ("failed", "RuntimeError: env crashed on purpose after 120 steps")
    assert "training diverged: non-finite loss" in output
    assert "run failed: RuntimeError: env crashed on purpose after 120 steps (traceback in" in output
    assert sum(line.startswith(f"error: {tmp_path}/") for line in output.splitlines()) == 3  # each job's own line

    monkeypatch.setenv("RL_HYDRA_TRUST", "tests.helpers.RaiseAfter")  # evaluate reads every job's config
    assert evaluate_main([f"run_dir={tmp_path}", "episodes=2"]) == 0
    with open(tmp_path / "eval" / "results_last_2ep_seed0.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(row["failed"] for row in rows if row["failed"]) == sorted(set(runs) - set(healthy))
    assert [bool(row["mean"]) for row in rows].count(True) == 1


def test_an_unexpected_exception_becomes_a_recorded_one_line_failure(tmp_path):
    cfg = compose_config(*TINY, f"env.wrappers={CRASHING_ENV}")
    with pytest.raises(RunFailed) as error:
        launch(cfg, tmp_path)
    assert error.value.code == 1  # a single run exits 1 with this line; a multirun job logs it
    assert str(error.value) == (
        f"run failed: RuntimeError: env crashed on purpose after 120 steps (traceback in {tmp_path}/traceback.txt)"
    )
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"
    assert "tests/helpers.py" in (tmp_path / "traceback.txt").read_text()


def interrupt_at(run_dir, step: int, monkeypatch) -> None:
    """Redo a finished job's run so that it stops at `step`, as SIGTERM would stop it: the
    directory then holds checkpoints/last.pt at that step and an 'interrupted' summary."""
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    for name in ("checkpoints", "tb"):
        shutil.rmtree(run_dir / name)
    for name in ("summary.json", "metrics.csv"):
        (run_dir / name).unlink()
    with monkeypatch.context() as patch:
        stop_at(patch, step)
        with pytest.raises(StopRequested):
            run(cfg, run_dir)


def test_relaunching_a_sweep_skips_finished_runs_and_resumes_an_interrupted_one(tmp_path, monkeypatch):
    args = ["seed=0,1", *UPDATES, short_names()]
    sweep(tmp_path, *args)
    finished, interrupted = tmp_path / "seed=0", tmp_path / "seed=1"
    interrupt_at(interrupted, 150, monkeypatch)
    assert json.loads((interrupted / "summary.json").read_text())["status"] == "interrupted"
    finished_mtime = (finished / "metrics.csv").stat().st_mtime_ns

    output = sweep(tmp_path, *args)  # the same command again
    assert f"{finished} already holds a finished run (step 300); not training again" in output
    assert (finished / "metrics.csv").stat().st_mtime_ns == finished_mtime
    assert f"resuming {interrupted} at step 150" in output
    resumed = json.loads((interrupted / "summary.json").read_text())
    assert resumed["status"] == "completed" and resumed["global_step"] == 300
    with open(interrupted / "metrics.csv", newline="") as f:
        steps = [int(row["step"]) for row in csv.DictReader(f)]
    assert steps == sorted(set(steps)) and steps[-1] == 300


def test_a_long_job_name_is_shortened_the_same_way_each_time_so_a_relaunch_finds_its_run(tmp_path):
    """TINY's overrides in the name run past 80 characters: the job directory keeps a prefix, how
    many overrides it leaves out and a hash; .hydra/overrides.yaml keeps them all; the same
    command again finds the run finished."""
    sweep(tmp_path, "seed=0")
    (name,) = summaries(tmp_path)
    assert name.startswith("device=cpu,seed=0,") and len(name) <= 80 and re.search(r"-and-\d+-more-[0-9a-f]{8}$", name)
    recorded = yaml.safe_load((tmp_path / name / ".hydra" / "overrides.yaml").read_text())
    assert {"seed=0", *TINY} - {"train.progress=false"} <= set(recorded)
    output = sweep(tmp_path, "seed=0")
    assert f"{tmp_path / name} already holds a finished run (step 300); not training again" in output
    assert list(summaries(tmp_path)) == [name]


def test_job_dir_names_stay_short_and_readable_and_never_change_for_the_same_overrides(tmp_path):
    trial = (
        "+hparams_search=dqn_cartpole,algo.batch_size=128,algo.exploration.fraction=0.21942968041716733,"
        "algo.gamma=0.995,algo.optimizer.lr=0.00036119473318016823,network.hidden_sizes=[64,64]"
    )
    name = job_dir_name(str(tmp_path), trial)
    assert len(trial) > 150 and len(name) <= 80
    # whole overrides only (a cut value would claim one the run does not have), then the count left out
    assert re.fullmatch(r"\+hparams_search=dqn_cartpole,algo\.batch_size=128-and-4-more-[0-9a-f]{8}", name), name
    assert job_dir_name("elsewhere", trial) == name  # the same overrides, the same name
    assert job_dir_name(str(tmp_path), trial.replace("0.995", "0.99")) != name
    short = "algo=dqn,seed=0,train.total_steps=2000"
    assert job_dir_name(str(tmp_path), short) == short
    wrapper = "env.wrappers=[{_target_:tests.helpers.SlowDown,_partial_:true,seconds:0.01},{_target_:b.C}],seed=1"
    assert re.fullmatch(r"seed=1-and-1-more-[0-9a-f]{8}", job_dir_name(str(tmp_path), wrapper))  # the long one left out
    alone = wrapper.removesuffix(",seed=1")
    assert re.fullmatch(r"env\.wrappers=\.\.\.-[0-9a-f]{8}", job_dir_name(str(tmp_path), alone))
    (tmp_path / trial).mkdir()  # made by a sweep before names were shortened: a re-launch keeps using it
    assert job_dir_name(str(tmp_path), trial) == trial


def compose_with_hydra(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=True)


def test_an_unknown_preset_is_one_line_naming_the_presets(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "-m", "+hparams_search=dqn_cartpol")
    assert code == 2 and len(err) == 1
    assert err[0] == (
        f"error: hparams_search=dqn_cartpol is not a config option; choose one of: {', '.join(PRESETS)}"
        "; did you mean dqn_cartpole?"
    )


needs_optuna = pytest.mark.skipif(
    not installed("hydra_plugins.rl_hydra_optuna_sweeper", "optuna"),
    reason='needs the optuna extra: pip install -e ".[optuna]"',
)


@needs_optuna
@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_maximises_over_keys_its_config_has(preset):
    cfg = compose_with_hydra(f"+hparams_search={preset}")
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert sweeper.storage is None and 1 <= sweeper.n_trials <= 20 and sweeper.study_name == preset
    algo, env = preset.rsplit("_", 1)
    assert cfg.algo._target_.startswith(f"rl_hydra.algos.{algo}.") and cfg.env.id.lower().startswith(env)
    missing = [key for key in sweeper.params if OmegaConf.select(cfg, key) is None]
    assert not missing, f"{preset} searches keys the config does not have: {missing}"


@pytest.mark.slow  # a learning run or a whole sweep: about 10-15 s
@needs_optuna
def test_optuna_sweep_survives_a_diverging_trial_and_saves_the_best(tmp_path):
    import optuna

    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    # the grid sampler asks each lr once, in the order written
    output = sweep(
        tmp_path / "sweep",
        "+hparams_search=dqn_cartpole",
        "hydra.sweeper.n_trials=2",
        "hydra/sweeper/sampler=grid",
        "algo.optimizer.lr=choice(1e-3,1e9)",
        "algo.gamma=0.99",
        "algo.batch_size=64",
        "algo.exploration.fraction=0.1",
        "algo.max_grad_norm=null",
        "algo.loss=mse",
        *UPDATES,
        f"hydra.sweeper.storage={storage}",
        short_names(
            "hparams_search",
            "algo.gamma",
            "algo.batch_size",
            "algo.exploration.fraction",
            "algo.max_grad_norm",
            "algo.loss",
        ),
        failed=1,
    )
    runs = summaries(tmp_path / "sweep")
    assert {name: s["status"] for name, s in runs.items()} == {
        "algo.optimizer.lr=0.001": "completed",
        "algo.optimizer.lr=1000000000.0": "failed",
    }
    trials = optuna.load_study(study_name="dqn_cartpole", storage=storage).trials
    assert [(t.params, t.state.name) for t in trials] == [
        ({"algo.optimizer.lr": 0.001}, "COMPLETE"),
        ({"algo.optimizer.lr": 1e9}, "FAIL"),
    ]
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert results["best_params"] == {"algo.optimizer.lr": 0.001}
    assert results["best_value"] == runs["algo.optimizer.lr=0.001"]["eval_return_mean"]
    assert "Best parameters: {'algo.optimizer.lr': 0.001}" in output


@pytest.mark.slow  # three processes one after another (~15 s): over the default suite's budget
@pytest.mark.skipif(
    not installed("hydra_plugins.hydra_submitit_launcher", "submitit"),
    reason='needs the submitit extra: pip install -e ".[submitit]"',
)
def test_submitit_local_runs_two_jobs_one_batch_at_a_time(tmp_path):
    sweep(
        tmp_path,
        "seed=0,1",
        "hydra/launcher=submitit_local",
        "hydra.sweeper.max_batch_size=1",
        "hydra.launcher.timeout_min=10",
        short_names(),
    )
    runs = summaries(tmp_path)
    assert sorted(runs) == ["seed=0", "seed=1"] and all(s["status"] == "completed" for s in runs.values())


@pytest.mark.slow  # starting a local Ray instance alone takes ~15 s
@pytest.mark.skipif(
    not installed("hydra_plugins.hydra_ray_launcher", "ray"), reason='needs the ray extra: pip install -e ".[ray]"'
)
def test_ray_launcher_runs_two_jobs_on_a_local_ray_instance(tmp_path):
    sweep(
        tmp_path,
        "seed=0,1",
        "hydra/launcher=ray",
        "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        short_names(),
        timeout=600,
    )
    runs = summaries(tmp_path)
    assert sorted(runs) == ["seed=0", "seed=1"] and all(s["status"] == "completed" for s in runs.values())


def test_a_relaunch_with_a_changed_config_refuses_those_jobs_and_fails(tmp_path):
    sweep(tmp_path, "seed=0,1", short_names())
    before = summaries(tmp_path)
    # algo.gamma left out of the job names: the same job directories, with another config
    output = sweep(tmp_path, "seed=0,1", "algo.gamma=0.9", short_names("algo.gamma"), failed=2)
    refusals = [line for line in output.splitlines() if line.startswith("error:") and "0.99 -> 0.9" in line]
    assert "error: 2 of 2 jobs failed" in output and len(refusals) == 2  # one line per refused job
    assert summaries(tmp_path) == before  # the finished runs are untouched


def test_a_relaunch_after_an_upgrade_that_added_config_keys_finds_its_finished_runs(tmp_path):
    import yaml

    sweep(tmp_path, "seed=0", short_names())
    before = summaries(tmp_path)
    recorded = next(tmp_path.glob("*/.hydra/config.yaml"))
    old = yaml.safe_load(recorded.read_text())
    del old["algo"]["n_step"]  # as written by a version before algo.n_step existed
    recorded.write_text(yaml.safe_dump(old))
    output = sweep(tmp_path, "seed=0", short_names())
    assert "keys added since this run began (not in its recorded config): algo.n_step" in output
    assert summaries(tmp_path) == before  # found finished, not trained again
    recorded.write_text(yaml.safe_dump(old))
    output = sweep(tmp_path, "seed=0", "algo.n_step=1", short_names("algo.n_step"), failed=1)
    assert "already holds a run with another config (algo.n_step: None -> 1)" in output  # asked for, never had
    assert summaries(tmp_path) == before  # and the finished run is left as it was
