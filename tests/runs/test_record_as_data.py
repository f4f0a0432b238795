"""Issue #65's cases, each on the entry points it broke: a run directory is read as data, so a crafted
file is one `error:` line (exit 2, or verify's 1 for a record that reads but differs) and changes
nothing; nothing is computed, imported, connected to or allocated past the file's size."""

from __future__ import annotations

import json
import re
import sys
import time

import pytest
import torch
import yaml

from rl_hydra import load_run
from rl_hydra.commands.cli import main as cli_main
from rl_hydra.commands.report import main as evaluate_main
from rl_hydra.runs.run_dir import RunDirectory, RunError, RunLock
from rl_hydra.verify import main as verify_main
from tests.runs.test_trust import plant


def snapshot(run_dir) -> dict:
    return {p.relative_to(run_dir): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def resume(run_dir, monkeypatch, capsys, *args) -> tuple[int, list[str]]:
    monkeypatch.setattr(sys, "argv", ["train.py", f"resume={run_dir}", *args])
    with pytest.raises(SystemExit) as stopped:
        cli_main()
    return stopped.value.code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def evaluate(run_dir, capsys) -> tuple[int, list[str]]:
    code = evaluate_main([f"run_dir={run_dir}", "episodes=1"])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def verify(run_dir, capsys) -> tuple[int, list[str]]:
    code = verify_main([str(run_dir), "--steps", "all"])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def refused_everywhere(run_dir, monkeypatch, capsys, why: str, verify_code: int = 2) -> None:
    """Every entry point refuses in one line naming `why`, and the directory keeps every byte."""
    before = snapshot(run_dir)
    with pytest.raises(RunError, match=re.escape(why)):
        _ = load_run(run_dir).summary
    for (code, lines), expected in (
        (evaluate(run_dir, capsys), 2),
        (verify(run_dir, capsys), verify_code),
        (resume(run_dir, monkeypatch, capsys, "train.total_steps=900"), 2),
    ):
        assert code == expected and len(lines) == 1 and lines[0].startswith("error: ") and why in lines[0], lines
    assert snapshot(run_dir) == before


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{before}'] * 9)}]\n" for before, name in zip("abcdefgh", "bcdefghi")
)


def test_an_alias_bomb_in_the_config_is_refused_at_once(run_dir, monkeypatch, capsys):
    path = run_dir / ".hydra" / "config.yaml"
    path.write_text(ALIAS_BOMB + path.read_text())
    started = time.monotonic()
    refused_everywhere(run_dir, monkeypatch, capsys, "an anchor (&a)")
    assert time.monotonic() - started < 60  # 9 ** 9 values, had it expanded


def test_an_alias_bomb_in_hydras_record_is_refused_before_a_resume_trains(run_dir, monkeypatch, capsys):
    path = run_dir / ".hydra" / "hydra.yaml"
    path.write_text(ALIAS_BOMB + path.read_text())
    before = snapshot(run_dir)
    code, lines = resume(run_dir, monkeypatch, capsys, "train.total_steps=900")
    assert code == 2 and len(lines) == 1 and "hydra.yaml cannot be read as a config (an anchor" in lines[0], lines
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("name", ["summary.json", "provenance.json"])
def test_json_nested_100000_deep_is_one_line(run_dir, monkeypatch, capsys, name):
    (run_dir / name).write_text("[" * 100_000 + "]" * 100_000)
    refused_everywhere(run_dir, monkeypatch, capsys, "nested more than 32 deep") if name == "summary.json" else None
    if name == "provenance.json":
        code, lines = resume(run_dir, monkeypatch, capsys, "train.total_steps=900")
        assert code == 2 and len(lines) == 1 and "nested more than 32 deep" in lines[0]


def test_an_unresolvable_reference_is_one_line(run_dir, monkeypatch, capsys):
    plant(run_dir, "algo.gamma", "${algo.no_such_key}")
    refused_everywhere(run_dir, monkeypatch, capsys, "algo.gamma='${algo.no_such_key}', a reference to no key")


def test_an_unknown_top_level_key_is_refused_by_the_schema(run_dir, monkeypatch, capsys):
    plant(run_dir, "extra_key", 1)
    refused_everywhere(run_dir, monkeypatch, capsys, "extra_key")


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("env.max_episode_steps", 10**12, "env.max_episode_steps=1000000000000 is out of range"),
        (
            "env.wrappers",
            [{"_target_": "gymnasium.wrappers.FrameStackObservation", "_partial_": True, "stack_size": 10**9}],
            "env.wrappers[0].stack_size=1000000000 is out of range",
        ),
        ("summary_global_step", "400", "global_step='400', not int or null"),
    ],
)
def test_sizes_that_scale_memory_or_time_are_bounded(run_dir, monkeypatch, capsys, key, value, why):
    if key == "summary_global_step":
        summary = json.loads((run_dir / "summary.json").read_text())
        (run_dir / "summary.json").write_text(json.dumps({**summary, "global_step": value}))
    else:
        plant(run_dir, key, value)
    refused_everywhere(run_dir, monkeypatch, capsys, why)


def test_a_stride_0_tensor_is_refused_before_it_is_copied(run_dir, monkeypatch, capsys):
    for name in ("best", "last"):
        path = run_dir / "checkpoints" / f"{name}.pt"
        state = torch.load(path, weights_only=True)
        state["agent"]["optimizer"]["state"][0]["exp_avg"] = torch.zeros(1).expand(10**9)  # 4 GB once copied
        torch.save(state, path)
        assert path.stat().st_size < 5_000_000
    refused_everywhere(run_dir, monkeypatch, capsys, "(a view repeating its values)", verify_code=1)


