"""The issues' attacks on a run directory, by name: the targeted regression cases, and one draw of
the random strategy. test_fuzz_records.py runs each through every entry point, but for the shapes of
issue #74 (FOCUS): the default suite runs those through the entry points the issue saw them reach,
the slow suite through the rest."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.fuzz.archive import Archive
from tests.fuzz.mutations import (
    BEST,
    BOMB,
    CONFIG,
    DEEP_JSON_OBJECT,
    DEEP_LIST,
    HUGE_INT,
    HYDRA,
    LAST,
    METRICS,
    OVERRIDES,
    PLANTED,
    PROVENANCE,
    PYTHON_TAG,
    SUMMARY,
    Bomb,
    Checkpoint,
    CsvCell,
    CsvLine,
    Declared,
    Delete,
    Fifo,
    Folder,
    HardLink,
    Link,
    Long,
    Nest,
    Raw,
    Set,
    Swap,
    Tensor,
    Truncate,
    WholeCheckpoint,
    Write,
    key,
)
from tests.payload import pickled_mark


def torch_load_payload() -> dict:
    """torch.load(BytesIO(b64decode(...)), weights_only=False) of a pickle that calls tests.payload.mark."""
    data = base64.b64encode(pickled_mark("pwned")).decode()
    inner = {"_target_": "io.BytesIO", "initial_bytes": {"_target_": "base64.b64decode", "s": data}}
    return {"_target_": "torch.load", "weights_only": False, "f": inner}


def planted_env(reference: str) -> list:
    """env.id made by a reference from a string that names the planted module (written as
    `${...}`, env.id holds no colon to refuse)."""
    return [Set(CONFIG, key("env/name"), f"{PLANTED}:CartPole-v1"), Set(CONFIG, key("env/id"), reference)]


def both(make) -> list:
    """The same change to last.pt and best.pt."""
    return [make(LAST), make(BEST)]


def config(at: str, value) -> Set:
    return Set(CONFIG, key(at), value)


PLANTED_TARGET = {"_target_": f"{PLANTED}.X"}
MLFLOW = {"_target_": "rl_hydra.loggers.mlflow.MLflowLogger", "tracking_uri": "http://127.0.0.1:1", "experiment": "x"}
WANDB = {"_target_": "rl_hydra.loggers.wandb.WandbLogger", "mode": "online", "project": "x", "entity": "y", "tags": []}
MLFLOW_LOCAL = {"_target_": "rl_hydra.loggers.mlflow.MLflowLogger", "tracking_uri": None, "experiment": "x"}
WANDB_OFFLINE = {**WANDB, "mode": "offline", "entity": None}
GIF = "eval/videos/last_seed0.gif"  # what evaluate video=true writes for the last checkpoint at seed 0
WEIGHT = "agent/q_net/net.0.weight"
LEGACY = yaml.safe_dump({"algo": PLANTED_TARGET, "env": {"id": "CartPole-v1"}, "train": {}})

ATTACKS = {
    # code: a _target_ the project does not trust, an env id's module, a resolver that imports
    "target_planted": [config("algo/optimizer", PLANTED_TARGET)],
    "target_os_system": [config("logger/csv", {"_target_": "os.system", "command": "touch pwned"})],
    "target_exec": [config("network", {"_target_": "builtins.exec", "source": "open('pwned', 'w')"})],
    "target_torch_load": [config("algo/optimizer/eps", torch_load_payload())],
    "target_in_hydra_yaml": [
        Set(HYDRA, key("hydra/callbacks/x"), PLANTED_TARGET),
        Set(HYDRA, key("hydra/job_logging/filters"), {"f": {"()": f"{PLANTED}.X"}}),
    ],
    "legacy_run_config": [Write(".hydra/run_config.yaml", Raw(LEGACY, "run_config.yaml naming the planted module"))],
    "env_id_planted": [config("env/id", f"{PLANTED}:CartPole-v1")],
    "env_id_interpolated": planted_env("${env.name}"),
    "env_id_relative_interpolation": planted_env("${.name}"),
    "env_id_help_groups": [config("env/id", f"${{rl_hydra.help_groups:[pkg://{PLANTED}]}}")],
    # references and resolvers
    "oc_env": [config("logger/csv/note", "${oc.env:HOME}")],
    "updates_inf": [config("algo/gradient_steps", "${rl_hydra.updates:inf,0,1,1}")],
    "updates_huge": [config("buffer/capacity", "${rl_hydra.updates:1e300,0,1,1}")],
    "interpolation_cycle": [
        config("train/total_steps", "${train.eval_every}"),
        config("train/eval_every", "${train.total_steps}"),
    ],
    "interpolation_dangling": [config("train/total_steps", "${nope.nothing}")],
    # YAML and numbers
    "yaml_alias_bomb": [config("logger/csv/note", BOMB)],
    "yaml_python_tag": [config("algo/optimizer", PYTHON_TAG)],
    "yaml_deep": [config("env/kwargs", DEEP_LIST)],
    "yaml_huge_int": [config("train/total_steps", HUGE_INT)],
    "huge_numbers": [config("buffer/capacity", 10**12), config("env/num_envs", 10**12)],
    "huge_float": [config("train/total_steps", 1e300)],
    "target_deleted": [Delete(CONFIG, key("algo/_target_"))],
    "env_kwargs_unknown": [config("env/kwargs/x", 0)],
    "overrides_malformed": [Write(OVERRIDES, b"- [unclosed\n- {a: b}\n")],
    "overrides_mapping": [Write(OVERRIDES, b"algo: {_target_: os.system}\n")],
    # JSON
    "summary_deep": [Write(SUMMARY, DEEP_LIST)],
    "summary_step_string": [Set(SUMMARY, key("global_step"), "600")],
    "summary_lists": [Set(SUMMARY, key("status"), ["completed"]), Set(SUMMARY, key("global_step"), [600])],
    "provenance_deep": [Write(PROVENANCE, DEEP_JSON_OBJECT)],
    "provenance_sessions_object": [Set(PROVENANCE, key("sessions"), {"start_step": 0})],
    "provenance_unhashable": [Set(PROVENANCE, key("sessions/0/device"), [])],
    "provenance_change_planted": [
        Set(PROVENANCE, key("sessions/0/config_changes"), {"train.total_steps": [PLANTED_TARGET, 600]})
    ],
    # metrics.csv
    "csv_superscript_step": [CsvCell(1, 0, "²")],
    "csv_arabic_indic_step": [CsvCell(1, 0, "٣٠٠")],
    "csv_stray_ff": [CsvCell(2, 3, b"\xff")],
    "csv_200k_field": [CsvCell(1, 5, Long("7" * 200_000))],
    "csv_duplicated_row": [CsvLine("duplicate", 1)],
    "csv_cut": [Truncate(METRICS, 0.6)],
    # checkpoints (loaded with weights_only, changed, saved with torch.save)
    "checkpoint_expanded_weight": both(lambda name: Checkpoint(name, key(WEIGHT), Tensor("expand"))),
    "checkpoint_expanded_buffer": [Checkpoint(LAST, key("buffer/storage/obs"), Tensor("expand"))],
    "checkpoint_expanded_rng": [Checkpoint(LAST, key("rng/torch"), Tensor("expand"))],
    "checkpoint_wrong_shape": both(lambda name: Checkpoint(name, key("agent/q_net/net.2.weight"), Tensor("grow"))),
    "checkpoint_wrong_dtype": both(lambda name: Checkpoint(name, key(WEIGHT), Tensor("float16"))),
    "checkpoint_no_runner": both(lambda name: Checkpoint(name, key("runner"), "DELETE")),
    "checkpoint_step_forged": [
        Checkpoint(LAST, key("runner/global_step"), "600"),
        Checkpoint(BEST, key("runner/global_step"), 10**30),
    ],
    "checkpoint_buffer_size_forged": [Checkpoint(LAST, key("buffer/size"), 10**12)],
    "checkpoint_list": both(lambda name: WholeCheckpoint(name, [1, 2])),
    "checkpoint_truncated": both(lambda name: Truncate(name, 0.5)),
    "checkpoint_nan": [Checkpoint(LAST, key("env/obs"), Tensor("nan"))],
    # links and special files
    "link_summary_out": [Link(SUMMARY, "outside")],
    "link_config_out": [Link(CONFIG, "outside")],
    "link_checkpoints_out": [Link("checkpoints", "outside")],
    "link_eval_out": [Link("eval", "outside")],
    "link_dev_zero": [Link(SUMMARY, "/dev/zero"), Link(PROVENANCE, "/dev/zero")],
    "link_loop": [Link(CONFIG, "self")],
    "link_loop_checkpoint": [Link(BEST, "self")],
    "link_loop_eval": [Link("eval", "self")],
    "fifo_lock": [Fifo(".lock")],
    "fifo_metrics": [Fifo(METRICS)],
    "fifo_train_log": [Fifo("train.log")],
    # where to connect: the record must never choose
    "distributed_ray": [config("distributed", {"name": "apex", "address": "ray://127.0.0.1:1", "actors": 1})],
    "mlflow_uri": [config("logger/mlflow", MLFLOW)],
    "wandb_online": [config("logger/wandb", WANDB)],
    # issue #74. Hard links: an outside file linked in (in place of the run's), the run's own linked out
    "hardlink_lock_in": [HardLink(".lock", "in")],
    "hardlink_train_log_in": [HardLink("train.log", "in")],
    "hardlink_gif_in": [HardLink(GIF, "in")],
    "hardlink_run_files_out": [HardLink(name, "out") for name in (METRICS, SUMMARY, PROVENANCE, ".lock", LAST, BEST)],
    "link_gif_to_checkpoint": [Link(GIF, "relative:../../checkpoints/last.pt")],
    "link_train_log_to_summary": [Link("train.log", "inside")],
    "folder_evil_tmp": [Folder(".evil.tmp")],
    "folder_lock": [Folder(".lock")],
    "folders_nested_1200": [Nest("tb", 1200)],
    # the checkpoint's pickle: a reference bomb, tensors whose declared shape their bytes do not hold
    "pickle_reference_bomb": both(lambda name: Checkpoint(name, key("runner/finished_returns"), Bomb(40))),
    "pickle_bomb_unknown_key": both(lambda name: Checkpoint(name, ("extra",), Bomb(40))),
    "pickle_declared_shape": both(lambda name: Checkpoint(name, key(WEIGHT), Declared((10**12,), (1,)))),
    "pickle_declared_stride_0": both(lambda name: Checkpoint(name, key(WEIGHT), Declared((10**6, 10**6), (0, 0)))),
    "pickle_declared_storage": both(lambda name: Archive(name, "declared_storage")),
    # the checkpoint's zip archive (tests/fuzz/archive.py)
    "zip_bomb": both(lambda name: Archive(name, "bomb")),
    "zip_deflated": both(lambda name: Archive(name, "deflated")),
    "zip_duplicate_bomb_last": both(lambda name: Archive(name, "duplicate_bomb_last")),
    "zip_duplicate_bomb_first": both(lambda name: Archive(name, "duplicate_bomb_first")),
    "zip_duplicate_planted_last": both(lambda name: Archive(name, "duplicate_planted_last")),
    "zip_duplicate_planted_first": both(lambda name: Archive(name, "duplicate_planted_first")),
    "zip_dotdot_entry": both(lambda name: Archive(name, "dotdot_entry")),
    "zip_dotdot_names": both(lambda name: Archive(name, "dotdot_names")),
    # the checkpoint's env and optimizer states
    "envstate_render_human": [Checkpoint(LAST, key("env/state/0/attributes/render_mode"), "human")],
    "envstate_render_rgb_array": [Checkpoint(LAST, key("env/state/0/attributes/render_mode"), "rgb_array")],
    "envstate_wrong_shape": [Checkpoint(LAST, key("env/state/0/attributes/state"), Tensor("grow"))],
    "envstate_elapsed_string": [Checkpoint(LAST, key("env/state/0/elapsed_steps/0"), "39")],
    "optimizer_lr_1e30": [Checkpoint(LAST, key("agent/optimizer/param_groups/0/lr"), 1e30)],
    "optimizer_betas": [Checkpoint(LAST, key("agent/optimizer/param_groups/0/betas"), [5.0, -3.0])],
    "optimizer_exp_avg_sq_0_dims": [Checkpoint(LAST, key("agent/optimizer/state/0/exp_avg_sq"), Tensor("scalar"))],
    # side effects a record must not choose: loggers, compilation, processes
    "logger_mlflow_local": [config("logger/mlflow", MLFLOW_LOCAL)],
    "logger_mlflow_environment": [config("logger/mlflow", MLFLOW_LOCAL)],
    "logger_wandb_offline": [config("logger/wandb", WANDB_OFFLINE)],
    "compile_true": [config("compile", True)],
    "network_50m_wide": [config("network/hidden_sizes", [50_000_000])],
    "batch_size_1e12": [config("algo/batch_size", 10**12)],
    "vector_async_64": [config("env/num_envs", 64), config("env/vectorization", "async")],
    # a link swapped in for a folder while the command runs
    "swap_eval": [Swap("eval")],
    "swap_checkpoints": [Swap("checkpoints")],
    "swap_hydra": [Swap(".hydra")],
    "swap_tb": [Swap("tb")],
}


@dataclass(frozen=True)
class Focus:
    """Where the default suite runs an attack of issue #74: its entry points, the base run, the case's
    timeout, and environment over the case's own (None unsets a name)."""

    entries: tuple[str, ...]
    base: str = "finished"
    timeout: float = 30
    environment: dict = field(default_factory=dict)


