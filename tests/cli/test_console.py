"""What a run prints while it trains: the progress bar, and the log lines that say what was built
and where the records went (issue #43, items 6 and 9)."""

from __future__ import annotations

import json
import logging
import re
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from rl_hydra.buffers.prioritized import PrioritizedReplayBuffer
from rl_hydra.buffers.replay import ReplayBuffer
from rl_hydra.buffers.sequence import SequenceBuffer
from tests.conftest import CONF_DIR, TINY, buffer_keys, from_the_run, run_training

# --- the progress bar ------------------------------------------------------------------------


def train_with_bar(tmp_path, capsys, caplog, *overrides: str) -> tuple[dict, str, list[tuple[str, str]]]:
    """Train a tiny run with the bar on; returns the summary, everything written to stderr and,
    for each log line, (the line, what stderr held when it was logged)."""
    written, seen = [], []

    class Snapshot(logging.Handler):
        def emit(self, record):
            written.append(capsys.readouterr().err)
            seen.append((record.getMessage(), "".join(written)))

    caplog.set_level(logging.INFO, logger="rl_hydra")
    snapshot = Snapshot()
    logging.getLogger("rl_hydra").addHandler(snapshot)
    try:
        summary = run_training(tmp_path / "run", *TINY, "train.progress=true", *overrides)
    finally:
        logging.getLogger("rl_hydra").removeHandler(snapshot)
    written.append(capsys.readouterr().err)
    return summary, "".join(written), seen


def last_bar(stderr: str) -> str:
    """The bar as it was last drawn (tqdm redraws it in place after a carriage return)."""
    return [line for line in re.split(r"[\r\n]", stderr) if "|" in line][-1]


def test_the_bar_shows_one_named_rate_and_ends_its_line_before_the_last_log_lines(tmp_path, capsys, caplog):
    _, stderr, seen = train_with_bar(tmp_path, capsys, caplog)
    bar = last_bar(stderr)
    assert "100%" in bar and "300/300" in bar and "eval return" in bar
    assert re.findall(r"steps?/s|sps", bar) == ["steps/s"]  # not tqdm's own rate beside it
    # the lines logged once the loop is over: the bar has ended its line, they start lines of their own
    after_the_loop = [text for line, text in seen if re.match(r"checkpoint .*last\.pt at step 300 |finished", line)]
    assert len(after_the_loop) == 2
    assert all(text.endswith("\n") for text in after_the_loop)


def test_a_run_that_stop_at_return_ends_leaves_the_bar_full_and_solved(tmp_path, capsys, caplog):
    summary, stderr, _ = train_with_bar(tmp_path, capsys, caplog, "train.stop_at_return=-1000")
    assert summary["solved_at_step"] == 150 and summary["global_step"] == 150
    bar = last_bar(stderr)
    assert bar.startswith("solved: 100%") and "150/150" in bar


# --- what the buffer says it is ----------------------------------------------------------------

VECTOR = gym.spaces.Box(-1, 1, (4,), dtype=np.float32)
FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
ACTIONS = gym.spaces.Discrete(2)


@pytest.mark.parametrize(
    "make, kind",
    [
        (
            lambda: ReplayBuffer(100, VECTOR, ACTIONS, **from_the_run(), share_frames="auto"),
            "uniform replay buffer: 100 transitions x",
        ),
        (
            lambda: ReplayBuffer(100, FRAMES, ACTIONS, **from_the_run(n_step=3), share_frames="auto"),
            "uniform replay buffer (3-step returns, frames stored once): 100 transitions x",
        ),
        (
            lambda: PrioritizedReplayBuffer(
                100,
                VECTOR,
                ACTIONS,
                **from_the_run(n_step=3),
                **buffer_keys("prioritized", sum_tree="numpy", beta_steps=100),
            ),
            "prioritized replay buffer (3-step returns): 100 transitions x",
        ),
        (
            lambda: PrioritizedReplayBuffer(
                100, FRAMES, ACTIONS, **from_the_run(), **buffer_keys("prioritized", sum_tree="numpy", beta_steps=100)
            ),
            "prioritized replay buffer (frames stored once): 100 transitions x",
        ),
        (
            lambda: SequenceBuffer(10, 16, 8, VECTOR, ACTIONS, **from_the_run(returns=False), share_frames="auto"),
            "sequence buffer (16-step chunks): 10 chunks x",
        ),
        (
            lambda: SequenceBuffer(10, 16, 8, FRAMES, ACTIONS, **from_the_run(returns=False), share_frames="auto"),
            "sequence buffer (16-step chunks, frames stored once): 10 chunks x",
        ),
    ],
)
def test_the_buffer_line_names_the_kind_of_buffer(caplog, make, kind):
    with caplog.at_level(logging.INFO, logger="rl_hydra"):
        buffer = make()
    assert kind in caplog.text
    assert caplog.text.count(buffer.describe()) == 1


