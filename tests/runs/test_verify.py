"""rl-hydra-verify re-makes a run's first steps and catches every change to its record: an edit of
the config (also one hidden behind provenance.json), of metrics.csv's columns, rows or values, of a
checkpoint, of the provenance; it reads the run as data; a stop on request is exit 130 and leaves
no temporary directory; and an untouched run of every algorithm verifies."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rl_hydra.verify import main as verify_main
from rl_hydra.verify.scratch import SCRATCH_PREFIX
from tests.conftest import CONF_DIR, ROOT, TINY

# a run with updates, evaluations, log rows and checkpoints, in about half a second
RECORD = [
    *TINY,
    "train.total_steps=400",
    "train.eval_every=200",
    "train.log_every=50",
    "train.checkpoint_every=100",
    "train.stop_at_return=null",
    "algo.learning_starts=50",
    "algo.train_every=4",
    "algo.gradient_steps=1",
    "algo.batch_size=16",
]


def make_run(run_dir: Path, *overrides: str) -> Path:
    from rl_hydra import train

    train(*RECORD, *overrides, run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("record") / "run")


@pytest.fixture
def altered(finished, tmp_path) -> Path:
    """A copy of the finished run, for a test to change."""
    return Path(shutil.copytree(finished, tmp_path / "altered"))


def verify(capsys, *argv: str) -> tuple[int, str]:
    """rl-hydra-verify argv... in this process: (exit code, its one line)."""
    capsys.readouterr()
    code = verify_main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    lines = (out + err).splitlines()
    assert len(lines) == 1, lines
    assert (out if code == 0 else err) == lines[0] + "\n"
    return code, lines[0]


def edit_config(run_dir: Path, key: str, value) -> None:
    path = run_dir / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(path)
    OmegaConf.update(cfg, key, value, merge=False)
    OmegaConf.save(cfg, path)


def edit_provenance(run_dir: Path, change) -> None:
    path = run_dir / "provenance.json"
    record = json.loads(path.read_text())
    change(record["sessions"])
    path.write_text(json.dumps(record, indent=2))


def edit_metrics(run_dir: Path, change) -> None:
    path = run_dir / "metrics.csv"
    lines = path.read_text().splitlines()
    change(lines)
    path.write_text("\n".join(lines) + "\n")


def test_an_untouched_run_verifies_in_its_default_window_and_whole(finished, capsys):
    code, line = verify(capsys, finished)
    assert code == 0 and line.startswith(f"verified {finished}") and "match the record exactly" in line, line
    code, line = verify(capsys, finished, "--steps", "all")
    assert code == 0 and "the first 400 steps" in line, line
    assert "(8 logged rows; best.pt, last.pt, summary.json equal too)" in line, line
    # the checkout may have moved on (another commit) since the fixture ran; nothing else may differ
    if "provenance differs" in line:
        named = line.split("provenance differs: ")[1].split(")")[0].split(", ")
        assert all(item.startswith(("git_commit", "git_dirty")) for item in named), line
    assert verify(capsys, finished, "--steps", "-3")[0] == 2
    assert verify(capsys, finished.parent / "nothing")[0] == 2


# --- the config is data, and only a resume's changes are replayed -----------------------------
MARKER_WRAPPER = "tests.helpers.RecordTorchThreads"  # writes a file when built: it must never be


def test_a_config_that_names_code_is_refused_and_nothing_runs(altered, tmp_path, capsys):
    marker = tmp_path / "ran"
    edit_config(altered, "env.wrappers", [{"_target_": MARKER_WRAPPER, "_partial_": True, "path": str(marker)}])
    code, line = verify(capsys, altered)
    assert code == 2 and f"names env.wrappers[0]._target_={MARKER_WRAPPER}" in line and "nothing was run" in line
    edit_config(altered, "algo.optimizer", {"_target_": "torch.load", "f": "payload", "weights_only": False})
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 2 and "names algo.optimizer._target_=torch.load" in line, line
    assert not marker.exists()


def test_code_smuggled_through_provenance_config_changes_is_refused(altered, tmp_path, capsys):
    marker = tmp_path / "ran"
    wrapper = [{"_target_": MARKER_WRAPPER, "_partial_": True, "path": str(marker)}]
    edit_provenance(
        altered,
        lambda sessions: sessions.append(
            {**sessions[0], "start_step": 200, "config_changes": {"env.wrappers": [wrapper, []]}}
        ),
    )
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 2 and "provenance.json names config_changes.env.wrappers[0][0]._target_=" in line, line
    edit_provenance(
        altered,
        lambda sessions: sessions[1].update(
            config_changes={"train.eval_every": [{"_target_": "torch.load", "f": "payload"}, 200]}
        ),
    )
    code, line = verify(capsys, altered)
    assert code == 2 and "_target_=torch.load" in line, line
    assert not marker.exists()


def test_a_faked_resume_session_does_not_hide_a_changed_key(altered, capsys):
    edit_config(altered, "algo.gamma", 0.9)
    edit_provenance(
        altered,
        lambda sessions: sessions.append(
            {**sessions[0], "start_step": 400, "config_changes": {"algo.gamma": [0.99, 0.9]}}
        ),
    )
    for steps in ([], ["--steps", "all"]):
        code, line = verify(capsys, altered, *steps)
        assert code == 1 and "session 2 records a change of algo.gamma, which no resume makes" in line, line
    edit_provenance(altered, lambda sessions: sessions.pop())  # without the session, the edit itself shows
    code, line = verify(capsys, altered)
    assert code == 1 and "column train/loss: recorded" in line, line


def test_a_config_change_that_does_not_lead_to_the_config_is_a_difference(altered, capsys):
    edit_provenance(
        altered,
        lambda sessions: sessions.append(
            {**sessions[0], "start_step": 200, "config_changes": {"train.total_steps": [300, 500]}}
        ),
    )
    code, line = verify(capsys, altered)
    assert code == 1 and "session 2 says train.total_steps became 500, but the config it leads to holds 400" in line


@pytest.fixture(scope="module")
def resumed(finished, tmp_path_factory) -> Path:
    """The finished run, resumed to 600 steps with evaluations every 150: a resume that changed the config."""
    from rl_hydra.commands.resume import resume_main

    run_dir = Path(shutil.copytree(finished, tmp_path_factory.mktemp("resumed") / "run"))
    resume_main(str(run_dir), ["train.total_steps=600", "train.eval_every=150"])
    return run_dir


def test_a_resumed_run_is_re_made_with_its_config_changes_at_the_step_it_made_them(resumed, tmp_path, capsys):
    code, line = verify(capsys, resumed, "--steps", "all")
    assert code == 0 and "the first 600 steps" in line and "config changes of the resume at step 400" in line, line
    assert "best.pt, last.pt, summary.json equal too" in line
    altered = Path(shutil.copytree(resumed, tmp_path / "altered"))

    def change_loss_after_the_resume(lines):
        header = lines[0].split(",")
        row = lines[-2].split(",")  # step 550: trained with the resume's config
        row[header.index("train/loss")] = "0.25"
        lines[-2] = ",".join(row)

    edit_metrics(altered, change_loss_after_the_resume)
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 1 and "at step 550, column train/loss: recorded 0.25, re-run" in line, line


@pytest.mark.parametrize("stopped_at", [230, 200], ids=["between", "at-an-evaluation"])
def test_a_run_stopped_then_resumed_with_changes_verifies(tmp_path, monkeypatch, capsys, stopped_at):
    """Stopped on request, a run leaves what fell due at that step to its resume, which does it with
    its own config (here 3 evaluation episodes instead of 2): a re-run compares the steps before it."""
    from rl_hydra.commands.launch import RunFailed, launch
    from rl_hydra.commands.resume import resume_main
    from tests.conftest import compose_config, stop_at

    with monkeypatch.context() as patch:
        stop_at(patch, stopped_at)
        with pytest.raises(RunFailed):
            launch(compose_config(*RECORD), tmp_path, overrides=RECORD)
    resume_main(str(tmp_path), ["train.total_steps=600", "train.eval_episodes=3"])
    code, line = verify(capsys, tmp_path, "--steps", "all")
    if stopped_at == 230:
        assert code == 0 and "the first 600 steps" in line and "of the resume at step 230" in line, line
    else:
        assert code == 0 and "the first 199 steps" in line and "did what fell due at 200 with a changed" in line, line


# --- metrics.csv: columns, rows, fields, values -------------------------------------------------
def drop_column(lines, name="train/loss"):
    index = lines[0].split(",").index(name)
    lines[:] = [",".join(field for i, field in enumerate(line.split(",")) if i != index) for line in lines]


def add_column(lines):
    lines[:] = [lines[0] + ",train/bonus", *(line + ",1.0" for line in lines[1:])]


def duplicate_row(lines):
    lines.insert(3, lines[3])


def drop_row(lines):
    del lines[3]


def add_field(lines):
    lines[5] += ",7"


def drop_field(lines):
    lines[5] = lines[5].rsplit(",", 1)[0]


def empty_line(lines):
    lines.insert(4, "")


def change_value(lines):
    header, row = lines[0].split(","), lines[3].split(",")
    row[header.index("train/loss")] = "0.5"
    lines[3] = ",".join(row)


METRICS_CHANGES = [
    (drop_column, "metrics.csv has no column train/loss, which the re-run logged"),
    (add_column, "metrics.csv has a column train/bonus, which the re-run did not log"),
    (duplicate_row, "metrics.csv line 5 is at step 150, not after the line before it (step 150): a row repeated"),
    (drop_row, "the record has no row at step 150, which the re-run logged"),
    (add_field, "metrics.csv line 6 has"),
    (drop_field, "metrics.csv line 6 has"),
    (empty_line, "metrics.csv line 5 has 0 fields"),
    (change_value, "at step 150, column train/loss: recorded 0.5, re-run "),
]


@pytest.mark.parametrize("change, named", METRICS_CHANGES, ids=[change.__name__ for change, _ in METRICS_CHANGES])
def test_every_change_to_metrics_csv_is_named(altered, capsys, change, named):
    edit_metrics(altered, change)
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 1 and named in line, line


def test_a_dropped_last_row_is_named_against_summary_and_last_checkpoint(altered, capsys):
    edit_metrics(altered, lambda lines: lines.pop())  # the last row, at step 400
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 1 and "summary.json 400, last.pt 400, metrics.csv's last row 350" in line, line


def test_a_deleted_metrics_csv_or_an_edited_summary_is_a_difference(altered, capsys):
    summary = json.loads((altered / "summary.json").read_text())
    (altered / "summary.json").write_text(json.dumps({**summary, "eval_return_mean": 500.0}))
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 1 and "summary.json has eval_return_mean=500.0, where metrics.csv gives " in line, line
    (altered / "summary.json").write_text(json.dumps({**summary, "global_step": "400"}))
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 2 and "summary.json has global_step='400', not int or null" in line, line  # damaged: unread
    (altered / "metrics.csv").unlink()
    code, line = verify(capsys, altered)
    assert code == 1 and "metrics.csv is missing or holds no rows, though the run has checkpoints" in line, line


# --- checkpoints --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["last", "best"])
@pytest.mark.parametrize("content", [b"", pickle.dumps({"agent": os.getcwd})], ids=["empty", "pickle"])
def test_a_checkpoint_that_does_not_load_is_a_difference(altered, capsys, name, content):
    (altered / "checkpoints" / f"{name}.pt").write_bytes(content)
    code, line = verify(capsys, altered)
    assert code == 1 and f"checkpoint {altered / 'checkpoints' / name}.pt cannot be read" in line, line


def test_a_completed_run_without_its_last_checkpoint_is_a_difference(altered, capsys):
    (altered / "checkpoints" / "last.pt").unlink()
    code, line = verify(capsys, altered)
    assert code == 1 and "checkpoints/last.pt is missing, though summary.json says the run completed" in line, line
    shutil.copy(altered / "checkpoints" / "best.pt", altered / "checkpoints" / "last.pt")  # an older state
    code, line = verify(capsys, altered)
    assert code == 1 and "the completed run ends at different steps: summary.json 400, last.pt " in line, line


@pytest.mark.parametrize("name", ["last", "best"])
def test_a_missing_checkpoint_is_found_missing_from_every_part_of_the_record(altered, capsys, name):
    """Without summary.json, provenance.json says the run ended; without that, metrics.csv's rows say."""
    (altered / "checkpoints" / f"{name}.pt").unlink()
    (altered / "summary.json").unlink()
    code, line = verify(capsys, altered)
    because = (
        "provenance.json says a session completed"
        if name == "last"
        else "metrics.csv records an evaluation at step 200"
    )
    assert code == 1 and f"{name}.pt is missing, though {because}" in line, line
    (altered / "provenance.json").unlink()
    code, line = verify(capsys, altered)
    because = "metrics.csv has rows past step 100, where the run saved it" if name == "last" else because
    assert code == 1 and f"{name}.pt is missing, though {because}" in line, line


