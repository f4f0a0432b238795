"""The speed layer's seam (rl_hydra/speed): each fast path is probed at start-up, falls back to the
plain torch/gymnasium path with one log line when the private API it rests on is gone or
different, and a run on the plain path (`fast_paths=false`) trains to the same numbers.
The fast paths' own equality with their plain counterparts: tests/speed/test_lean_paths.py,
tests/algos/test_acting.py, tests/buffers/test_host_memory.py, tests/algos/test_distributional.py (the quantile
Huber loss)."""

from __future__ import annotations

import logging
import mmap
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.vector import SyncVectorEnv
from torch import nn

from rl_hydra import speed
from rl_hydra.build import build_components
from rl_hydra.speed import foreach, lean_adam, numpy_mirror, quantile_huber, vector_env
from rl_hydra.training import run
from tests.conftest import TINY, compose_config, metric_rows


@pytest.fixture(autouse=True)
def probes_run_afresh():
    """Each test sees the probes run again (they are cached per process), and leaves no result behind."""
    speed.forget_probes()
    yield
    speed.forget_probes()


BREAKAGES = {
    "adam": lambda monkeypatch: monkeypatch.setattr(lean_adam, "FUSED_ADAM", None),  # torch drops the kernel
    "mirror": lambda monkeypatch: monkeypatch.setitem(
        numpy_mirror.NUMPY_ACTIVATIONS, nn.ReLU, np.tanh
    ),  # answers differ
    "host_memory": lambda monkeypatch: monkeypatch.delattr(mmap, "MADV_HUGEPAGE"),  # not Linux
    "vector_env": lambda monkeypatch: monkeypatch.setattr(  # a gymnasium without a private buffer it writes
        vector_env, "PRIVATE_BUFFERS", (*vector_env.PRIVATE_BUFFERS, "_renamed_in_a_later_gymnasium")
    ),
    "cuda_graph": lambda monkeypatch: monkeypatch.delattr(torch.cuda, "graph"),  # a torch without it
    "foreach": lambda monkeypatch: monkeypatch.setitem(foreach.FOREACH, "_foreach_lerp_", None),  # renamed
    "quantile_huber": lambda monkeypatch: monkeypatch.setattr(  # a derivation gone wrong: the gradient halved
        quantile_huber.ClosedFormQuantileHuber,
        "backward",
        staticmethod(lambda ctx, grad: (0.5 * grad[:, None] * ctx.saved_tensors[0], None, None, None, None)),
    ),
}


def test_every_fast_path_passes_its_probe_here():
    assert speed.failures() == {}
    assert set(speed.PROBES) == set(speed.PLAIN_PATHS) == set(BREAKAGES)


def test_the_speed_layer_names_what_it_accelerates_and_nothing_it_accelerates_names_the_speed_layer():
    from rl_hydra.networks.dueling import DuelingHead
    from rl_hydra.networks.mlp import ActionValueNetwork, PerActionNetwork, QNetwork
    from rl_hydra.networks.noisy import NoisyLinear

    assert set(numpy_mirror.TWINS) == {ActionValueNetwork, DuelingHead, NoisyLinear}
    for network in (QNetwork, PerActionNetwork, DuelingHead, NoisyLinear):
        assert numpy_mirror.twin_for(network) is not None

    class OwnForward(QNetwork):
        def forward(self, obs):
            return super().forward(obs) * 2.0

    assert numpy_mirror.twin_for(OwnForward) is None  # another function: torch runs it
    package = Path(speed.__file__).parents[1]
    speed_sources = " ".join(path.read_text() for path in (package / "speed").glob("*.py"))
    for algo in ("dqn", "qr_dqn", "iqn", "c51", "drqn", "redq", "sac"):
        assert f"rl_hydra.algos.{algo}" not in speed_sources
    accelerated = [*package.glob("algos/*.py"), *package.glob("networks/*.py"), *package.glob("buffers/*.py")]
    accelerated += [*package.glob("envs/*.py"), package / "losses.py", package / "spaces.py"]
    for path in accelerated:
        text = path.read_text()
        assert "rl_hydra.speed" not in text and "from rl_hydra import speed" not in text, path


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
    obs = np.zeros((1, 4), np.float32)
    with speed.enabled(False):
        agent, env, _ = plain_components(cfg)
    assert type(agent.optimizer) is torch.optim.Adam and type(env) is SyncVectorEnv
    agent, env, _ = plain_components(cfg)
    assert type(agent.optimizer) is lean_adam.LeanAdam and type(env) is vector_env.LeanSyncVectorEnv
    assert numpy_mirror.call_mirror(agent, "action_values", obs) is not None


