"""Env groups, the presets that follow the env they were tuned for, and run directory names;
compose_option, Hydra composing one group option (an env group's id, an algo's class) on its own."""

from __future__ import annotations

import fnmatch
import json
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobRuntime
from hydra.version import VersionBase
from omegaconf import OmegaConf

from rl_hydra import choices
from rl_hydra.commands.api import _compose
from rl_hydra.commands.launch import RunFailed, launch
from rl_hydra.config import (
    ConfigError,
    check_preset,
    compose_option,
    env_groups_for,
    env_label,
    group_env,
    group_env_id,
    run_env_name,
)
from rl_hydra.envs import make
from rl_hydra.schema import validate_config
from tests.conftest import CONF_DIR, TINY, compose_config, run_cli
from tests.runs.test_run_record import cli

PRESETS = sorted(p.stem for p in (CONF_DIR / "algo_env").glob("*.yaml"))
ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))


def split_preset(name: str) -> tuple[str, str]:
    """dqn_lunar_lander -> (dqn, lunar_lander): the longest algo option the name starts with."""
    algo = max((a for a in ALGOS if name.startswith(a + "_")), key=len)
    return algo, name[len(algo) + 1 :]


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_names_itself_and_the_env_id_of_its_group(preset):
    algo, env = split_preset(preset)
    cfg = compose_config(f"algo={algo}", f"env={env}")
    assert cfg.env.id == group_env_id(env)
    # a preset of a whole suite names a pattern its group's id fits (minatar: MinAtar/*-v1)
    assert cfg.preset.env_id == cfg.env.id or fnmatch.fnmatchcase(cfg.env.id, cfg.preset.env_id)
    # an alias file (cartpole_novel) applies the preset it stands for
    assert cfg.preset.name in (preset, preset.replace("cartpole_novel", "cartpole_no_velocity"))


