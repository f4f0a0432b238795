"""What a run directory records, read for `rl-hydra-verify` and checked for holding together before
anything is re-run: the config each session trained with, metrics.csv row by row, the checkpoints.

A file that cannot be read as what a run writes there is a RunError (exit 2: nothing to verify);
a record that reads but contradicts itself (a duplicated row, a checkpoint that will not load, a
config change a resume cannot make) is `Differs` (exit 1: the record was changed)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rl_hydra.build import check_widths_fit
from rl_hydra.commands.resume import RESUMABLE
from rl_hydra.runs.metrics import Differs, Metrics, finite, read_metrics  # noqa: F401 - verify's names
from rl_hydra.runs.provenance import read_sessions, running_misfit  # noqa: F401 - verify's names
from rl_hydra.runs.run_dir import RunDirectory, RunError, read_json_object
from rl_hydra.runs.run_dir import read_choices as read_hydra_choices
from rl_hydra.runs.trust import read_config, read_value
from rl_hydra.schema.evaluate import CHECKPOINTS


@dataclass
class Segment:
    """The steps from `start` on were trained with `cfg` (a resume that changed the config starts one)."""

    start: int
    cfg: DictConfig


def resumable(key: str) -> bool:
    """Whether a resume may change `key` (rl_hydra.commands.resume.RESUMABLE: `train.` covers train.*)."""
    return key in RESUMABLE or key.startswith(tuple(k for k in RESUMABLE if k.endswith(".")))


def config_segments(directory: RunDirectory, sessions: list[dict[str, Any]]) -> list[Segment]:
    """The configs the run trained with, from the step each began: config.yaml is the latest, and
    walking the sessions back undoes each resume's `config_changes`. Read as data (runs/trust.py):
    a change's values may name no code either. A change of a key that a resume cannot change, or
    one that does not lead to what config.yaml holds, is `Differs`."""
    cfg = read_config(directory)
    changed = [(number, s) for number, s in enumerate(sessions, start=1) if s.get("config_changes")]
    for _number, session in changed:  # code first: refused (exit 2) whatever else is wrong
        for key, (old, new) in session["config_changes"].items():
            read_value([old, new], directory.provenance_json, f"config_changes.{key}")
    for number, session in changed:
        for key in session["config_changes"]:
            if not resumable(key):
                allowed = ", ".join(f"{k}*" if k.endswith(".") else k for k in RESUMABLE)
                raise Differs(
                    f"provenance.json's session {number} records a change of {key}, which no resume makes "
                    f"(a resume changes only {allowed})"
                )
    starts = [s["start_step"] for s in sessions]
    if starts and (starts[0] != 0 or starts != sorted(starts)):
        raise Differs(
            f"provenance.json's sessions start at steps {starts}: a run starts at 0 and a resume "
            f"where the one before it stopped"
        )
    segments = [Segment(0, cfg)]
    for number, session in reversed(changed):
        if session["start_step"] == 0:
            raise Differs(f"provenance.json's session {number} changes the config at step 0, before any step ran")
        earlier = segments[0].cfg.copy()
        for key, (old, new) in session["config_changes"].items():
            now = OmegaConf.select(earlier, key, default=None)
            if plain(now) != new:
                raise Differs(
                    f"provenance.json's session {number} says {key} became {new!r}, but the config it "
                    f"leads to holds {plain(now)!r}"
                )
            OmegaConf.update(earlier, key, old, merge=False)
        segments[0].start = session["start_step"]
        segments.insert(0, Segment(0, earlier))
    return [s for s, after in zip(segments, [*segments[1:], None]) if after is None or after.start > s.start]


def replay_limit(segments: list[Segment], sessions: list[dict[str, Any]]) -> int | None:
    """The last step a re-run can re-make, or None for all. A run stopped on request (Ctrl-C,
    SIGTERM) at a step where something fell due (an evaluation, a row, a checkpoint) leaves it to
    the resume, which does it with its own config: when that resume changed the config, a re-run
    (which ends a segment as a finished run does, what fell due done) stops before that step."""
    for before, after in zip(segments, segments[1:]):
        stopped = any(s.get("status") == "interrupted" and s.get("end_step") == after.start for s in sessions)
        if stopped and falls_due(before.cfg, after.start):
            return after.start - 1
    return None


def falls_due(cfg: DictConfig, step: int) -> bool:
    from rl_hydra.loops.schedule import crossed

    train, before = cfg.train, step - cfg.env.num_envs
    every = (train.eval_every, train.log_every, train.checkpoint_every)
    return step >= train.total_steps or any(crossed(before, step, interval) for interval in every)


def plain(value: Any) -> Any:
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def read_choices(directory: RunDirectory) -> dict[str, Any] | None:
    """The config-group choices in .hydra/hydra.yaml (`algo: iqn`), read as YAML data; None without the file."""
    return read_hydra_choices(directory)


def read_checkpoints(
    directory: RunDirectory, metrics: Metrics, cfg: DictConfig, sessions: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The checkpoints the run holds, loaded (tensors only). One that exists but does not load, or
    that the record says exists but is missing (`expected_checkpoints`), is `Differs`; so is a
    completed run whose summary, last.pt and last logged row are not at the same step, and a summary
    that says a resumed session is running where none started or after last.pt's step."""
    summary = directory.read_summary() or {}
    status = summary.get("status")
    loaded = {}
    for name in CHECKPOINTS:
        path = directory.checkpoints / f"{name}.pt"
        if path.exists():
            try:
                loaded[name] = directory.load_checkpoint(name)
                check_widths_fit(cfg, loaded[name]["agent"], path)  # before the re-run builds them
            except RunError as error:
                raise Differs(str(error)) from None
            if type(step_of(loaded[name])) is not int:
                raise Differs(f"checkpoint {path} holds no runner.global_step: not a checkpoint a run writes")
    evaluated = {int(row["step"]) for row in metrics.rows if finite(row.get("eval/return_mean"))}
    if "best" in loaded and step_of(loaded["best"]) not in evaluated:
        raise Differs(
            f"checkpoint best.pt is from step {step_of(loaded['best'])}, at which metrics.csv logged no evaluation"
        )
    if "last" in loaded and metrics.rows and step_of(loaded["last"]) > metrics.steps()[-1] + cfg.train.log_every:
        raise Differs(f"checkpoint last.pt is from step {step_of(loaded['last'])}, past metrics.csv's last row")
    running = running_misfit(summary, sessions, step_of(loaded["last"]) if "last" in loaded else None)
    if running:
        raise Differs(running)
    for name, because in expected_checkpoints(summary, metrics, cfg, sessions).items():
        if name not in loaded:
            raise Differs(f"{directory.checkpoints / name}.pt is missing, though {because}")
    if status == "completed":
        ends = {
            "summary.json": summary.get("global_step"),
            "last.pt": step_of(loaded["last"]),
            "metrics.csv's last row": metrics.steps()[-1] if metrics.rows else None,
        }
        if len(set(ends.values())) > 1:
            where = ", ".join(f"{name} {step!r}" for name, step in ends.items())
            raise Differs(f"the completed run ends at different steps: {where}")
    return loaded