def test_an_edited_checkpoint_is_named_down_to_the_tensor_or_value(finished, altered, capsys):
    import torch

    best = torch.load(altered / "checkpoints" / "best.pt", weights_only=True)
    first = next(iter(best["agent"]["q_net"]))
    best["agent"]["q_net"][first].view(-1)[0] += 1e-4
    torch.save(best, altered / "checkpoints" / "best.pt")
    code, line = verify(capsys, altered, "--steps", "all")
    assert (
        code == 1
        and f"checkpoint best.pt (step {best['runner']['global_step']}) differs at agent.q_net.{first}" in line
    ), line
    last = torch.load(altered / "checkpoints" / "last.pt", weights_only=True)  # not only the weights
    last["runner"]["best_eval_return"] += 1.0
    torch.save(last, altered / "checkpoints" / "last.pt")
    shutil.copy(finished / "checkpoints" / "best.pt", altered / "checkpoints")
    code, line = verify(capsys, altered, "--steps", "all")
    assert code == 1 and "checkpoint last.pt (step 400) differs at runner.best_eval_return" in line, line


# --- provenance -----------------------------------------------------------------------------------
def test_an_edited_provenance_is_reported_not_passed_as_a_match(altered, capsys):
    import torch

    def fake(sessions):
        sessions[0].update(torch="2.12.0", host="elsewhere", pid=1, numpy="0.1")

    edit_provenance(altered, fake)
    code, line = verify(capsys, altered)
    assert code == 0 and line.startswith(f"verified {altered} (provenance differs: "), line  # named, not silent
    assert f"torch 2.12.0 -> {torch.__version__}" in line and "numpy 0.1 -> " in line, line
    assert "host elsewhere -> " in line and "pid" not in line.split("provenance differs")[1], line
    edit_provenance(altered, lambda sessions: sessions[0].update(git_commit="0123456789abcdef0123"))
    code, line = verify(capsys, altered)
    assert code == 0 and "git_commit 0123456789ab -> " in line, line
    edit_metrics(altered, change_value)  # a difference is explained with the provenance that differs
    code, line = verify(capsys, altered)
    assert code == 1 and "column train/loss" in line and f"torch 2.12.0 -> {torch.__version__}" in line, line


