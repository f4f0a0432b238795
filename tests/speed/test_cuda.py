"""device=cuda: buffers and networks stay on the GPU and updates never make the host wait.

The GPU tests are skipped where torch.cuda.is_available() is false. The device-side NaN
check they rely on is also exercised on the CPU, by treating every tensor as a device one.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch

import rl_hydra.loops.monitor as monitor_module
import rl_hydra.loops.runner as runner_module
from rl_hydra import speed
from rl_hydra.build import build_components, build_runner, seed_everything
from rl_hydra.loops.runner import TrainingDiverged
from rl_hydra.loops.steps import drive
from rl_hydra.speed import cuda_graph
from rl_hydra.training import pick_loop
from tests.conftest import TINY, compose_config, play_at_random, run_training

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
TINY_CUDA = [o for o in TINY if not o.startswith("device=")] + ["device=cuda"]
CASES = {
    "dqn": [
        "algo=dqn",
        "env=cartpole",
        "algo.learning_starts=100",
        "algo.train_every=50",
        "algo.gradient_steps=2",
        "network.hidden_sizes=[32,32]",
    ],
    "redq": [
        "algo=redq",
        "env=pendulum",
        "~algo_env",
        "algo.learning_starts=100",
        "algo.batch_size=32",
        "algo.gradient_steps=2",
        "algo.policy_delay=2",
        "network.actor.hidden_sizes=[32,32]",
        "network.critic.hidden_sizes=[32,32]",
    ],
}


def cpu_summary(tmp_path, algo: str) -> dict:
    """The summary of the same tiny run on the CPU: the schedule does not depend on the device."""
    return run_training(tmp_path / "cpu", *TINY, *CASES[algo])


def all_on_cuda(*tensors: torch.Tensor) -> bool:
    return len(tensors) > 0 and all(t.is_cuda for t in tensors)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def tiny_run(tmp_path, *overrides: str):
    cfg = compose_config(*TINY_CUDA, *overrides)
    runner = build_runner(cfg, tmp_path, torch.device("cuda"))
    runner.start()
    try:
        drive(pick_loop(runner.agent)(runner))
    finally:
        runner.close()
    return runner.agent, runner.local.buffer, runner


@needs_cuda
def test_dqn_keeps_networks_optimizer_and_buffer_on_the_gpu(tmp_path):
    agent, buffer, runner = tiny_run(tmp_path, *CASES["dqn"])
    assert runner.global_step == 300 and agent.updates == cpu_summary(tmp_path, "dqn")["updates"]
    assert all_on_cuda(*agent.q_net.parameters(), *agent.target_net.parameters())
    assert all_on_cuda(*optimizer_tensors(agent.optimizer))
    assert all_on_cuda(*buffer.storage.values()) and buffer.host_views is None
    assert buffer.generator.device.type == "cuda"


@needs_cuda
def test_redq_keeps_networks_optimizers_and_buffer_on_the_gpu(tmp_path):
    agent, buffer, runner = tiny_run(tmp_path, *CASES["redq"])
    assert runner.global_step == 300 and agent.updates > 0
    assert all_on_cuda(
        *agent.actor.parameters(), *agent.critic.parameters(), *agent.critic_target.parameters(), agent.log_alpha
    )
    for optimizer in (agent.actor_optimizer, agent.critic_optimizer, agent.alpha_optimizer):
        assert all_on_cuda(*optimizer_tensors(optimizer))
    assert all_on_cuda(*buffer.storage.values()) and agent.generator.device.type == "cuda"


CONTINUOUS = {
    algo: [
        "env=pendulum",
        f"algo={algo}",
        "~algo_env",
        "algo.learning_starts=100",
        "algo.batch_size=32",
        "network.actor.hidden_sizes=[32,32]",
        "network.critic.hidden_sizes=[32,32]",
    ]
    for algo in ("tqc", "td3", "crossq")
}


@needs_cuda
@pytest.mark.parametrize("algo", sorted(CONTINUOUS))
def test_the_continuous_family_trains_on_the_gpu_and_its_run_loads_on_the_cpu(tmp_path, algo):
    from rl_hydra.commands.api import train
    from rl_hydra.commands.run import load_run

    agent, buffer, _ = tiny_run(tmp_path / "parts", *CONTINUOUS[algo])
    modules = [m for m in vars(agent).values() if isinstance(m, torch.nn.Module)]
    optimizers = [o for o in vars(agent).values() if isinstance(o, torch.optim.Optimizer)]
    assert modules and optimizers and agent.updates > 0
    # CrossQ's batch renormalization keeps its running statistics as module buffers
    assert all_on_cuda(*(t for m in modules for t in (*m.parameters(), *m.buffers())))
    assert all_on_cuda(*(t for o in optimizers for t in optimizer_tensors(o)))
    assert all_on_cuda(*buffer.storage.values())

    run = train(*TINY_CUDA, *CONTINUOUS[algo], run_dir=tmp_path / "run")  # the path train.py takes
    assert run.summary["updates"] == run_training(tmp_path / "cpu", *TINY, *CONTINUOUS[algo])["updates"]
    on_gpu, on_cpu = load_run(tmp_path / "run", device="cuda"), load_run(tmp_path / "run", device="cpu")
    obs = torch.rand(5, 3).numpy() * 2 - 1
    torch.testing.assert_close(
        torch.as_tensor(on_gpu.predict(obs)), torch.as_tensor(on_cpu.predict(obs)), rtol=1e-4, atol=1e-5
    )


@needs_cuda
@pytest.mark.parametrize("algo", ["dqn", "redq"])
def test_buffer_add_sample_update_and_nan_check_never_sync_the_host(tmp_path, algo):
    cfg = compose_config(*TINY_CUDA, *CASES[algo])
    runner = build_runner(cfg, tmp_path, torch.device("cuda"))
    agent, env, buffer = runner.agent, runner.local.env, runner.local.buffer
    obs, transitions = env.reset()[0], []
    for _ in range(agent.batch_size + 10):
        actions = env.action_space.sample()
        next_obs, rewards, terminated, truncated, _ = env.step(actions)
        transitions.append((obs, actions, rewards, next_obs, terminated, truncated))
        obs = next_obs
    for transition in transitions[:-10]:
        buffer.add(*transition)
    for _ in range(cuda_graph.WARMUP + 2):  # lazy optimizer state, cuBLAS, the gradient step's CUDA graph
        runner.update(buffer.sample(agent.batch_size))
    runner.monitor.check_device(runner.global_step)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for transition in transitions[-10:]:
            buffer.add(*transition)
        for _ in range(5):
            runner.update(buffer.sample(agent.batch_size))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    runner.monitor.check_device(runner.global_step)  # the one sync of a training phase
    env.close()


@needs_cuda
def test_whole_cuda_run_completes_with_checkpoints(tmp_path):
    summary = run_training(tmp_path, *TINY_CUDA, *CASES["dqn"])
    assert summary["status"] == "completed" and summary["updates"] == cpu_summary(tmp_path, "dqn")["updates"]
    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True, map_location="cpu")
    assert state["buffer"]["size"] == 300


def diverging_update(tmp_path, monkeypatch, on_device: bool) -> tuple[int, int]:
    """(step, update) named by the error of a run whose loss blows up within a few updates."""
    if on_device:  # every metric treated as living on an accelerator: the deferred check runs on the CPU
        monkeypatch.setattr(monitor_module, "is_on_host", lambda value: not torch.is_tensor(value))
        monkeypatch.setattr(
            runner_module, "UpdateMonitor", lambda agent_on_cpu, hint: monitor_module.UpdateMonitor(False, hint)
        )
    with pytest.raises(TrainingDiverged, match="non-finite") as error:
        run_training(
            tmp_path,
            *TINY,
            "algo.learning_starts=150",
            "algo.train_every=4",
            "algo.gradient_steps=4",
            "algo.optimizer.lr=1e30",
            "algo.max_grad_norm=null",
            "algo.loss=mse",
            "train.total_steps=3000",
        )
    step, update = re.search(r"at step (\d+) \(update (\d+)\)", str(error.value)).groups()
    return int(step), int(update)


def test_device_side_nan_check_names_the_same_first_bad_update(tmp_path, monkeypatch):
    # the host check raises inside the training phase, at the bad update; the device-side one
    # reads its flag after the phase, and must still name that update and that step
    assert diverging_update(tmp_path / "host", monkeypatch, on_device=False) == diverging_update(
        tmp_path / "device", monkeypatch, on_device=True
    )


@needs_cuda
@pytest.mark.parametrize("where", ["cpu", "cuda", "auto"])
def test_a_cuda_run_trains_with_its_buffer_on_either_side(tmp_path, where):
    from rl_hydra.buffers.device import DeviceFeed

    cfg = compose_config(*TINY_CUDA, *CASES["dqn"], f"buffer.device={where}")
    agent, env, buffer = build_components(cfg, torch.device("cuda"))
    assert isinstance(buffer, DeviceFeed) == (where == "cpu")
    assert buffer.storage["rewards"].is_cuda == (where != "cpu")
    summary = run_training(tmp_path / where, *TINY_CUDA, *CASES["dqn"], f"buffer.device={where}")
    assert summary["updates"] > 0


@needs_cuda
@pytest.mark.parametrize("n_step", [1, 3])
def test_frame_stacks_live_on_the_gpu_and_give_the_host_buffers_batches_without_a_sync(n_step):
    from tests.buffers.test_frames import fill, pair

    host, _ = pair(60, num_envs=2, n_step=n_step)
    gpu, _ = pair(60, num_envs=2, n_step=n_step, device="cuda")
    assert gpu.frames.frames.is_cuda and gpu.frames.stacks.is_cuda
    fill([host, gpu], 300)  # the ring wraps many times: stacks leave the pool and their slots are taken again
    batch = gpu.sample(500)
    want = host.batch_at(batch.indices.cpu())
    for field in batch._fields:  # the frames byte for byte; n-step sums may round differently on the GPU
        got, expected = getattr(batch, field).cpu(), getattr(want, field)
        torch.testing.assert_close(
            got, expected, rtol=1e-6, atol=0, msg=field
        ) if got.is_floating_point() else torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=field)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fill([gpu], 20, seed=1)
        gpu.sample(64)
    finally:
        torch.cuda.set_sync_debug_mode("default")


# --- the gradient step replayed from a CUDA graph (rl_hydra/speed/cuda_graph.py) -----------------
GRAPHED = {
    "dqn": ["algo=dqn"],
    "qr_dqn": ["algo=qr_dqn"],
    "iqn": ["algo=iqn"],
    "rainbow": ["algo=rainbow"],
}  # rainbow: C51, dueling noisy layers, prioritized 3-step replay


def graph_config(algo: str, *overrides: str):
    return compose_config(
        *TINY_CUDA,
        "env=cartpole",
        "network.hidden_sizes=[32,32]",
        "algo.batch_size=32",
        "algo.learning_starts=100",
        *GRAPHED[algo],
        *overrides,
    )


def some_batches(cfg, count: int) -> list:
    """`count` batches of random CartPole play, on the GPU, the same for every agent that trains on them."""
    _, env, buffer = build_components(cfg, torch.device("cuda"))
    play_at_random(env, buffer, 300, seed=0)
    env.close()
    return [buffer.sample(32) for _ in range(count)]


def fresh_agent(cfg):
    seed_everything(cfg.seed)  # the same initial weights for every agent of this config
    return build_components(cfg, torch.device("cuda"))[0]


def train_on(agent, batches: list, graphs: bool, steps_between: int = 0) -> list[float]:
    torch.manual_seed(1)  # the noisy layers' draws
    losses = []
    with speed.enabled(graphs):
        for batch in batches:
            agent.explore_steps += steps_between  # env steps acted between updates (the lr schedule's clock)
            losses.append(agent.update(batch).metrics["loss"].clone())
    return [float(loss) for loss in losses]


def train_on_state(agent, batches: list, graphs: bool) -> torch.Tensor:
    """torch's CUDA generator state after training on `batches`."""
    train_on(agent, batches, graphs)
    return torch.cuda.get_rng_state()


