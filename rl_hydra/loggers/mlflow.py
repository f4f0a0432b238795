"""MLflow: one MLflow run per run directory, named after it, nested in one parent run per sweep.

The store is `logger.mlflow.tracking_uri`, else $MLFLOW_TRACKING_URI, else the local sqlite file
outputs/mlflow.db with the artifacts beside it in outputs/mlartifacts/ (docs/tracking.md).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rl_hydra.config import flat_config
from rl_hydra.errors import ConfigError
from rl_hydra.loggers.base import numbers, recall, remember, require, sweep_of
from rl_hydra.runs.run_dir import RunDirectory

if TYPE_CHECKING:
    from mlflow import MlflowClient

log = logging.getLogger(__name__)

DEFAULT_STORE = "sqlite:///outputs/mlflow.db"
# summary.json's -> MLflow's; a summary left `running` is a session killed while it extended the run
STATUS = {"completed": "FINISHED", "failed": "FAILED", "interrupted": "KILLED", "running": "KILLED"}
RUN_DIR_TAG = "rl_hydra.run_dir"


def resolve_tracking_uri(uri: str | None) -> str:
    """`uri`, else $MLFLOW_TRACKING_URI, else DEFAULT_STORE; a relative sqlite path made absolute,
    so that a run resumed from another directory finds its store."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        uri = "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    return uri


