"""The speed layer's seam (rl_hydra/speed): each fast path is probed at start-up, falls back to the
plain torch/gymnasium path with one log line when the private API it rests on is gone or
different, and a run on the plain path (`fast_paths=false`) trains to the same numbers.
The fast paths' own equality with their plain counterparts: tests/test_lean_paths.py,
tests/test_acting.py, tests/test_host_memory.py."""

from __future__ import annotations

import importlib
import logging
import mmap

import numpy as np
import pytest
import torch
from gymnasium.vector import SyncVectorEnv
from torch import nn

from rl_hydra import speed
from rl_hydra.speed import lean_adam, numpy_mirror, vector_env
from rl_hydra.training import build_components, run
from tests.conftest import TINY, compose_config, metric_rows


@pytest.fixture(autouse=True)
def probes_run_afresh():
    """Each test sees the probes run again (they are cached per process), and leaves no result behind."""
    speed.failures.cache_clear()
    yield
    speed.failures.cache_clear()


BREAKAGES = {
    "adam": lambda monkeypatch: monkeypatch.setattr(lean_adam, "FUSED_ADAM", None),       # torch drops the kernel
    "mirror": lambda monkeypatch: monkeypatch.setitem(numpy_mirror.NUMPY_ACTIVATIONS, nn.ReLU, np.tanh),  # answers differ
    "host_memory": lambda monkeypatch: monkeypatch.delattr(mmap, "MADV_HUGEPAGE"),         # not Linux
    "vector_env": lambda monkeypatch: monkeypatch.setattr(   # a gymnasium without a private buffer it writes
        vector_env, "PRIVATE_BUFFERS", (*vector_env.PRIVATE_BUFFERS, "_renamed_in_a_later_gymnasium")),
    "cuda_graph": lambda monkeypatch: monkeypatch.delattr(torch.cuda, "graph"),   # a torch without it
}


def test_every_fast_path_passes_its_probe_here():
    assert speed.failures() == {}
    assert set(speed.PROBES) == set(speed.PLAIN_PATHS) == set(BREAKAGES)


def test_every_twin_names_a_torch_method_that_exists():
    for qualified_name in numpy_mirror.TWINS:
        module_name, class_name, method = qualified_name.rsplit(".", 2)
        owner = getattr(importlib.import_module(module_name), class_name)
        assert method in vars(owner), f"{qualified_name}: no such method"
        assert numpy_mirror.twin_of(getattr(owner, method)) is numpy_mirror.TWINS[qualified_name]


@pytest.mark.parametrize("name", sorted(BREAKAGES))
def test_a_broken_private_api_falls_back_with_one_log_line(name, monkeypatch, caplog):
    BREAKAGES[name](monkeypatch)
    assert list(speed.failures()) == [name]
    assert not speed.active(name) and all(speed.active(other) for other in BREAKAGES if other != name)
    with caplog.at_level(logging.INFO, logger="rl_hydra.speed"):
        speed.log_fallbacks()
    lines = [r.getMessage() for r in caplog.records if r.name == "rl_hydra.speed"]
    assert len(lines) == 1 and lines[0].startswith(f"speed: {name} falls back to {speed.PLAIN_PATHS[name]} (")


def plain_components(cfg):
    agent, env, buffer = build_components(cfg, torch.device("cpu"))
    return agent, env, buffer


def test_fast_paths_false_builds_the_plain_torch_and_gymnasium_objects():
    cfg = compose_config("algo=dqn", "env=cartpole", *TINY)
    with speed.enabled(False):
        agent, env, _ = plain_components(cfg)
        assert speed.numpy_action_values(agent, np.zeros((1, 4), np.float32)) is None
    assert type(agent.optimizer) is torch.optim.Adam and type(env) is SyncVectorEnv
    agent, env, _ = plain_components(cfg)
    assert type(agent.optimizer) is lean_adam.LeanAdam and type(env) is vector_env.LeanSyncVectorEnv
    assert speed.numpy_action_values(agent, np.zeros((1, 4), np.float32)) is not None


def test_enabled_restores_the_switch_also_on_error():
    with pytest.raises(RuntimeError), speed.enabled(False):
        assert not speed.active("adam")
        raise RuntimeError
    assert speed.active("adam")