def test_enabled_restores_the_switch_also_on_error():
    with pytest.raises(RuntimeError), speed.enabled(False):
        assert not speed.active("adam")
        raise RuntimeError
    assert speed.active("adam")


@pytest.mark.parametrize(
    "algo, options", [("dqn", []), ("qr_dqn", []), ("c51", ["network.dueling=true", "network.noisy=true"])]
)
def test_the_plain_path_trains_to_the_same_numbers(algo, options, tmp_path):
    """Adam's steps, the foreach loops, the replay storage and the env steps are exact; the numpy
    mirror agrees with torch to float rounding, which decides no greedy action here. QR-DQN's
    quantile Huber loss sums its terms in another order in closed form than the formula does, so its
    training metrics agree to float rounding (1e-6 relative), not bit for bit."""
    overrides = [
        f"algo={algo}",
        "env=cartpole",
        "network.hidden_sizes=[32]",
        "algo.learning_starts=100",
        "algo.batch_size=16",
        "algo.train_every=1",
        "algo.gradient_steps=1",
        *options,
        *TINY,
    ]
    fast = run(compose_config(*overrides), tmp_path / "fast")
    plain = run(compose_config(*overrides, "fast_paths=false"), tmp_path / "plain")
    assert fast["updates"] == plain["updates"] > 100
    fast_rows, plain_rows = metric_rows(tmp_path / "fast"), metric_rows(tmp_path / "plain")
    if algo != "qr_dqn":
        assert fast_rows == plain_rows
        return
    assert [list(row) for row in fast_rows] == [list(row) for row in plain_rows]
    for fast_row, plain_row in zip(fast_rows, plain_rows):
        for key, value in fast_row.items():
            if key.startswith("train/") and value:
                assert float(value) == pytest.approx(float(plain_row[key]), rel=1e-6), key
            else:
                assert value == plain_row[key], key


def test_a_run_whose_fast_paths_all_fail_trains_on_the_plain_path(monkeypatch, tmp_path, caplog):
    for breaks in BREAKAGES.values():
        breaks(monkeypatch)
    overrides = ["algo=dqn", "env=cartpole", "network.hidden_sizes=[16]", "algo.learning_starts=100", *TINY]
    with caplog.at_level(logging.INFO, logger="rl_hydra.speed"):
        summary = run(compose_config(*overrides), tmp_path / "run")
    assert summary["updates"] > 0
    assert sorted(
        line.split()[1] for line in (r.getMessage() for r in caplog.records if r.name == "rl_hydra.speed")
    ) == sorted(BREAKAGES)


def test_fast_paths_is_checked_and_may_change_on_resume():
    from rl_hydra.commands.resume import RESUMABLE
    from rl_hydra.config import validate_run_config
    from rl_hydra.errors import ConfigError

    assert "fast_paths" in RESUMABLE
    with pytest.raises(ConfigError, match="fast_paths='maybe' is not allowed"):  # (yes and no read as booleans)
        validate_run_config(compose_config("fast_paths=maybe"))