def test_a_preset_is_refused_on_another_env_id_with_the_ways_out(tmp_path):
    cfg = compose_config("algo=dqn", "env=cartpole", "env.id=Acrobot-v1")
    with pytest.raises(
        ConfigError,
        match=r"algo_env=dqn_cartpole is tuned for env.id=CartPole-v1, not Acrobot-v1; "
        r"choose env=acrobot .*env=gym env.id=Acrobot-v1 .*~algo_env",
    ):
        check_preset(cfg)
    result = run_cli("algo=dqn", "env=cartpole", "env.id=Acrobot-v1", *TINY, f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: algo_env=dqn_cartpole is tuned for")
    assert not (tmp_path / "run").exists()  # a refused run leaves no directory behind


@pytest.mark.parametrize(
    "args, instead",
    [
        (
            ["algo=drqn", "env=minigrid_memory", "env.id=MiniGrid-DoorKey-5x5-v0"],
            "env=minigrid env.id=MiniGrid-DoorKey-5x5-v0",
        ),
        (["algo=dqn", "env=cartpole", "env.id=ALE/Breakout-v5"], "env=atari env.id=ALE/Breakout-v5"),
        (
            ["algo=dqn", "env=cartpole", "env.id=MiniGrid-MemoryS9-v0"],
            "env=minigrid_memory env.id=MiniGrid-MemoryS9-v0",
        ),
        (["algo=dqn", "env=cartpole", "env.id=Foo-v0"], r"env=gym env.id=Foo-v0 \(the algorithm's defaults\)"),
    ],
)
def test_a_refused_preset_points_to_the_group_made_for_the_id_s_family(args, instead):
    """An id no group sets, in a family a group is made for (its `ids`: MiniGrid-*, ALE/*), points
    to that group, the narrowest family first; env=gym, which has none of its wrappers, only when none is."""
    with pytest.raises(ConfigError, match=f"; choose {instead}, or ~algo_env to drop the preset$"):
        check_preset(compose_config(*args))
    assert env_groups_for("MiniGrid-MemoryS9-v0") == ["minigrid_memory", "minigrid"]


def test_a_suite_preset_applies_to_every_game_of_its_suite_and_to_nothing_else():
    for game in ("Breakout", "Asterix", "Freeway", "Seaquest", "SpaceInvaders"):
        check_preset(compose_config("algo=dqn", "env=minatar", f"env.id=MinAtar/{game}-v1"))
    with pytest.raises(
        ConfigError,
        match=r"algo_env=dqn_minatar is tuned for env.id=MinAtar/\*-v1, not "
        r"MinAtar/Breakout-v0",
    ):
        check_preset(compose_config("algo=dqn", "env=minatar", "env.id=MinAtar/Breakout-v0"))


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn", "iqn", "rainbow"])
def test_minatar_presets_are_the_values_the_minatar_benchmark_measured(algo):
    sys.path.insert(0, str(CONF_DIR.parent / "scripts" / "benchmarks"))
    from minatar_sb3 import our_overrides

    job = {
        "algo": algo,
        "game": "Breakout",
        "steps": 300_000,
        "warmup": 5000,
        "quantiles": 50,
        "eval_episodes": 10,
        "seed": 0,
    }
    measured = compose_config(*our_overrides(job), "~algo_env")  # the script's values over the algo's defaults
    preset = compose_config(f"algo={algo}", "env=minatar")
    assert preset.preset.name == f"{algo}_minatar"
    for group in ("algo", "network", "buffer"):
        assert OmegaConf.to_container(preset[group]) == OmegaConf.to_container(measured[group]), group
    assert preset.train.total_steps == 300_000


def test_dropping_the_preset_or_choosing_env_gym_runs_the_algorithm_defaults():
    base = OmegaConf.load(CONF_DIR / "algo" / "base" / "dqn.yaml")
    for overrides in (["env=cartpole", "env.id=Acrobot-v1", "~algo_env"], ["env=gym", "env.id=Acrobot-v1"]):
        cfg = compose_config("algo=dqn", *overrides)
        check_preset(cfg)
        assert cfg.preset is None
        assert cfg.algo.train_every == base.train_every and cfg.algo.optimizer.lr == base.optimizer.lr


def test_the_defaults_are_not_cartpole_s_tuning():
    tuned = compose_config("algo=dqn", "env=cartpole").algo
    untuned = compose_config("algo=dqn", "env=gym", "env.id=CartPole-v1").algo
    assert (tuned.train_every, tuned.gradient_steps) == (256, 128)
    assert (untuned.train_every, untuned.gradient_steps) == (4, 4)


def test_run_directories_are_named_after_the_env_actually_run():
    assert run_env_name("cartpole", "CartPole-v1") == "cartpole"
    assert run_env_name("cartpole_novel", "CartPole-v1") == "cartpole_novel"  # via its defaults list
    assert run_env_name("cartpole", "Acrobot-v1") == "Acrobot-v1"
    assert run_env_name("gym", "MountainCar-v0") == "MountainCar-v0"
    assert env_label("ALE/Pong-v5") == "ALE-Pong-v5"
    assert env_label("tests.plugin_env:PluginCorridor-v0") == "PluginCorridor-v0"
    _, hydra_cfg = _compose(["algo=dqn", "env=gym", "env.id=MountainCar-v0"])
    assert hydra_cfg.run.dir.endswith("_dqn_MountainCar-v0")
    _, hydra_cfg = _compose(["algo=iqn", "env=acrobot"])
    assert hydra_cfg.run.dir.endswith("_iqn_acrobot")


def test_env_gym_without_an_id_is_one_line():
    result = run_cli("env=gym", *TINY)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: env.id is required here (it is ??? in the chosen groups); e.g. env=gym env.id=MountainCar-v0"
    )


def test_a_plugin_env_in_module_colon_id_form_trains_from_the_command_line(tmp_path):
    result = run_cli(
        "env=gym",
        "env.id=tests.plugin_env:PluginCorridor-v0",
        *TINY,
        "algo.learning_starts=100",
        f"hydra.run.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["env_id"] == "tests.plugin_env:PluginCorridor-v0"


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("no_such_module:Corridor-v0", "cannot import its module 'no_such_module'"),
        ("tests.plugin_env:Nowhere-v0", "is not a registered gymnasium environment by module 'tests.plugin_env'"),
        ("Acrobot-v2", "did you mean: Acrobot-v1"),
    ],
)
def test_bad_env_ids_are_one_line(env_id, message):
    with pytest.raises(ConfigError, match=message):
        make.check_env_id(env_id)


