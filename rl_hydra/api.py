"""The Python API: train a run from overrides, exactly as the CLI would, and get it back."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rl_hydra.cli import CONF_DIR, execute
from rl_hydra.runs.loading import Run, load_run


def compose_train_config(*overrides: str):
    """The config `python train.py <overrides>` runs (Hydra's compose API, same files)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides), return_hydra_config=False)


def train(*overrides: str, run_dir: str | Path | None = None, checkpoint: str = "best") -> Run:
    """Train with CLI-style overrides into a new run directory under outputs/ and load it back.

    >>> run = train("algo=iqn", "env=cartpole", "train.total_steps=5000")
    >>> run.predict([0.0, 0.0, 0.0, 0.0])
    """
    cfg = compose_train_config(*overrides)
    if run_dir is None:
        choices = {o.split("=", 1)[0]: o.split("=", 1)[1] for o in overrides if "=" in o}
        stamp = datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")
        run_dir = Path("outputs") / f"{stamp}_{choices.get('algo', 'dqn')}_{choices.get('env', 'cartpole')}"
    run_dir = Path(run_dir)
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(list(overrides)))
    handler = logging.FileHandler(run_dir / "train.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logger = logging.getLogger("rl_hydra")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        execute(cfg, run_dir)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()
    return load_run(run_dir, checkpoint=checkpoint)