# --- adam: the config names torch's Adam, the layer builds its lean step -------------------------------
def test_the_optimizer_config_names_torch_s_adam_and_the_layer_swaps_in_its_lean_step_where_on(caplog):
    from omegaconf import OmegaConf

    cfg = compose_config("algo=dqn", "env=cartpole", *TINY)
    assert cfg.algo.optimizer._target_ == "torch.optim.Adam"

    def algo_node():
        adam = {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 0.1}
        return OmegaConf.create(
            {
                "optimizer": {**adam, "fused": True},
                "unfused": {**adam, "fused": False},
                "sgd": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.1},
            }
        )

    node = algo_node()
    with caplog.at_level(logging.INFO, logger="rl_hydra.speed"):
        speed.lean_adam_nodes(node)
    assert [node.optimizer._target_, node.unfused._target_, node.sgd._target_] == [
        "rl_hydra.speed.adam",
        "torch.optim.Adam",
        "torch.optim.SGD",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "speed: algo.optimizer, torch.optim.Adam(fused=True), runs the lean Adam step"
    ]
    with speed.enabled(False):
        node = algo_node()
        speed.lean_adam_nodes(node)
        assert node.optimizer._target_ == "torch.optim.Adam"


def test_a_run_recorded_with_the_old_optimizer_target_resumes_and_trains_as_a_new_one(tmp_path):
    """Runs recorded before conf/optimizer/adam.yaml named torch.optim.Adam hold `rl_hydra.speed.adam`."""
    from rl_hydra.commands.launch import launch
    from rl_hydra.commands.resume import resume_main
    from rl_hydra.commands.run import load_run

    overrides = ["algo=dqn", "env=cartpole", "network.hidden_sizes=[16]", "algo.learning_starts=100", *TINY]
    old = [*overrides, "algo.optimizer._target_=rl_hydra.speed.adam"]
    launch(compose_config(*old), tmp_path / "old", overrides=old)
    launch(compose_config(*overrides), tmp_path / "new", overrides=overrides)
    assert "rl_hydra.speed.adam" in (tmp_path / "old" / ".hydra" / "config.yaml").read_text()
    assert metric_rows(tmp_path / "old") == metric_rows(tmp_path / "new")
    resume_main(str(tmp_path / "old"), ["train.total_steps=450"])
    assert type(load_run(tmp_path / "old").agent.optimizer) is lean_adam.LeanAdam


# --- cuda_graph: which gradient steps may be replayed (the replay itself: tests/speed/test_cuda.py) ----------
def built_agent(*overrides: str):
    return plain_components(compose_config(*overrides, "env=cartpole", "network.hidden_sizes=[16]", *TINY))[0]


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn", "iqn", "c51", "rainbow"])
def test_the_project_s_q_learning_steps_may_be_replayed_read_off_their_code(algo):
    from rl_hydra.speed import cuda_graph

    agent = built_agent(f"algo={algo}")
    assert cuda_graph.why_plain(agent, random_batch_for(agent)) is None
    assert {"gradient_step", "loss", "q_net", "optimizer"} <= set(cuda_graph.step_code(type(agent)).reads)


def test_a_subclass_s_own_loss_is_read_too_so_its_settings_are_what_the_replay_depends_on():
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.speed import cuda_graph

    class ScaledLoss(DQN):
        loss_scale = 1.0

        def loss(self, batch):
            loss, priorities, metrics = super().loss(batch)
            return loss * self.loss_scale, priorities, metrics

    agent, batch = built_agent("algo=dqn"), None
    batch = random_batch_for(agent)
    agent.__class__ = ScaledLoss
    assert {"loss_scale", "double_q"} <= set(cuda_graph.step_code(ScaledLoss).reads)  # its own, and DQN.loss's
    before = cuda_graph.fingerprint(agent, batch)
    agent.loss_scale = 2.0
    assert cuda_graph.why_plain(agent, batch) is None and cuda_graph.fingerprint(agent, batch) != before


