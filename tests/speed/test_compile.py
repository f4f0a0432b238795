"""`compile=true`: checked like any key, refused for agents without compilable methods,
and the same numbers as eager updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl_hydra.build import build_components, compile_agent, seed_everything
from rl_hydra.errors import ConfigError
from rl_hydra.protocols import Capabilities
from tests.conftest import TINY, compose_config, run_training

SMALL = {
    "dqn": ["network.hidden_sizes=[32,32]"],
    "qr_dqn": ["network.hidden_sizes=[32,32]"],
    "iqn": ["network.hidden_sizes=[32]", "network.head_hidden_sizes=[32]"],
    "redq": ["network.actor.hidden_sizes=[32,32]", "network.critic.hidden_sizes=[32,32]"],
}
SMALL["sac"] = [*SMALL["redq"], "network.actor.gsde=true"]  # gSDE's (F, A) noise through the compiled losses
SMALL["tqc"] = SMALL["td3"] = SMALL["redq"]
ENVS = {
    "dqn": "cartpole",
    "qr_dqn": "cartpole",
    "iqn": "cartpole",
    "redq": "pendulum",
    "sac": "pendulum",
    "tqc": "pendulum",
    "td3": "pendulum",
}


def test_bad_compile_value_is_one_config_error_line(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"^compile='maybe' is not allowed; choose one of: true, false \(torch.compile each update's loss\)$",
    ):
        run_training(tmp_path, *TINY, "compile=maybe")


def test_agent_without_compilable_methods_is_refused_with_the_algos_that_have_them():
    class RecurrentAgent:
        name, compiled_methods = "lstm_thing", ("loss",)
        capabilities = Capabilities(
            actions="discrete", network="rl_hydra.networks.recurrent.RecurrentQNetwork", recurrent=True
        )

    with pytest.raises(ConfigError) as error:
        compile_agent(RecurrentAgent())
    message = str(error.value)
    assert "\n" not in message and message.startswith("compile=true is not supported by algo=lstm_thing")
    listed = message.split("it works with algo=")[1].split(", ")
    assert listed == sorted(listed) and "drqn" not in listed
    assert {"c51", "dopamine_iqn", "dqn", "droq", "iqn", "qr_dqn", "rainbow", "redq", "sac", "td3", "tqc"} <= set(
        listed
    )


def agent_and_batches(algo: str, compiled: bool, num_batches: int = 3):
    cfg = compose_config(f"algo={algo}", f"env={ENVS[algo]}", "device=cpu", *SMALL[algo])
    seed_everything(0)
    agent, env, buffer = build_components(cfg, torch.device("cpu"))
    obs = env.reset()[0]
    for _ in range(200):
        actions = env.action_space.sample()
        next_obs, rewards, terminated, truncated, _ = env.step(actions)
        buffer.add(obs, actions, rewards, next_obs, terminated, truncated)
        obs = next_obs
    if compiled:
        compile_agent(agent)
    return agent, [buffer.sample(agent.batch_size) for _ in range(num_batches)]


@pytest.mark.parametrize(
    "algo",
    [
        pytest.param("dqn", marks=pytest.mark.slow),  # torch.compile takes ~10 s
        pytest.param("qr_dqn", marks=pytest.mark.slow),
        pytest.param("iqn", marks=pytest.mark.slow),
        pytest.param("redq", marks=pytest.mark.slow),
        pytest.param("sac", marks=pytest.mark.slow),
        pytest.param("tqc", marks=pytest.mark.slow),
        pytest.param("td3", marks=pytest.mark.slow),
    ],
)
def test_compiled_updates_give_the_eager_numbers(algo):
    eager, batches = agent_and_batches(algo, compiled=False)
    compiled, same_batches = agent_and_batches(algo, compiled=True)
    for batch, same_batch in zip(batches, same_batches):
        assert torch.equal(batch.obs, same_batch.obs)
        expected, got = eager.update(batch).metrics, compiled.update(same_batch).metrics
        assert expected.keys() == got.keys()
        for key in expected:  # scalars, and the per-sample priorities (B,)
            np.testing.assert_allclose(
                np.asarray(got[key], dtype=np.float64),
                np.asarray(expected[key], dtype=np.float64),
                rtol=1e-4,
                atol=1e-5,
                err_msg=key,
            )