def test_a_damaged_provenance_is_one_line(altered, capsys):
    (altered / "provenance.json").write_text("{not json")
    code, line = verify(capsys, altered)
    assert code == 2 and "provenance.json cannot be read" in line, line
    (altered / "provenance.json").write_text('{"sessions": [{"start_step": "zero"}]}')
    code, line = verify(capsys, altered)
    assert code == 2 and "session 1 has start_step='zero'" in line, line


# --- the default window always holds updates ----------------------------------------------------
@pytest.fixture(scope="module")
def late_updates(tmp_path_factory) -> Path:
    """Checkpoints every 100 steps, the first update at step 252."""
    return make_run(tmp_path_factory.mktemp("late") / "run", "algo.learning_starts=250")


def test_the_default_window_reaches_past_the_first_update(late_updates, tmp_path, capsys):
    code, line = verify(capsys, late_updates)  # the first update at 252: to 300, or to best.pt at 400
    assert code == 0 and ("the first 300 steps" in line or "the first 400 steps" in line), line
    gamma = Path(shutil.copytree(late_updates, tmp_path / "gamma"))
    edit_config(gamma, "algo.gamma", 0.5)
    code, line = verify(capsys, gamma)
    assert code == 1 and "at step 300, column " in line, line  # the first row after the first update
    import torch

    best_edit = Path(shutil.copytree(late_updates, tmp_path / "best"))
    best = torch.load(best_edit / "checkpoints" / "best.pt", weights_only=True)
    next(iter(best["agent"]["q_net"].values())).view(-1)[0] += 1.0
    torch.save(best, best_edit / "checkpoints" / "best.pt")
    code, line = verify(capsys, best_edit)
    assert code == 1 and "checkpoint best.pt" in line and "differs at agent.q_net." in line, line


