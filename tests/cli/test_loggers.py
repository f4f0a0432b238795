"""The `logger` group: metrics.csv always, TensorBoard, MLflow and W&B beside it, all with the same
rows. MLflow and W&B run for real (a local sqlite store, W&B offline files), read back with
MlflowClient and wandb's own record format; each skips when its extra is not installed."""

from __future__ import annotations

import csv
import json
import logging
import os
import socket
import struct
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from rl_hydra import train
from rl_hydra.commands.launch import RunFailed, launch
from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.config import flat_config
from rl_hydra.loggers import CSVLogger, TensorBoardLogger, build_loggers
from tests.conftest import ROOT, TINY, compose_config, run_cli, stop_at

UPDATES = ["algo.learning_starts=100", "algo.train_every=50", "algo.gradient_steps=2"]  # train/* rows too


@pytest.fixture(autouse=True)
def no_mlflow_telemetry(monkeypatch):
    """MLflow 3 sends usage telemetry unless told not to; the tests stay off the network."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")


def store(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/mlflow.db"


def csv_rows(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def csv_series(run_dir, column: str) -> list[tuple[int, float]]:
    return [(int(row["step"]), float(row[column])) for row in csv_rows(run_dir) if row[column] not in ("", "nan")]


def resume(run_dir, **changes):
    """What `python train.py resume=<run_dir> key=value ...` does (rl_hydra.commands.resume.resume_main)."""
    config_file = run_dir / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(config_file)
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    config_file.write_text(OmegaConf.to_yaml(cfg))
    return launch(cfg, run_dir, resume=True)


# --- the group -----------------------------------------------------------------------------


def test_logger_lists_combine_and_metrics_csv_is_always_written():
    assert list(build_loggers(compose_config().logger)) == ["csv", "tensorboard"]  # the default
    loggers = build_loggers(compose_config("logger=[tensorboard]").logger)
    assert list(loggers) == ["csv", "tensorboard"] and isinstance(loggers["csv"], CSVLogger)
    assert list(build_loggers(compose_config("logger=[]").logger)) == ["csv"]
    # a run directory from before the group existed keeps what it had
    assert [type(logger) for logger in build_loggers(None).values()] == [CSVLogger, TensorBoardLogger]


@pytest.mark.parametrize("option", ["mlflow", "wandb"])
def test_a_logger_whose_package_is_missing_is_one_line_and_exit_2(tmp_path, option):
    hide = (
        f"import sys; sys.modules[{option!r}] = None; sys.argv[0] = 'train.py'; "
        "from rl_hydra.commands.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", hide, f"logger=[csv,{option}]", *TINY, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f'error: logger={option} needs the {option} package: pip install -e ".[{option}]"'
    )
    assert not (tmp_path / "run").exists()  # a refused config leaves nothing behind


class FailingLogger:
    """A logger whose second row fails, as one whose disk filled up or whose server went away."""

    def start(self, run_dir, cfg, step, columns):
        self.run_dir, self.rows = run_dir, 0

    def log(self, step, metrics):
        self.rows += 1
        if self.rows == 2:
            raise OSError(28, "No space left on device")

    def finish(self, status):
        (self.run_dir.path / "flaky_finished.txt").write_text(status)


def test_a_logger_failing_mid_run_warns_once_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RL_HYDRA_TRUST", "tests.cli.test_loggers.FailingLogger")  # train() loads the run back
    with caplog.at_level(logging.WARNING, logger="rl_hydra"):
        train(*TINY, "+logger.flaky._target_=tests.cli.test_loggers.FailingLogger", run_dir=tmp_path / "run")
    warnings = [r.getMessage() for r in caplog.records if "logger=flaky failed" in r.getMessage()]
    assert warnings == [
        "logger=flaky failed (OSError: [Errno 28] No space left on device); the run goes on "
        "without it, metrics.csv keeps every row"
    ]
    # dropped at once, and given the chance to let go of what it holds
    assert (tmp_path / "run" / "flaky_finished.txt").read_text() == "failed"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"
    assert [int(row["step"]) for row in csv_rows(tmp_path / "run")] == list(range(50, 301, 50))


def test_an_unreachable_mlflow_server_warns_once_and_the_run_goes_on(tmp_path, monkeypatch, caplog):
    pytest.importorskip("mlflow")
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    with caplog.at_level(logging.WARNING, logger="rl_hydra"):
        train(
            *TINY,
            "logger=[csv,mlflow]",
            f"logger.mlflow.tracking_uri=http://127.0.0.1:{port}",
            run_dir=tmp_path / "run",
        )
    assert len([r for r in caplog.records if "logger=mlflow failed" in r.getMessage()]) == 1
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"
    assert len(csv_rows(tmp_path / "run")) == 6


# --- MLflow --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlflow_run(tmp_path_factory):
    pytest.importorskip("mlflow")
    tmp = tmp_path_factory.mktemp("mlflow")
    run = train(
        *TINY,
        *UPDATES,
        "logger=[csv,tensorboard,mlflow]",
        f"logger.mlflow.tracking_uri={store(tmp)}",
        run_dir=tmp / "run",
    )
    return run, tmp


def only_run(tracking_uri: str):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("rl-hydra").experiment_id])
    assert len(runs) == 1, [r.info.run_name for r in runs]
    return client, runs[0]


def test_mlflow_run_holds_the_config_every_row_the_artifacts_and_the_status(mlflow_run):
    import mlflow

    run, tmp = mlflow_run
    client, logged = only_run(store(tmp))
    assert (logged.info.run_name, logged.info.status) == ("run", "FINISHED")
    assert logged.data.tags["rl_hydra.run_dir"] == str(run.path.resolve())
    made_by = run.provenance["sessions"][-1]  # the run's provenance, as tags
    assert {key: logged.data.tags[f"rl_hydra.{key}"] for key in ("torch", "git_commit", "device", "host")} == {
        key: str(made_by[key]) for key in ("torch", "git_commit", "device", "host")
    }
    config = flat_config(OmegaConf.to_container(run.cfg, resolve=True))
    assert logged.data.params == {key: str(value) for key, value in config.items()}
    columns = [c for c in csv_rows(run.path)[0] if c != "step"]
    assert "train/loss" in columns and "eval/return_mean" in columns
    for column in columns:  # every metric of metrics.csv, by the same name, at the same steps
        history = client.get_metric_history(logged.info.run_id, column)
        assert sorted((m.step, m.value) for m in history) == csv_series(run.path, column), column
    artifacts = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert artifacts == {"summary.json", ".hydra", "checkpoints"}
    assert {a.path for a in client.list_artifacts(logged.info.run_id, "checkpoints")} == {"checkpoints/best.pt"}
    assert ".hydra/config.yaml" in {a.path for a in client.list_artifacts(logged.info.run_id, ".hydra")}
    copy = client.download_artifacts(logged.info.run_id, "summary.json", str(tmp))
    assert json.loads(open(copy).read()) == run.summary
    assert mlflow.active_run() is None  # no fluent-API run left open in the process
    assert (tmp / "mlartifacts").is_dir()  # a local store keeps its artifacts beside it


def test_evaluate_works_unchanged_on_a_run_that_logged_to_mlflow(mlflow_run, capsys):
    run, _ = mlflow_run
    assert evaluate_main([f"run_dir={run.path}", "episodes=2", "checkpoint=last"]) == 0


def test_mlflow_status_follows_summary_and_resume_continues_the_same_run(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    overrides = [*TINY, "logger=[csv,mlflow]", f"logger.mlflow.tracking_uri={store(tmp_path)}"]
    with monkeypatch.context() as patch:
        stop_at(patch, 150)
        with pytest.raises(RunFailed):
            train(*overrides, run_dir=tmp_path / "run")
    client, stopped = only_run(store(tmp_path))
    assert stopped.info.status == "KILLED"  # summary.json: interrupted

    resume(tmp_path / "run", **{"train.total_steps": 450})
    client, resumed = only_run(store(tmp_path))
    assert resumed.info.run_id == stopped.info.run_id and resumed.info.status == "FINISHED"
    history = client.get_metric_history(resumed.info.run_id, "rollout/episodes")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == list(range(50, 451, 50))  # once each
    assert csv_series(tmp_path / "run", "rollout/episodes") == sorted((m.step, m.value) for m in history)
    assert resumed.data.params["train.total_steps"] == "300"  # MLflow keeps a param's first value...
    copy = client.download_artifacts(resumed.info.run_id, ".hydra/config.yaml", str(tmp_path))
    assert OmegaConf.load(copy).train.total_steps == 450  # ... the .hydra/ artifact has the config it ends with


def test_mlflow_status_of_a_failed_run_is_failed(tmp_path):
    pytest.importorskip("mlflow")
    crashing_env = "env.wrappers=[{_target_:tests.helpers.RaiseAfter,_partial_:true,steps:120}]"
    with pytest.raises(RunFailed):
        train(
            *TINY,
            crashing_env,
            "logger=[csv,mlflow]",
            f"logger.mlflow.tracking_uri={store(tmp_path)}",
            run_dir=tmp_path / "run",
        )
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "failed"
    assert only_run(store(tmp_path))[1].info.status == "FAILED"


# --- W&B -----------------------------------------------------------------------------------


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B's own files (settings, cache, staging) in tmp_path, never ~; offline, never the network."""
    pytest.importorskip("wandb")
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / f"wandb_{name.lower()}"))
    monkeypatch.setenv("WANDB_MODE", "offline")


