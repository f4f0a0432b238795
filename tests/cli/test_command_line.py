"""The one check before Hydra runs (rl_hydra/commands/cli.py check_config): the command line read by Hydra's
own parsers and composed once with Hydra's compose API, each refusal one `error:` line and exit 2."""

from __future__ import annotations

import argparse
import inspect
import os
import traceback

import hydra
import pytest

from rl_hydra.commands import cli as cli_module
from rl_hydra.commands.cli import HydraFlags, check_config, command_line
from rl_hydra.errors import ConfigError
from tests.conftest import CONF_DIR, TINY
from tests.runs.test_run_record import cli

OPTIONS = {
    "algo": ", ".join(sorted(path.stem for path in (CONF_DIR / "algo").glob("*.yaml"))),
    "logger": "csv, mlflow, tensorboard, wandb",
}
NEW_KEY = "(a new key is added with +{key}=...; python train.py --cfg job shows every key)"


@pytest.mark.parametrize(
    "args, message",
    [
        (["algo=foo"], f"algo=foo is not a config option; choose one of: {OPTIONS['algo']}"),
        (["logger=[csv,foo]"], f"logger=foo is not a config option; choose one of: {OPTIONS['logger']}"),
        (["-m", "algo=dqn,foo"], f"algo=foo is not a config option; choose one of: {OPTIONS['algo']}"),  # every value
        (["-m", "logger=[csv],[csv,foo]"], "logger=foo is not a config option"),
        (["hydra/launcher=nope"], "hydra/launcher=nope is not a config option; choose one of: basic"),
        (
            ["algo.gama=0.9"],
            "algo.gama is not a key of the config; did you mean algo.gamma? " + NEW_KEY.format(key="algo.gama"),
        ),
        (
            ["-m", "algo=dqn,iqn", "train.total_step=10"],
            "train.total_step is not a key of the config; did you mean train.total_steps?",
        ),
        (["-m", "algo.optimizer.lr=tag(log,interval(1e-4,1e-2))", "algo.gama=1"], "did you mean algo.gamma?"),
        (["hydra.run.dirr=x"], "hydra.run.dirr is not a key of the config; did you mean hydra.run.dir?"),
        (["env=gym"], "env.id is required here (it is ??? in the chosen groups); e.g. env=gym env.id=MountainCar-v0"),
        (["-m", "env=gym,cartpole"], "env.id is required here"),  # a sweep: its first job, composed as Hydra will
        (["algo=dqn,iqn"], "Ambiguous value for argument 'algo=dqn,iqn'; 1. To use it as a list"),  # without -m
        (["--cfg", "nope"], "argument --cfg/-c: invalid choice: 'nope' (choose from 'job', 'hydra', 'all')"),
        (["--nope"], "unrecognized arguments: --nope; python train.py --hydra-help lists Hydra's flags"),
        (["algo.gamma=[1"], "cannot parse 'algo.gamma=[1'"),
        (["env.id=Foo=Bar"], "cannot parse 'env.id=Foo=Bar'"),  # an = in a value is quoted: env.id='Foo=Bar'
        (["~no_such_key"], "Could not delete from config. 'no_such_key' does not exist"),
        (["+seed=1"], "Could not append to config. An item is already at 'seed'; Either remove + prefix"),
        # a mistyped key, also a top-level one, and a mistyped option: the closest one, never an old alias
        (
            ["trian.total_steps=10"],
            "trian.total_steps is not a key of the config; did you mean train.total_steps? "
            + NEW_KEY.format(key="trian.total_steps"),
        ),
        (["algo.optimzer.lr=1"], "algo.optimzer.lr is not a key of the config; did you mean algo.optimizer.lr?"),
        (["algo=dqnn"], f"algo=dqnn is not a config option; choose one of: {OPTIONS['algo']}; did you mean dqn?"),
        (
            ["-m", "algo=dqn,iqnn"],
            f"algo=iqnn is not a config option; choose one of: {OPTIONS['algo']}; did you mean iqn?",
        ),
        (
            ["env=cartpol"],
            "env=cartpol is not a config option; choose one of: acrobot, ant, atari, cartpole, "
            "cartpole_no_velocity, cliff_walking, ",
        ),
        # a group that acts only in a sweep, without -m: refused, with the command that has it
        (
            ["+hparams_search=dqn_cartpole"],
            "+hparams_search=dqn_cartpole is an Optuna search, which runs only in a sweep: "
            "add -m (python train.py -m +hparams_search=dqn_cartpole train.total_steps=300",
        ),
        (["hydra/launcher=joblib"], "hydra/launcher=joblib is a launcher, which runs only in a sweep: add -m"),
        # refused while the env is built, in the run directory Hydra made for it (which is removed)
        (
            ["env.wrappers=[{_target_:tests.helpers.Nope,_partial_:true}]"],
            "env.wrappers[0]._target_=tests.helpers.Nope does not exist (module tests.helpers has no Nope)",
        ),
        (
            ["env.wrappers=[{_target_:nowhere.Wrapper,_partial_:true}]"],
            "env.wrappers[0]._target_=nowhere.Wrapper cannot be imported"
            " (ModuleNotFoundError: No module named 'nowhere')",
        ),
        (
            ["env=gym", "env.id=CliffWalking-v1", "env.fallback_max_episode_steps=null"],
            "env.id=CliffWalking-v1 has no time limit of its own, so an episode could last for ever, and "
            "env.fallback_max_episode_steps=null gives it none: give env.max_episode_steps=N",
        ),
    ],
)
def test_each_refusal_before_the_run_is_one_error_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    code, out, err = cli(
        monkeypatch, capsys, *args, *TINY, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"
    )
    assert code == 2 and out == [] and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()