# --- a stop on request, and what a killed verify leaves ------------------------------------------
SLOW = "env.wrappers=[{_target_:tests.helpers.SlowDown,_partial_:true,seconds:0.01}]"


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory) -> Path:
    """A run whose re-run takes seconds (every env step sleeps), so that a signal finds it training."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RL_HYDRA_TRUST", "tests.helpers.SlowDown")  # train() loads the run back
        return make_run(tmp_path_factory.mktemp("slow") / "run", SLOW, "train.total_steps=300", "train.eval_episodes=1")


def catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGTERM (Python has none by default: verify's main does)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def start_verify(run_dir: Path, scratch: Path, until_training: bool = True) -> subprocess.Popen:
    """The installed rl-hydra-verify on `run_dir`, with its temporary directories under `scratch`;
    returns once it trains (its re-run's metrics.csv has a row), or else once its main has begun."""
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "RL_HYDRA_TRUST": "tests.helpers.SlowDown", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("rl-hydra-verify")), str(run_dir), "--steps", "all"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and process.poll() is None:
        if until_training and any(
            len(csv.read_text().splitlines()) > 1 for csv in scratch.glob(f"{SCRATCH_PREFIX}*/metrics.csv")
        ):
            return process
        if not until_training and catches_sigterm(process.pid):
            return process
        time.sleep(0.01)
    process.kill()
    raise AssertionError(f"verify did not start: {process.communicate()}")