def assert_same_weights(a, b) -> None:
    for x, y in zip(a.q_net.state_dict().values(), b.q_net.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


@needs_cuda
@pytest.mark.parametrize("algo", sorted(GRAPHED))
def test_a_replayed_gradient_step_trains_as_the_plain_one(algo):
    cfg = graph_config(algo)
    batches = some_batches(cfg, 12)
    plain, graphed = fresh_agent(cfg), fresh_agent(cfg)
    plain_losses, graphed_losses = train_on(plain, batches, graphs=False), train_on(graphed, batches, graphs=True)
    assert cuda_graph._steps[graphed].graph is not None and plain not in cuda_graph._steps
    assert graphed_losses == pytest.approx(plain_losses, rel=1e-5)
    assert_same_weights(plain, graphed)
    if algo == "iqn":  # its fractions' generator advanced alike
        assert torch.equal(plain.tau_generator.get_state(), graphed.tau_generator.get_state())
    if algo == "rainbow":  # the noise, drawn inside the step, advanced torch's generator alike
        plain_rng = train_on_state(plain, batches, graphs=False)
        assert torch.equal(plain_rng, train_on_state(graphed, batches, graphs=True))


@needs_cuda
def test_a_loaded_checkpoint_is_recorded_afresh():
    cfg = graph_config("dqn")
    batches, elsewhere = some_batches(cfg, 16), fresh_agent(cfg)
    train_on(elsewhere, batches[8:], graphs=False)
    plain, graphed = fresh_agent(cfg), fresh_agent(cfg)
    for agent, graphs in ((plain, False), (graphed, True)):
        train_on(agent, batches[:8], graphs)
        # a copy, as from a file: Adam's load_state_dict keeps the very step tensors it is given
        agent.load_state_dict(copy.deepcopy(elsewhere.state_dict()))
        train_on(agent, batches[8:], graphs)
    assert cuda_graph._steps[graphed].graph is not None
    assert_same_weights(plain, graphed)


@needs_cuda
def test_a_decaying_learning_rate_is_never_replayed():
    cfg = graph_config("dqn", "algo.final_lr_fraction=0.5")
    batches = some_batches(cfg, 10)
    plain, graphed = fresh_agent(cfg), fresh_agent(cfg)
    train_on(plain, batches, graphs=False, steps_between=4)
    train_on(graphed, batches, graphs=True, steps_between=4)
    assert cuda_graph._steps[graphed].graph is None
    assert_same_weights(plain, graphed)


@needs_cuda
def test_a_subclass_s_own_loss_is_replayed_as_it_runs_plainly_and_its_settings_moving_records_afresh():
    from rl_hydra.algos.dqn import DQN

    class ScaledLoss(DQN):
        loss_scale = 1.0

        def loss(self, batch):
            loss, priorities, metrics = super().loss(batch)
            return loss * self.loss_scale, priorities, metrics

    cfg = graph_config("dqn")
    batches = some_batches(cfg, 16)
    plain, graphed = fresh_agent(cfg), fresh_agent(cfg)
    losses = []
    for agent, graphs in ((plain, False), (graphed, True)):
        agent.__class__ = ScaledLoss
        losses.append(train_on(agent, batches[:8], graphs))
        agent.loss_scale = 0.5  # read by the override only: the recording is dropped, then made again
        losses[-1] += train_on(agent, batches[8:], graphs)
    assert cuda_graph._steps[graphed].graph is not None
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert_same_weights(plain, graphed)
