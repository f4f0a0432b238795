"""Issue #74, bounded by the bytes: what a record costs to read is bounded by its files' sizes
(a pickle's shared nodes visited once, no compressed zip entries, metrics.csv streamed, sizes in
a config capped before anything is built, the sweep curve's bootstrap bounded)."""

from __future__ import annotations

import contextlib
import re
import time
import zipfile

import pytest
import torch

from rl_hydra.runs.run_dir import RunDirectory, RunError
from tests.runs.test_record_as_data import evaluate, refused_everywhere, resume, verify


def reference_bomb(depth: int = 40) -> list:
    """A list reached by 2**depth paths through `depth` nested pairs: a few hundred pickled bytes."""
    nested: list = [torch.zeros(1)]
    for _ in range(depth):
        nested = [nested, nested]
    return nested


def test_a_pickle_reference_bomb_is_refused_in_a_moment(run_dir, monkeypatch, capsys):
    """Finding 9: the walk visits each shared object once and refuses containers nested past
    MAX_DEPTH (a restore walking the state as a tree, runner.finished_returns, hung or ran out of
    memory once the run had taken its directory)."""
    for name in ("best", "last"):
        path = run_dir / "checkpoints" / f"{name}.pt"
        state = torch.load(path, weights_only=True)
        state["runner"]["finished_returns"] = reference_bomb()
        torch.save(state, path)
    started = time.monotonic()
    with pytest.raises(RunError, match="nests containers more than 32 deep"):
        RunDirectory(run_dir).load_checkpoint("last")
    assert evaluate(run_dir, capsys)[0] == 2
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "nests containers more than 32 deep" in lines[0], lines
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    code, lines = resume(run_dir, monkeypatch, capsys, "train.total_steps=900")
    assert code == 2 and "nests containers more than 32 deep" in lines[0], lines
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    assert time.monotonic() - started < 60  # 2**40 visits each, had the walk followed every path


def test_a_reference_bomb_as_the_global_step_is_named_by_its_type_not_its_repr(run_dir, capsys):
    """Found by the long fuzz campaign: the refusal's message printed the step with repr, which for a
    list sharing itself 55 levels deep is 2**55 items long (verify ran until it was killed)."""
    path = run_dir / "checkpoints" / "last.pt"
    state = torch.load(path, weights_only=True)
    state["runner"]["global_step"] = reference_bomb(depth=55)
    torch.save(state, path)
    with pytest.raises(RunError, match=r"runner.global_step=<a list>, not a number of env steps"):
        RunDirectory(run_dir).load_checkpoint("last")
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "runner.global_step=<a list>" in lines[0], lines