def test_a_step_a_replay_could_get_wrong_runs_plainly_and_says_why():
    """What the layer cannot see through, or what holds host-side state a replay would freeze: each
    is found in the class's code or the instance, and the step runs as it is."""
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.protocols import SequenceBatch
    from rl_hydra.speed import cuda_graph

    class CountsSteps(DQN):
        def loss(self, batch):
            self.last_batch_size = len(batch.obs)
            return super().loss(batch)

    class HandsSelfOn(DQN):
        def loss(self, batch):
            return DQN.loss(self, batch)

    class DrawsWithNumpy(DQN):
        def loss(self, batch):
            loss, priorities, metrics = super().loss(batch)
            return loss * float(self.rng.random()), priorities, metrics

    class Scaled(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x) * 2.0

    agent = built_agent("algo=dqn")
    batch = random_batch_for(agent)
    assert cuda_graph.why_plain(agent, batch) is None
    for subclass, why in ((CountsSteps, "sets self."), (HandsSelfOn, "hands self on"), (DrawsWithNumpy, "self.rng")):
        agent.__class__ = subclass
        assert why in cuda_graph.why_plain(agent, batch), subclass
    agent.__class__ = DQN
    agent.loss = torch.compile(agent.loss)  # what compile=true does
    assert "self.loss" in cuda_graph.why_plain(agent, batch)
    del agent.loss
    agent.q_net = Scaled(agent.q_net)
    assert "outside rl_hydra" in cuda_graph.why_plain(agent, batch)
    drqn = plain_components(compose_config("algo=drqn", "env=cartpole", *TINY))[0]
    state = tuple(drqn.initial_state(2))
    sequences = SequenceBatch(*(torch.zeros(3, 2) for _ in range(5)), torch.ones(2, dtype=torch.bool), state)
    assert "more than tensors" in cuda_graph.why_plain(drqn, sequences)


@pytest.fixture
def graphs_on_the_cpu(monkeypatch):
    """GraphedStep's decisions on the CPU: a 'recording' that only marks the step recorded, a 'replay'
    that runs the plain step and counts (the real replay is compared in tests/speed/test_cuda.py)."""
    from rl_hydra.speed import cuda_graph

    replays = []
    monkeypatch.setattr(cuda_graph.GraphedStep, "on_side_stream", lambda self, run: run())
    monkeypatch.setattr(cuda_graph.GraphedStep, "record", lambda self, batch: setattr(self, "graph", "recorded"))

    def replay(self, batch):
        replays.append(batch)
        return self.plain(batch)

    monkeypatch.setattr(cuda_graph.GraphedStep, "replay", replay)
    return replays


def test_a_step_is_recorded_after_warm_up_calls_that_find_and_leave_alike_what_it_reads(graphs_on_the_cpu):
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.speed import cuda_graph

    class ScaledLoss(DQN):
        loss_scale = 1.0

        def loss(self, batch):
            loss, priorities, metrics = super().loss(batch)
            return loss * self.loss_scale, priorities, metrics

    agent = built_agent("algo=dqn")
    agent.__class__ = ScaledLoss
    batch, graphed = random_batch_for(agent), cuda_graph.GraphedStep(agent)
    for _ in range(cuda_graph.WARMUP + 1):  # the first makes Adam's moments: it moves what it reads
        graphed(batch)
    assert graphed.graph is None
    graphed(batch)
    assert graphed.graph == "recorded" and len(graphs_on_the_cpu) == 1
    graphed(batch)
    assert len(graphs_on_the_cpu) == 2
    agent.loss_scale = 0.5  # the override's own setting moved: the recording is dropped
    graphed(batch)
    assert graphed.graph is None and len(graphs_on_the_cpu) == 2


def test_a_step_that_moves_a_value_it_reads_is_never_recorded(graphs_on_the_cpu):
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.speed import cuda_graph

    class CountsInItsNetwork(DQN):
        def loss(self, batch):
            self.q_net.calls = getattr(self.q_net, "calls", 0) + 1  # a plain value a replay would not move
            return super().loss(batch)

    agent = built_agent("algo=dqn")
    agent.__class__ = CountsInItsNetwork
    batch, graphed = random_batch_for(agent), cuda_graph.GraphedStep(agent)
    for _ in range(3 * cuda_graph.WARMUP):
        graphed(batch)
    assert graphed.graph is None and not graphs_on_the_cpu and agent.q_net.calls == 3 * cuda_graph.WARMUP