def expected_checkpoints(
    summary: dict[str, Any], metrics: Metrics, cfg: DictConfig, sessions: list[dict[str, Any]]
) -> dict[str, str]:
    """{checkpoint: why the record says it exists}: last.pt once a run ended on its own or on
    request, or logged a row past its first checkpoint step; best.pt once it evaluated."""
    expected = {}
    ended = [s["status"] for s in sessions if s.get("status") in ("completed", "interrupted")]
    every = cfg.train.checkpoint_every
    if summary.get("status") in ("completed", "interrupted"):
        expected["last"] = f"summary.json says the run {summary['status']}"
    elif ended:
        expected["last"] = f"provenance.json says a session {ended[0]}"
    elif isinstance(every, int) and metrics.rows and metrics.steps()[-1] > every:
        expected["last"] = f"metrics.csv has rows past step {every}, where the run saved it"
    evaluated = [row["step"] for row in metrics.rows if finite(row.get("eval/return_mean"))]
    if summary.get("best_eval_return_mean") is not None:
        expected["best"] = "summary.json records a best evaluation"
    elif evaluated:
        expected["best"] = f"metrics.csv records an evaluation at step {evaluated[0]}"
    return expected


def check_summary_derives(summary: dict[str, Any] | None, metrics: Metrics, cfg: DictConfig) -> None:
    """`Differs` unless summary.json says what metrics.csv shows: the last step, the last and best
    evaluations, the step it was solved at, and a status its steps allow."""
    if not summary or not metrics.rows or summary.get("status") != "completed":
        return
    evaluations = [
        (int(row["step"]), float(row["eval/return_mean"]))
        for row in metrics.rows
        if finite(row.get("eval/return_mean"))
    ]
    last = metrics.steps()[-1]
    goal = cfg.train.stop_at_return
    solved = next((step for step, value in evaluations if goal is not None and value >= goal), None)
    derived = {
        "global_step": last,
        "eval_return_mean": evaluations[-1][1] if evaluations else None,
        "best_eval_return_mean": max(value for _, value in evaluations) if evaluations else None,
        "solved_at_step": solved,
    }
    for key, value in derived.items():
        if summary.get(key) != value:
            raise Differs(f"summary.json has {key}={summary.get(key)!r}, where metrics.csv gives {value!r}")
    if last < cfg.train.total_steps and solved is None:
        raise Differs(
            f"summary.json says the run completed, but metrics.csv ends at step {last} of train.total_steps="
            f"{cfg.train.total_steps} and no evaluation reached train.stop_at_return"
        )