@pytest.mark.parametrize("algo, options", [("dqn", []), ("qr_dqn", []),
                                           ("c51", ["network.dueling=true", "network.noisy=true"])])
def test_the_plain_path_trains_to_the_same_numbers(algo, options, tmp_path):
    """Adam's steps, the replay storage and the env steps are exact; the numpy mirror agrees with
    torch to float rounding, which decides no greedy action here."""
    overrides = [f"algo={algo}", "env=cartpole", "network.hidden_sizes=[32]", "algo.learning_starts=100",
                 "algo.batch_size=16", "algo.train_every=1", "algo.gradient_steps=1", *options, *TINY]
    fast = run(compose_config(*overrides), tmp_path / "fast")
    plain = run(compose_config(*overrides, "fast_paths=false"), tmp_path / "plain")
    assert fast["updates"] == plain["updates"] > 100
    assert metric_rows(tmp_path / "fast") == metric_rows(tmp_path / "plain")


def test_a_run_whose_fast_paths_all_fail_trains_on_the_plain_path(monkeypatch, tmp_path, caplog):
    for breaks in BREAKAGES.values():
        breaks(monkeypatch)
    overrides = ["algo=dqn", "env=cartpole", "network.hidden_sizes=[16]", "algo.learning_starts=100", *TINY]
    with caplog.at_level(logging.INFO, logger="rl_hydra.speed"):
        summary = run(compose_config(*overrides), tmp_path / "run")
    assert summary["updates"] > 0
    assert sorted(line.split()[1] for line in (r.getMessage() for r in caplog.records if r.name == "rl_hydra.speed")) \
        == sorted(BREAKAGES)


def test_fast_paths_is_checked_and_may_change_on_resume():
    from rl_hydra.resume import RESUMABLE
    from rl_hydra.config import ConfigError, validate_run_config

    assert "fast_paths" in RESUMABLE
    with pytest.raises(ConfigError, match="fast_paths='yes' is not allowed"):
        validate_run_config(compose_config("fast_paths=yes"))


# --- cuda_graph: which gradient steps may be replayed (the replay itself: tests/test_cuda.py) ----------
def built_agent(*overrides: str):
    return plain_components(compose_config(*overrides, "env=cartpole", "network.hidden_sizes=[16]", *TINY))[0]


@pytest.mark.parametrize("algo, base", [("dqn", "DQN"), ("qr_dqn", "QRDQN"), ("iqn", "IQN"), ("c51", "C51"),
                                        ("rainbow", "C51")])
def test_the_project_s_q_learning_steps_are_known_to_replay(algo, base):
    from rl_hydra.speed.cuda_graph import known_base

    assert known_base(built_agent(f"algo={algo}")).__name__ == base


def test_a_step_the_layer_does_not_know_runs_plainly():
    """A subclass's own loss, a compiled loss, a network class from outside the package, DRQN's
    sequences: each could hold host-side state a replay would freeze, so none is replayed."""
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.speed.cuda_graph import known_base

    class OwnLoss(DQN):
        def loss(self, batch):
            return super().loss(batch)

    class OwnNetworkBuilder(DQN):   # changes what is built, not what a step runs
        def make_network(self, network):
            return super().make_network(network)

    class Scaled(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) * 2.0

    agent = built_agent("algo=dqn")
    assert known_base(agent) is DQN
    agent.__class__ = OwnNetworkBuilder
    assert known_base(agent) is DQN
    agent.__class__ = OwnLoss
    assert known_base(agent) is None
    agent.__class__ = DQN
    agent.loss = torch.compile(agent.loss)   # what compile=true does
    assert known_base(agent) is None
    del agent.loss
    agent.q_net = Scaled(agent.q_net)
    assert known_base(agent) is None
    drqn = plain_components(compose_config("algo=drqn", "env=cartpole", *TINY))[0]
    assert known_base(drqn) is None


def test_on_the_cpu_the_gradient_step_is_the_agent_s_own():
    from rl_hydra.speed import cuda_graph

    agent = built_agent("algo=dqn")
    assert cuda_graph.graphed_step(agent) is None and agent not in cuda_graph._steps
