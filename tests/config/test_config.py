"""Every algo x env pair composes; every group instantiates; pairs that cannot work say why."""

import functools

import gymnasium as gym
import pytest
import torch
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from rl_hydra.build import build_components
from rl_hydra.envs.make import check_env_id
from rl_hydra.errors import ConfigError
from rl_hydra.protocols import Capabilities
from tests.conftest import CONF_DIR, TINY, compose_config, env_overrides, run_cli, skip_without_env_extra

ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))
ENVS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))


def env_action_kind(env: str) -> str:
    env_id = compose_config(*env_overrides(env)).env.id  # composed: an alias file has no id
    check_env_id(env_id)  # registers the ALE/ and MinAtar/ namespaces
    space = gym.make(env_id).action_space
    return "discrete" if isinstance(space, gym.spaces.Discrete) else "continuous"


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_declares_what_it_works_with(algo):
    capabilities = get_class(compose_config(f"algo={algo}").algo._target_).capabilities
    assert isinstance(capabilities, Capabilities) and capabilities.actions in ("discrete", "continuous")


@pytest.mark.parametrize("algo", ALGOS)
def test_composed_config_names_a_target_for_algo_network_and_buffer(algo):
    cfg = compose_config(f"algo={algo}")
    for group in ("algo", "buffer"):
        assert cfg[group]["_target_"].startswith("rl_hydra."), group
    network = cfg.network
    targets = [network._target_] if "_target_" in network else [v._target_ for v in network.values()]
    assert targets and all(t.startswith("rl_hydra.networks.") for t in targets)


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("algo", ALGOS)
def test_algo_env_pair_builds_or_fails_clearly(algo, env):
    skip_without_env_extra(*env_overrides(env))
    # a small buffer: the MuJoCo presets' million transitions would only cost allocation time here
    cfg = compose_config(f"algo={algo}", *env_overrides(env), "device=cpu", "buffer.capacity=1000")
    if get_class(cfg.algo._target_).capabilities.actions == env_action_kind(env):
        agent, vec_env, buffer = build_components(cfg, torch.device("cpu"))
        actions, _ = agent.act(vec_env.reset()[0], explore=False)
        assert vec_env.action_space.contains(actions.astype(vec_env.action_space.dtype))
        vec_env.close()
    else:
        name = get_class(cfg.algo._target_).name  # a preset of another class (rainbow: c51) names the class
        with pytest.raises(ConfigError, match=f"algo={name} needs a"):
            build_components(cfg, torch.device("cpu"))


REPLAY, SEQUENCE = "rl_hydra.buffers.replay.ReplayBuffer", "rl_hydra.buffers.sequence.SequenceBuffer"
PRIORITIZED = "rl_hydra.buffers.prioritized.PrioritizedReplayBuffer"


def test_each_algorithm_picks_its_buffer():
    """algo/<algo>.yaml's defaults list picks the buffer: the sequence buffer for DRQN, prioritized
    replay for the Rainbow presets, the replay buffer for the others."""
    picks = {"drqn": SEQUENCE, "rainbow": PRIORITIZED, "dopamine_iqn": PRIORITIZED}
    for algo in ALGOS:
        assert compose_config(f"algo={algo}").buffer._target_ == picks.get(algo, REPLAY), algo


def test_command_line_network_and_buffer_choices_win_over_the_algorithm_defaults():
    cfg = compose_config("algo=dqn", "buffer=sequence", "network=drqn", "network.lstm_size=8")
    assert cfg.buffer._target_ == SEQUENCE and cfg.network.lstm_size == 8
    cfg = compose_config("algo=drqn", "buffer=replay", "network.lstm_size=8")
    assert cfg.buffer._target_ == REPLAY and cfg.network.lstm_size == 8
    cfg = compose_config("algo=dqn", "network.hidden_sizes=[8]")
    assert list(cfg.network.hidden_sizes) == [8]


