"""scripts/benchmarks/benchmark.py, the one runner of ours against SB3: the hyperparameter matching by
hand, the order of the runs, the record it writes, and (slow) tiny runs of both sides."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rl_hydra.errors import ConfigError
from rl_hydra.runs.results import check_record, median_problems, rows_table, seeds_table
from tests.conftest import ROOT, compose_config

sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))  # the scripts' folder, as Python puts it first running one
import benchmark  # noqa: E402
import sb3_peer  # noqa: E402
from zoo import PER_STEP, SBX, ZOO, expected_config, expected_updates, sb3_spec, target_update_every  # noqa: E402

CARTPOLE = ZOO["dqn_cartpole"].hp


def parse(*argv: str, out=None) -> argparse.Namespace:
    args = benchmark.with_defaults(benchmark.build_parser().parse_args(list(argv)))
    args.out = out
    return args


def test_target_sync_interval_in_env_steps_becomes_updates():
    assert target_update_every(CARTPOLE) == 128  # a sync between any two phases of 128 updates
    assert target_update_every({**CARTPOLE, **PER_STEP}) == 10  # one update per step: 10 steps, 10 updates
    assert target_update_every({**CARTPOLE, "train_freq": 2, "gradient_steps": 4}) == 20
    with pytest.raises(ValueError, match="not a multiple"):
        target_update_every({**CARTPOLE, "train_freq": 3})


def test_expected_updates_count_the_phases_from_learning_starts():
    assert expected_updates(CARTPOLE, 50_000) == 192 * 128  # phases at 1024, 1280, ..., 49920
    assert expected_updates({**CARTPOLE, **PER_STEP}, 20_000) == 19_001


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn"])
def test_our_cartpole_runs_carry_sb3s_hyperparameters(algo):
    cases = {case.id: case for case in benchmark.cartpole_cases(parse("cartpole", "--algos", algo))}
    assert benchmark.check(list(cases.values())) == []
    cfg = compose_config(*cases[f"{algo}_per_step"].ours, "seed=3")
    assert cfg.preset is None and (cfg.train.total_steps, cfg.train.stop_at_return) == (20_000, None)
    assert cfg.algo.optimizer.lr == 2.3e-3 and cfg.algo.batch_size == 128 and cfg.buffer.capacity == 100_000
    assert (cfg.algo.learning_starts, cfg.algo.train_every, cfg.algo.gradient_steps) == (1000, 1, 1)
    assert (cfg.algo.target_update_every, cfg.algo.tau, cfg.algo.gamma) == (10, 1.0, 0.99)
    assert list(cfg.network.hidden_sizes) == [256, 256] and cfg.algo.final_lr_fraction == 1.0
    if algo == "qr_dqn":  # sb3-contrib: no clipping, Adam eps = 0.01 / batch size
        assert cfg.algo.num_quantiles == 10 and cfg.algo.max_grad_norm is None and cfg.algo.optimizer.eps == 0.01 / 128
    else:
        assert cfg.algo.max_grad_norm == 10.0 and cfg.algo.loss == "huber"
    peer = cases[f"{algo}_per_step"].peer
    assert peer["kwargs"]["target_update_interval"] == 10 and peer["policy_kwargs"]["net_arch"] == [256, 256]
    assert ("dqn_solve" in cases) == (algo == "dqn")


def test_our_cartpole_dqn_carries_sbxs_hyperparameters_and_qr_dqn_is_refused_for_sbx(tmp_path, capsys):
    args = parse("cartpole", "--peer", "sbx")
    assert args.algos == ["dqn"]  # the CartPole runs SBX has
    cases = {case.id: case for case in benchmark.cartpole_cases(args)}
    assert list(cases) == ["dqn_zoo", "dqn_per_step", "dqn_solve"] and benchmark.check(list(cases.values())) == []
    for case in cases.values():  # SBX's DQN on the Zoo's values, in each regime
        assert case.peer["lib"] == "sbx" and case.peer["algo"] == "dqn", case.id
    assert cases["dqn_zoo"].peer["kwargs"] == sb3_spec(ZOO["dqn_cartpole"], "CartPole-v1", 50_000)["kwargs"]
    assert cases["dqn_per_step"].zoo.peer == "sbx" and cases["dqn_per_step"].peer["kwargs"]["train_freq"] == 1
    assert "SBX's zoo run" in cases["dqn_solve"].label and cases["dqn_solve"].peer == cases["dqn_zoo"].peer
    cfg = compose_config(*cases["dqn_per_step"].ours, "seed=0")
    assert cfg.algo.max_grad_norm is None and cfg.algo.loss == "huber"  # SBX's DQN clips no gradient; SB3's at 10
    assert (cfg.algo.target_update_every, cfg.algo.exploration.end) == (10, 0.04)
    case = cases["dqn_zoo"]
    case.ours = [*case.ours, "algo.max_grad_norm=10"]
    assert benchmark.check([case]) == ["dqn_zoo: algo.max_grad_norm is 10.0 in our config; SBX's run means None"]
    with pytest.raises(ValueError, match="first learning rate"):  # no schedule reaches SBX's DQN
        expected_config(replace(SBX["dqn_cartpole"], hp={**ZOO["dqn_cartpole"].hp, "learning_rate": "lin_2.3e-3"}))
    with pytest.raises(ValueError, match="two layers of net_arch"):
        expected_config(replace(SBX["dqn_cartpole"], hp={**ZOO["dqn_cartpole"].hp, "net_arch": [256, 128]}))
    for argv in (["--algos", "dqn", "qr_dqn"], ["--algos", "qr_dqn"]):  # SBX has no QR-DQN: one line, nothing run
        with pytest.raises(SystemExit) as exit_info:
            benchmark.main(["cartpole", "--peer", "sbx", *argv, "--out", str(tmp_path)])
        assert exit_info.value.code == 2 and not any(tmp_path.iterdir())
        assert capsys.readouterr().err.splitlines() == [
            "error: --algos qr_dqn: SBX has no CartPole run of it; with --peer sbx choose among: dqn"
        ]


def test_the_peer_gets_the_specs_learning_rate_or_its_classs_own():
    spec = sb3_spec(ZOO["crossq_pendulum"], "Pendulum-v1", 20_000)  # the Zoo leaves CrossQ's lr (1e-3) out
    assert "learning_rate" not in spec["kwargs"] and "learning_rate" not in sb3_peer.keywords(spec)
    assert sb3_peer.keywords(sb3_spec(ZOO["tqc_pendulum"], "Pendulum-v1", 20_000))["learning_rate"] == 1e-3
    schedule = sb3_peer.keywords(sb3_spec(ZOO["qr_dqn_lunar_lander"], "LunarLander-v3", 100_000))["learning_rate"]
    assert (schedule(1.0), schedule(0.5)) == (1.5e-3, 0.75e-3)  # lin_1.5e-3


def test_the_sides_alternate_and_an_identical_peer_run_is_shared(tmp_path, monkeypatch):
    args = parse("cartpole", "--algos", "dqn", out=tmp_path)
    cases = benchmark.cartpole_cases(args)
    ran = []

    def fake_run(case, side, seed, args):
        ran.append((seed, side, case.id, benchmark.job_for(case, side, seed, args)[1].name))
        return {"wall_s": 1.0}

    monkeypatch.setattr(benchmark, "run_side", fake_run)
    assert benchmark.run_all(cases, [0, 1], args) == []
    assert [(s, side, c) for s, side, c, _ in ran[:6]] == [
        (0, "ours", "dqn_zoo"),
        (0, "peer", "dqn_zoo"),
        (0, "ours", "dqn_per_step"),
        (0, "peer", "dqn_per_step"),
        (0, "ours", "dqn_solve"),
        (0, "peer", "dqn_solve"),
    ]
    assert [side for s, side, _, _ in ran if s == 1][:2] == ["peer", "ours"]  # the peer first on odd seeds
    files = {c: f for s, side, c, f in ran if s == 0 and side == "peer"}
    assert files["dqn_zoo"] == files["dqn_solve"] != files["dqn_per_step"]


def test_a_line_says_how_many_runs_there_are_and_another_as_each_finishes(tmp_path, monkeypatch, capsys):
    args = parse("cartpole", "--algos", "dqn", out=tmp_path)
    cases = benchmark.cartpole_cases(args)[:1]
    results = iter(
        [
            {"wall_s": 1234.5, "eval_return": 500.0},
            None,
            {"wall_s": 3.0, "reused": True},
            {"wall_s": 2.0, "eval_return": None},
        ]
    )
    printed = []  # stderr so far, as each run starts

    def fake_run(case, side, seed, args):
        printed.append(capsys.readouterr().err)
        return next(results)

    monkeypatch.setattr(benchmark, "run_side", fake_run)
    assert benchmark.run_all(cases, [0, 1], args) == ["seed 0: peer dqn_zoo"]
    lines = "".join([*printed, capsys.readouterr().err]).splitlines()
    assert lines == [
        "4 runs, one after another; a line as each finishes",
        "  1/4 seed 0: ours dqn_zoo: 1,234.5 s, return 500.0",
        "  2/4 seed 0: peer dqn_zoo: failed (above)",
        "  3/4 seed 1: peer dqn_zoo: found, reused",
        "  4/4 seed 1: ours dqn_zoo: 2.0 s",
    ]
    assert printed[1].endswith("1/4 seed 0: ours dqn_zoo: 1,234.5 s, return 500.0\n")  # before the next run


def test_a_peer_run_without_the_bench_extra_is_refused_in_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    for module in benchmark.PEER_PACKAGES["sb3"]:
        monkeypatch.setitem(sys.modules, module, None)  # not importable, whether installed or not
    monkeypatch.setattr(benchmark, "run_all", lambda *args: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as exit_:
        benchmark.main(["suite", "continuous", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and not any(tmp_path.iterdir())
    assert capsys.readouterr().err.splitlines() == [
        "error: the SB3 side needs stable-baselines3 and sb3-contrib, which cannot be imported: pip install -e "
        '".[bench]" (or --sides ours to run ours alone)'
    ]
    cases = benchmark.suite_cases(parse("suite", "continuous", "--rows", "td3_pendulum", out=tmp_path))
    for without_peer in (["--sides", "ours"], ["--table-only"]):  # nothing of the peer's is imported then
        assert benchmark.missing_peer(cases, parse("suite", "continuous", *without_peer, out=tmp_path)) is None


def test_the_record_holds_every_seed_and_their_medians(tmp_path):
    args = parse("cartpole", "--algos", "dqn", out=tmp_path)
    case = benchmark.cartpole_cases(args)[0]
    for seed, (ours, peer) in enumerate([(1.0, 2.0), (3.0, 4.0), (2.0, 5.0)]):
        for side, wall in (("ours", ours), ("peer", peer)):
            path = benchmark.job_for(case, side, seed, args)[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"wall_s": wall, "steps": 100, "eval_return": 10.0 * seed}))
    record = benchmark.record([case], [0, 1, 2, 3], args, ["cartpole"], 0.0)
    row = record["rows"][0]
    assert row["per_seed"]["ratio"] == [0.5, 0.75, 0.4, None] and row["seeds_done"] == "3/4"
    assert row["summary"]["ratio"] == 0.5 and (row["summary"]["ratio_min"], row["summary"]["ratio_max"]) == (0.4, 0.75)
    assert row["summary"]["ours_sps"] == 50.0 and record["topic"] == "benchmark"
    assert (row["summary"]["ours_return_low"], row["summary"]["ours_return_high"]) == (0.0, 20.0)  # 3 seeds
    assert check_record(record, record["name"]) == []
    assert median_problems(record) == []
    assert "| 0 | 0.0 | 0.0 | 1.0 | 2.0 | 0.50 | 100.0 | 50.0 |" in seeds_table(record, case.id)
    assert "| 10.0 (0.0 to 20.0) | 10.0 (0.0 to 20.0) |" in rows_table(record)
    complete = benchmark.record([case], [0, 1, 2], args, ["cartpole"], 0.0)
    complete["rows"][0]["summary"]["peer_return_high"] = 25.0  # (a seed without a value is not checked)
    assert median_problems(complete) == [
        f"{complete['name']}/{case.id}: the interval's high end of peer_return is 20, the summary says 25"
    ]


def test_a_suite_rows_record_holds_both_sides_curves_at_the_same_steps_and_draws_them(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_results

    args = parse("suite", "continuous", "--rows", "td3_hopper", "--steps", "30000", out=tmp_path)
    (case,) = benchmark.suite_cases(args)
    assert case.peer["curve"] == {"every": 10000, "episodes": 10}  # the preset's eval_every and eval_episodes
    assert benchmark.curve_steps(case) == [10000, 20000, 30000]
    for seed in (0, 1):
        job, path = benchmark.job_for(case, "ours", seed, args)
        run_dir = Path(job["run_dir"])
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text("{}")
        (run_dir / "metrics.csv").write_text(
            "step,train/loss,eval/return_mean\n5000,1.0,\n10000,1.0,100.0\n20000,1.0,200.0\n30000,1.0,300.0\n"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"wall_s": 10.0, "steps": 30000, "eval_return": 300.0}))
    peer = {
        "wall_s": 20.0,
        "steps": 30000,
        "eval_return": 90.0,
        "curve": {"steps": [10000, 20000, 30000], "returns": [30.0, 60.0, 90.0]},
    }
    path = benchmark.job_for(case, "peer", 0, args)[1]  # the peer's seed 1 has not run
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(peer))
    record = benchmark.record([case], [0, 1], args, ["suite", "continuous"], 0.0)
    row = record["rows"][0]
    assert row["curve_steps"] == [10000, 20000, 30000]
    assert row["per_seed"]["ours_curve"] == [[100.0, 200.0, 300.0]] * 2
    assert row["per_seed"]["peer_curve"] == [[30.0, 60.0, 90.0], None]
    assert "ours_curve" not in row["summary"] and row["summary"]["ours_return"] == 300.0
    assert check_record(record, record["name"]) == [] and median_problems(record) == []
    render_results.draw(record, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_commands_sharing_one_out_make_one_record_with_table_only(tmp_path):
    """Rows and seeds run by separate commands (a core each) into one --out: --table-only assembles
    them into the record, under the title and docs page given."""
    steps = ["--steps", "30000", "--seeds", "2", "--out", str(tmp_path)]
    for row, seed in (("td3_hopper", 0), ("td3_half_cheetah", 1)):  # as two --only-seeds commands leave them
        args = parse("suite", "continuous", "--rows", row, *steps[:4], out=tmp_path)
        (case,) = benchmark.suite_cases(args)
        for side, wall in (("ours", 8.0), ("peer", 10.0)):
            path = benchmark.job_for(case, side, seed, args)[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"wall_s": wall, "steps": 30000, "eval_return": 100.0 + seed}))
    record_path = tmp_path / "td3_both.json"
    result = run(
        "suite",
        "continuous",
        "--rows",
        "td3_hopper",
        "td3_half_cheetah",
        *steps,
        "--table-only",
        "--no-fingerprint",  # the runs above are made up: no config of ours trained them
        "--record",
        str(record_path),
        "--title",
        "TD3 on two envs",
        "--topic",
        "continuous",
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(record_path.read_text())
    assert (record["name"], record["title"], record["topic"]) == ("td3_both", "TD3 on two envs", "continuous")
    assert "--rows td3_hopper td3_half_cheetah" in record["command"] and "--table-only" not in record["command"]
    rows = {row["id"]: row for row in record["rows"]}
    assert rows["td3_hopper"]["per_seed"]["ours_return"] == [100.0, None]
    assert rows["td3_half_cheetah"]["per_seed"]["peer_return"] == [None, 101.0]
    assert rows["td3_half_cheetah"]["summary"]["ratio"] == 0.8 and rows["td3_hopper"]["seeds_done"] == "1/2"
    assert check_record(record, record["name"]) == []


def run(*argv: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmarks" / "benchmark.py"), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=None if env is None else {**os.environ, **env},
    )


def test_seeds_outside_the_range_are_refused_before_anything_runs(tmp_path):
    result = run("cartpole", "--seeds", "3", "--only-seeds", "2", "3", "7", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("error: --only-seeds 3 7: --seeds 3 runs seeds 0 to 2")
    assert not any(tmp_path.iterdir())


def test_algorithms_without_an_sb3_side_are_refused_when_only_the_peer_runs(tmp_path):
    result = run("minatar", "--algos", "dqn", "iqn", "rainbow", "--sides", "peer", "--out", str(tmp_path))
    assert result.returncode == 2
    assert (
        "iqn_Breakout, rainbow_Breakout, iqn_SpaceInvaders, rainbow_SpaceInvaders: no SB3 side to run; "
        "add --sides ours" in result.stderr
    )
    assert not any(tmp_path.iterdir())


def test_minatar_cases_name_other_quantile_counts_and_compose_rainbow_from_its_parts():
    cases = {
        c.id: c
        for c in benchmark.minatar_cases(
            parse("minatar", "--algos", "qr_dqn", "rainbow", "--quantiles", "50", "--games", "Breakout")
        )
    }
    assert set(cases) == {"qr_dqn50_Breakout", "rainbow_Breakout"} and cases["rainbow_Breakout"].peer is None
    assert cases["qr_dqn50_Breakout"].peer["policy_kwargs"]["n_quantiles"] == 50
    cfg = compose_config(*cases["rainbow_Breakout"].ours, "seed=0")
    assert cfg.algo._target_.endswith("C51") and cfg.algo.n_step == 3 and cfg.algo.double_q
    assert cfg.buffer._target_.endswith("PrioritizedReplayBuffer") and cfg.network.noisy and cfg.network.dueling
    assert cfg.algo.max_grad_norm is None and cfg.algo.optimizer.eps == 0.01 / 32


def test_the_atari_case_is_the_general_purpose_dqn_on_sb3s_values_not_the_dopamine_preset():
    case = benchmark.atari_cases(parse("atari", "--steps", "100", "--capacity", "1000"))[0]
    cfg, sb3 = compose_config(*case.ours, "seed=0"), case.peer["kwargs"]
    assert cfg.preset is None and case.window == [1000, 1100] and cfg.train.total_steps == 1101
    assert (cfg.algo.max_grad_norm, cfg.algo.optimizer.get("eps")) == (sb3["max_grad_norm"], None) == (10, None)
    assert (cfg.algo.optimizer.lr, cfg.algo.batch_size, cfg.algo.gamma) == (sb3["learning_rate"], 32, sb3["gamma"])
    assert (cfg.algo.train_every, cfg.algo.learning_starts, cfg.buffer.capacity) == (
        sb3["train_freq"],
        sb3["learning_starts"],
        sb3["buffer_size"],
    )
    assert cfg.algo.target_update_every * cfg.algo.train_every == sb3["target_update_interval"]
    assert (cfg.network.encoder, list(cfg.network.hidden_sizes)) == ("nature_cnn", [512])


def test_the_atari_cases_keep_one_update_per_four_env_steps_with_many_envs():
    dqn, iqn, rainbow = benchmark.atari_cases(
        parse(
            "atari", "--num-envs", "8", "--vectorization", "async", "--steps", "800", "--algos", "dqn", "iqn", "rainbow"
        )
    )
    sb3 = dqn.peer["kwargs"]
    assert (sb3["train_freq"], sb3["gradient_steps"]) == (1, 2)  # SB3 counts vector steps of 8
    assert dqn.peer["env"] == {"atari": "ALE/Pong-v5", "num_envs": 8, "subprocesses": True}
    for case, preset in ((dqn, None), (iqn, "iqn_atari"), (rainbow, "rainbow_atari")):
        cfg = compose_config(*case.ours, "seed=0")
        assert (cfg.env.num_envs, cfg.env.vectorization, cfg.preset and cfg.preset.name) == (8, "async", preset)
        assert (cfg.algo.batch_size, cfg.algo.train_every, cfg.algo.gradient_steps) == (32, 4, 1)
        assert case.window == [1000, 1800] and (case.peer is None) == (preset is not None)
    with pytest.raises(ConfigError, match="--num-envs 6: --learning-starts and --steps must be multiples of it"):
        benchmark.atari_cases(parse("atari", "--num-envs", "6"))


@pytest.mark.slow  # ~25 s each: the smallest budget the command takes, one seed, both sides
@pytest.mark.parametrize(
    "command",
    [
        ["minatar", "--games", "Breakout", "--algos", "dqn", "--steps", "300", "--learning-starts", "100"],
        ["atari", "--steps", "100", "--learning-starts", "100", "--capacity", "1000"],
    ],
)
def test_a_tiny_minatar_or_atari_run_of_both_sides_writes_its_record(tmp_path, command):
    pytest.importorskip("sb3_contrib")
    pytest.importorskip("minatar" if command[0] == "minatar" else "ale_py")
    result = run(*command, "--seeds", "1", "--out", str(tmp_path), "--record", str(tmp_path / "tiny.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads((tmp_path / "tiny.json").read_text())["rows"][0]
    assert row["seeds_done"] == "1/1" and row["per_seed"]["ours_sps"][0] and row["per_seed"]["peer_sps"][0]


@pytest.mark.slow  # ~40 s: two tiny cases on each side, then the same command again
def test_a_tiny_run_of_both_sides_writes_its_record_and_reuses_its_runs(tmp_path):
    pytest.importorskip("sb3_contrib")
    command = [
        "cartpole",
        "--algos",
        "qr_dqn",
        "--steps",
        "1100",
        "--seeds",
        "1",
        "--out",
        str(tmp_path),
        "--record",
        str(tmp_path / "tiny.json"),
    ]
    first = run(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    record = json.loads((tmp_path / "tiny.json").read_text())
    assert [r["id"] for r in record["rows"]] == ["qr_dqn_zoo", "qr_dqn_per_step"]
    assert record["peer"]["version"] and record["rows"][1]["per_seed"]["peer_return"][0] is not None
    assert record["rows"][1]["per_seed"]["load"][0] >= 0
    assert record["machine"]["load"].endswith("(1 min, as each seed finished)")
    again = run(*command)
    assert again.returncode == 0 and again.stderr.count("found, reused") == 4, again.stderr[-3000:]


@pytest.mark.slow  # ~30 s: 4,000 random steps (TD3's first update is at 10,000) and two evaluations a side
def test_a_tiny_suite_run_records_each_sides_evaluations_during_training(tmp_path):
    pytest.importorskip("stable_baselines3")
    temp = tmp_path / "temp"
    temp.mkdir()
    result = run(
        "suite",
        "continuous",
        "--rows",
        "td3_pendulum",
        "--steps",
        "4000",
        "--seeds",
        "1",
        "--out",
        str(tmp_path / "out"),
        "--record",
        str(tmp_path / "tiny.json"),
        env={"TMPDIR": str(temp)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert not list(temp.glob("SB3-*"))  # SB3's logger folder, left behind by every peer run unless replaced
    row = json.loads((tmp_path / "tiny.json").read_text())["rows"][0]
    assert row["curve_steps"] == [2000, 4000]  # the preset evaluates every 2,000 steps
    for side in ("ours", "peer"):
        (curve,) = row["per_seed"][f"{side}_curve"]
        assert len(curve) == 2 and curve[-1] == row["per_seed"][f"{side}_return"][0] < -200  # no update yet


def test_vector_envs_times_each_vectorization_and_records_its_ratio_to_sync(tmp_path, capsys):
    import vector_envs

    out = tmp_path / "vector_envs_cartpole.json"
    vector_envs.main(
        [
            "--env",
            "cartpole",
            "--envs",
            "2",
            "--modes",
            "sync",
            "async",
            "--steps",
            "50",
            "--rounds",
            "2",
            "--record",
            str(out),
        ]
    )
    record = json.loads(out.read_text())
    assert check_record(record, out.stem) == []
    sync, asynchronous = record["rows"]
    assert sync["summary"]["ratio"] == 1.0 and len(asynchronous["per_seed"]["steps_per_s"]) == 2
    assert "| async |" in capsys.readouterr().out


def test_an_sbx_record_names_sbx_and_holds_its_compile_seconds_apart(tmp_path):
    args = parse("suite", "continuous", "--peer", "sbx", "--rows", "droq_pendulum", "redq_pendulum", out=tmp_path)
    droq, redq = benchmark.suite_cases(args)
    assert redq.peer is None  # no peer has REDQ: ours alone
    for seed in (0, 1):
        for case, side in ((droq, "ours"), (droq, "peer"), (redq, "ours")):
            path = benchmark.job_for(case, side, seed, args)[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            result = {"wall_s": 10.0 + seed, "steps": 3000, "eval_return": -150.0 - seed}
            path.write_text(json.dumps({**result, "compile_s": 2.0} if side == "peer" else result))
    record = benchmark.record([droq, redq], [0, 1], args, ["suite", "continuous", "--peer", "sbx"], 0.0)
    assert record["peer"] is None or record["peer"]["name"] == "SBX"  # None where the bench extra is not installed
    assert "SBX compile (s)" in [c["header"] for c in record["columns"]]
    assert record["rows"][0]["per_seed"]["peer_compile"] == [2.0, 2.0]
    assert "peer_compile" not in record["rows"][1]["per_seed"]
    assert check_record(record, record["name"]) == [] and median_problems(record) == []
    assert "| droq_pendulum | 2/2 |" in rows_table(record) and "| redq_pendulum | 2/2 |" in rows_table(record)
    assert any(note.startswith("droq_pendulum: SBX's SAC updates the actor") for note in record["notes"])


def test_sbx_runs_on_one_core():
    assert benchmark.ONE_CORE["XLA_FLAGS"] == "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    assert benchmark.ONE_CORE["OMP_NUM_THREADS"] == "1" and benchmark.ONE_CORE["JAX_PLATFORMS"] == "cpu"


@pytest.mark.slow  # ~1 min on a loaded machine, most of it JAX compiling: a tiny SBX DroQ run in the peer's process
def test_a_tiny_sbx_droq_run_reports_its_compile_seconds(tmp_path):
    if importlib.util.find_spec("sbx") is None:  # not imported here: JAX's absl logs would keep our captured stderr
        pytest.skip("sbx is not installed (the bench extra)")
    spec = {
        "algo": "droq",
        "lib": "sbx",
        "policy": "MlpPolicy",
        "env": {"gym": "Pendulum-v1"},
        "kwargs": {"learning_starts": 50, "batch_size": 16, "gradient_steps": 2, "policy_delay": 2},
        "policy_kwargs": {"net_arch": [8, 8], "dropout_rate": 0.01, "layer_norm": True},
        "steps": 60,
    }
    job = {"spec": spec, "seed": 0, "eval_episodes": 1, "device": "cpu"}
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmarks" / "benchmark.py"), "--worker", "peer", json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, **benchmark.ONE_CORE},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith(benchmark.RESULT))
    found = json.loads(line.removeprefix(benchmark.RESULT))
    assert found["steps"] == 60 and found["updates"] == 20  # 10 phases of 2 updates after 50 random steps
    assert 0 < found["compile_s"] < found["wall_s"] and found["eval_return"] < 0


def test_the_qr_dqn_curves_case_reads_both_sides_as_an_early_stop_at_500_would(tmp_path):
    """Only by name; both sides evaluated every 2,500 steps; each side's first evaluation at 500 and what
    a stop there keeps, from the curves (SB3's last evaluation falls at 50,176, a whole number of phases)."""
    assert "qr_dqn_curves" not in [c.id for c in benchmark.cartpole_cases(parse("cartpole", "--algos", "qr_dqn"))]
    args = parse("cartpole", "--algos", "qr_dqn", "--rows", "qr_dqn_curves", "--seeds", "2", out=tmp_path)
    (case,) = benchmark.cartpole_cases(args)
    assert case.stop_at == 500 and case.peer["curve"] == {"every": 2500, "episodes": 10}
    assert "train.eval_every=2500" in case.ours and "train.stop_at_return=null" in case.ours
    steps = benchmark.curve_steps(case)
    curves = {0: [100.0] * 9 + [500.0] + [300.0] * 10, 1: [100.0] * 20}  # seed 0 reaches 500 at 25,000
    for seed, returns in curves.items():
        job, path = benchmark.job_for(case, "peer", seed, args)
        path.parent.mkdir(parents=True, exist_ok=True)
        curve = {"steps": [*steps[:-1], 50_176], "returns": returns}
        path.write_text(json.dumps({"wall_s": 1.0, "steps": 50_176, "eval_return": returns[-1], "curve": curve}))
    values = benchmark.per_seed_values(case, [0, 1], args)
    assert values["peer_solved_at"] == [25_000, None]
    assert values["peer_stopped_return"] == [500.0, 100.0]
