"""`hydra/launcher=packed`: a sweep's seeds trained in one process, each job its own run directory,
the same record as the basic launcher's job; packs split by the keys that change a tensor's shape;
bad launcher keys refused before anything is written; a signal stops every member at its step's end."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from rl_hydra.commands.launch import EXIT_INTERRUPTED
from rl_hydra.errors import BadArgument
from tests.cli.test_sweeps import UPDATES, short_names, summaries, sweep
from tests.conftest import ROOT, TINY, compose_config, metric_rows, run_cli

PACKED = "hydra/launcher=packed"


# DroQ's update draws from torch's generator (dropout, the actor's noise): in a pack, from its member's
@pytest.mark.parametrize("algo", [[], ["algo=droq", "env=pendulum"]], ids=["dqn", "droq"])
def test_a_pack_of_two_seeds_writes_what_two_solo_jobs_write(tmp_path, algo):
    packed, solo = tmp_path / "packed", tmp_path / "solo"
    args = ["seed=0,1", "fast_paths=false", *algo, *UPDATES, short_names("fast_paths", "algo", "env")]  # own updates
    output = sweep(packed, PACKED, *args)
    sweep(solo, *args)
    assert "Launching 2 jobs as 1 pack(s) of 2 member(s)" in output
    assert sorted(summaries(packed)) == sorted(summaries(solo)) == ["seed=0", "seed=1"]
    for name in ("seed=0", "seed=1"):
        assert metric_rows(packed / name) == metric_rows(solo / name), name  # bit for bit, as alone
        ours, theirs = summaries(packed)[name], summaries(solo)[name]
        assert ours["status"] == "completed" and ours["eval_return_mean"] == theirs["eval_return_mean"]
        assert (packed / name / ".hydra" / "overrides.yaml").read_text() == (
            solo / name / ".hydra" / "overrides.yaml"
        ).read_text()
        (session,) = json.loads((packed / name / "provenance.json").read_text())["sessions"]
        assert session["pack"] == {"size": 2, "member": int(name[-1]), "members": ["seed=0", "seed=1"]}
        log = (packed / name / "train.log").read_text()
        other = packed / ("seed=1" if name == "seed=0" else "seed=0")
        assert f"run directory: {packed / name}" in log and str(other) not in log  # each member's lines only


def test_keys_that_change_shapes_split_the_packs_and_the_line_says_which(tmp_path):
    output = sweep(
        tmp_path,
        PACKED,
        "seed=0,1",
        "network.hidden_sizes=[8],[16]",
        "hydra.launcher.n_jobs=2",
        *UPDATES,
        short_names(),
    )
    assert "Launching 4 jobs as 2 pack(s) of 2+2 member(s); network.hidden_sizes splits them" in output  # 2 at once
    assert output.count("pack: each member updates alone: 2 members, fewer than 4") == 2
    assert all(s["status"] == "completed" for s in summaries(tmp_path).values()) and len(summaries(tmp_path)) == 4


def test_bad_launcher_keys_are_one_line_and_write_nothing(tmp_path):
    for args, line in (
        (["hydra.launcher.pack_size=0"], "error: hydra.launcher.pack_size=0 is out of range; expected an integer >= 1"),
        (["hydra.launcher.n_jobs=0"], "error: hydra.launcher.n_jobs=0 is out of range; expected an integer >= 1"),
        (["device=cpu,auto"], "error: device=auto,cpu: the packed launcher trains a sweep on one device"),
        (
            ["buffer.capacity=1000000000"],
            "error: hydra.launcher.pack_size: a pack of 2 members of buffer.capacity=1000000000 needs about",
        ),
    ):
        sweep_dir = tmp_path / "sweep"
        result = run_cli("-m", PACKED, "seed=0,1", *TINY, *args, f"hydra.sweep.dir={sweep_dir}")
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1].startswith(line), result.stderr[-2000:]
        assert not sweep_dir.exists(), args


@pytest.mark.parametrize("via", ["submitit_local", pytest.param("ray", marks=pytest.mark.slow)])  # Ray starts slowly
def test_a_pack_is_one_job_of_submitit_or_ray_and_writes_what_it_writes_here(tmp_path, via):
    pytest.importorskip(via.split("_")[0])
    args = ["seed=0,1", "network.hidden_sizes=[8],[16]", "fast_paths=false", *UPDATES, short_names("fast_paths")]
    elsewhere, here = tmp_path / via, tmp_path / "here"
    extra = ["+hydra.launcher.executor.num_cpus=1"] if via == "ray" else ["+hydra.launcher.executor.timeout_min=10"]
    output = sweep(elsewhere, PACKED, f"hydra.launcher.via={via}", "hydra.launcher.n_jobs=2", *extra, *args)
    sweep(here, PACKED, *args)
    assert "Launching 4 jobs as 2 pack(s) of 2+2 member(s); network.hidden_sizes splits them" in output
    assert sorted(summaries(elsewhere)) == sorted(summaries(here)) and len(summaries(here)) == 4
    for name in summaries(here):
        assert metric_rows(elsewhere / name) == metric_rows(here / name), name  # the same runs, bit for bit
        (session,) = json.loads((elsewhere / name / "provenance.json").read_text())["sessions"]
        assert session["pack"]["size"] == 2
    if via == "submitit_local":  # one submitit job a pack, its files in the sweep directory
        assert len([p for p in (elsewhere / ".submitit").iterdir() if p.name.isdigit()]) == 2


def test_a_bad_via_or_executor_key_is_one_line_and_writes_nothing(tmp_path):
    for args, line in (
        (["hydra.launcher.via=slurm"], "error: hydra.launcher.via=slurm is not a choice; choose one of: local, "),
        (
            ["hydra.launcher.via=submitit_local", "+hydra.launcher.executor.gpus=1"],
            "error: hydra.launcher.via=submitit_local executor={'gpus': 1}: Parameter 'gpus' need to be prefixed",
        ),
        (
            ["hydra.launcher.via=ray", "+hydra.launcher.executor.gpus=1"],
            "error: hydra.launcher.executor.gpus is not a Ray task option; choose from: address, num_cpus,",
        ),
        (["+hydra.launcher.executor.timeout_min=5"], "error: hydra.launcher.executor={'timeout_min': 5} is for via="),
    ):
        sweep_dir = tmp_path / "sweep"
        result = run_cli("-m", PACKED, "seed=0,1", *TINY, *args, f"hydra.sweep.dir={sweep_dir}")
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1].startswith(line), result.stderr[-2000:]
        assert not sweep_dir.exists(), args


def test_sigint_stops_every_member_at_its_step_and_the_same_command_resumes_them(tmp_path):
    args = ["-m", PACKED, "seed=0,1", *TINY, "train.total_steps=3000", "train.checkpoint_every=500", short_names()]
    command = [sys.executable, str(ROOT / "train.py"), *args, f"hydra.sweep.dir={tmp_path}"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(
        (tmp_path / name / "checkpoints" / "last.pt").is_file() for name in ("seed=0", "seed=1")
    ):
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, output[-2000:]
    stopped = summaries(tmp_path)
    assert sorted(stopped) == ["seed=0", "seed=1"], output[-2000:]
    assert all(s["status"] == "interrupted" and s["global_step"] < 3000 for s in stopped.values()), stopped

    result = run_cli(*args, f"hydra.sweep.dir={tmp_path}")  # the same command again
    assert result.returncode == 0, result.stderr[-2000:]
    for name, summary in stopped.items():
        assert f"resuming {tmp_path / name} at step {summary['global_step']}" in result.stdout + result.stderr
    assert all(s["status"] == "completed" and s["global_step"] == 3000 for s in summaries(tmp_path).values())


def test_the_python_api_packs_a_sweep_and_gives_back_each_run(tmp_path):
    from rl_hydra import sweep

    args = ["seed=0,1", "algo.optimizer.lr=1e-3,3e-3", "hydra.launcher.pack_size=3", *TINY, *UPDATES, short_names()]
    runs = sweep(*args, sweep_dir=tmp_path)  # a learning-rate sweep packs with the seeds
    assert [run.run_dir.name for run in runs] == [
        f"algo.optimizer.lr={lr},seed={s}" for lr in (0.001, 0.003) for s in (0, 1)
    ]
    sizes = [json.loads((run.run_dir / "provenance.json").read_text())["sessions"][-1]["pack"]["size"] for run in runs]
    assert sorted(sizes) == [1, 3, 3, 3]
    assert runs[0].predict([0.0, 0.0, 0.0, 0.0]) in (0, 1)
    with pytest.raises(BadArgument, match="hydra.launcher.pack_size=0 is out of range"):
        sweep("seed=0,1", *TINY, "hydra.launcher.pack_size=0", sweep_dir=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_jobs_differing_in_packable_keys_share_a_pack_and_others_split_it():
    from omegaconf import OmegaConf

    from hydra_plugins.rl_hydra_packed_launcher._packs import Job, group

    def job(index, **keys):
        base = {"seed": 0, "algo": {"gamma": 0.99, "optimizer": {"lr": 1e-3}}, "network": {"hidden_sizes": [8]}}
        config = OmegaConf.merge(base, OmegaConf.from_dotlist([f"{k.replace('__', '.')}={v}" for k, v in keys.items()]))
        return Job(index, [f"{k.replace('__', '.')}={v}" for k, v in keys.items()], config)

    jobs = [job(0, seed=0), job(1, seed=1, algo__gamma=0.9), job(2, algo__optimizer__lr=3e-3), job(3, seed=3)]
    jobs.append(job(4, seed=1, network__hidden_sizes="[16]"))
    packs, splitting = group(jobs, pack_size=None)
    assert [[j.index for j in pack] for pack in packs] == [[0, 1, 2, 3], [4]] and splitting == ["network.hidden_sizes"]
    packs, _ = group(jobs, pack_size=3)
    assert [[j.index for j in pack] for pack in packs] == [[0, 1, 2], [3], [4]]


@pytest.mark.parametrize(
    "overrides", [("algo=dqn", "env=cartpole"), ("algo=drqn", "env=cartpole_no_velocity", "network.lstm_size=64")]
)
def test_the_replay_estimate_bounds_what_a_member_s_buffer_holds(overrides):
    """The estimate that refuses a pack too large for memory: at least a built buffer's bytes, at most twice."""
    from hydra.utils import instantiate

    from hydra_plugins.rl_hydra_packed_launcher._packs import replay_bytes
    from rl_hydra.envs import make_env

    cfg = compose_config(*overrides, "buffer.capacity=3000")
    env = make_env(cfg.env, seed=0)
    spaces = (env.single_observation_space, env.single_action_space)
    n_step = {} if "sequence_length" in cfg.buffer else {"n_step": 1, "gamma": 0.99}
    buffer = instantiate(
        cfg.buffer, observation_space=spaces[0], action_space=spaces[1], num_envs=1, seed=0, device="cpu", **n_step
    )
    env.close()
    tensors = [v for v in vars(buffer).values() if isinstance(v, torch.Tensor)]
    tensors += [v for value in vars(buffer).values() if isinstance(value, dict) for v in value.values()]
    held = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    held += 3000 * 2 * 64 * 4 if cfg.algo._target_.endswith("DRQN") else 0  # the actor's state, made at the first add
    assert held <= replay_bytes(cfg) <= 2 * held, (held, replay_bytes(cfg))


def test_an_optuna_batch_of_trials_trains_as_packs(tmp_path):
    args = ["+hparams_search=dqn_cartpole", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=4", *UPDATES]
    output = sweep(tmp_path, PACKED, *args, short_names("hparams_search"))
    assert "Launching 4 jobs as" in output and output.count("Trial ") >= 4, output[-3000:]
    runs = list(tmp_path.glob("*/provenance.json"))
    assert len(runs) == 4 and all("pack" in json.loads(p.read_text())["sessions"][-1] for p in runs)
    assert all(s["status"] == "completed" for s in summaries(tmp_path).values())