def test_a_missing_extra_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(choices.ENV_EXTRAS, "box2d", "no_such_box2d_module")
    with pytest.raises(
        ConfigError,
        match=r"^env.id=LunarLander-v3 needs the box2d extra \(no_such_box2d_module is "
        r'not installed\): pip install -e "\.\[box2d\]"$',
    ):
        make.env_factory(compose_config("env=lunar_lander").env)
    with pytest.raises(ConfigError, match=r"env.extra='nope' is not allowed; choose one of: box2d, mujoco, atari"):
        validate_config(compose_config("env=cartpole", "env.extra=nope"))  # the schema's choice


def test_gymnasium_s_own_missing_dependency_error_is_turned_into_the_extra():
    error = make.gym.error.DependencyNotInstalled("Box2D is not installed, run `pip install swig`")
    assert make.missing_dependency("LunarLander-v3", error) == (
        "env.id=LunarLander-v3 needs the box2d extra (Box2D is not installed, run `pip install swig`): "
        'pip install -e ".[box2d]"'
    )


def test_a_required_key_left_out_is_refused_by_the_run_too(tmp_path):
    """The check before the run composes a sweep's first job; a later job, or a config composed in
    Python, is refused by the run, in one line."""
    with pytest.raises(RunFailed) as refused:
        launch(compose_config("env=gym", *TINY), tmp_path)
    assert refused.value.code == 2 and "env.id is required here" in str(refused.value)
    result = run_cli("-m", "env=cartpole,gym", *TINY, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "env=gym" in errors[0] and errors[0].endswith(
        "env.id is required here (it is ??? in the chosen groups); e.g. env=gym env.id=MountainCar-v0"
    )
    assert errors[1].startswith("error: 1 of 2 jobs failed")


def hydra_state() -> tuple:
    """Hydra's global state as its public API shows it: each of its singletons and what it holds."""
    global_hydra, version, job = GlobalHydra.instance(), VersionBase.instance(), JobRuntime.instance()
    return global_hydra, global_hydra.hydra, version, version.getbase(), job, job.conf


def test_compose_option_composes_a_group_option_through_its_defaults_list():
    from rl_hydra.fit import algo_options

    assert compose_option("algo", "c51").algo._target_ == "rl_hydra.algos.c51.C51"  # base/c51@_here_ followed
    assert compose_option("env", "cartpole_novel").env.id == "CartPole-v1"  # - cartpole_no_velocity
    assert group_env_id("gym") is None and group_env_id("no_such_env") is None  # id: ???
    assert algo_options()["rainbow"].__name__ == "C51" and algo_options()["dopamine_iqn"].__name__ == "IQN"


def test_compose_option_leaves_hydra_as_it_found_it_outside_and_inside_a_composed_app():
    compose_option.cache_clear()
    before = hydra_state()
    assert compose_option("env", "acrobot").env.id == "Acrobot-v1"
    assert hydra_state() == before and not GlobalHydra.instance().is_initialized()
    with initialize_config_dir(config_dir=str(CONF_DIR), job_name="mine", version_base="1.3"):
        inside = hydra_state()
        hydra = GlobalHydra.instance().hydra
        assert compose_option("env", "pendulum").env.id == "Pendulum-v1"
        assert hydra_state() == inside and GlobalHydra.instance().hydra is hydra
        assert JobRuntime.instance().get("name") == "mine"
        assert compose(config_name="train", overrides=["env=acrobot"]).env.id == "Acrobot-v1"  # still usable
    assert not GlobalHydra.instance().is_initialized()


def test_compose_option_runs_inside_a_running_hydra_app(monkeypatch, capsys):
    """The run directory's name (`rl_hydra.env_name`, resolved by Hydra inside its app) composes the env group."""
    compose_option.cache_clear()
    group_env.cache_clear()
    code, out, err = cli(monkeypatch, capsys, "env=cartpole_novel", "--cfg", "all", "--resolve")
    assert code == 0 and any(
        line.strip().startswith("dir: outputs/") and line.endswith("_dqn_cartpole_novel") for line in out
    ), (out, err)