@pytest.mark.parametrize("training", [True, False], ids=["while-training", "while-starting"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_verify_with_exit_130_and_removes_its_directory(slow_run, tmp_path, sig, training):
    scratch = tmp_path / "tmp"
    process = start_verify(slow_run, scratch, until_training=training)
    if training:
        assert [path.name.split("-")[3] for path in scratch.iterdir()] == [str(process.pid)]  # named by its pid
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130 and out == "", (out, err)
    stopped = f"rl-hydra-verify stopped by Ctrl-C or SIGTERM before a verdict; {slow_run} was not changed"
    assert err.splitlines() == [stopped], err
    assert list(scratch.iterdir()) == []


def test_the_next_verify_removes_what_a_killed_one_left(slow_run, tmp_path, capsys, monkeypatch):
    import tempfile

    scratch = tmp_path / "tmp"
    process = start_verify(slow_run, scratch)
    process.kill()
    process.communicate(timeout=60)
    left = list(scratch.iterdir())
    assert len(left) == 1 and left[0].name.startswith(f"{SCRATCH_PREFIX}{process.pid}-")
    alive = scratch / f"{SCRATCH_PREFIX}{os.getpid()}-x"  # a live verify's (this process): kept
    alive.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("RL_HYDRA_TRUST", "tests.helpers.SlowDown")
    code, line = verify(capsys, slow_run, "--steps", "50")
    assert code == 0, line
    assert list(scratch.iterdir()) == [alive]


# --- every algorithm ---------------------------------------------------------------------------------
ALGO_OVERRIDES = {
    "drqn": ["env=cartpole_no_velocity", "algo.burn_in=2"],
    "sac": ["env=pendulum"],
    "redq": ["env=pendulum"],
    "tqc": ["env=pendulum"],
    "td3": ["env=pendulum"],
    "droq": ["env=pendulum", "algo.policy_delay=1"],
    "crossq": ["env=pendulum"],
}
ALGOS = sorted(path.stem for path in (CONF_DIR / "algo").glob("*.yaml"))


def test_every_algo_option_is_verified():
    assert set(ALGO_OVERRIDES) <= set(ALGOS) and len(ALGOS) >= 9


@pytest.mark.parametrize("algo", ALGOS)
def test_an_untouched_run_of_every_algorithm_verifies(tmp_path, algo):
    from rl_hydra import train, verify_run

    run = train(
        *TINY,
        "train.total_steps=200",
        "train.eval_every=100",
        "train.checkpoint_every=100",
        "train.log_every=50",
        f"algo={algo}",
        "algo.learning_starts=50",
        "algo.train_every=4",
        "algo.gradient_steps=1",
        "algo.batch_size=8",
        *ALGO_OVERRIDES.get(algo, []),
        run_dir=tmp_path,
    )
    assert run.summary["updates"] > 0  # the comparison covers gradient updates
    verdict = verify_run(tmp_path, "all")
    assert (
        verdict.ok
        and "match the record exactly (4 logged rows; best.pt, last.pt, summary.json equal too)" in verdict.message
    ), verdict.message
    verdict = verify_run(tmp_path)
    assert verdict.ok, verdict.message


def test_verify_is_an_installed_command_whose_help_gives_its_exit_codes():
    result = subprocess.run(["rl-hydra-verify", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and "--steps" in result.stdout
    assert "1 the record differs, 2 it cannot be verified, 130 stopped by Ctrl-C or SIGTERM" in " ".join(
        result.stdout.split()
    )


def test_verify_help_says_what_the_default_window_does(capsys):
    """#77: the help said the default always re-runs to best.pt's step; with checkpoints every 10,000
    and best.pt at 27,500 it re-ran 10,000 steps. The help now says when best.pt is reached."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from rl_hydra.verify import DEFAULT_STEPS, MAX_DEFAULT_STEPS, main, window

    cfg = OmegaConf.create(
        {
            "algo": {"learning_starts": 1000, "train_every": 1},
            "env": {"num_envs": 1},
            "train": {"checkpoint_every": 10_000},
        }
    )
    rows = SimpleNamespace(steps=lambda: list(range(2500, 50_001, 2500)))
    far, near = {"best": {"runner": {"global_step": 27_500}}}, {"best": {"runner": {"global_step": 2500}}}
    assert window(cfg, rows, far, None, None) == 10_000  # best.pt past the window: not reached
    assert window(cfg, rows, near, None, None) == 10_000
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"to best.pt's step only when it lies within that or within {DEFAULT_STEPS}" in text
    assert (
        f"never past {MAX_DEFAULT_STEPS} steps" in text and "always" not in text.split("--steps")[1].split("--rtol")[0]
    )
