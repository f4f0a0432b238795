"""A suite's rows side by side with Stable-Baselines3 / sb3-contrib on the same hyperparameters.

    python scripts/benchmarks/suite_sb3.py discrete_zoo --seeds 3 [--rows dqn_acrobot ...] [--out DIR]
    python scripts/benchmarks/suite_sb3.py continuous --seeds 3
    python scripts/benchmarks/suite_sb3.py discrete_zoo --seeds 1 --steps 2000 --out /tmp/s   # smoke test
    python scripts/benchmarks/suite_sb3.py discrete_zoo --table-only                        # train nothing

Our side of each (row, seed) is exactly the suite's run (rl_hydra/suite.py: `train.py -m algo=A
env=E [the row's overrides] seed=S [train.total_steps=N] hydra.sweep.dir=<out>/<algo>_<env>`), in
the suite's layout, so `python scripts/suite.py <suite> --table-only` shows it and the suite skips
it; a finished run found there is reused, not trained again. SB3's side is DQN (stable_baselines3), QR-DQN
(sb3_contrib) or SAC (stable_baselines3) with RL Baselines3 Zoo's hyperparameters for the env
(ZOO below, in SB3's own names), written to `<out>/sb3/<algo>_<env>/seed_<S>.json`; a rerun skips
the seeds found there. IQN rows have no SB3 counterpart and are skipped.

Before anything runs, each row's composed config is checked against its SB3 hyperparameters
translated to our keys (`expected_config`); a difference is an error naming the key. A preset
tuned beyond the Zoo (3-step returns on MountainCar) differs: suite `discrete_zoo` runs the
discrete rows with those parts turned back to the Zoo's values.

Runs go one at a time, each in a fresh process with one torch thread: for each seed, for each
row, ours and SB3's back to back, SB3 first on odd seeds. Returns are the final greedy
evaluation (10 episodes, env i seeded seed + 1e6 + i) on both sides. Our wall time is
summary.json's wall_time_s: the whole training loop, with its periodic evaluations and
checkpoints and the final evaluation; SB3's is model.learn() alone (it evaluates nothing inside).
The table goes to `<out>/sb3_comparison.md` and stdout.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark import run_job  # noqa: E402
from benchmark_match import Setting, sb3_job, target_update_every  # noqa: E402

from rl_hydra.config import ConfigError, check_int  # noqa: E402
from rl_hydra.suite import Row, fmt, load_suite, suite_names, sweep_command  # noqa: E402

EVAL_EPISODES = 10  # the final evaluation of both sides (our train.eval_episodes, checked)
DQN_FAMILY = ("dqn", "qr_dqn")


@dataclass
class Zoo:
    """One row's SB3 run: `hp` are the keyword arguments SB3 gets (net_arch and n_quantiles go into
    policy_kwargs), in SB3's names and values; `steps` is the Zoo's budget (n_timesteps)."""
    algo: str
    hp: dict
    steps: int
    source: str
    notes: list[str] = field(default_factory=list)


# rl-baselines3-zoo hyperparams/dqn.yml, qrdqn.yml and sac.yml (LunarLander: its -v2 entry)
_DQN_ONE_UPDATE_PER_STEP = dict(learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0,
                                gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
                                exploration_fraction=0.12, exploration_final_eps=0.1, net_arch=[256, 256])
_MOUNTAIN_CAR = dict(learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000, gamma=0.98,
                     target_update_interval=600, train_freq=16, gradient_steps=8, exploration_fraction=0.2,
                     exploration_final_eps=0.07, net_arch=[256, 256])
ZOO = {
    "dqn_acrobot": Zoo("dqn", dict(_DQN_ONE_UPDATE_PER_STEP), 100_000, "dqn.yml Acrobot-v1"),
    "dqn_mountain_car": Zoo("dqn", dict(_MOUNTAIN_CAR), 120_000, "dqn.yml MountainCar-v0"),
    "dqn_lunar_lander": Zoo("dqn", dict(_DQN_ONE_UPDATE_PER_STEP), 100_000, "dqn.yml LunarLander-v2"),
    "qr_dqn_acrobot": Zoo("qr_dqn", dict(_DQN_ONE_UPDATE_PER_STEP, n_quantiles=25), 100_000, "qrdqn.yml Acrobot-v1"),
    "qr_dqn_mountain_car": Zoo("qr_dqn", dict(_MOUNTAIN_CAR, n_quantiles=25), 120_000, "qrdqn.yml MountainCar-v0"),
    "qr_dqn_lunar_lander": Zoo("qr_dqn", dict(
        learning_rate="lin_1.5e-3", batch_size=128, buffer_size=100_000, learning_starts=10_000, gamma=0.995,
        target_update_interval=1, train_freq=256, gradient_steps=-1, exploration_fraction=0.24,
        exploration_final_eps=0.18, net_arch=[256, 256], n_quantiles=25), 100_000, "qrdqn.yml LunarLander-v2",
        ["25 quantiles on both sides, not the Zoo's 170: our preset's choice for a CPU "
         "(conf/algo_env/qr_dqn_lunar_lander.yaml), given to SB3 too"]),
    "sac_mountain_car_continuous": Zoo("sac", dict(
        learning_rate=3e-4, buffer_size=50_000, batch_size=512, ent_coef=0.1, train_freq=32, gradient_steps=32,
        gamma=0.9999, tau=0.01, learning_starts=0, use_sde=True, log_std_init=-3.67, net_arch=[64, 64]), 50_000,
        "sac.yml MountainCarContinuous-v0"),
    # the Zoo's MuJoCo entry: SB3's defaults with 10,000 random steps first (net_arch: SB3 SAC's default)
    "sac_hopper": Zoo("sac", dict(learning_starts=10_000, net_arch=[256, 256]), 1_000_000, "sac.yml Hopper"),
}

# SB3 2.9.2's defaults for what the Zoo leaves out (tests/test_suite_sb3.py checks them against
# the installed classes); SB3's Adam has torch's defaults, sb3-contrib's QR-DQN eps 0.01 / batch
SB3_DEFAULTS = {
    "dqn": dict(tau=1.0, exploration_initial_eps=1.0, max_grad_norm=10),
    "qr_dqn": dict(tau=1.0, exploration_initial_eps=1.0, max_grad_norm=None),
    "sac": dict(learning_rate=3e-4, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
                gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto", target_update_interval=1,
                target_entropy="auto", use_sde=False, sde_sample_freq=-1),
}
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)  # torch.optim.Adam's defaults
SB3_LOG_STD_INIT = -3.0  # SAC's policy's log_std_init (a policy keyword, so not in SB3_DEFAULTS)


# --- the translation check ---------------------------------------------------------------------
def learning_rate(value) -> tuple[float, float]:
    """SB3's learning_rate (a number, or the Zoo's lin_<lr>) as (our lr, our final_lr_fraction)."""
    if isinstance(value, str):
        if not value.startswith("lin_"):
            raise ValueError(f"learning_rate={value!r}: only numbers and lin_<lr> are translated")
        return float(value.removeprefix("lin_")), 0.0
    return float(value), 1.0


def adam(prefix: str, lr, eps: float) -> tuple[dict, float]:
    our_lr, final = learning_rate(lr)
    return {f"{prefix}.lr": our_lr, f"{prefix}.eps": eps, f"{prefix}.betas": list(ADAM["betas"]),
            f"{prefix}.weight_decay": ADAM["weight_decay"]}, final


def expected_config(zoo: Zoo) -> tuple[dict, list[str]]:
    """Our config keys and the values that give SB3's run, and notes on what is not exact."""
    hp = {**SB3_DEFAULTS[zoo.algo], **zoo.hp}
    notes = list(zoo.notes)
    gradient_steps = hp["train_freq"] if hp["gradient_steps"] == -1 else hp["gradient_steps"]  # -1: as many as steps
    common = {"env.num_envs": 1, "algo.n_step": 1, "buffer._target_": "rl_hydra.buffers.replay.ReplayBuffer",
              "algo.batch_size": hp["batch_size"], "buffer.capacity": hp["buffer_size"],
              "algo.learning_starts": hp["learning_starts"], "algo.gamma": hp["gamma"], "algo.tau": hp["tau"],
              "algo.train_every": hp["train_freq"], "algo.gradient_steps": gradient_steps,
              "train.eval_episodes": EVAL_EPISODES}
    if zoo.algo in DQN_FAMILY:
        sync = {**hp, "gradient_steps": gradient_steps}
        interval, train_freq = hp["target_update_interval"], hp["train_freq"]
        if train_freq < interval and interval % train_freq:
            notes.append(f"target sync: SB3 syncs every {interval} env steps, i.e. after alternately "
                         f"{interval // train_freq} and {interval // train_freq + 1} phases of {gradient_steps} "
                         f"updates; ours every {target_update_every(sync, exact=False)} updates, SB3's mean")
        eps = 0.01 / hp["batch_size"] if zoo.algo == "qr_dqn" else ADAM["eps"]
        optimizer, final = adam("algo.optimizer", hp["learning_rate"], eps)
        expected = {**common, **optimizer, "algo.final_lr_fraction": final,
                    "algo.target_update_every": target_update_every(sync, exact=False), "algo.double_q": False,
                    "algo.exploration.start": hp["exploration_initial_eps"],
                    "algo.exploration.end": hp["exploration_final_eps"],
                    "algo.exploration.fraction": hp["exploration_fraction"], "algo.max_grad_norm": hp["max_grad_norm"],
                    "network.hidden_sizes": hp["net_arch"], "network.activation": "relu",
                    "network.layer_norm": False, "network.dropout": 0.0,
                    "network.dueling": False, "network.noisy": False}
        if zoo.algo == "qr_dqn":
            expected.update({"algo.num_quantiles": hp["n_quantiles"], "algo.kappa": 1.0})
        else:
            expected["algo.loss"] = "huber"
        if final != 1.0:
            notes.append(f"learning rate {hp['learning_rate']}: SB3 sets it from its progress at each training "
                         "phase, ours from the env step at each update")
        return expected, notes
    if hp["target_update_interval"] != 1:
        raise ValueError("SAC: only target_update_interval=1 has a counterpart here")
    ent = hp["ent_coef"]
    learned = isinstance(ent, str)
    alpha = float(ent.split("_", 1)[1]) if learned and "_" in ent else (1.0 if learned else float(ent))
    expected = {**common, "algo.ensemble_size": 2, "algo.subset_size": 2, "algo.actor_q": "min",
                "algo.policy_delay": 1, "algo.learn_alpha": learned, "algo.initial_alpha": alpha,
                "algo.target_entropy": hp["target_entropy"], "algo.max_grad_norm": None}
    for name in ("actor", "critic", "alpha"):
        optimizer, final = adam(f"algo.{name}_optimizer", hp["learning_rate"], ADAM["eps"])
        if final != 1.0:
            raise ValueError("SAC: a decaying learning rate has no counterpart here")
        expected.update(optimizer)
    for net in ("actor", "critic"):
        expected.update({f"network.{net}.hidden_sizes": hp["net_arch"], f"network.{net}.activation": "relu"})
    expected["network.actor.gsde"] = hp["use_sde"]
    if hp["use_sde"]:   # SB3's gSDE: full_std, use_expln=False, clip_mean=2.0, learn_features: ours throughout
        expected.update({"network.actor.gsde_log_std_init": hp.get("log_std_init", SB3_LOG_STD_INIT),
                         "network.actor.gsde_clip_mean": 2.0, "algo.gsde_resample_every": hp["sde_sample_freq"]})
    return expected, notes


