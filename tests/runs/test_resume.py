"""Resume restores exactly what was saved; a stopped and resumed run equals an uninterrupted one."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
from omegaconf import OmegaConf

from rl_hydra.build import build_components, build_runner
from rl_hydra.loops.runner import StopRequested
from rl_hydra.runs.run_dir import RunDirectory, RunError
from rl_hydra.training import run
from tests.conftest import ROOT, TINY, compose_config, metric_rows, run_cli, stop_at

FAST = [
    *TINY,
    "algo.learning_starts=60",
    "algo.train_every=20",
    "algo.gradient_steps=2",
    "train.total_steps=600",
    "train.eval_every=200",
    "train.checkpoint_every=100",
]
ALGO_ARGS = {
    "dqn": ["algo=dqn"],
    "qr_dqn": ["algo=qr_dqn"],
    "redq": ["algo=redq", "env=pendulum"],
    "sac": ["algo=sac", "env=pendulum"],
    # n-step returns, prioritized replay, noisy dueling network: all restored exactly
    "rainbow": ["algo=rainbow", "algo.v_min=0", "algo.v_max=100"],
    # prioritized replay alone: its tree, RNG and beta's step (annealed within the run)
    "prioritized": ["algo=dqn", "buffer=prioritized", "algo.n_step=2", "buffer.beta_steps=20"],
    # gSDE: the exploration matrices held between env steps
    "sac_gsde": ["algo=sac", "env=pendulum", "network.actor.gsde=true", "algo.gsde_resample_every=7"],
    "tqc": ["algo=tqc", "env=pendulum", "network.critic.hidden_sizes=[32,32]"],
    # the Ornstein-Uhlenbeck process of each env, carried across the checkpoint; delayed updates
    "td3_ou": ["algo=td3", "env=pendulum", "env.num_envs=2", "algo.action_noise.kind=ornstein_uhlenbeck"],
    # dropout in the critics draws from torch's global stream, which the checkpoint holds
    "droq": ["algo=droq", "env=pendulum", "algo.policy_delay=2"],
    # batch renormalization's running statistics and step counts; the actor every 3rd update
    "crossq": ["algo=crossq", "env=pendulum", "network.critic.hidden_sizes=[32,32]", "algo.policy_delay=3"],
}
ALGOS = list(ALGO_ARGS)


def assert_same(a, b, path="state"):
    """Recursive exact equality of checkpoint contents (tensors, dicts, lists, plain values)."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), path
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{path}: keys {set(a) ^ set(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.mark.parametrize("algo", ALGOS)
def test_resume_restores_exactly_the_saved_state(tmp_path, monkeypatch, algo):
    cfg = compose_config(*FAST, *ALGO_ARGS[algo])
    stop_at(monkeypatch, 300)
    with pytest.raises(StopRequested):
        run(cfg, tmp_path)
    saved = RunDirectory(tmp_path).load_checkpoint("last")
    assert saved["runner"]["global_step"] == 300 and "buffer" in saved
    # a fresh process would build everything anew from the config, then load
    restored = build_runner(cfg, tmp_path, torch.device("cpu"))
    torch.manual_seed(12345)  # disturb the global stream: resume must restore it
    restored.load_state_dict(saved)
    restored.local.rollout.start()
    assert_same(saved, restored.state_dict(with_buffer=True))


@pytest.mark.parametrize("algo", ALGOS)
def test_stopped_and_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path, monkeypatch, algo):
    cfg = compose_config(*FAST, *ALGO_ARGS[algo])
    uninterrupted = run(cfg, tmp_path / "a")
    with monkeypatch.context() as patch:
        stop_at(patch, 300)
        with pytest.raises(StopRequested):
            run(cfg, tmp_path / "b")
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["status"] == "interrupted"
    resumed = run(cfg, tmp_path / "b", resume=True)
    assert resumed["global_step"] == uninterrupted["global_step"] == 600
    assert resumed["eval_return_mean"] == uninterrupted["eval_return_mean"]
    assert metric_rows(tmp_path / "a") == metric_rows(tmp_path / "b")
    final_a, final_b = (RunDirectory(tmp_path / d).load_checkpoint("last") for d in "ab")
    assert_same(final_a["agent"], final_b["agent"])
    assert_same(final_a["buffer"], final_b["buffer"])


def test_resume_without_buffer_still_reaches_the_same_global_step(tmp_path, monkeypatch):
    cfg = compose_config(*FAST, "checkpoint.save_buffer=false")
    stop_at(monkeypatch, 300)
    with pytest.raises(StopRequested):
        run(cfg, tmp_path)
    assert "buffer" not in RunDirectory(tmp_path).load_checkpoint("last")
    monkeypatch.undo()
    assert run(cfg, tmp_path, resume=True)["global_step"] == 600
    steps = [int(r["step"]) for r in metric_rows(tmp_path)]
    assert steps == sorted(set(steps)) and steps[-1] == 600


def test_a_kill_during_checkpoint_writing_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    directory = RunDirectory(tmp_path)
    directory.save_checkpoint("last", {"agent": {}, "runner": {"global_step": 1}})

    def dies_halfway(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt  # what a kill looks like from inside the writer

    monkeypatch.setattr(torch, "save", dies_halfway)
    with pytest.raises(KeyboardInterrupt):
        directory.save_checkpoint("last", {"agent": {}, "runner": {"global_step": 2}})
    monkeypatch.undo()
    assert directory.load_checkpoint("last")["runner"]["global_step"] == 1
    assert [p.name for p in directory.checkpoints.iterdir()] == ["last.pt"]  # no temp file left


def test_corrupt_checkpoint_gives_one_clear_line(tmp_path):
    directory = RunDirectory(tmp_path)
    directory.checkpoints.mkdir(parents=True)
    (directory.checkpoints / "last.pt").write_bytes(b"not a checkpoint at all")
    with pytest.raises(RunError, match="cannot be read") as error:
        directory.load_checkpoint("last")
    assert "\n" not in str(error.value)


def test_resume_errors_are_one_line_and_exit_2(tmp_path, capsys):
    from rl_hydra.commands.resume import resume_main

    run_dir = tmp_path / "run"
    cfg = compose_config(*FAST)
    run(cfg, run_dir)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    cases = [
        (tmp_path / "missing", [], "is not a run directory"),
        (
            run_dir,
            ["network.hidden_sizes=[8]", "train.total_steps=900"],
            "network.hidden_sizes cannot change when resuming",
        ),
        (run_dir, ["algo=iqn"], "cannot be applied when resuming"),
        (run_dir, ["train.totl_steps=5"], "train.totl_steps is not a key"),
    ]
    for directory, overrides, message in cases:
        with pytest.raises(SystemExit) as exit_:
            resume_main(str(directory), overrides)
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], (overrides, lines)


def test_relaunch_into_a_finished_run_does_not_train_again(tmp_path):
    from rl_hydra.commands.launch import launch

    cfg = compose_config(*FAST)
    first = launch(cfg, tmp_path)
    mtime = (tmp_path / "metrics.csv").stat().st_mtime_ns
    assert launch(cfg, tmp_path) == first
    assert (tmp_path / "metrics.csv").stat().st_mtime_ns == mtime


def test_sigterm_checkpoints_then_resume_completes(tmp_path):
    args = [
        *TINY,
        "train.total_steps=200000",
        "train.checkpoint_every=100000",
        "train.log_every=500",
        f"hydra.run.dir={tmp_path}",
    ]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while (
        time.time() < deadline
        and len((tmp_path / "metrics.csv").read_text().splitlines() if (tmp_path / "metrics.csv").exists() else []) < 3
    ):
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130
    assert f"resume with: python train.py resume={tmp_path}" in stderr
    assert "error:" not in stderr  # a requested stop is not an error
    stopped_at = RunDirectory(tmp_path).load_checkpoint("last")["runner"]["global_step"]
    assert 0 < stopped_at < 200000
    result = run_cli(f"resume={tmp_path}", f"train.total_steps={stopped_at + 1000}")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["global_step"] == stopped_at + 1000
    steps = [int(r["step"]) for r in metric_rows(tmp_path)]
    assert steps == sorted(set(steps)), "no duplicated step rows"


def test_a_resumed_runs_tensorboard_data_reads_back_whole(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = compose_config(*FAST)
    with monkeypatch.context() as patch:
        stop_at(patch, 300)
        with pytest.raises(StopRequested):
            run(cfg, tmp_path)
    run(cfg, tmp_path, resume=True)
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    csv_steps = [int(row["step"]) for row in metric_rows(tmp_path)]
    assert [e.step for e in events.Scalars("time/elapsed_s")] == csv_steps
    assert [e.step for e in events.Scalars("eval/return_mean")] == [200, 400, 600]


def test_a_resumed_runs_tensorboard_file_loads_after_one_written_in_the_same_second(tmp_path, monkeypatch):
    """Event file names sort as text: a writer counter of 10 after 9 in one second sorted first."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.summary.writer import event_file_writer

    from rl_hydra.loggers import TensorBoardLogger
    from rl_hydra.runs.run_dir import RunDirectory

    monkeypatch.setattr(event_file_writer, "_global_uid", event_file_writer.AtomicCounter(9))
    run_dir = RunDirectory(tmp_path)
    for first_step, steps in [(0, [50, 100]), (100, [150, 200])]:
        logger = TensorBoardLogger()
        logger.start(run_dir, {}, first_step, [])
        for step in steps:
            logger.log(step, {"loss": float(step)})
        logger.finish("completed")
    events = EventAccumulator(str(run_dir.tensorboard))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [50, 100, 150, 200]


@pytest.mark.parametrize(
    "algo, env_option, key, generator",
    [("iqn", "cartpole", "tau_generator", "tau_generator"), ("redq", "pendulum", "generator", "generator")],
)
def test_a_gpu_run_s_generator_state_loads_on_the_cpu(algo, env_option, key, generator):
    """A CUDA generator's state (seed and offset, 16 bytes) cannot set a CPU generator: the agent
    is seeded from it instead, the same way each time (predicting with a GPU run on a laptop)."""

    cfg = compose_config(f"algo={algo}", f"env={env_option}", *TINY)
    agent = build_components(cfg, torch.device("cpu"))[0]
    state = agent.state_dict()
    state[key] = torch.tensor([7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8)
    draws = []
    for _ in range(2):
        agent.load_state_dict(state)
        draws.append(torch.rand(4, generator=getattr(agent, generator)))
    assert torch.equal(draws[0], draws[1])


def test_a_gpu_run_s_buffer_resumes_on_the_cpu():
    """`--resume device=cpu` of a GPU run: the buffer's sampling generator takes the CUDA state's seed."""

    buffer = build_components(compose_config("algo=dqn", "env=cartpole", *TINY), torch.device("cpu"))[2]
    state = buffer.state_dict()
    state["generator"] = torch.tensor([7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8)
    buffer.load_state_dict(state)
    first = torch.rand(4, generator=buffer.generator)
    buffer.load_state_dict(state)
    assert torch.equal(first, torch.rand(4, generator=buffer.generator))