@pytest.mark.parametrize("where", ["lr", "exp_avg"])
def test_a_meta_tensor_is_refused_before_anything_reads_its_values(run_dir, monkeypatch, capsys, where):
    # found by the fuzzer: reading a meta tensor's value imports torch's compiler stack, which made a
    # cache directory outside the run, and then raised
    for name in ("best", "last"):
        path = run_dir / "checkpoints" / f"{name}.pt"
        state = torch.load(path, weights_only=True)
        optimizer = state["agent"]["optimizer"]
        meta = torch.empty((), device="meta") if where == "lr" else torch.empty(3, device="meta")
        if where == "lr":
            optimizer["param_groups"][0]["lr"] = meta
        else:
            optimizer["state"][0]["exp_avg"] = meta
        torch.save(state, path)
    refused_everywhere(run_dir, monkeypatch, capsys, "tensor on device meta", verify_code=1)


@pytest.mark.parametrize(
    "state, why",
    [
        ([1, 2], "holds no agent and runner state"),
        ({"agent": {}}, "holds no agent and runner state"),
        ({"agent": {}, "runner": {"global_step": 1e6}}, "global_step=1000000.0"),
    ],
)
def test_a_checkpoint_that_is_not_a_runs_is_one_line(run_dir, monkeypatch, capsys, state, why):
    for name in ("best", "last"):
        torch.save(state, run_dir / "checkpoints" / f"{name}.pt")
    refused_everywhere(run_dir, monkeypatch, capsys, why, verify_code=1)


@pytest.mark.parametrize("damage", [b"\xff", "²".encode(), "٣".encode(), b"9" * 200_000])
def test_a_resume_with_a_damaged_metrics_csv_changes_nothing(run_dir, monkeypatch, capsys, damage):
    path = run_dir / "metrics.csv"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = damage + lines[1][lines[1].index(b",") :]
    path.write_bytes(b"".join(lines))
    before = snapshot(run_dir)
    code, lines = resume(run_dir, monkeypatch, capsys, "train.total_steps=900")
    assert code == 2 and len(lines) == 1 and "metrics.csv" in lines[0], lines
    assert snapshot(run_dir) == before


def test_a_resume_never_connects_where_the_record_says(run_dir, monkeypatch, capsys):
    plant(
        run_dir,
        "distributed",
        {
            "name": "apex",
            "address": "ray://127.0.0.1:1",
            "actors": 1,
            "cpus_per_actor": 1.0,
            "shards": 1,
            "epsilon_base": 0.4,
            "epsilon_alpha": 7.0,
            "weights_every": 400,
            "publish_every": 10,
            "send_every": 50,
            "max_replay_ratio": None,
            "min_replay_ratio": None,
            "priority_alpha": 0.6,
            "priority_eta": 0.9,
            "priority_beta": 0.0,
            "max_restarts": 3,
            "prefetch": 2,
        },
    )
    before = snapshot(run_dir)
    code, lines = resume(run_dir, monkeypatch, capsys, "train.total_steps=900")
    assert code == 2 and len(lines) == 1, lines
    assert "records distributed.address=ray://127.0.0.1:1" in lines[0] and "give distributed.address=" in lines[0]
    assert snapshot(run_dir) == before


def test_verify_refuses_forged_checkpoints_and_summaries(run_dir, capsys):
    path = run_dir / "checkpoints" / "best.pt"
    state = torch.load(path, weights_only=True)
    state["runner"]["global_step"] = 10**6
    state["agent"]["q_net"] = {k: torch.zeros_like(v) for k, v in state["agent"]["q_net"].items()}
    torch.save(state, path)
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "best.pt is from step 1000000, at which metrics.csv logged no evaluation" in lines[0]


def test_verify_refuses_a_forged_status_and_solved_step(run_dir, capsys):
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "solved_at_step": 150}))
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "summary.json has solved_at_step=150, where metrics.csv gives None" in lines[0], lines


def test_verify_of_a_run_in_use_is_one_line(run_dir, capsys):
    with RunLock(RunDirectory(run_dir)):
        code, lines = verify(run_dir, capsys)
    assert code == 2 and len(lines) == 1 and "is in use by another process" in lines[0], lines


def test_verify_takes_no_tolerance_from_the_record(run_dir, monkeypatch):
    from rl_hydra.verify import pick_device

    provenance = json.loads((run_dir / "provenance.json").read_text())
    provenance["sessions"][0]["device"] = "cuda:0 (NVIDIA H100)"
    (run_dir / "provenance.json").write_text(json.dumps(provenance))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert pick_device(None) == ("cpu", None, "as asked")


def test_a_malformed_overrides_file_is_one_line_in_evaluate(run_dir, monkeypatch, capsys):
    (run_dir / ".hydra" / "overrides.yaml").write_text("- [unclosed\n")
    code, lines = evaluate(run_dir, capsys)
    assert code == 2 and len(lines) == 1 and "overrides.yaml cannot be read as a config" in lines[0], lines
    (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump({"not": "a list"}))
    code, lines = evaluate(run_dir, capsys)
    assert code == 2 and len(lines) == 1 and "is not a list of overrides" in lines[0], lines


def test_verify_refuses_a_forged_eval_file(run_dir, capsys):
    assert evaluate_main([f"run_dir={run_dir}", "episodes=2"]) == 0
    capsys.readouterr()
    path = next((run_dir / "eval").glob("last_2ep_seed0.json"))
    written = json.loads(path.read_text())
    path.write_text(json.dumps({**written, "return_mean": 500.0}))
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "eval/last_2ep_seed0.json's episodes and return_mean do not match" in lines[0], lines
    path.write_text(json.dumps({**written, "step": 10**6}))
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "is of step 1000000, a checkpoint this record never had" in lines[0], lines
    path.write_text(json.dumps(written))
    assert verify(run_dir, capsys)[0] == 0