def rewrite(path, compress: str | None = None, padding: int = 0, extra: list[tuple[str, bytes]] = ()) -> None:
    """Rewrite the zip at `path` entry by entry: `compress` deflated (with `padding` zero bytes
    after its pickle's end), `extra` entries appended as they are."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in [*entries, *extra]:
            deflate = compress is not None and name.endswith(compress)
            data = data + bytes(padding) if deflate else data
            archive.writestr(name, data, zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED)


def test_a_zip_bomb_is_refused_without_inflating_it(run_dir, monkeypatch, capsys):
    for name in ("best", "last"):
        rewrite(run_dir / "checkpoints" / f"{name}.pt", compress="data.pkl", padding=200_000_000)
        assert (run_dir / "checkpoints" / f"{name}.pt").stat().st_size < 2_000_000
    with pytest.raises(RunError, match=r"data.pkl' of [0-9,]+ bytes declared to hold 200,"):
        RunDirectory(run_dir).load_checkpoint("best")  # from the zip's directory: nothing inflated
    refused_everywhere(run_dir, monkeypatch, capsys, "(a compressed entry)", verify_code=1)


@pytest.mark.parametrize(
    "extra, why",
    [
        (lambda names: [(names[0], b"x")], "twice: torch.save writes each once"),
        (lambda names: [("../outside", b"x")], "'../outside', outside the archive's folder"),
        (lambda names: [("/etc/passwd", b"x")], "'/etc/passwd', outside the archive's folder"),
    ],
)
def test_a_zip_laid_out_unlike_torch_saves_is_one_line(run_dir, extra, why):
    path = run_dir / "checkpoints" / "last.pt"
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
    with pytest.warns(UserWarning) if why.startswith("twice") else contextlib.nullcontext():
        rewrite(path, extra=extra(names))
    with pytest.raises(RunError, match=f"checkpoint .*last.pt holds the entry .*{why[:20]}"):
        RunDirectory(run_dir).load_checkpoint("last")


def test_metrics_csv_padded_to_a_gigabyte_is_refused_not_verified(run_dir, capsys):
    import os

    from rl_hydra.runs.metrics import Differs, read_metrics

    path = run_dir / "metrics.csv"
    os.truncate(path, path.stat().st_size + 2**30)  # a sparse gigabyte of NUL bytes after the real rows
    with pytest.raises(Differs, match="line [0-9]+ is longer than 65,536 characters: not a row a run writes"):
        read_metrics(RunDirectory(run_dir))
    code, lines = verify(run_dir, capsys)
    assert code == 1 and "is longer than 65,536 characters" in lines[0], lines


def test_metrics_rows_read_back_as_csv_reads_them(run_dir):
    import csv

    from rl_hydra.runs.metrics import read_metrics

    with open(run_dir / "metrics.csv", newline="") as f:
        expected = list(csv.DictReader(f))
    metrics = read_metrics(RunDirectory(run_dir))
    assert list(metrics.rows) == expected and metrics.rows[-1] == expected[-1] and len(metrics.rows) == len(expected)
    assert metrics.steps() == [int(row["step"]) for row in expected]
    assert metrics.up_to(int(expected[1]["step"])) == expected[:2]


def test_the_curve_band_is_the_step_by_step_bootstrap_at_once():
    import numpy as np

    from rl_hydra.runs.aggregate import bootstrap_ci, curve_band

    grid = np.random.default_rng(3).normal(size=(5, 40))  # (seeds, steps)
    expected = np.array([bootstrap_ci(column, np.mean, samples=500) for column in grid.T])
    np.testing.assert_allclose(curve_band(grid), expected, rtol=1e-12)


def test_a_curve_of_many_evaluations_is_drawn_at_a_thousand_points():
    import numpy as np

    from rl_hydra.runs.aggregate import MAX_CURVE_POINTS, thinned

    steps = np.arange(0, 20_000 * 50, 50)
    drawn = thinned(steps)
    assert len(drawn) == MAX_CURVE_POINTS and drawn[0] == 0 and drawn[-1] == steps[-1]
    assert np.all(np.diff(drawn) > 0) and np.array_equal(thinned(steps[:999]), steps[:999])


def sweep_of_two(run_dir, second: str):
    import shutil

    sweep = run_dir.parent / "sweep"
    shutil.copytree(run_dir, sweep / "0")
    shutil.copytree(run_dir, sweep / second)
    return sweep


def test_a_member_named_with_a_newline_adds_no_line_to_the_table(run_dir, capsys):
    from rl_hydra.commands.report import main as evaluate_main

    sweep = sweep_of_two(run_dir, "1\n| injected | 0 | 0 | 1.0 +- 0.0 |\u2028")
    assert evaluate_main([f"run_dir={sweep}", "episodes=1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("| injected") for line in printed), printed
    assert "| 1\\n\\| injected \\| 0 \\| 0 \\| 1.0 +- 0.0 \\|\\u2028 |" in "\n".join(printed)
    assert "\n| injected" not in (sweep / "eval" / "results_last_1ep_seed0.md").read_text()


@pytest.mark.filterwarnings("error")
def test_an_infinite_eval_return_in_a_members_metrics_is_one_line(run_dir, capsys):
    from rl_hydra.commands.report import main as evaluate_main

    sweep = sweep_of_two(run_dir, "1")
    path = sweep / "1" / "metrics.csv"
    lines = path.read_text().splitlines(keepends=True)
    column = lines[0].rstrip("\n").split(",").index("eval/return_mean")
    row = next(number for number, line in enumerate(lines) if number and line.split(",")[column])
    fields = lines[row].split(",")
    lines[row] = ",".join([*fields[:column], "inf", *fields[column + 1 :]])
    path.write_text("".join(lines))
    assert evaluate_main([f"run_dir={sweep}", "episodes=1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"has eval/return_mean=inf at step {fields[0]}: not a return an evaluation gives" in err[0]


def test_a_records_width_past_the_limit_is_refused_before_a_network_is_built(run_dir, monkeypatch, capsys):
    from tests.runs.test_trust import plant

    plant(run_dir, "network.hidden_sizes", [50_000_000])  # 5.7 GB of weights, had it been built
    refused_everywhere(run_dir, monkeypatch, capsys, "network.hidden_sizes[0]=50000000 is out of range")


def test_widths_the_checkpoint_cannot_hold_are_refused_before_they_are_built(run_dir, monkeypatch, capsys):
    from rl_hydra import load_run
    from tests.runs.test_record_as_data import snapshot
    from tests.runs.test_trust import plant

    plant(run_dir, "network.hidden_sizes", [2048, 2048])  # 4M weights, more than the checkpoint holds (as 16,384 x 8)
    why = (
        "weights the config's widths make (network.hidden_sizes=[2048, 2048]): the config is not the one that saved it"
    )
    before = snapshot(run_dir)
    with pytest.raises(RunError, match=re.escape(why)):
        load_run(run_dir)
    for code, lines in (evaluate(run_dir, capsys), resume(run_dir, monkeypatch, capsys, "train.total_steps=900")):
        assert code == 2 and len(lines) == 1 and why in lines[0], lines
    assert snapshot(run_dir) == before


def test_a_shape_declared_past_its_stored_bytes_is_one_line_without_allocating(tmp_path):
    import struct

    from rl_hydra.runs.checkpoint import load_checkpoint_file

    path = tmp_path / "last.pt"
    torch.save({"agent": {}, "runner": {"global_step": 1}, "x": torch.zeros(12345)}, path)
    with zipfile.ZipFile(path) as archive:
        entries = [(info.filename, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries:
            if name.endswith("data.pkl"):  # the pickle's second 12345 is the tensor's shape: 2**31 - 1 floats (8 GB)
                at = data.index(b"M" + struct.pack("<H", 12345), data.index(b"M" + struct.pack("<H", 12345)) + 1)
                data = data[:at] + b"J" + struct.pack("<i", 2**31 - 1) + data[at + 3 :]
            archive.writestr(name, data)
    with pytest.raises(RunError, match="last.pt cannot be read .*storage"):
        load_checkpoint_file(path)