def our_value(cfg, key: str):
    """`key` of the composed config; an optimizer option it does not set has the class's default."""
    from omegaconf import OmegaConf

    missing = object()
    value = OmegaConf.select(cfg, key, default=missing)
    if value is missing:
        prefix, option = key.rsplit(".", 1)
        target = OmegaConf.select(cfg, f"{prefix}._target_")
        if target is None:
            return None
        import hydra.utils

        parameter = inspect.signature(hydra.utils.get_object(target)).parameters.get(option)
        return None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


def same(ours, expected) -> bool:
    if isinstance(expected, (list, tuple)):
        return isinstance(ours, (list, tuple)) and len(ours) == len(expected) and all(map(same, ours, expected))
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return ours == expected and type(ours) is type(expected)
    return isinstance(ours, (int, float)) and not isinstance(ours, bool) and math.isclose(ours, expected, rel_tol=1e-9)


def mismatches(cfg, zoo: Zoo) -> list[str]:
    """Each key where our composed config differs from SB3's hyperparameters, said in one line."""
    import hydra.utils
    import torch

    expected, _ = expected_config(zoo)
    found = [f"{key} is {our_value(cfg, key)!r} in our config; SB3's run means {value!r}"
             for key, value in expected.items() if not same(our_value(cfg, key), value)]
    for prefix in ("algo.optimizer",) if zoo.algo in DQN_FAMILY else [f"algo.{n}_optimizer" for n in
                                                                        ("actor", "critic", "alpha")]:
        node = cfg.algo[prefix.split(".")[1]]
        if not isinstance(hydra.utils.instantiate(node)([torch.nn.Parameter(torch.zeros(1))]), torch.optim.Adam):
            found.append(f"{prefix}._target_ is {node._target_}, which makes no Adam (SB3's optimizer)")
    return found


