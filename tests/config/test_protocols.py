"""Every shipped agent and buffer fulfils the written contract in rl_hydra/protocols.py."""

from __future__ import annotations

import json
import typing

import pytest
import torch

from rl_hydra import train
from rl_hydra.algos.dqn import DQN
from rl_hydra.build import build_components
from rl_hydra.protocols import Agent, Buffer, RecurrentAgent, SequenceBuffer
from tests.conftest import CONF_DIR, TINY, compose_config

ENV_FOR = {
    "redq": "pendulum",
    "sac": "pendulum",
    "tqc": "pendulum",
    "td3": "pendulum",
    "droq": "pendulum",
    "crossq": "pendulum",
}
ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))


def declared_members(protocol) -> dict[str, object]:
    """The protocol's data members with their annotations, inherited ones included."""
    hints = {}
    for klass in reversed(protocol.__mro__):
        if klass.__dict__.get("_is_protocol"):
            hints.update(typing.get_type_hints(klass))
    return hints


def check_members(obj, protocol) -> None:
    for name, hint in declared_members(protocol).items():
        assert hasattr(obj, name), f"{type(obj).__name__} lacks {protocol.__name__}.{name}"
        value = getattr(obj, name)
        if typing.get_origin(hint) is typing.ClassVar:
            assert name in {k for klass in type(obj).__mro__ for k in vars(klass)}, f"{name} must be a class attribute"
            hint = typing.get_args(hint)[0]
        base = typing.get_origin(hint) or hint
        assert isinstance(value, base), f"{type(obj).__name__}.{name}={value!r} is not {hint}"


@pytest.mark.parametrize("algo", ALGOS)
def test_every_shipped_agent_and_buffer_fulfils_its_protocol(algo):
    cfg = compose_config(f"algo={algo}", f"env={ENV_FOR.get(algo, 'cartpole')}", *TINY)
    agent, env, buffer = build_components(cfg, torch.device("cpu"))
    env.close()
    agent_protocol = RecurrentAgent if agent.capabilities.recurrent else Agent
    buffer_protocol = SequenceBuffer if agent.capabilities.recurrent else Buffer
    assert isinstance(agent, agent_protocol) and isinstance(buffer, buffer_protocol)
    check_members(agent, agent_protocol)
    check_members(buffer, buffer_protocol)
    assert all(isinstance(name, str) for name in agent.metric_names)
    for name in agent.compiled_methods:
        assert callable(getattr(agent, name))
    assert agent.learning_starts >= 0 and min(agent.train_every, agent.gradient_steps, agent.batch_size) >= 1


@pytest.mark.parametrize("algo", ALGOS)
def test_the_discount_has_one_home(algo):
    """algo.gamma goes to whoever builds the returns: the transition buffer of a feed-forward agent,
    which never gets it, or a recurrent agent itself, whose sequence buffer never gets it."""
    cfg = compose_config(f"algo={algo}", f"env={ENV_FOR.get(algo, 'cartpole')}", *TINY, "algo.gamma=0.9")
    agent, env, buffer = build_components(cfg, torch.device("cpu"))
    env.close()
    holders = [part for part in (agent, buffer) if hasattr(part, "gamma")]
    assert holders == [agent if agent.capabilities.recurrent else buffer] and holders[0].gamma == 0.9
    assert not hasattr(agent, "n_step") or agent.capabilities.recurrent


def test_every_protocol_member_has_a_docstring():
    import ast
    import inspect

    import rl_hydra.protocols as protocols

    source = inspect.getsource(protocols)
    lines = source.splitlines()
    tree = ast.parse(source)
    for node in [n for n in tree.body if isinstance(n, ast.ClassDef)]:
        for i, item in enumerate(node.body):
            if isinstance(item, ast.FunctionDef):
                assert ast.get_docstring(item), f"{node.name}.{item.name} has no docstring"
            elif isinstance(item, ast.AnnAssign):
                following = node.body[i + 1] if i + 1 < len(node.body) else None
                documented = isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                shape_comment = "#" in lines[item.lineno - 1]  # a batch's fields: a shape comment each
                assert documented or shape_comment, f"{node.name}.{item.target.id} has no docstring"


class RenamedDQN(DQN):
    name = "some_label"


def test_summary_names_the_algorithm_by_the_config_choice_not_the_class_label(tmp_path):
    run = train("algo=dqn", "algo._target_=tests.config.test_protocols.RenamedDQN", *TINY, run_dir=tmp_path / "run")
    assert json.loads((run.path / "summary.json").read_text())["algo"] == "dqn"


def test_the_agent_contract_never_names_the_speed_layer():
    """An algorithm's author need not know rl_hydra/speed exists: what a CUDA graph may replay is read
    off the agent's class there (rl_hydra/speed/cuda_graph.py), never declared on it."""
    import re
    from pathlib import Path

    import rl_hydra.protocols as protocols

    assert "tensor_only_step" not in declared_members(Agent)
    assert not re.search(
        r"\btensor_only_step\b|\bgradient_step\b|\bspeed\b|CUDA graph", Path(protocols.__file__).read_text()
    )