def test_values_hand_splitting_would_break_compose_as_hydra_reads_them(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "env=gym", "env.id='Foo=Bar'", "--cfg", "job")
    assert code == 0 and "  id: Foo=Bar" in out, err
    code, out, err = cli(
        monkeypatch,
        capsys,
        "logger=[csv,tensorboard]",
        "hydra.job.name='a,b'",
        "+where='${hydra:runtime.output_dir}/x'",
        "--cfg",
        "job",
    )  # resolved by the job alone
    assert code == 0 and "  csv:" in out and "  tensorboard:" in out, err
    # a sweep: a quoted value with a comma is one value; a list of options is checked option by option
    check_config(
        command_line(["-m", "env=gym", "env.id='A,B=C',D", "logger=[csv],[csv,tensorboard]"])[1], multirun=True
    )
    with pytest.raises(ConfigError, match="^algo.gama is not a key"):  # the first job: env.id='A,B=C' composed
        check_config(command_line(["-m", "env=gym", "env.id='A,B=C',D", "algo.gama=1"])[1], multirun=True)


def flags(parser: argparse.ArgumentParser) -> dict:
    """Each argument a parser takes: its names, choices, number of values, default and kind."""
    return {
        action.dest: (
            action.option_strings,
            action.choices,
            action.nargs,
            action.const,
            action.default,
            type(action).__name__,
            getattr(action, "version", None),
        )
        for action in parser._actions
    }


def test_the_cli_reads_the_flags_hydras_own_parser_reads():
    """HydraFlags declares Hydra's flags; Hydra's own parser is private (hydra._internal), so this
    test is the one place that reads it: a Hydra that adds or changes a flag fails here."""
    from hydra._internal.utils import get_args_parser

    assert flags(HydraFlags()) == flags(get_args_parser())
    for argv in (
        ["-m", "--cfg", "job", "--resolve", "-p", "algo", "seed=1"],
        ["--info"],
        ["-i", "plugins", "-r"],
        ["-cp", "a", "-cn", "b", "-cd", "c", "x=1", "y=2"],
        ["-sc", "install=bash"],
        ["-h", "--hydra-help"],
        ["--experimental-rerun", "outputs/x/.hydra/config.pickle"],
        ["--config-name=c", "--multirun"],
    ):
        assert vars(HydraFlags().parse_args(argv)) == vars(get_args_parser().parse_args(argv)), argv


def test_the_version_flag_prints_hydras_version(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "--version")
    assert code == 0 and out == [f"Hydra {hydra.__version__}"], err


def test_no_function_of_the_cli_splits_an_override_by_hand():
    source = inspect.getsource(cli_module)
    for hand_parsing in ('split("=', "split('=", 'split(",")', 'strip("[]")', 'partition("=")'):
        assert hand_parsing not in source, hand_parsing


