"""A run directory is data, never code (rl_hydra/runs/trust.py): a `_target_` that the project does
not trust, anywhere in a run's config, is refused in one line before anything is built, by every
entry point that opens a run directory; RL_HYDRA_TRUST extends the list on purpose."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys

import pytest
import yaml

from rl_hydra import load_run
from rl_hydra.commands.cli import main as cli_main
from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.runs.run_dir import RunDirectory, RunError
from rl_hydra.runs.trust import TRUST_VARIABLE, UntrustedConfig, is_trusted
from tests.conftest import ROOT
from tests.payload import pickled_mark


def plant(run_dir, key: str, node) -> None:
    """Set `key` (dotted; `env.wrappers` takes a list) of the run's recorded config to `node`."""
    path = run_dir / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    *parents, last = key.split(".")
    at = cfg
    for part in parents:
        at = at.setdefault(part, {})
    at[last] = node
    path.write_text(yaml.safe_dump(cfg))


def payload(marker) -> dict:
    return {"_target_": "tests.payload.mark", "path": str(marker)}


def torch_load_payload(marker) -> dict:
    """torch.load(BytesIO(b64decode(...)), weights_only=False): not on Hydra's own block list."""
    data = base64.b64encode(pickled_mark(str(marker))).decode()
    return {
        "_target_": "torch.load",
        "weights_only": False,
        "f": {"_target_": "io.BytesIO", "initial_bytes": {"_target_": "base64.b64decode", "s": data}},
    }


# every group that holds a `_target_`, and a value nested under one
PLANTS = {
    "algo._target_": lambda m: "tests.payload.mark",
    "algo.optimizer": payload,
    "algo.optimizer.lr": payload,
    "network": payload,
    "buffer": payload,
    "env.wrappers": lambda m: [payload(m)],
    "logger.csv": payload,
    "algo.optimizer.eps": torch_load_payload,
}