def test_a_sweep_over_algorithms_gives_each_job_its_algorithm_s_network_and_buffer(tmp_path):
    result = run_cli("-m", "algo=dqn,drqn", *TINY, "algo.learning_starts=100", f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = {
        cfg.algo._target_.rsplit(".", 1)[1]: cfg
        for cfg in map(OmegaConf.load, sorted(tmp_path.glob("*/.hydra/config.yaml")))
    }
    assert sorted(jobs) == ["DQN", "DRQN"], jobs.keys()
    assert jobs["DQN"].buffer._target_ == REPLAY and jobs["DRQN"].buffer._target_ == SEQUENCE
    assert jobs["DQN"].network._target_.endswith(".QNetwork")
    assert jobs["DRQN"].network._target_.endswith(".RecurrentQNetwork")


def test_every_group_option_composes():
    for group in ("algo", "env", "network", "buffer"):
        for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
            cfg = compose_config(f"{group}={option}")
            assert cfg[group] is not None, f"{group}={option}"


NETWORKS = sorted(p.stem for p in (CONF_DIR / "network").glob("*.yaml"))


@functools.cache
def network_option(name: str) -> DictConfig:
    return compose_config(f"network={name}").network


@pytest.mark.parametrize("algo", ALGOS)
def test_a_network_of_another_kind_is_refused_in_one_line_before_anything_is_built(algo):
    """Every network option either is of the class the algorithm declares it builds on (its own,
    or a variant of it: rainbow's for c51) and builds, or is refused naming both classes."""
    from rl_hydra.fit import check_fit

    cfg = compose_config(f"algo={algo}", "device=cpu", "buffer.capacity=100")
    algo_class = get_class(cfg.algo._target_)
    action_space = (
        gym.spaces.Box(-1, 1, (1,)) if algo_class.capabilities.actions == "continuous" else gym.spaces.Discrete(2)
    )
    fits = []
    for network in NETWORKS:
        cfg.network = network_option(network)
        try:
            check_fit(cfg, action_space, lambda group, network=network: network if group == "network" else algo)
            fits.append(network)
        except ConfigError as error:
            assert (
                "\n" not in str(error)
                and f"network={network} builds" in str(error)
                and f"but algo={algo} builds on" in str(error)
            ), str(error)
    assert cfg.algo and compose_config(f"algo={algo}").network.get("_target_") in [
        network_option(n).get("_target_") for n in fits
    ], fits
    for network in fits:  # what fits also builds
        env = "pendulum" if algo_class.capabilities.actions == "continuous" else "cartpole"
        build_components(
            compose_config(f"algo={algo}", f"network={network}", f"env={env}", "device=cpu", "buffer.capacity=100"),
            torch.device("cpu"),
        )[1].close()


@pytest.mark.parametrize(
    "args,message",
    [
        (["algo=dqn", "network=redq"], "builds actor: rl_hydra.networks.actor_critic.SquashedGaussianActor"),
        (["algo=dqn", "network=qr_dqn"], "but algo=dqn builds on rl_hydra.networks.mlp.QNetwork"),
        (["algo=dqn", "network=iqn"], "builds rl_hydra.networks.quantile.ImplicitQuantileNetwork, but algo=dqn"),
        (["algo=sac", "env=pendulum", "network=dqn"], "but algo=sac builds on actor: "),
        (["algo=drqn", "buffer=replay"], "algo=drqn needs a sequence buffer (buffer=sequence)"),
        (["algo=dqn", "buffer=sequence"], "algo=dqn needs a transition buffer (buffer=replay)"),
        (
            ["algo=redq", "env=pendulum", "buffer=prioritized"],
            "needs an algo whose update returns per-sample priorities",
        ),
        (["algo=sac", "env=pendulum", "algo.n_step=3"], "algo.n_step=3 is not supported by algo=sac"),
        (["algo=iqn", "env=pendulum"], "algo=iqn needs a discrete action space"),
        (["algo=redq", "env=cartpole"], "algo=redq needs a continuous (Box) action space"),
    ],
)
def test_groups_that_do_not_fit_are_refused_in_one_line_before_anything_is_built(args, message):
    with pytest.raises(ConfigError) as error:
        build_components(compose_config(*args, "device=cpu"), torch.device("cpu"))
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["algo=dqn", "network=redq"],
            "network=redq builds actor: rl_hydra.networks.actor_critic.SquashedGaussianActor",
        ),
        (["algo=drqn", "buffer=replay"], "algo=drqn needs a sequence buffer (buffer=sequence); buffer=replay"),
        (["algo=sac", "env=pendulum", "algo.n_step=3"], "algo.n_step=3 is not supported by algo=sac"),
    ],
)
def test_groups_that_do_not_fit_are_one_error_line_and_exit_2(tmp_path, monkeypatch, capsys, args, message):
    from tests.runs.test_run_record import cli

    code, out, err = cli(monkeypatch, capsys, *TINY, *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and out == [] and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run").exists()