def test_list_indexes_new_keys_and_config_dirs_on_the_searchpath_go_through(tmp_path, monkeypatch, capsys):
    code, out, err = cli(
        monkeypatch, capsys, "network.hidden_sizes.0=32", "+algo.new_key=1", "~algo_env", "--cfg", "job"
    )
    assert code == 0 and "  - 32" in "\n".join(out) and "  new_key: 1" in out, err
    (tmp_path / "conf" / "env").mkdir(parents=True)
    (tmp_path / "conf" / "env" / "mine.yaml").write_text("defaults:\n  - cartpole\n  - _self_\nnum_envs: 2\n")
    mine = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"
    code, out, err = cli(monkeypatch, capsys, mine, "env=mine", "--cfg", "job")
    assert code == 0 and "  num_envs: 2" in out, err
    code, _, err = cli(monkeypatch, capsys, mine, "env=nope", "--cfg", "job")
    assert code == 2 and len(err) == 1 and "env=nope is not a config option; choose one of: acrobot" in err[0]
    assert ", mine, " in err[0]  # the options of every config dir


def test_a_suggestion_never_offers_an_old_alias_which_still_works(monkeypatch, capsys):
    code, _, err = cli(monkeypatch, capsys, "env=cartpol", *TINY)
    assert code == 2 and len(err) == 1 and err[0].endswith("; did you mean cartpole?"), err
    assert "cartpole_novel" not in err[0]  # ENV_ALIASES: not a choice to offer
    code, out, err = cli(monkeypatch, capsys, "env=cartpole_novel", "--cfg", "job")
    assert code == 0 and "  id: CartPole-v1" in out, err


def test_a_sweep_only_group_is_fine_with_m_and_where_nothing_runs(monkeypatch, capsys):
    code, out, err = cli(monkeypatch, capsys, "+hparams_search=dqn_cartpole", "--cfg", "job")  # prints, runs nothing
    assert code == 0 and "  total_steps: 20000" in out, err
    check_config(command_line(["-m", "+hparams_search=dqn_cartpole"])[1], multirun=True)
    check_config(command_line(["hydra.mode=MULTIRUN", "hydra/launcher=joblib"])[1], multirun=True)


def test_a_single_run_is_composed_once(tmp_path, monkeypatch, capsys):
    """hydra.main alone composes a single run's config (no check of ours composes it before); a bug
    raised inside the run keeps its traceback instead of being read as a refusal, and HYDRA_FULL_ERROR
    is put back."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # the one composer Hydra has

    composed = []  # by whom: hydra.main's machinery, or other code (ours)
    load = ConfigLoaderImpl.load_configuration

    def counted(self, config_name, overrides, run_mode, *args, **kwargs):
        callers = {frame.f_code.co_name for frame, _ in traceback.walk_stack(None)}
        composed.append("hydra.main" if "_run_hydra" in callers else "other")
        return load(self, config_name, overrides, run_mode, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    code, _, err = cli(monkeypatch, capsys, *TINY, f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 0 and "hydra.main" in composed and "other" not in composed, (composed, err)
    assert (tmp_path / "run" / "summary.json").is_file() and "HYDRA_FULL_ERROR" not in os.environ

    def broken(*args, **kwargs):
        raise OverflowError("a bug inside the run")  # a type composition refusals also raise
        yield  # the launch's steps (loops/steps.py)

    monkeypatch.setattr(cli_module, "launching", broken)
    with pytest.raises(OverflowError, match="a bug inside the run"):
        cli(monkeypatch, capsys, *TINY, f"hydra.run.dir={tmp_path / 'other'}")
    assert "HYDRA_FULL_ERROR" not in os.environ


def test_the_budget_is_all_a_refused_resume_names(tmp_path, monkeypatch, capsys):
    """A finished run resumed with a budget that would not train it further: the line names the
    budget given (train.total_steps), not the other changes (train.progress)."""
    code, _, err = cli(monkeypatch, capsys, *TINY, "train.total_steps=100", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 0, err
    code, _, err = cli(monkeypatch, capsys, f"resume={tmp_path / 'run'}", "train.total_steps=50", "train.progress=true")
    assert code == 2 and err == [
        f"error: {tmp_path / 'run'} ended at step 100; train.total_steps=50 would not "
        "train it further (to extend it, give a larger train.total_steps); nothing was "
        "changed"
    ], err
    code, _, err = cli(monkeypatch, capsys, f"resume={tmp_path / 'run'}", "train.progress=true")
    assert code == 2 and err[0].startswith(f"error: {tmp_path / 'run'} ended at step 100; this resume would not"), err