def compose_row(row: Row, seed: int):
    from rl_hydra.api import compose_train_config

    return compose_train_config(*row.train_overrides(), f"seed={seed}")


def check_rows(rows: list[Row]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(errors by row, notes by row): our composed config of each row against its Zoo entry."""
    errors, notes = {}, {}
    for row in rows:
        zoo = ZOO[row.name]
        cfg = compose_row(row, 0)
        notes[row.name] = expected_config(zoo)[1]
        if cfg.train.total_steps != zoo.steps:
            notes[row.name].append(f"{cfg.train.total_steps:,} steps on both sides (the Zoo's budget: {zoo.steps:,})")
        found = mismatches(cfg, zoo)
        if found:
            errors[row.name] = found
    return errors, notes


# --- running -------------------------------------------------------------------------------------
def job_dir(row: Row, seed: int, out: Path) -> Path:
    """Where the suite's run of (row, seed) goes: Hydra names a sweep job from its overrides as
    the sweeper rewrote them (`false` becomes `False`), sorted, joined with commas
    (hydra.job.override_dirname; train.progress is left out)."""
    parsed = OverridesParser.create().parse_overrides([*row.train_overrides(), f"seed={seed}"])
    overrides = [f"{o.get_key_element()}={o.get_value_element_as_str()}" for o in parsed]
    return out / row.name / ",".join(sorted(o for o in overrides if not o.startswith("train.progress=")))


def finished_summary(row: Row, seed: int, out: Path, total_steps: int) -> dict | None:
    path = job_dir(row, seed, out) / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    if summary.get("status") != "completed" or summary.get("global_step", 0) < total_steps:
        return None
    return summary


def eval_env_steps(run_dir: Path, episodes: int) -> int | None:
    """Env steps of our run's evaluations (periodic and final), from metrics.csv."""
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return None
    with path.open() as f:
        lengths = [float(r["eval/length_mean"]) for r in csv.DictReader(f) if r.get("eval/length_mean")]
    return round(sum(lengths) * episodes)


def run_ours(row: Row, seed: int, out: Path, total_steps: int, label: str) -> dict | None:
    summary = finished_summary(row, seed, out, total_steps)
    if summary is not None:
        print(f"  {label}: finished run found, reused: {summary['wall_time_s']:.1f} s", file=sys.stderr, flush=True)
        return summary
    command = sweep_command(row, [seed], out, jobs=1)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    print(f"  {label} ...", end="", file=sys.stderr, flush=True)
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    process_s = time.perf_counter() - start
    summary = finished_summary(row, seed, out, total_steps)
    if proc.returncode or summary is None:
        print(f" failed (exit status {proc.returncode}; no finished summary.json in {job_dir(row, seed, out)}):\n"
              f"{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
        return None
    print(f" {summary['wall_time_s']:.1f} s (process {process_s:.1f} s)", file=sys.stderr, flush=True)
    return summary


def sb3_path(row: Row, seed: int, out: Path) -> Path:
    return out / "sb3" / row.name / f"seed_{seed}.json"


def run_sb3(row: Row, seed: int, out: Path, env_id: str, total_steps: int, label: str, info: dict) -> dict | None:
    path = sb3_path(row, seed, out)
    if path.is_file():
        result = json.loads(path.read_text())
        if result["total_steps"] != total_steps:
            raise SystemExit(f"error: {path} holds a run of {result['total_steps']} steps, not {total_steps}: "
                             f"use another --out")
        print(f"  {label}: result found, reused: {result['learn_s']:.1f} s", file=sys.stderr, flush=True)
        return result
    zoo = ZOO[row.name]
    args = argparse.Namespace(device="cpu", eval_episodes=EVAL_EPISODES)
    job = sb3_job(Setting(zoo.algo, "zoo", total_steps, zoo.hp), seed, args, env_id=env_id)
    result = run_job(job, label)
    if result is None:
        return None
    result = {"row": row.name, "algo": zoo.algo, "env_id": env_id, "seed": seed, "total_steps": total_steps,
              "kwargs": job["kwargs"], "eval_seed": job["eval_seed"], **result, "host": platform.node(),
              "versions": info, "finished_at": datetime.datetime.now().isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result


def run_rows(rows: list[Row], seeds: int, out: Path, info: dict) -> list[str]:
    """For each seed, each row: ours and SB3's back to back, SB3 first on odd seeds. Returns the
    runs that failed."""
    configs = {row.name: compose_row(row, 0) for row in rows}
    failed = []
    for seed in range(seeds):
        for row in rows:
            cfg = configs[row.name]
            steps = cfg.train.total_steps
            for side in ("ours", "sb3") if seed % 2 == 0 else ("sb3", "ours"):
                label = f"seed {seed}: {side} {row.name} ({steps:,} steps)"
                if side == "ours":
                    result = run_ours(row, seed, out, steps, label)
                else:
                    result = run_sb3(row, seed, out, cfg.env.id, steps, label, info)
                if result is None:
                    failed.append(label)
    return failed


# --- the table -----------------------------------------------------------------------------------
def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def collect(row: Row, seeds: int, out: Path) -> list[dict]:
    """Per seed: our and SB3's return, wall time and steps/s (None where that side has no result)."""
    steps = compose_row(row, 0).train.total_steps
    per_seed = []
    for seed in range(seeds):
        ours = finished_summary(row, seed, out, steps)
        path = sb3_path(row, seed, out)
        sb3 = json.loads(path.read_text()) if path.is_file() else None
        if ours is None and sb3 is None:
            continue
        per_seed.append({
            "seed": seed, "steps": steps,
            "ours_return": ours and ours["eval_return_mean"], "ours_wall": ours and ours["wall_time_s"],
            "ours_sps": ours and ours["global_step"] / ours["wall_time_s"],
            "ours_eval_steps": ours and eval_env_steps(job_dir(row, seed, out), EVAL_EPISODES),
            "sb3_return": sb3 and sb3["eval_return"], "sb3_wall": sb3 and sb3["learn_s"],
            "sb3_sps": sb3 and sb3["steps"] / sb3["learn_s"],
            "ratio": ours["wall_time_s"] / sb3["learn_s"] if ours and sb3 else None})
    return per_seed


def row_line(row: Row, per_seed: list[dict], seeds: int) -> str:
    ours_n = sum(s["ours_return"] is not None for s in per_seed)
    sb3_n = sum(s["sb3_return"] is not None for s in per_seed)
    ours_ret, sb3_ret = median(s["ours_return"] for s in per_seed), median(s["sb3_return"] for s in per_seed)
    ratios = [s["ratio"] for s in per_seed if s["ratio"] is not None]
    ratio = (f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else "-")
    verdict_return = "-" if ours_ret is None or sb3_ret is None else ("yes" if ours_ret >= sb3_ret else "no")
    verdict_wall = "-" if not ratios else ("yes" if statistics.median(ratios) <= 0.6 else "no")
    steps = per_seed[0]["steps"] if per_seed else None
    return (f"| {row.name} | {fmt(steps, 0)} | {ours_n}/{seeds} | {sb3_n}/{seeds} | {fmt(ours_ret)} | "
            f"{fmt(sb3_ret)} | {verdict_return} | {fmt(median(s['ours_wall'] for s in per_seed))} | "
            f"{fmt(median(s['sb3_wall'] for s in per_seed))} | {ratio} | {verdict_wall} | "
            f"{fmt(median(s['ours_sps'] for s in per_seed), 0)} | {fmt(median(s['sb3_sps'] for s in per_seed), 0)} |")


def seed_line(s: dict) -> str:
    eval_steps = f", {s['ours_eval_steps']:,} evaluation env steps" if s["ours_eval_steps"] is not None else ""
    ratio = f", ratio {s['ratio']:.2f}" if s["ratio"] is not None else ""
    return (f"seed {s['seed']}: ours {fmt(s['ours_return'])} in {fmt(s['ours_wall'])} s{eval_steps}; "
            f"SB3 {fmt(s['sb3_return'])} in {fmt(s['sb3_wall'])} s{ratio}")


def tables(suite_name: str, rows: list[Row], seeds: int, out: Path, notes: dict[str, list[str]], info: dict,
           skipped: list[str]) -> str:
    head = ["| row | steps | ours seeds | SB3 seeds | ours median return | SB3 median return | ours >= SB3 | "
            "ours median wall (s) | SB3 median wall (s) | wall ratio ours/SB3, median [min-max] | <= 0.6 | "
            "ours steps/s | SB3 steps/s |",
            "|---|---:|---:|---:|---:|---:|:---:|---:|---:|---|:---:|---:|---:|"]
    details = []
    for row in rows:
        per_seed = collect(row, seeds, out)
        head.append(row_line(row, per_seed, seeds))
        zoo = ZOO[row.name]
        details.append(f"- `{row.name}` (SB3: {'sb3_contrib.QRDQN' if zoo.algo == 'qr_dqn' else zoo.algo.upper()}, "
                       f"the Zoo's {zoo.source})")
        details += [f"  - {seed_line(s)}" for s in per_seed] or ["  - no result yet"]
        details += [f"  - note: {note}" for note in notes.get(row.name, [])]
    versions = ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("cpu", "cuda") and v)
    text = [f"## Suite `{suite_name}` side by side with SB3", "",
            f"Same machine ({info.get('cpu', '?')}; {versions}), one torch thread, CPU, one run at a time, "
            "ours and SB3 alternating (SB3 first on odd seeds). Return: the final greedy evaluation, 10 episodes "
            "seeded alike on both sides; median over seeds. Our wall is summary.json's wall_time_s, the whole "
            "training loop *including* our periodic evaluations (their env steps are listed per seed), "
            "checkpoints and the final evaluation; SB3's is model.learn() alone (no evaluation inside). "
            "Nothing is subtracted. The wall ratio is the median of the per-seed ratios; <= 0.6 tests that "
            "median, ours >= SB3 the median returns.", "", *head, "", *details]
    if skipped:
        text += ["", f"Rows without an SB3 counterpart, not run: {', '.join(skipped)}."]
    return "\n".join(text) + "\n"


# --- the command ---------------------------------------------------------------------------------
def select_rows(suite, names: list[str] | None) -> tuple[list[Row], list[str]]:
    """The suite's rows with an SB3 counterpart (restricted to `names`), and those without one."""
    if names:
        unknown = sorted(set(names) - {r.name for r in suite.rows})
        if unknown:
            raise ConfigError(f"--rows {' '.join(unknown)}: not rows of suite {suite.name}; "
                              f"choose among: {', '.join(r.name for r in suite.rows)}")
    chosen = [r for r in suite.rows if not names or r.name in names]
    return [r for r in chosen if r.name in ZOO], [r.name for r in chosen if r.name not in ZOO]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", help=f"a conf/suite/ name: {', '.join(suite_names())}")
    parser.add_argument("--seeds", type=int, help="seeds per row, 0..N-1 (default: the suite's own)")
    parser.add_argument("--rows", nargs="+", help="only these rows (<algo>_<env>)")
    parser.add_argument("--out", type=Path, help="the suite's directory (default: outputs/suites/<suite>)")
    parser.add_argument("--steps", type=int, help="override every row's budget (smoke tests; into another --out)")
    parser.add_argument("--table-only", action="store_true", help="write the table from the results there")
    args = parser.parse_args(argv)
    try:
        suite = load_suite(args.suite)
        seeds = check_int("--seeds", args.seeds, minimum=1) if args.seeds is not None else suite.seeds
        rows, skipped = select_rows(suite, args.rows)
        if args.steps is not None:
            for row in rows:
                row.steps = check_int("--steps", args.steps, minimum=1)
        errors, notes = check_rows(rows)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    if skipped:
        print(f"no SB3 counterpart, skipped: {', '.join(skipped)}", file=sys.stderr)
    if errors:
        for name, found in errors.items():
            for line in found:
                print(f"error: {name}: {line}", file=sys.stderr)
        print("error: our config and SB3's hyperparameters differ (above); nothing was run", file=sys.stderr)
        sys.exit(2)
    out = args.out or Path("outputs") / "suites" / suite.name
    info = run_job({"kind": "probe"}, "versions") or {}
    failed = [] if args.table_only else run_rows(rows, seeds, out, info)
    # the table: these rows, and every other row of the suite that already has results here
    shown = [r for r in select_rows(suite, None)[0]
             if r.name in {x.name for x in rows} or (out / r.name).is_dir() or (out / "sb3" / r.name).is_dir()]
    if args.steps is not None:
        for row in shown:
            row.steps = args.steps
    _, shown_notes = check_rows([r for r in shown if r.name not in notes])
    out.mkdir(parents=True, exist_ok=True)
    text = tables(suite.name, shown, seeds, out, {**notes, **shown_notes}, info, skipped)
    (out / "sb3_comparison.md").write_text(text)
    print(text, end="")
    if failed:
        print(f"error: runs that failed: {'; '.join(failed)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
