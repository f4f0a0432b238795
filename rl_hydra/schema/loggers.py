"""The keys of each logger (conf/logger/*.yaml, each one entry of the run's `logger` node)."""

from dataclasses import dataclass
from typing import Any, ClassVar

from rl_hydra.schema.keys import key

WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class LoggerKeys:
    stored_as: ClassVar[str] = "logger/plain"
    targets: ClassVar[tuple[str, ...]] = (
        "rl_hydra.loggers.csv.CSVLogger",
        "rl_hydra.loggers.tensorboard.TensorBoardLogger",
    )
    _target_: str = key(help="the logger's class")


@dataclass
class MLflowKeys(LoggerKeys):
    stored_as: ClassVar[str] = "logger/mlflow"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.loggers.mlflow.MLflowLogger",)
    tracking_uri: str | None = key(help="null: $MLFLOW_TRACKING_URI, else sqlite:///outputs/mlflow.db")
    experiment: str = key(help="the MLflow experiment")


@dataclass
class WandbKeys(LoggerKeys):
    stored_as: ClassVar[str] = "logger/wandb"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.loggers.wandb.WandbLogger",)
    mode: str = key(help="offline (upload later with wandb sync) | online | disabled", choices=WANDB_MODES)
    project: str = key(help="the W&B project")
    entity: str | None = key(help="null: your W&B default entity")
    tags: Any = key(help="a list of tags")
