"""Training runs from pixels: a short MinAtar run per algorithm (default suite), an Atari one (slow)."""

from __future__ import annotations

import pytest
from conftest import run_training

pytest.importorskip("minatar", reason='needs the minatar extra: pip install -e ".[minatar]"')

SHORT = [
    "train.total_steps=2000",
    "train.eval_every=2000",
    "train.eval_episodes=1",
    "train.checkpoint_every=1000",
    "train.log_every=500",
    "train.progress=false",
    "device=cpu",
    "algo.learning_starts=500",
    "algo.train_every=50",
    "algo.gradient_steps=2",
    "algo.batch_size=16",
    "buffer.capacity=5000",
]


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn", "iqn", "c51", "rainbow", "drqn"])
def test_every_discrete_algo_trains_on_minatar_grids(tmp_path, algo):
    summary = run_training(tmp_path, f"algo={algo}", "env=minatar", "env.id=MinAtar/Breakout-v1", *SHORT)
    assert summary["status"] == "completed" and summary["global_step"] == 2000 and summary["updates"] > 0
    assert summary["eval_return_mean"] is not None


@pytest.mark.slow
def test_dqn_trains_on_atari_frames_with_one_frame_per_transition(tmp_path, caplog):
    pytest.importorskip("ale_py", reason='needs the atari extra: pip install -e ".[atari]"')
    with caplog.at_level("INFO", logger="rl_hydra"):
        summary = run_training(
            tmp_path,
            "algo=dqn",
            "env=atari",
            "env.id=ALE/Pong-v5",
            "network.hidden_sizes=[512]",
            *SHORT[:-1],
            "train.total_steps=1000",
            "train.eval_every=1000",
            "buffer.capacity=2000",
        )
    assert summary["status"] == "completed" and summary["updates"] > 0
    # one 84x84 frame per transition, not two stacks of four
    assert "uniform replay buffer (frames stored once): 2000 transitions x 7.1 KB = 14.2 MB" in caplog.text
