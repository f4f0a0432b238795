"""Every algo x env pair composes; every group instantiates; pairs that cannot work say why."""

import gymnasium as gym
import pytest
import torch
from hydra.utils import get_class
from omegaconf import OmegaConf

from rl_hydra.config import ConfigError
from rl_hydra.envs.make import check_env_id
from rl_hydra.training import build_components
from tests.conftest import CONF_DIR, TINY, compose_config, env_overrides, run_cli, skip_without_env_extra

ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))
ENVS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))
# which action space each algorithm handles; a new algorithm must be added here
ACTION_KIND = {"dqn": "discrete", "qr_dqn": "discrete", "iqn": "discrete", "drqn": "discrete", "c51": "discrete",
               "rainbow": "discrete", "dopamine_iqn": "discrete", "redq": "continuous", "sac": "continuous"}


def env_action_kind(env: str) -> str:
    env_id = compose_config(*env_overrides(env)).env.id   # composed: an alias file has no id
    check_env_id(env_id)                                   # registers the ALE/ and MinAtar/ namespaces
    space = gym.make(env_id).action_space
    return "discrete" if isinstance(space, gym.spaces.Discrete) else "continuous"


def test_every_algorithm_declares_its_action_kind():
    assert set(ALGOS) <= set(ACTION_KIND), f"add {set(ALGOS) - set(ACTION_KIND)} to ACTION_KIND"


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
    if ACTION_KIND[algo] == env_action_kind(env):
        agent, vec_env, buffer = build_components(cfg, torch.device("cpu"))
        actions, _ = agent.act(vec_env.reset()[0], explore=False)
        assert vec_env.action_space.contains(actions.astype(vec_env.action_space.dtype))
        vec_env.close()
    else:
        name = get_class(cfg.algo._target_).name   # a preset of another class (rainbow: c51) names the class
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
    jobs = {cfg.algo._target_.rsplit(".", 1)[1]: cfg
            for cfg in map(OmegaConf.load, sorted(tmp_path.glob("*/.hydra/config.yaml")))}
    assert sorted(jobs) == ["DQN", "DRQN"], jobs.keys()
    assert jobs["DQN"].buffer._target_ == REPLAY and jobs["DRQN"].buffer._target_ == SEQUENCE
    assert jobs["DQN"].network._target_.endswith(".QNetwork")
    assert jobs["DRQN"].network._target_.endswith(".RecurrentQNetwork")


def test_every_group_option_composes():
    for group in ("algo", "env", "network", "buffer"):
        for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
            cfg = compose_config(f"{group}={option}")
            assert cfg[group] is not None, f"{group}={option}"
