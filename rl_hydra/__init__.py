"""rl-hydra: a Hydra-configured launcher for off-policy deep RL.

    from rl_hydra import train, load_run
    run = train("algo=iqn", "env=cartpole", "train.total_steps=5000")
    run = load_run("outputs/2026-01-01/12-00-00-000000_iqn_cartpole")
    action = run.predict(observation)
"""

from rl_hydra.api import compose_train_config, train
from rl_hydra.runs.loading import Run, load_run

__all__ = ["Run", "compose_train_config", "load_run", "train"]