def refused_in_one_line(text: str, key: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return (
        len(lines) == 1
        and lines[0].startswith("error: ")
        and key.split(".")[0] in lines[0]
        and "may not build" in lines[0]
    )


@pytest.mark.parametrize("key", PLANTS)
def test_evaluate_refuses_a_planted_target_and_runs_nothing(run_dir, tmp_path, key, capsys):
    marker = tmp_path / "ran"
    plant(run_dir, key, PLANTS[key](marker))
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1"]) == 2
    assert refused_in_one_line(capsys.readouterr().err, key)
    assert not marker.exists()
    assert not (run_dir / "eval").exists()


@pytest.mark.parametrize("key", PLANTS)
def test_load_run_refuses_a_planted_target_and_runs_nothing(run_dir, tmp_path, key):
    marker = tmp_path / "ran"
    plant(run_dir, key, PLANTS[key](marker))
    with pytest.raises(UntrustedConfig, match="may not build"):
        load_run(run_dir)
    assert not marker.exists()


@pytest.mark.parametrize("key", PLANTS)
def test_resume_refuses_a_planted_target_and_changes_nothing(run_dir, tmp_path, key, monkeypatch, capsys):
    marker = tmp_path / "ran"
    plant(run_dir, key, PLANTS[key](marker))
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume={run_dir}", "train.total_steps=900"])
    with pytest.raises(SystemExit) as stopped:
        cli_main()
    assert stopped.value.code == 2
    assert refused_in_one_line(capsys.readouterr().err, key)
    assert not marker.exists()
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_sweep_folder_holding_one_planted_run_is_refused_whole(trained, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(trained, sweep / "seed=0")
    shutil.copytree(trained, sweep / "seed=1")
    marker = tmp_path / "ran"
    plant(sweep / "seed=1", "algo.optimizer", torch_load_payload(marker))
    assert evaluate_main([f"run_dir={sweep}", "episodes=1"]) == 2
    assert refused_in_one_line(capsys.readouterr().err, "algo.optimizer")
    assert not marker.exists()
    assert not any(sweep.rglob("eval"))  # not even the good run was evaluated


@pytest.mark.parametrize(
    "command",
    [["train.py", "resume={run}", "train.total_steps=900"], ["scripts/evaluate.py", "run_dir={run}", "episodes=1"]],
)
def test_the_command_line_refuses_the_torch_load_payload_with_exit_2(run_dir, tmp_path, command):
    marker = tmp_path / "ran"
    plant(run_dir, "algo.optimizer", torch_load_payload(marker))
    script, *args = command
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *(a.format(run=run_dir) for a in args)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert refused_in_one_line(done.stderr, "algo.optimizer"), done.stderr
    assert "algo.optimizer._target_=torch.load" in done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    "value",
    [
        "${oc.env:HOME}",
        "${rl_hydra.help_groups:[pkg://tests.payload]}",
        "${rl_hydra.env_name:cartpole,CartPole-v1}",
        "${oc.create:{a: 1}}",
        "x${env.${env.id}}",
        "${now:%Y}",
    ],
)
def test_no_resolver_of_any_kind_is_evaluated_from_a_record(run_dir, value):
    plant(run_dir, "env.kwargs.note", value)
    with pytest.raises(RunError, match="an interpolation that is not a reference to another key"):
        load_run(run_dir)


def test_a_reference_is_resolved_before_the_env_id_is_checked(run_dir, tmp_path):
    """`id: ${env.name}` hid the module from a check of the text as written."""
    plant(run_dir, "env.id", "${env.name}")
    plant(run_dir, "env.name", "tests.payload:CartPole-v1")
    with pytest.raises(UntrustedConfig, match="env.id=tests.payload:CartPole-v1, whose module tests.payload"):
        load_run(run_dir)


def test_the_user_can_trust_their_own_code_for_one_command(run_dir, tmp_path, monkeypatch):
    """The planted target runs once the user trusts it: the refusal was the list, not a failure to build."""
    marker = tmp_path / "ran"
    plant(run_dir, "env.wrappers", [{"_target_": "tests.helpers.SlowDown", "_partial_": True, "seconds": 0.0}])
    with pytest.raises(UntrustedConfig, match=f"{TRUST_VARIABLE}=tests.helpers.SlowDown"):
        load_run(run_dir)
    assert load_run(run_dir, trust=["tests.helpers."]).evaluate(episodes=1)["episodes"] == 1
    monkeypatch.setenv(TRUST_VARIABLE, "tests.helpers.SlowDown")
    assert load_run(run_dir).evaluate(episodes=1)["episodes"] == 1
    assert not marker.exists()


@pytest.mark.parametrize(
    "target, place, trusted",
    [
        ("rl_hydra.algos.dqn.DQN", "algo", True),
        ("rl_hydra.speed.adam", "optimizer", True),
        ("torch.optim.AdamW", "optimizer", True),
        ("rl_hydra.envs.wrappers.MaskObservation", "wrapper", True),
        ("gymnasium.wrappers.FrameStackObservation", "wrapper", True),
        ("rl_hydra.algos.dqn.DQN", "network", False),  # a component, but not of that place
        ("rl_hydra.buffers.replay.ReplayBuffer", "algo", False),
        ("rl_hydra.speed.adam", None, False),  # no component is built outside its place
        ("gymnasium.wrappers.TimeLimit", "wrapper", False),  # no schema declares its keys
        ("torch.load", "optimizer", False),
        ("io.BytesIO", "wrapper", False),
        ("gymnasium.wrappers.RecordVideo", "wrapper", False),
        ("rl_hydra.runs.run_dir.atomic_write_text", "algo", False),
        ("rl_hydra.envs.make.make_env", "wrapper", False),
        ("os.system", "algo", False),
        ("rl_hydra.algos.no_such.Thing", "algo", False),
    ],
)
def test_a_record_builds_only_what_the_schema_of_each_place_declares(target, place, trusted):
    assert is_trusted(target, place) is trusted


@pytest.mark.parametrize(
    "trusted, target, expected",
    [
        ("th", "this.x", False),
        ("mypkg.Net", "mypkg.NetX", False),
        ("mypkg.Net", "mypkg.Net", True),
        ("mypkg", "mypkg.nets.Net", True),
        ("mypkg.", "mypkg.nets.Net", True),
        ("mypkg", "mypkgx.Net", False),
    ],
)
def test_the_trust_variable_matches_whole_names_only(monkeypatch, trusted, target, expected):
    monkeypatch.setenv(TRUST_VARIABLE, trusted)
    assert is_trusted(target, "algo") is expected


@pytest.mark.parametrize(
    "text, why",
    [
        ("algo: [unclosed", "cannot be read as a config"),
        ("", "is empty"),
        ("- a\n- b\n", "not a mapping"),
        ("seed: 0\n", "has no env section"),
    ],
)
def test_a_damaged_config_is_one_line_on_every_entry_point(run_dir, text, why, monkeypatch, capsys):
    (run_dir / ".hydra" / "config.yaml").write_text(text)
    with pytest.raises(RunError, match=why):
        load_run(run_dir)
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1"]) == 2
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume={run_dir}", "train.total_steps=900"])
    with pytest.raises(SystemExit) as stopped:
        cli_main()
    assert stopped.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and all(why in line and line.startswith("error: ") for line in lines)


@pytest.mark.parametrize("text, why", [("{not json", "cannot be read"), ("[1, 2]", "holds a JSON list")])
def test_a_damaged_summary_is_one_line_on_resume_and_evaluate(run_dir, text, why, monkeypatch, capsys):
    (run_dir / "summary.json").write_text(text)
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1"]) == 2
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume={run_dir}", "train.total_steps=900"])
    with pytest.raises(SystemExit) as stopped:
        cli_main()
    assert stopped.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and all(why in line and "summary.json" in line for line in lines), lines


# --- writes stay inside the run directory --------------------------------------------------------


@pytest.mark.parametrize("name", [".lock", "train.log", "metrics.csv", "checkpoints", "eval", ".hydra/config.yaml"])
def test_a_link_out_of_the_run_directory_is_refused_and_its_target_untouched(
    run_dir, tmp_path, name, monkeypatch, capsys
):
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "victim"
    entry = run_dir / name
    if entry.is_dir():  # a folder: move it out and link to it
        shutil.move(entry, target)
    else:
        target.write_bytes(entry.read_bytes() if entry.exists() else b"precious\n")
        entry.unlink(missing_ok=True)
    entry.symlink_to(target)
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume={run_dir}", "train.total_steps=900"])
    with pytest.raises(SystemExit) as stopped:
        cli_main()
    assert stopped.value.code == 2
    assert evaluate_main([f"run_dir={run_dir}", "episodes=1"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and all("symbolic link" in line and "outside the run directory" in line for line in lines)
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
    assert entry.is_symlink()


def test_a_link_inside_the_run_directory_is_fine(run_dir):
    (run_dir / "latest").symlink_to(run_dir / "checkpoints")  # as W&B's wandb/latest-run
    assert load_run(run_dir).evaluate(episodes=1)["episodes"] == 1
    RunDirectory(run_dir).check_links()


def test_the_lock_and_the_metrics_are_never_opened_through_a_link(tmp_path):
    """Belt and braces below check_links: the lock, metrics.csv and train.log open with O_NOFOLLOW."""
    from rl_hydra.commands.launch import QuietFileHandler
    from rl_hydra.runs.files import NotOwnFile
    from rl_hydra.runs.metrics import MetricsCSV
    from rl_hydra.runs.run_dir import RunLock

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    directory = RunDirectory(tmp_path / "run")
    directory.path.mkdir()
    for link in (directory.lock_file, directory.metrics_csv, directory.path / "train.log"):
        link.symlink_to(victim)
    with pytest.raises(NotOwnFile, match="is a link or not a file"):
        RunLock(directory).__enter__()
    with pytest.raises(NotOwnFile):
        MetricsCSV(directory.metrics_csv, ["a"])
    with pytest.raises(NotOwnFile):
        QuietFileHandler(directory)
    assert victim.read_text() == "precious\n"


def test_an_env_id_naming_a_module_to_import_is_refused_unless_trusted(run_dir, monkeypatch):
    plant(run_dir, "env.id", "tests.plugin_env:PluginCorridor-v0")
    with pytest.raises(UntrustedConfig, match="whose module tests.plugin_env gymnasium would import"):
        load_run(run_dir)
    monkeypatch.setenv(TRUST_VARIABLE, "tests.plugin_env")
    with pytest.raises(RunError, match="does not fit"):  # trusted: built, and this run's checkpoint is CartPole's
        load_run(run_dir)