def sqlite_file(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:////") else None


def quiet_store_setup() -> None:
    """MLflow logs its database setup on every new store ("Creating initial MLflow database
    tables...", "Updating database tables", alembic's migration steps) at INFO, in a format of its
    own, amid the run's log: noise to a user. Those loggers are raised to WARNING, which keeps
    their real warnings. Called after mlflow is imported, whose import sets its loggers' levels."""
    for name in ("mlflow.store.db.utils", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def how_to_see(uri: str) -> str:
    """What to open to look at a run in the store `uri`: a server's address as it is, any other
    store through a local `mlflow ui`, which needs the full mlflow package: the mlflow extra
    installs mlflow-skinny, without the UI, so the line then says what to install first."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    command = f"mlflow ui --backend-store-uri {shlex.quote(uri)}"
    return command if ui_installed() else f"{command} (the UI needs the full package first: pip install mlflow)"


def ui_installed() -> bool:
    """Whether `mlflow ui` can run: the full mlflow package is installed, not mlflow-skinny alone."""
    from importlib import metadata

    try:
        metadata.distribution("mlflow")
    except metadata.PackageNotFoundError:
        return False
    return True


class MLflowLogger:
    """Params: the flattened composed config. Metrics: every row, as it is logged. At the end:
    summary.json, .hydra/ and checkpoints/best.pt as artifacts, and the status summary.json has
    (completed, failed, interrupted -> FINISHED, FAILED, KILLED). A later session of the same run
    directory (resume, re-launched sweep) continues the run recorded in its tracking.json."""

    def __init__(self, *, tracking_uri: str | None, experiment: str):
        require("mlflow", "mlflow")
        self.tracking_uri, self.experiment = resolve_tracking_uri(tracking_uri), experiment
        self.client: MlflowClient | None = None
        self.run_id: str | None = None
        self.run_dir: RunDirectory | None = None

    def _opened(self) -> tuple[MlflowClient, str]:
        """The store's client and the run's id, which start opened."""
        assert self.client is not None and self.run_id is not None, "logged before start()"
        return self.client, self.run_id

    def start(self, run_dir: RunDirectory, config: Mapping[str, Any], step: int, columns: Sequence[str]) -> None:  # noqa: ARG002
        self.run_dir = run_dir
        sweep = sweep_of(run_dir.path)
        parent = recall(sweep, "mlflow") if sweep is not None else {}
        tags = {"mlflow.parentRunId": parent["run_id"]} if parent.get("tracking_uri") == self.tracking_uri else {}
        self.run_id = self.open_run(run_dir.path, run_dir.path.name, tags)
        self._tag_provenance(run_dir)
        self._log_params(flat_config(dict(config)))
        log.info(
            "MLflow run %s (experiment %s) in %s; see it with: %s",
            self.run_id,
            self.experiment,
            self.tracking_uri,
            how_to_see(self.tracking_uri),
        )

    def _tag_provenance(self, run_dir: RunDirectory) -> None:
        """The session's provenance (rl_hydra/runs/provenance.py) as tags: code, versions, device, host."""
        from mlflow.entities import RunTag

        from rl_hydra.runs import provenance

        client, run_id = self._opened()
        client.log_batch(run_id, tags=[RunTag(k, v[:5000]) for k, v in provenance.tags(run_dir).items()])

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        client, run_id = self._opened()
        client.log_batch(run_id, metrics=[Metric(key, value, now, step) for key, value in numbers(metrics).items()])

    def finish(self, status: str) -> None:
        if self.client is None or self.run_id is None:  # no run opened
            return
        try:
            self._log_artifacts()
        finally:
            self.client.set_terminated(self.run_id, STATUS.get(status, "FAILED"))

    def open_run(self, directory: Path, name: str, tags: dict[str, str]) -> str:
        """The run that `directory` recorded in this store, running again, or a new one recorded there."""
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException

        quiet_store_setup()
        database = sqlite_file(self.tracking_uri)
        if database is not None:
            database.parent.mkdir(parents=True, exist_ok=True)
        self.client = client = MlflowClient(self.tracking_uri)
        record = recall(directory, "mlflow")
        if record.get("tracking_uri") == self.tracking_uri:
            try:
                client.update_run(record["run_id"], status="RUNNING")
                return record["run_id"]
            except MlflowException:  # deleted from the store since: a new run
                pass
        run = client.create_run(
            self._experiment_id(client), run_name=name, tags={RUN_DIR_TAG: str(directory.resolve()), **tags}
        )
        remember(directory, "mlflow", tracking_uri=self.tracking_uri, run_id=run.info.run_id)
        return run.info.run_id

    def _experiment_id(self, client: MlflowClient) -> str:
        from mlflow.exceptions import MlflowException

        found = client.get_experiment_by_name(self.experiment)
        if found is None:
            database = sqlite_file(self.tracking_uri)
            location = (database.parent / "mlartifacts" / self.experiment).as_uri() if database else None
            try:
                return client.create_experiment(self.experiment, artifact_location=location)
            except MlflowException:  # a parallel job created it first
                found = client.get_experiment_by_name(self.experiment)
                if found is None:
                    raise
        return found.experiment_id

    def _log_params(self, params: dict[str, Any]) -> None:
        """The params the run lacks: a continued run keeps its first values (MLflow params never
        change); its .hydra/ artifact has the config it ends with."""
        from mlflow.entities import Param

        client, run_id = self._opened()
        have = client.get_run(run_id).data.params
        new = [Param(key, str(value)) for key, value in params.items() if key not in have]
        for i in range(0, len(new), 100):  # at most 100 params a batch
            client.log_batch(run_id, params=new[i : i + 100])

    def _log_artifacts(self) -> None:
        (client, run_id), run_dir = self._opened(), self.run_dir
        assert run_dir is not None  # start set it before opening the run
        if run_dir.summary_json.is_file():
            client.log_artifact(run_id, str(run_dir.summary_json))
        if run_dir.hydra.is_dir():
            client.log_artifacts(run_id, str(run_dir.hydra), ".hydra")
        best = run_dir.checkpoints / "best.pt"
        if best.is_file():
            client.log_artifact(run_id, str(best), "checkpoints")


class MLflowSweep(Callback):
    """A sweep whose jobs log to MLflow gets one parent run, named after the sweep directory. This
    Hydra callback opens it in the process that launches the sweep and records it in
    <sweep dir>/tracking.json, where every job finds it, in whatever process its launcher runs it;
    at the end the parent gets FAILED if a job failed, KILLED if one was interrupted, else FINISHED."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ARG002
        logger, sweep_dir = _sweep_logger(config), Path(config.hydra.sweep.dir)
        if logger is None:
            return
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            overrides = " ".join(OmegaConf.select(config, "hydra.overrides.task", default=[]))
            logger.open_run(sweep_dir, str(sweep_dir), {"rl_hydra.overrides": overrides})
        except Exception as error:  # noqa: BLE001 - the jobs still train and log, without a parent
            log.warning("MLflow: no parent run for sweep %s (%s: %s)", sweep_dir, type(error).__name__, error)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ARG002
        logger, sweep_dir = _sweep_logger(config), Path(config.hydra.sweep.dir)
        if logger is None:  # the jobs did not log to MLflow: no parent run to end
            return
        record = recall(sweep_dir, "mlflow")
        if not record or record.get("tracking_uri") != logger.tracking_uri:
            return
        statuses = {json.loads(p.read_text()).get("status") for p in sweep_dir.glob("*/summary.json")}
        killed = {"interrupted", "running"} & statuses  # running: a member killed while it was extended
        status = "FAILED" if "failed" in statuses else "KILLED" if killed else "FINISHED"
        try:
            from mlflow import MlflowClient

            MlflowClient(logger.tracking_uri).set_terminated(record["run_id"], status)
        except Exception as error:  # noqa: BLE001
            log.warning("MLflow: sweep %s's parent run not ended (%s: %s)", sweep_dir, type(error).__name__, error)


def _sweep_logger(config: DictConfig) -> MLflowLogger | None:
    """The sweep's MLflow logger, when its jobs have one and mlflow is installed (if not, each
    job's run stops with the line that says so)."""
    node = OmegaConf.select(config, "logger.mlflow")
    if node is None:
        return None
    try:
        return MLflowLogger(tracking_uri=node.tracking_uri, experiment=node.experiment)
    except ConfigError:
        return None