EVERY = ("evaluate", "load_run", "verify", "resume")
BOMBS = 10  # s: a bomb shows as a case still running, sooner than the usual 30 s (the slowest case passing: 4 s)
NO_MLFLOW_SERVER = {"MLFLOW_TRACKING_URI": None}  # MLflow's default store then: ./outputs/mlflow.db
FOCUS = {
    "hardlink_lock_in": Focus(("resume", "evaluate")),
    "hardlink_train_log_in": Focus(("resume",), "unfinished"),
    "hardlink_gif_in": Focus(("evaluate_video",)),
    "hardlink_run_files_out": Focus(("resume", "evaluate"), "unfinished"),
    "link_gif_to_checkpoint": Focus(("evaluate_video",)),
    "link_train_log_to_summary": Focus(("resume",), "unfinished"),
    "folder_evil_tmp": Focus(("resume",), "unfinished"),
    "folder_lock": Focus(("resume", "evaluate")),
    "folders_nested_1200": Focus(("resume", "evaluate")),
    "pickle_reference_bomb": Focus(("evaluate", "resume"), "unfinished", BOMBS),
    "pickle_bomb_unknown_key": Focus(("load_run",), timeout=BOMBS),
    "pickle_declared_shape": Focus(("evaluate", "resume"), "unfinished"),
    "pickle_declared_stride_0": Focus(("evaluate", "resume"), "unfinished"),
    "pickle_declared_storage": Focus(("load_run",)),
    "zip_bomb": Focus(("evaluate",), timeout=BOMBS),
    "zip_deflated": Focus(("load_run",)),
    "zip_duplicate_bomb_last": Focus(("evaluate",), timeout=BOMBS),
    "zip_duplicate_bomb_first": Focus(("evaluate",), timeout=BOMBS),
    "zip_duplicate_planted_last": Focus(("load_run",)),
    "zip_duplicate_planted_first": Focus(("load_run",)),
    "zip_dotdot_entry": Focus(("load_run",)),
    "zip_dotdot_names": Focus(("load_run",)),
    "envstate_render_human": Focus(("resume", "verify"), "unfinished"),
    "envstate_render_rgb_array": Focus(("resume",), "unfinished"),
    "envstate_wrong_shape": Focus(("resume",), "unfinished"),
    "envstate_elapsed_string": Focus(("resume",), "unfinished"),
    "optimizer_lr_1e30": Focus(("resume",), "unfinished"),
    "optimizer_betas": Focus(("resume",), "unfinished"),
    "optimizer_exp_avg_sq_0_dims": Focus(("resume",), "unfinished"),
    "logger_mlflow_local": Focus(("resume", "verify"), "unfinished", environment=NO_MLFLOW_SERVER),
    "logger_mlflow_environment": Focus(("resume",), "unfinished", BOMBS),  # MLflow's client retries
    "logger_wandb_offline": Focus(("resume", "verify"), "unfinished"),
    "compile_true": Focus(("verify", "resume"), "unfinished", BOMBS),
    "network_50m_wide": Focus(("load_run", "resume"), "unfinished"),
    "batch_size_1e12": Focus(("resume",), "unfinished"),
    "vector_async_64": Focus(("resume",), "unfinished"),
    "swap_eval": Focus(("evaluate", "evaluate_video")),
    "swap_checkpoints": Focus(("resume", "evaluate"), "unfinished"),
    "swap_hydra": Focus(("resume",), "unfinished"),
    "swap_tb": Focus(("resume",), "unfinished"),
}


@dataclass(frozen=True)
class Attack:
    """One of ATTACKS, by name."""

    name: str

    def apply(self, run: Path, outside: Path) -> str:
        done = [mutation.apply(run, outside) for mutation in ATTACKS[self.name]]
        return f"{self.name}: {'; '.join(d for d in done if d)}"

    def during(self, run: Path, sandbox: Path) -> list:
        """What its mutations run while the command does (a link swapper)."""
        found = []
        for mutation in ATTACKS[self.name]:
            found += getattr(mutation, "during", lambda *_: [])(run, sandbox)
        return found