EVAL_KEYS = {"returns", "lengths", "return_mean", "return_std", "episodes", "seed", "checkpoint", "step", "run"}


def check_eval_files(directory: RunDirectory, metrics: Metrics) -> int:
    """`Differs` unless each eval/<checkpoint>_<n>ep_seed<s>.json holds what evaluate writes: its
    own keys, as many returns as episodes, their mean and spread, and the step of a checkpoint the
    record had (best.pt: a step metrics.csv evaluated at; last.pt: one of its logged steps or
    before its last). Returns how many were checked; a file that cannot be read is a RunError."""
    import numpy as np

    folder = directory.path / "eval"
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    evaluated = {int(row["step"]) for row in metrics.rows if finite(row.get("eval/return_mean"))}
    last = metrics.steps()[-1] if metrics.rows else 0
    for path in files:
        found = read_json_object(path, directory)
        name = f"eval/{path.name}"
        unknown = sorted(set(found) - EVAL_KEYS)
        returns, step = found.get("returns"), found.get("step")
        if unknown:
            raise Differs(f"{name} has the key {unknown[0]!r}, which evaluate does not write")
        if not isinstance(returns, list) or not returns or not all(isinstance(r, (int, float)) for r in returns):
            raise Differs(f"{name} holds no list of returns")
        mean = found.get("return_mean")
        if (
            found.get("episodes") != len(returns)
            or not isinstance(mean, (int, float))
            or not np.isclose(mean, np.mean(returns))
        ):
            raise Differs(f"{name}'s episodes and return_mean do not match its {len(returns)} returns")
        if type(step) is not int or step > last or (found.get("checkpoint") == "best" and step not in evaluated):
            raise Differs(f"{name} is of step {step!r}, a checkpoint this record never had")
    return len(files)


def step_of(checkpoint: dict[str, Any]) -> Any:
    runner = checkpoint.get("runner") if isinstance(checkpoint, dict) else None
    return runner.get("global_step") if isinstance(runner, dict) else None
