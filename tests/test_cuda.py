"""device=cuda: buffers and networks stay on the GPU and updates never make the host wait.

The GPU tests are skipped where torch.cuda.is_available() is false. The device-side NaN
check they rely on is also exercised on the CPU, by treating every tensor as a device one.
"""

from __future__ import annotations

import re

import pytest
import torch

import rl_hydra.loops.monitor as monitor_module
import rl_hydra.loops.runner as runner_module
from rl_hydra.loops.runner import Runner, TrainingDiverged
from rl_hydra.training import build_components, pick_loop
from tests.conftest import TINY, compose_config, run_training

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
TINY_CUDA = [o for o in TINY if not o.startswith("device=")] + ["device=cuda"]
CASES = {"dqn": ["algo=dqn", "env=cartpole", "algo.learning_starts=100", "algo.train_every=50",
                 "algo.gradient_steps=2", "network.hidden_sizes=[32,32]"],
         "redq": ["algo=redq", "env=pendulum", "~algo_env", "algo.learning_starts=100", "algo.batch_size=32",
                  "algo.gradient_steps=2", "algo.policy_delay=2", "network.actor.hidden_sizes=[32,32]",
                  "network.critic.hidden_sizes=[32,32]"]}


def cpu_summary(tmp_path, algo: str) -> dict:
    """The summary of the same tiny run on the CPU: the schedule does not depend on the device."""
    return run_training(tmp_path / "cpu", *TINY, *CASES[algo])


def all_on_cuda(*tensors: torch.Tensor) -> bool:
    return len(tensors) > 0 and all(t.is_cuda for t in tensors)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def tiny_run(tmp_path, algo: str):
    cfg = compose_config(*TINY_CUDA, *CASES[algo])
    agent, env, buffer = build_components(cfg, torch.device("cuda"))
    runner = Runner(cfg, agent, env, buffer, tmp_path)
    runner.start()
    try:
        pick_loop(agent)(runner)
    finally:
        runner.close()
    return agent, buffer, runner


@needs_cuda
def test_dqn_keeps_networks_optimizer_and_buffer_on_the_gpu(tmp_path):
    agent, buffer, runner = tiny_run(tmp_path, "dqn")
    assert runner.global_step == 300 and agent.updates == cpu_summary(tmp_path, "dqn")["updates"]
    assert all_on_cuda(*agent.q_net.parameters(), *agent.target_net.parameters())
    assert all_on_cuda(*optimizer_tensors(agent.optimizer))
    assert all_on_cuda(*buffer.storage.values()) and buffer.host_views is None
    assert buffer.generator.device.type == "cuda"


@needs_cuda
def test_redq_keeps_networks_optimizers_and_buffer_on_the_gpu(tmp_path):
    agent, buffer, runner = tiny_run(tmp_path, "redq")
    assert runner.global_step == 300 and agent.updates > 0
    assert all_on_cuda(*agent.actor.parameters(), *agent.critic.parameters(), *agent.critic_target.parameters(),
                       agent.log_alpha)
    for optimizer in (agent.actor_optimizer, agent.critic_optimizer, agent.alpha_optimizer):
        assert all_on_cuda(*optimizer_tensors(optimizer))
    assert all_on_cuda(*buffer.storage.values()) and agent.generator.device.type == "cuda"


@needs_cuda
@pytest.mark.parametrize("algo", ["dqn", "redq"])
def test_buffer_add_sample_update_and_nan_check_never_sync_the_host(tmp_path, algo):
    cfg = compose_config(*TINY_CUDA, *CASES[algo])
    agent, env, buffer = build_components(cfg, torch.device("cuda"))
    runner = Runner(cfg, agent, env, buffer, tmp_path)
    obs, transitions = env.reset()[0], []
    for _ in range(agent.batch_size + 10):
        actions = env.action_space.sample()
        next_obs, rewards, terminated, truncated, _ = env.step(actions)
        transitions.append((obs, actions, rewards, next_obs, terminated, truncated))
        obs = next_obs
    for transition in transitions[:-10]:
        buffer.add(*transition)
    runner.update_on(buffer.sample(agent.batch_size))  # lazy optimizer state, cuBLAS
    runner.check_device_updates()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for transition in transitions[-10:]:
            buffer.add(*transition)
        for _ in range(5):
            runner.update_on(buffer.sample(agent.batch_size))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    runner.check_device_updates()  # the one sync of a training phase
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
        monkeypatch.setattr(runner_module, "UpdateMonitor",
                            lambda agent_on_cpu, hint: monitor_module.UpdateMonitor(False, hint))
    with pytest.raises(TrainingDiverged, match="non-finite") as error:
        run_training(tmp_path, *TINY, "algo.learning_starts=150", "algo.train_every=4", "algo.gradient_steps=4",
                     "algo.optimizer.lr=1e30", "algo.max_grad_norm=null", "algo.loss=mse", "train.total_steps=3000")
    step, update = re.search(r"at step (\d+) \(update (\d+)\)", str(error.value)).groups()
    return int(step), int(update)


def test_device_side_nan_check_names_the_same_first_bad_update(tmp_path, monkeypatch):
    # the host check raises inside the training phase, at the bad update; the device-side one
    # reads its flag after the phase, and must still name that update and that step
    assert diverging_update(tmp_path / "host", monkeypatch, on_device=False) == \
        diverging_update(tmp_path / "device", monkeypatch, on_device=True)


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
