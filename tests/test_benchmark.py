"""scripts/benchmarks/benchmark.py: the hyperparameter matching by hand, and tiny smoke runs of the script
(our side and the floor always; the SB3 side when stable-baselines3 is installed)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import yaml

from rl_hydra.buffers import compiled_sum_tree
from tests.conftest import ROOT, compose_config

sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))
from benchmark_match import PER_STEP, ZOO, Setting, expected_updates, our_overrides, sb3_job, target_update_every  # noqa: E402

ARGS = argparse.Namespace(device="cpu", eval_episodes=10)
TINY = ["--pairs", "1", "--zoo-steps", "1100", "--per-step-steps", "1020", "--solve-steps", "1100",
        "--eval-episodes", "2", "--redq-steps", "36", "--redq-learning-starts", "32", "--ensemble-iters", "2",
        "--ensemble-repeats", "1"]


def test_target_sync_interval_in_env_steps_becomes_updates():
    # zoo: SB3 syncs every 10 env steps, a phase of 128 updates every 256 steps -> once per phase
    assert target_update_every(ZOO["dqn"]) == 128
    # one update per env step: 10 env steps = 10 updates
    assert target_update_every({**ZOO["dqn"], **PER_STEP}) == 10
    # 4 updates every 2 steps, sync every 10 steps = every 5 phases = 20 updates
    assert target_update_every({**ZOO["dqn"], "train_freq": 2, "gradient_steps": 4}) == 20
    with pytest.raises(ValueError, match="not a multiple"):
        target_update_every({**ZOO["dqn"], "train_freq": 3})


def test_expected_updates_count_the_phases_from_learning_starts():
    # phases at 1024, 1280, ..., 49920: 192 phases of 128 updates
    assert expected_updates(ZOO["dqn"], 50_000) == 192 * 128
    # one update at every step from 1000 to 20000
    assert expected_updates({**ZOO["dqn"], **PER_STEP}, 20_000) == 19_001


@pytest.mark.parametrize("algo", ["dqn", "qr_dqn"])
def test_our_config_carries_sb3s_hyperparameters(algo):
    hp = {**ZOO[algo], **PER_STEP}
    cfg = compose_config(*our_overrides(Setting(algo, "per_step", 20_000, hp), seed=3, args=ARGS))
    assert (cfg.seed, cfg.torch_threads, cfg.compile, cfg.env.id) == (3, 1, False, "CartPole-v1")
    assert (cfg.train.total_steps, cfg.train.eval_every, cfg.train.stop_at_return) == (20_000, 20_000, None)
    assert cfg.algo.optimizer.lr == 2.3e-3 and cfg.algo.batch_size == 128 and cfg.buffer.capacity == 100_000
    assert (cfg.algo.learning_starts, cfg.algo.train_every, cfg.algo.gradient_steps) == (1000, 1, 1)
    assert (cfg.algo.target_update_every, cfg.algo.tau, cfg.algo.gamma) == (10, 1.0, 0.99)
    assert (cfg.algo.exploration.start, cfg.algo.exploration.end, cfg.algo.exploration.fraction) == (1.0, 0.04, 0.16)
    assert list(cfg.network.hidden_sizes) == [256, 256] and cfg.algo.final_lr_fraction == 1.0
    if algo == "qr_dqn":  # sb3-contrib: no clipping, Adam eps = 0.01 / batch size
        assert cfg.algo.num_quantiles == 10 and cfg.algo.max_grad_norm is None
        assert cfg.algo.optimizer.eps == 0.01 / 128
    else:
        assert cfg.algo.max_grad_norm == 10.0 and cfg.algo.loss == "huber"
    job = sb3_job(Setting(algo, "per_step", 20_000, hp), seed=3, args=ARGS)
    assert job["kwargs"]["target_update_interval"] == 10 and job["eval_seed"] == 1_000_003
    assert job["kwargs"]["policy_kwargs"]["net_arch"] == [256, 256]


def run_benchmark(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "benchmarks" / "benchmark.py"), *TINY, *args],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "failed" not in result.stderr, result.stderr[-3000:]
    return result


@pytest.mark.slow  # ~15 s: four settings end to end
def test_our_side_the_floor_and_redq_run_without_sb3(tmp_path):
    out = tmp_path / "bench.md"
    result = run_benchmark("--only", "ours", "--algos", "dqn", "--suites", "zoo", "floor", "redq",
                           "--out", str(out))
    assert out.read_text() == result.stdout
    for heading in ("## dqn, zoo: 1,100 steps", "## The floor", "## REDQ"):
        assert heading in result.stdout
    assert "| ours wall (s) | ours steps/s | ours final eval |" in result.stdout
    assert "SB3 wall" not in result.stdout.split("## The floor")[0]
    floor_row = next(line for line in result.stdout.splitlines() if line.startswith("| dqn zoo |"))
    assert "| 128 |" in floor_row and "| 1,100 |" in floor_row  # one phase of 128 updates at step 1024
    assert "| ours / (its updates + M pure env steps) |" in result.stdout
    assert "batched / looped" in result.stdout and "REDQ run, env steps/s" in result.stdout


@pytest.mark.slow  # needs the bench extra, which CI installs for the slow tests
def test_both_sides_run():
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("sb3_contrib")
    result = run_benchmark("--algos", "qr_dqn", "--suites", "per_step")
    assert "ours / SB3 wall" in result.stdout and "| median |" in result.stdout
    # SB3 trains once num_timesteps > learning_starts (from step 1001), ours from step 1000
    assert "Updates per run (median): ours 21, sb3 20" in result.stdout


def test_sides_alternate_and_every_table_is_written(monkeypatch):
    import benchmark

    calls, floor_jobs = [], []

    def fake_run_job(job, label):
        calls.append(label)
        if job["kind"] == "floor":  # halves of a floor of 0.5 s in the first pair and 1.0 s in the second
            floor_jobs.append(job)
            pair = (len(floor_jobs) + 1) // 2
            return {"update_s": 0.2 * pair, "env_s": 0.05 * pair, "optimizer": "LeanAdam"}
        if job["kind"] == "sb3":
            return {"wall_s": 2.0, "steps": 100, "updates": 128, "eval_return": 500.0}
        return {"wall_s": 1.0, "update_s": 0.8, "steps": 100, "updates": 128, "eval_return": 500.0,
                "solved_at_step": 2500}

    monkeypatch.setattr(benchmark, "run_job", fake_run_job)
    args = benchmark.build_parser().parse_args(["--pairs", "2", "--algos", "dqn", "--suites", "zoo", "solve",
                                                "floor", "--compile"])
    settings, plan = benchmark.build_plan(args, with_sb3=True)
    results = benchmark.run_pairs(plan, args)
    sides = [label.split(": ")[1].split()[0] for label in calls]
    # the floor's halves just before and just after our run; the other sides reverse from pair to pair
    assert sides == ["floor", "ours", "floor", "sb3", "ours_compiled", "ours_preset",
                     "ours_preset", "ours_compiled", "sb3", "floor", "ours", "floor"]
    assert [job["updates"] for job in floor_jobs] == [12_288, 12_288] * 2  # the run's 24,576, halved
    assert [job["env_steps"] for job in floor_jobs] == [25_000, 25_000] * 2
    text = benchmark.report(args, {}, settings, results, True, None)
    assert "| median |  | 1.0 | 2.0 | 0.50 | 100 | 50 | 500.0 | 500.0 |" in text
    assert "## Time to solve" in text and "| 2,500 |" in text and "## compile=true against" in text
    # ratios are medians of per-pair ratios (1/0.5 and 1/1.0 -> 1.5), not ratios of medians (1/0.75)
    floor_row = next(line for line in text.splitlines() if line.startswith("| dqn zoo |"))
    assert floor_row.endswith("| 0.75 | 1.0 | 1.50 | 2.00, 1.00 | 2.0 | 3.00 |"), floor_row
    # inside the run: 1.0 s over its own 0.8 s of updates plus the pair's 0.1 or 0.2 s of env steps
    inside_row = [line for line in text.splitlines() if line.startswith("| dqn zoo |")][1]
    assert inside_row == "| dqn zoo | 1.0 | 0.80 | 0.20 | 1.06 |", inside_row


def test_hot_path_script_prints_every_piece_and_its_ratio():
    result = subprocess.run([sys.executable, "scripts/benchmarks/bench_hot_path.py", "--rounds", "1", "--calls", "10"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for piece in ("numpy forward", "torch forward", "LeanSyncVectorEnv", "gymnasium SyncVectorEnv",
                  "LeanAdam", "torch Adam(fused=True)", "sample_batches(64, 128)", "128 x sample(64)",
                  "closed-form gradient", "autograd, term by term", "QR-DQN (10 quantiles)",
                  "QR-DQN (170, batch 128)"):
        line = next(line for line in lines if piece in line)
        assert line.rstrip().endswith("x the first") and float(line.split()[-5]) > 0


def test_prioritized_script_prints_every_candidate_and_its_ratio():
    result = subprocess.run([sys.executable, "scripts/benchmarks/bench_prioritized.py", "--rounds", "1", "--calls", "8",
                             "--capacity", "2000", "--frame-capacity", "200", "--update-calls", "4"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    cpu_lines = [line for line in result.stdout.splitlines() if line.lstrip().startswith("cpu")]
    assert len(cpu_lines) == 8  # sampling at 4 and 84 floats and of frames, each at batch 32 and 64; the update at both
    trees = ("numpy", "numba") if compiled_sum_tree.numba is not None else ("numpy",)
    for line in cpu_lines:
        assert "uniform" in line and all(f"prioritized, {tree} tree" in line for tree in trees), line
        assert line.count("x)") == len(trees) + ("compiled tree alone" in line), line
    assert sum("compiled tree alone" in line for line in cpu_lines) == (6 if "numba" in trees else 0)


def test_loop_timers_time_every_piece_of_a_short_run():
    result = subprocess.run([sys.executable, "scripts/benchmarks/loop_timers.py", "--algo", "qr_dqn", "--steps", "1100"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[2:]}
    assert "128 updates" in result.stdout.splitlines()[0]  # one phase, at step 1024
    assert rows["update"][2] == "128" and rows["buffer.sample"][2] == "1"  # the phase's batches in one gather
    count = lambda piece: int(rows[piece][2].replace(",", ""))  # noqa: E731
    assert count("act") >= 100 and count("env.step") >= 1100  # training acts from step 1000; evaluation too


def test_minatar_script_refuses_seeds_outside_its_range(tmp_path):
    command = [sys.executable, str(ROOT / "scripts" / "benchmarks" / "minatar_sb3.py"), "--seeds", "3",
               "--only-seeds", "2", "3", "7", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("error: --only-seeds 3 7: --seeds 3 runs seeds 0 to 2")
    assert not any(tmp_path.iterdir())


def test_minatar_script_refuses_algos_without_an_sb3_side_when_only_sb3_trains(tmp_path):
    command = [sys.executable, str(ROOT / "scripts" / "benchmarks" / "minatar_sb3.py"), "--algo", "dqn", "iqn",
               "rainbow", "--sides", "sb3", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith(
        "error: --algo iqn rainbow: no SB3 side to train; add --sides ours")
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # ~20 s; needs the bench extra (SB3) and the minatar extra
def test_minatar_script_trains_only_the_seeds_asked_and_skips_them_when_run_again(tmp_path):
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("minatar")
    command = [sys.executable, str(ROOT / "scripts" / "benchmarks" / "minatar_sb3.py"), "--games", "Breakout",
               "--seeds", "2", "--only-seeds", "1", "--steps", "300", "--learning-starts", "100",
               "--eval-episodes", "1", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "ours_dqn_Breakout_300_seed1.json", "sb3_dqn_Breakout_300_seed1.json"]
    row = next(line for line in result.stdout.splitlines() if line.startswith("| dqn | Breakout |")).split("|")
    assert row[3].strip() == "1"                               # seeds found
    per_seed = row[-2].strip()                                 # "ours, SB3" per seed: seed 0 has none
    assert per_seed.startswith("-, -; ") and per_seed.count(";") == 1, per_seed
    again = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert again.returncode == 0 and again.stdout.count("skip ") == 2, again.stdout[-3000:]


@pytest.mark.slow  # ~10 s; needs the minatar extra
def test_minatar_script_trains_ours_alone_with_other_quantile_counts_under_their_own_name(tmp_path):
    pytest.importorskip("minatar")
    command = [sys.executable, str(ROOT / "scripts" / "benchmarks" / "minatar_sb3.py"), "--games", "Breakout",
               "--algo", "qr_dqn", "--quantiles", "5", "--sides", "ours", "--seeds", "1", "--steps", "300",
               "--learning-starts", "100", "--eval-episodes", "1", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["ours_qr_dqn5_Breakout_300_seed0.json"]
    config = (tmp_path / "runs" / "qr_dqn5_Breakout_300" / "seed_0" / ".hydra" / "config.yaml").read_text()
    assert "num_quantiles: 5\n" in config
    row = next(line for line in result.stdout.splitlines() if line.startswith("| qr_dqn5 | Breakout |")).split("|")
    assert row[3].strip() == "1" and row[4].strip() and not row[5].strip()   # ours' return, no SB3 return


@pytest.mark.slow  # ~15 s; needs the minatar extra
def test_minatar_script_trains_rainbow_composed_from_its_parts_on_our_side(tmp_path):
    pytest.importorskip("minatar")
    command = [sys.executable, str(ROOT / "scripts" / "benchmarks" / "minatar_sb3.py"), "--games", "Breakout",
               "--algo", "rainbow", "--sides", "ours", "--seeds", "1", "--steps", "300",
               "--learning-starts", "100", "--eval-episodes", "1", "--out", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [p.name for p in (tmp_path / "results").iterdir()] == ["ours_rainbow_Breakout_300_seed0.json"]
    config = yaml.safe_load((tmp_path / "runs" / "rainbow_Breakout_300" / "seed_0" / ".hydra" / "config.yaml").read_text())
    assert config["algo"]["_target_"].endswith("C51") and config["algo"]["n_step"] == 3 and config["algo"]["double_q"]
    assert config["buffer"]["_target_"].endswith("PrioritizedReplayBuffer")
    assert config["network"]["dueling"] and config["network"]["noisy"] and config["network"]["encoder"] == "minatar_cnn"
    assert config["algo"]["max_grad_norm"] is None and config["algo"]["optimizer"]["eps"] == 0.01 / 32
