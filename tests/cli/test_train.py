"""Whole runs: the run directory, determinism, the CLI, bad input, and one learning check."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from rl_hydra.errors import ConfigError
from rl_hydra.loops.runner import TrainingDiverged
from rl_hydra.runs.run_dir import SUMMARY_KEYS
from tests.conftest import ROOT, TINY, compose_config, run_cli, run_training


def read_metrics(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_in_process_run_leaves_a_complete_run_directory(tmp_path):
    summary = run_training(tmp_path, *TINY, "algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2")
    assert list(summary) == list(SUMMARY_KEYS) and summary["status"] == "completed"
    assert summary == json.loads((tmp_path / "summary.json").read_text())
    assert summary["global_step"] == 300 and summary["updates"] == 5 * 2
    rows = read_metrics(tmp_path / "metrics.csv")
    assert [int(r["step"]) for r in rows] == list(range(50, 301, 50))
    assert {"time/sps", "train/loss", "eval/return_mean", "rollout/return_mean"} <= set(rows[0])
    assert rows[-1]["eval/return_mean"] and float(rows[-1]["eval/return_mean"]) == summary["eval_return_mean"]
    assert rows[-1]["train/loss"] != ""
    assert any((tmp_path / "tb").iterdir())
    for name in ("last", "best"):
        state = torch.load(tmp_path / "checkpoints" / f"{name}.pt", weights_only=True)
        assert "q_net" in state["agent"]
    assert state["runner"]["global_step"] in (150, 300)


def test_same_seed_gives_identical_metrics_on_cpu(tmp_path):
    def metrics_without_wall_clock(run_dir):
        run_training(
            run_dir, *TINY, "algo.learning_starts=50", "algo.train_every=10", "algo.gradient_steps=1", "seed=3"
        )
        return [
            {k: v for k, v in row.items() if not k.startswith("time/")} for row in read_metrics(run_dir / "metrics.csv")
        ]

    first = metrics_without_wall_clock(tmp_path / "a")
    assert first == metrics_without_wall_clock(tmp_path / "b")
    other_seed = run_training(
        tmp_path / "c", *TINY, "algo.learning_starts=50", "algo.train_every=10", "algo.gradient_steps=1", "seed=4"
    )
    assert read_metrics(tmp_path / "c" / "metrics.csv")[-1]["train/loss"] != first[-1]["train/loss"]
    assert other_seed["status"] == "completed"


def test_diverging_run_stops_within_one_update_and_keeps_its_checkpoint(tmp_path):
    from rl_hydra.loops.runner import TrainingDiverged

    with pytest.raises(TrainingDiverged, match="non-finite"):
        run_training(
            tmp_path,
            *TINY,
            "train.checkpoint_every=100",
            "algo.learning_starts=150",
            "algo.train_every=1",
            "algo.optimizer.lr=1e30",
            "algo.max_grad_norm=null",
            "algo.loss=mse",
            "train.total_steps=3000",
        )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "non-finite" in summary["reason"]
    last = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in last["agent"]["q_net"].values())


def test_cli_multirun_sweeps_two_seeds_into_separate_directories(tmp_path):
    result = run_cli("-m", "seed=0,1", *TINY, f"hydra.sweep.dir={tmp_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    summaries = sorted(tmp_path.glob("*/summary.json"))
    # job directories are named from the overrides, not from launch order
    names = [p.parent.name.split(",") for p in summaries]
    assert len(names) == 2 and "seed=0" in names[0] and "seed=1" in names[1]
    assert [json.loads(p.read_text())["seed"] for p in summaries] == [0, 1]
    assert all((p.parent / ".hydra" / "config.yaml").is_file() for p in summaries)
    assert all("finished: eval return" in (p.parent / "train.log").read_text() for p in summaries)


def test_cli_prints_the_composed_config_with_targets():
    result = run_cli("--cfg", "job", "algo=dqn", "env=cartpole")
    assert result.returncode == 0
    for target in ("rl_hydra.algos.dqn.DQN", "rl_hydra.networks.mlp.QNetwork", "rl_hydra.buffers.replay.ReplayBuffer"):
        assert f"_target_: {target}" in result.stdout


BAD_INPUTS = [
    (["seed=xyz"], "seed='xyz' is not an integer"),
    (["train.total_steps=abc"], "train.total_steps='abc' is not an integer"),
    (["train.total_steps=-5"], "train.total_steps=-5 is out of range; expected an integer >= 1"),
    (["algo.gamma=1.5"], "algo.gamma=1.5 is out of range"),
    (["algo.batch_size=0"], "algo.batch_size=0 is out of range"),
    (["env.num_envs=0"], "env.num_envs=0 is out of range"),
    (["+env.eval_epsilon=1.5"], "env.eval_epsilon=1.5 is out of range; expected a number >= 0.0 and <= 1.0"),
    (
        ["env=gym", "env.id=CartPol-v1"],
        "env.id='CartPol-v1' is not a registered gymnasium environment; did you mean: CartPole-v1",
    ),
    (["algo=dqn", "env=pendulum"], "algo=dqn needs a discrete action space"),
    (["algo.optimizer.lr=abc"], "algo.optimizer.lr='abc' is not a finite number"),
    (["flush_denormal=sometimes"], "flush_denormal='sometimes' is not allowed; choose one of: true, false"),
    (["+algo.gamme=0.9"], "algo.gamme is not a key of algo; its keys: batch_size, learning_starts"),
]
if not torch.cuda.is_available():
    BAD_INPUTS.append((["device=cuda"], "device='cuda' but CUDA is not available"))


@pytest.mark.parametrize("args, message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_raises_one_line_config_error_before_training(tmp_path, args, message):
    with pytest.raises(ConfigError) as error:
        run_training(tmp_path, *args, "train.progress=false")
    assert message in str(error.value) and "\n" not in str(error.value)
    assert not (tmp_path / "checkpoints").exists()  # nothing trained


def settings_seen_by_the_loop(monkeypatch) -> dict:
    """Records the process settings the training loop runs under."""
    import rl_hydra.loops.off_policy as off_policy
    from rl_hydra.build import flushes_denormals

    seen, loop = {}, off_policy.loop

    def spy(runner):
        seen.update(threads=torch.get_num_threads(), flush=flushes_denormals())
        yield from loop(runner)

    monkeypatch.setattr(off_policy, "loop", spy)
    return seen


@pytest.mark.parametrize("flush", [True, False])
def test_flush_denormal_decides_whether_cpu_math_treats_denormals_as_zero(tmp_path, monkeypatch, flush):
    seen = settings_seen_by_the_loop(monkeypatch)
    run_training(tmp_path, *TINY, f"flush_denormal={str(flush).lower()}")
    assert seen["flush"] == flush


def process_state():
    import random

    from rl_hydra.build import flushes_denormals

    return (
        torch.get_num_threads(),
        flushes_denormals(),
        random.getstate(),
        np.random.get_state()[1].tolist(),
        torch.get_rng_state().tolist(),
    )


@pytest.mark.parametrize("outcome", ["completed", "diverged"])
def test_a_run_leaves_the_callers_threads_denormals_and_rngs_as_they_were(tmp_path, monkeypatch, outcome):
    torch.set_num_threads(2)
    torch.manual_seed(7)
    before = process_state()
    seen = settings_seen_by_the_loop(monkeypatch)
    args = [*TINY, "torch_threads=1", "flush_denormal=true", "seed=3"]
    if outcome == "diverged":
        args += [
            "algo.learning_starts=150",
            "algo.train_every=4",
            "algo.gradient_steps=4",
            "algo.optimizer.lr=1e30",
            "algo.max_grad_norm=null",
            "algo.loss=mse",
            "train.total_steps=3000",
        ]
        with pytest.raises(TrainingDiverged):
            run_training(tmp_path, *args)
    else:
        run_training(tmp_path, *args)
    assert process_state() == before  # the caller's settings, back as they were
    assert seen["threads"] == 1 and seen["flush"]  # the run's own while it ran


@pytest.mark.parametrize(
    "args, message",
    [
        (["algo=foo"], "algo=foo is not a config option; choose one of: c51, "),
        (["seed=xyz"], "seed='xyz' is not an integer"),
        (["algo=dqn", "env=pendulum"], "algo=dqn needs a discrete action space"),
    ],
)
def test_cli_bad_input_prints_one_error_line_and_exits_nonzero(tmp_path, args, message):
    result = run_cli(*args, f"hydra.run.dir={tmp_path}", "train.progress=false")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and message in error_lines[0], result.stderr
    assert not (tmp_path / "checkpoints").exists()


def test_dqn_learns_cartpole_quickly(tmp_path):
    """A short run with a generous bar: a random policy scores about 20."""
    summary = run_training(
        tmp_path,
        "train.total_steps=6000",
        "train.eval_every=2000",
        "train.progress=false",
        "device=cpu",
        "checkpoint.save_buffer=false",
    )
    assert summary["best_eval_return_mean"] >= 100, summary


def test_stop_at_return_ends_the_run_at_the_first_evaluation_that_reaches_it(tmp_path):
    from rl_hydra.commands.launch import launch
    from tests.conftest import compose_config

    cfg = compose_config(*TINY, "train.total_steps=3000", "train.eval_every=100", "train.stop_at_return=1.0")
    summary = launch(cfg, tmp_path)
    assert summary["solved_at_step"] == 100 and summary["global_step"] == 100
    assert summary["status"] == "completed" and summary["eval_return_mean"] >= 1.0
    assert launch(cfg, tmp_path) == summary  # a solved run counts as finished
    unreachable = run_training(tmp_path / "b", *TINY, "train.stop_at_return=1e9")
    assert unreachable["solved_at_step"] is None and unreachable["global_step"] == 300


def test_the_launching_process_does_not_import_torch():
    # a parallel sweep's parent only composes configs; its workers import torch themselves
    code = "import sys, rl_hydra, rl_hydra.commands.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize(
    "args, hint",
    [
        (["algo.max_grad_norm=null"], "try a lower algo.optimizer.lr or enable algo.max_grad_norm (e.g. 10)"),
        ([], "try a lower algo.optimizer.lr or lower algo.max_grad_norm (now 10.0)"),
        (
            ["algo=redq", "env=pendulum"],
            "try a lower algo.actor_optimizer.lr / algo.critic_optimizer.lr / "
            "algo.alpha_optimizer.lr or enable algo.max_grad_norm (e.g. 10)",
        ),
    ],
)
def test_the_divergence_hint_is_true_for_the_config_at_hand(args, hint):
    from rl_hydra.loops.settings import divergence_hint

    assert divergence_hint(compose_config(*args)) == hint


def test_integer_keys_refuse_floats_while_composing_and_name_the_integer(tmp_path):
    # the schema types them int (rl_hydra/schema): OmegaConf refuses 3e2 and 1.5 alike, before anything runs
    with pytest.raises(
        ConfigError, match=r"^train.total_steps=300.0 is not an integer \(give 300\); expected an integer"
    ):
        run_training(tmp_path / "a", *TINY, "train.total_steps=3e2")
    with pytest.raises(ConfigError, match=r"^train.total_steps=1.5 is not an integer; expected an integer >= 1"):
        run_training(tmp_path / "b", *TINY, "train.total_steps=1.5")
    with pytest.raises(ConfigError, match=r"^network.hidden_sizes\[0\]=16.0 has the wrong type"):
        run_training(tmp_path / "c", *TINY, "network.hidden_sizes=[16.0]")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_run_that_would_never_update_says_so_before_it_starts(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="rl_hydra"):
        summary = run_training(tmp_path, *TINY, "algo.learning_starts=1000")
    assert summary["updates"] == 0
    warning = next(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert "algo.learning_starts=1000" in warning and "train.total_steps=300" in warning
    caplog.clear()
    with caplog.at_level("WARNING", logger="rl_hydra"):
        run_training(tmp_path / "b", *TINY, "algo.learning_starts=100", "algo.train_every=10")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_run_files_are_readable_as_the_umask_allows(tmp_path):
    import os

    previous = os.umask(0o022)
    try:
        run_training(tmp_path, *TINY)
    finally:
        os.umask(previous)
    for name in ("summary.json", "checkpoints/last.pt", "checkpoints/best.pt", "metrics.csv"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o644, name


def test_help_mentions_resume_and_evaluation():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "resume=<run dir>" in result.stdout and "scripts/evaluate.py run_dir=" in result.stdout


def test_the_run_directory_is_named_at_the_start_and_at_the_end(tmp_path, capsys):
    from rl_hydra import train

    run = train(*TINY, run_dir=tmp_path / "run")
    assert run.run_dir == run.path == tmp_path / "run"
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"rl-hydra: training into {tmp_path / 'run'}" and out[-1].endswith(f"run directory: {run.path}")
    result = run_cli(*TINY, f"hydra.run.dir={tmp_path / 'cli'}")
    lines = [line for line in result.stdout.splitlines() if "run directory: " in line]
    assert len(lines) == 2 and lines[0].endswith(f"run directory: {tmp_path / 'cli'}") and "finished:" in lines[1]


def test_every_summary_has_every_key_whatever_the_outcome(tmp_path):
    """One schema for a completed run and for a refused sweep job (the CLI knows the env option)."""
    run_cli(*TINY, "env=cartpole_no_velocity", f"hydra.run.dir={tmp_path / 'ok'}")
    run_cli("-m", *TINY, "algo.gamma=0.9,2", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    ok = json.loads((tmp_path / "ok" / "summary.json").read_text())
    refused = json.loads(next((tmp_path / "sweep").glob("algo.gamma=2,*/summary.json")).read_text())
    assert list(ok) == list(refused) == list(SUMMARY_KEYS)
    assert (ok["env"], ok["env_id"], ok["algo"], ok["reason"]) == ("cartpole_no_velocity", "CartPole-v1", "dqn", None)
    assert ok["stop_at_return"] is None and ok["solved_at_step"] is None
    assert refused["status"] == "failed" and "algo.gamma=2" in refused["reason"]
    assert refused["global_step"] is None and refused["env"] == "cartpole" and refused["algo"] == "dqn"


def test_a_refused_single_run_leaves_nothing_behind(tmp_path):
    result = run_cli(*TINY, "algo.gamma=2", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and not (tmp_path / "run").exists()
    from rl_hydra import train
    from rl_hydra.commands.launch import RunFailed

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("kept")
    with pytest.raises(RunFailed):
        train(*TINY, "algo.gamma=2", run_dir=tmp_path / "mine")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]  # only what it wrote goes


def test_relaunching_into_a_run_with_another_config_is_refused_naming_the_keys(tmp_path):
    first = run_cli(*TINY, f"hydra.run.dir={tmp_path}")
    assert first.returncode == 0, first.stderr
    again = run_cli(*TINY, f"hydra.run.dir={tmp_path}")
    assert again.returncode == 0 and "already holds a finished run" in again.stdout
    other = run_cli(*TINY, "seed=1", "algo.gamma=0.9", f"hydra.run.dir={tmp_path}")
    errors = [line for line in other.stderr.splitlines() if line.startswith("error:")]
    assert other.returncode == 2 and len(errors) == 1, other.stderr
    assert "algo.gamma: 0.99 -> 0.9" in errors[0] and "seed: 0 -> 1" in errors[0] and "resume=" in errors[0]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"  # the run is untouched


def test_console_logging_goes_through_the_progress_bar_while_it_is_shown(tmp_path, monkeypatch):
    import logging
    import sys

    import rl_hydra.loops.off_policy as off_policy

    console = logging.StreamHandler(sys.stderr)
    root = logging.getLogger()
    root.addHandler(console)
    seen, loop = {}, off_policy.loop

    def spy(runner):
        seen["handlers"] = list(root.handlers)
        yield from loop(runner)

    monkeypatch.setattr(off_policy, "loop", spy)
    try:
        run_training(tmp_path, *TINY, "train.progress=true")
        assert console in root.handlers  # put back after the run
    finally:
        root.removeHandler(console)
    assert console not in seen["handlers"]  # replaced while the loop ran ...
    assert "_TqdmLoggingHandler" in [type(h).__name__ for h in seen["handlers"]]  # ... by tqdm's


@pytest.mark.parametrize(
    "args, message",
    [
        (["algo.gama=0.9"], "error: algo.gama is not a key of the config; did you mean algo.gamma?"),
        (["algo=iqn", "algo.num_tau_sample=8"], "did you mean algo.num_tau_samples?"),
        (["-m", "algo=dqn,iqn", "train.total_step=10"], "did you mean train.total_steps?"),
    ],
)
def test_a_misspelled_key_gets_one_line_with_the_closest_key_and_exit_2(tmp_path, args, message):
    result = run_cli(*args, f"hydra.run.dir={tmp_path}", f"hydra.sweep.dir={tmp_path}")
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(errors) == 1 and message in errors[0], result.stderr
    assert "+" in errors[0]  # how to add a new key instead


def test_key_checks_let_list_indexes_and_new_keys_through():
    result = run_cli("--cfg", "job", "network.hidden_sizes.0=32", "+algo.new_key=1")
    assert result.returncode == 0, result.stderr
    assert "- 32" in result.stdout and "new_key: 1" in result.stdout