def wandb_records(run_dir) -> list[tuple[str, list]]:
    """(offline run dir name, its records) for each session of a run, oldest first, read from the
    .wandb transaction log: a 7-byte header, then records framed in 32 KiB blocks (LevelDB's log
    format: crc32c, length, type 1 full / 2 first / 3 middle / 4 last) holding wandb's protobufs."""
    from wandb.proto import wandb_internal_pb2

    sessions = []
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        data, records, pos, pending = path.read_bytes(), [], 7, b""
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
                pos += 32768 - pos % 32768
                continue
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if kind == 0:
                pos += 32768 - pos % 32768
                continue
            pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
            if kind in (1, 4):
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                records.append(record)
                pending = b""
        sessions.append((path.parent.name, records))
    return sessions


def wandb_items(records, kind: str) -> list[dict]:
    """The history rows (kind="history") or summary updates ("summary") as {key: value}."""
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == kind:
            items = record.history.item if kind == "history" else record.summary.update
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items})
    return rows


def test_wandb_offline_run_holds_the_config_every_row_and_the_summary(tmp_path, wandb_offline):
    environ = {k: v for k, v in os.environ.items() if k.startswith("WANDB")}
    excepthook = sys.excepthook
    run = train(*TINY, *UPDATES, "logger=[csv,wandb]", run_dir=tmp_path / "run")
    ((name, records),) = wandb_records(run.path)
    (header,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert (header.project, header.display_name, header.run_group) == ("rl-hydra", "run", "")
    assert name.endswith(header.run_id)
    logged_config = {
        item.key: json.loads(item.value_json) for item in header.config.update if not item.key.startswith("_")
    }
    made_by = logged_config.pop("provenance")  # the run's provenance, in its config and as tags
    assert made_by["torch"] == run.provenance["sessions"][0]["torch"] and f"torch:{made_by['torch']}" in header.tags
    assert logged_config == OmegaConf.to_container(run.cfg, resolve=True)
    history = {row["_step"]: row for row in wandb_items(records, "history")}
    for row in csv_rows(run.path):  # every row of metrics.csv, at its step, by the same names
        logged = {k: v for k, v in history[int(row["step"])].items() if not k.startswith("_")}
        assert logged == {k: float(v) for k, v in row.items() if k != "step" and v not in ("", "nan")}
    summary = {}
    for update in wandb_items(records, "summary"):
        summary.update(update)
    assert {k: summary[k] for k in run.summary} == run.summary  # summary.json's figures
    assert summary["eval/return_mean"] == run.summary["eval_return_mean"]  # and the last values
    (exit_record,) = [r.exit for r in records if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 0
    # the process is as it was: no WANDB_* variable or exception hook left behind
    assert {k: v for k, v in os.environ.items() if k.startswith("WANDB")} == environ
    assert sys.excepthook is excepthook

    resume(run.path, **{"train.total_steps": 400})  # a later session continues the same W&B run
    sessions = wandb_records(run.path)
    assert len(sessions) == 2
    (again,) = [r.run for r in sessions[1][1] if r.WhichOneof("record_type") == "run"]
    assert again.run_id == header.run_id
    assert sorted(row["_step"] for row in wandb_items(sessions[1][1], "history")) == [350, 400]


# --- a sweep: MLflow parent and children, W&B group, in joblib's worker processes ----------


@pytest.mark.slow  # about 20 s: two worker processes, each importing torch, mlflow and wandb
def test_a_sweep_is_one_parent_mlflow_run_with_a_child_per_job_and_one_wandb_group(
    tmp_path, monkeypatch, wandb_offline
):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store(tmp_path))
    sweep_dir = tmp_path / "sweep"
    same_in_every_job = [
        "train.progress",
        "device",
        "train.total_steps",
        "train.eval_every",
        "train.eval_episodes",
        "train.checkpoint_every",
        "train.log_every",
        "logger",
    ]
    result = run_cli(
        "-m",
        "seed=0,1",
        "logger=[csv,mlflow,wandb]",
        *TINY,
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.job.config.override_dirname.exclude_keys=[{','.join(same_in_every_job)}]",
    )
    assert result.returncode == 0, result.stderr[-3000:]

    from mlflow import MlflowClient

    client = MlflowClient(store(tmp_path))
    runs = {r.info.run_name: r for r in client.search_runs([client.get_experiment_by_name("rl-hydra").experiment_id])}
    assert sorted(runs) == sorted([str(sweep_dir), "seed=0", "seed=1"])
    parent = runs[str(sweep_dir)]
    assert parent.info.status == "FINISHED" and "mlflow.parentRunId" not in parent.data.tags
    for job in ("seed=0", "seed=1"):
        child = runs[job]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED" and child.data.params["seed"] == job[-1]
        ((_, records),) = wandb_records(sweep_dir / job)
        (header,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
        assert (header.display_name, header.run_group) == (job, str(sweep_dir))
    assert evaluate_main([f"run_dir={sweep_dir}", "episodes=2"]) == 0  # evaluate reads the sweep as ever


def test_a_sweep_without_mlflow_ends_without_an_mlflow_warning(tmp_path, caplog):
    from omegaconf import OmegaConf

    from rl_hydra.loggers.mlflow import MLflowSweep

    config = OmegaConf.create({"logger": {"csv": {}}, "hydra": {"sweep": {"dir": str(tmp_path)}}})
    with caplog.at_level("WARNING"):
        MLflowSweep().on_multirun_end(config)
    assert not [r for r in caplog.records if "MLflow" in r.getMessage()]