# --- where the tracking runs went -------------------------------------------------------------


def test_mlflow_says_where_its_run_went_and_keeps_its_store_setup_quiet(tmp_path, monkeypatch, capfd, caplog):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with caplog.at_level(logging.INFO, logger="rl_hydra"):
        run_training(
            tmp_path / "run",
            *TINY,
            "train.total_steps=50",
            "train.eval_every=50",
            "logger=[csv,mlflow]",
            f"logger.mlflow.tracking_uri={uri}",
        )
    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["mlflow"]["run_id"]
    from rl_hydra.loggers.mlflow import ui_installed

    needs = "" if ui_installed() else " (the UI needs the full package first: pip install mlflow)"  # mlflow-skinny
    assert (
        f"MLflow run {run_id} (experiment rl-hydra) in {uri}; see it with: mlflow ui --backend-store-uri {uri}{needs}\n"
    ) in caplog.text
    assert "Creating initial MLflow database tables" not in capfd.readouterr().err
    setup = logging.getLogger("mlflow.store.db.utils")
    assert not setup.isEnabledFor(logging.INFO) and setup.isEnabledFor(logging.WARNING)  # warnings still show


def test_an_online_wandb_run_logs_its_id_and_address(caplog):
    pytest.importorskip("wandb")
    from rl_hydra.loggers.wandb import WandbLogger

    logger = WandbLogger(project="rl-hydra", entity=None, mode="online", tags=[])
    logger.run = SimpleNamespace(id="abc123", url="https://wandb.ai/me/rl-hydra/runs/abc123")
    with caplog.at_level(logging.INFO, logger="rl_hydra"):
        logger._say_where()
    assert "W&B run abc123: https://wandb.ai/me/rl-hydra/runs/abc123" in caplog.text


# --- the joblib launcher's opening line --------------------------------------------------------

JOBLIB_LINE = (
    "Joblib.Parallel(n_jobs={},backend=loky,prefer=processes,require=None,verbose=0,timeout=None,"
    "pre_dispatch=2*n_jobs,batch_size=auto,temp_folder=None,max_nbytes=None,mmap_mode=r) "
    "is launching 4 jobs"
)


@pytest.mark.parametrize("n_jobs, said", [(2, "launching 4 jobs, 2 at a time"), (-1, "launching 4 jobs, ")])
def test_the_joblib_launchers_line_is_short_in_hydras_logging(capsys, n_jobs, said):
    """Hydra's logging as a sweep's launching process has it (the launcher sets it up before its line)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.utils import configure_log

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        configure_log(compose(config_name="train", return_hydra_config=True).hydra.hydra_logging)
    launcher = logging.getLogger("some.launcher")
    launcher.info(JOBLIB_LINE.format(n_jobs))
    launcher.info("Launching jobs, sweep output dir : x")
    lines = capsys.readouterr().out.splitlines()
    assert f"[HYDRA] {said}" in lines[0] and "Joblib.Parallel" not in "\n".join(lines), lines
    assert lines[1].endswith("[HYDRA] Launching jobs, sweep output dir : x"), lines
