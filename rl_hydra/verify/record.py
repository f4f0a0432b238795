"""What a run directory records, read for `rl-hydra-verify` and checked for holding together before
anything is re-run: the config each session trained with, metrics.csv row by row, the checkpoints.

A file that cannot be read as what a run writes there is a RunError (exit 2: nothing to verify);
a record that reads but contradicts itself (a duplicated row, a checkpoint that will not load, a
config change a resume cannot make) is `Differs` (exit 1: the record was changed)."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rl_hydra.resume import RESUMABLE
from rl_hydra.runs.provenance import CODE_KEYS
from rl_hydra.runs.run_dir import RunDirectory, RunError, read_json_object
from rl_hydra.runs.trust import read_choices as read_hydra_choices
from rl_hydra.runs.trust import read_config, read_value

CHECKPOINTS = ("best", "last")
# what metrics.csv holds: steps in ASCII digits, values as Python writes floats (repr) or integers
STEP = re.compile(r"[0-9]+", re.ASCII)
NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*(?:e[-+]?[0-9]+)?|inf|nan|True|False)", re.ASCII)


class Differs(Exception):
    """The record differs from what it should hold; the message says where, in one line."""


@dataclass
class Segment:
    """The steps from `start` on were trained with `cfg` (a resume that changed the config starts one)."""

    start: int
    cfg: DictConfig


def read_sessions(directory: RunDirectory) -> list[dict[str, Any]]:
    """provenance.json's sessions ([] for a run made before it existed)."""
    path = directory.provenance_json
    if not path.is_file():
        return []
    sessions = read_json_object(path).get("sessions")
    if not isinstance(sessions, list) or not sessions or not all(isinstance(s, dict) for s in sessions):
        raise RunError(f"{path} has no list of sessions: not the provenance a run writes")
    for number, session in enumerate(sessions, start=1):
        start, changes = session.get("start_step"), session.get("config_changes") or {}
        if type(start) is not int or start < 0:
            raise RunError(f"{path}: session {number} has start_step={start!r}, not a number of env steps")
        plain = [key for key in CODE_KEYS if not isinstance(session.get(key), (str, bool, int, type(None)))]
        if plain:
            raise RunError(f"{path}: session {number} has {plain[0]}={session[plain[0]]!r}, not a name or version")
        if not isinstance(changes, dict) or not all(isinstance(c, list) and len(c) == 2 for c in changes.values()):
            raise RunError(f"{path}: session {number} has config_changes that are not {{key: [old, new]}}")
    return sessions


def resumable(key: str) -> bool:
    """Whether a resume may change `key` (rl_hydra.resume.RESUMABLE: `train.` covers train.*)."""
    return key in RESUMABLE or key.startswith(tuple(k for k in RESUMABLE if k.endswith(".")))


def config_segments(directory: RunDirectory, sessions: list[dict[str, Any]]) -> list[Segment]:
    """The configs the run trained with, from the step each began: config.yaml is the latest, and
    walking the sessions back undoes each resume's `config_changes`. Read as data (runs/trust.py):
    a change's values may name no code either. A change of a key that a resume cannot change, or
    one that does not lead to what config.yaml holds, is `Differs`."""
    cfg = read_config(directory)
    changed = [(number, s) for number, s in enumerate(sessions, start=1) if s.get("config_changes")]
    for number, session in changed:  # code first: refused (exit 2) whatever else is wrong
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


@dataclass
class Metrics:
    columns: list[str]
    rows: list[dict[str, str]]

    def steps(self) -> list[int]:
        return [int(row["step"]) for row in self.rows]

    def up_to(self, step: int) -> list[dict[str, str]]:
        return [row for row in self.rows if int(row["step"]) <= step]


def read_metrics(directory: RunDirectory) -> Metrics:
    """metrics.csv, every row checked against its header: `Differs` for a row with more or fewer
    fields, an empty line, or a step that is not after the one before it (a duplicated row). As on
    resume (runs/metrics.py), whole lines only: a last line without its newline is a cut write."""
    path = directory.metrics_csv
    if not path.is_file():
        return Metrics([], [])
    try:
        with open(path, newline="") as f:
            lines = list(csv.reader(line for line in f if line.endswith("\n")))
    except (OSError, UnicodeDecodeError, csv.Error) as error:  # csv.Error: a field over csv's limit, 131,072
        raise Differs(f"metrics.csv cannot be read ({type(error).__name__}: {str(error).splitlines()[0]})") from None
    if not lines:
        return Metrics([], [])
    columns, rows, previous = lines[0], [], -1
    if columns[:1] != ["step"]:
        raise Differs(f"metrics.csv's header begins with {columns[:1] or 'nothing'}, not step")
    for number, fields in enumerate(lines[1:], start=2):
        if len(fields) != len(columns):
            raise Differs(f"metrics.csv line {number} has {len(fields)} fields, its header {len(columns)}")
        step = fields[0]
        if not STEP.fullmatch(step):
            raise Differs(f"metrics.csv line {number} has step {step!r}, not a number of env steps in digits 0-9")
        for column, value in zip(columns[1:], fields[1:]):
            if value and not NUMBER.fullmatch(value):
                raise Differs(
                    f"metrics.csv line {number} has {column}={value[:40]!r}, not a number as a run writes one"
                )
        if int(step) <= previous:
            raise Differs(
                f"metrics.csv line {number} is at step {step}, not after the line before it "
                f"(step {previous}): a row repeated or out of order"
            )
        rows.append(dict(zip(columns, fields)))
        previous = int(step)
    return Metrics(columns, rows)


def read_choices(directory: RunDirectory) -> dict[str, Any] | None:
    """The config-group choices in .hydra/hydra.yaml (`algo: iqn`), read as YAML data; None without the file."""
    return read_hydra_choices(directory)


def read_checkpoints(
    directory: RunDirectory, metrics: Metrics, cfg: DictConfig, sessions: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The checkpoints the run holds, loaded (tensors only). One that exists but does not load, or
    that the record says exists but is missing (`expected_checkpoints`), is `Differs`; so is a
    completed run whose summary, last.pt and last logged row are not at the same step."""
    summary = directory.read_summary() or {}
    status = summary.get("status")
    loaded = {}
    for name in CHECKPOINTS:
        path = directory.checkpoints / f"{name}.pt"
        if path.exists():
            try:
                loaded[name] = directory.load_checkpoint(name)
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
    goal = cfg.train.get("stop_at_return")
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


def finite(text: str | None) -> bool:
    try:
        return text is not None and math.isfinite(float(text))
    except (TypeError, ValueError):
        return False


def step_of(checkpoint: dict[str, Any]) -> Any:
    runner = checkpoint.get("runner") if isinstance(checkpoint, dict) else None
    return runner.get("global_step") if isinstance(runner, dict) else None