def test_a_loaded_checkpoint_drops_the_recording(graphs_on_the_cpu):
    import copy

    from rl_hydra.speed import cuda_graph

    agent, elsewhere = built_agent("algo=dqn"), built_agent("algo=dqn")
    batch, graphed = random_batch_for(agent), cuda_graph.GraphedStep(agent)
    elsewhere.update(batch)
    for _ in range(cuda_graph.WARMUP + 2):
        graphed(batch)
    assert graphed.graph == "recorded"
    agent.load_state_dict(copy.deepcopy(elsewhere.state_dict()))  # new Adam moments: the kernels would read the old
    graphed(batch)
    assert graphed.graph is None and len(graphs_on_the_cpu) == 1


def test_a_step_that_may_not_be_replayed_runs_as_the_class_s_own_and_says_so_once(caplog):
    from rl_hydra.algos.dqn import DQN
    from rl_hydra.build import seed_everything
    from rl_hydra.speed import cuda_graph

    class CountsSteps(DQN):
        def loss(self, batch):
            self.last_batch_size = len(batch.obs)
            return super().loss(batch)

    agents = []
    for _ in range(2):
        seed_everything(0)
        agents.append(built_agent("algo=dqn"))
        agents[-1].__class__ = CountsSteps
    plain, attached = agents
    attached.gradient_step = cuda_graph.Step(attached, on=lambda: True)
    batch = random_batch_for(plain)
    caplog.clear()  # what building them said (the lean Adam, the numpy twins) is not this test's
    with caplog.at_level(logging.INFO, logger="rl_hydra.speed"):
        for _ in range(2):
            assert torch.equal(plain.update(batch).metrics["loss"], attached.update(batch).metrics["loss"])
    assert all(torch.equal(a, b) for a, b in zip(plain.q_net.parameters(), attached.q_net.parameters()))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("rl_hydra.speed")]
    assert lines == [
        "speed: cuda_graph runs CountsSteps's gradient step plainly (CountsSteps.loss sets self.last_batch_size)"
    ]


def test_on_the_cpu_the_gradient_step_is_the_agent_s_own():
    from rl_hydra.speed import cuda_graph

    agent = built_agent("algo=dqn")
    speed.attach(agent)
    assert not cuda_graph.on_cuda(agent) and "gradient_step" not in vars(agent)
    agent.update(random_batch_for(agent))
    assert agent not in cuda_graph._steps


def random_batch_for(agent):
    from rl_hydra.protocols import Batch

    n = agent.batch_size
    return Batch(
        obs=torch.randn(n, 4),
        actions=torch.randint(2, (n,)),
        rewards=torch.ones(n),
        next_obs=torch.randn(n, 4),
        terminated=torch.zeros(n),
        truncated=torch.zeros(n),
        discounts=torch.full((n,), 0.99),
        weights=torch.ones(n),
        indices=torch.arange(n),
    )


def test_an_attached_step_is_not_an_override_and_runs_the_class_s_step_where_graphs_are_off():
    """What `speed.attach` puts on a CUDA agent, tried on the CPU with the graphs off."""
    from rl_hydra.build import seed_everything
    from rl_hydra.speed import cuda_graph

    agents = []
    for _ in range(2):
        seed_everything(0)
        agents.append(built_agent("algo=dqn"))
    plain, attached = agents
    attached.gradient_step = cuda_graph.Step(attached, on=lambda: False)
    batch = random_batch_for(plain)
    assert cuda_graph.why_plain(attached, batch) is None
    assert torch.equal(plain.update(batch).metrics["loss"], attached.update(batch).metrics["loss"])
    assert all(torch.equal(a, b) for a, b in zip(plain.q_net.parameters(), attached.q_net.parameters()))
    assert attached not in cuda_graph._steps
