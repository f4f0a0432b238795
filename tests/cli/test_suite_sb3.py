"""scripts/benchmarks/zoo.py: our presets against their SB3 hyperparameters, key by key, and
benchmark.py's suite set refusing a suite whose presets go beyond them before anything runs."""

from __future__ import annotations

import importlib.util
import inspect
import json
import subprocess
import sys
from dataclasses import replace

import pytest

from rl_hydra.commands.suite import load_suite
from tests.conftest import ROOT, compose_config

sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))
import benchmark  # noqa: E402
import zoo  # noqa: E402

SB3_SUITES = ("discrete_zoo", "continuous")  # the suites the side-by-side runs (docs/suite.md)
SB3_ROWS = {row.name: row for suite in SB3_SUITES for row in load_suite(suite).rows}


def preset(name: str, *extra: str):
    algo, env = next((a, name[len(a) + 1 :]) for a in ("qr_dqn", "dqn", "sac") if name.startswith(a + "_"))
    return compose_config(f"algo={algo}", f"env={env}", *extra)


@pytest.mark.parametrize("name", sorted(name for name in SB3_ROWS if name in zoo.ZOO))
def test_every_sb3_row_runs_its_sb3_hyperparameters(name):
    assert zoo.mismatches(compose_config(*SB3_ROWS[name].train_overrides()), zoo.ZOO[name]) == []


@pytest.mark.parametrize("name", sorted(name for name in zoo.SBX if name in SB3_ROWS))
def test_every_sbx_row_runs_its_sbx_hyperparameters(name):
    assert zoo.SBX[name].peer == "sbx"
    assert zoo.mismatches(compose_config(*SB3_ROWS[name].train_overrides()), zoo.SBX[name]) == []


def test_sbx_runs_the_zoos_td3_tqc_and_crossq_pendulum_rows_and_names_what_it_does_otherwise(tmp_path):
    # the suite rows SBX has; its CartPole DQN (no suite row) is tests/speed/test_benchmark.py's
    assert set(zoo.SBX) - set(SB3_ROWS) == {"dqn_cartpole"}
    rows = ("crossq_pendulum", "tqc_pendulum", "td3_pendulum")  # the suite's order
    args = benchmark.with_defaults(
        benchmark.build_parser().parse_args(["suite", "continuous", "--peer", "sbx", "--rows", *rows])
    )
    args.out = tmp_path
    cases = benchmark.suite_cases(args)
    assert [case.id for case in cases] == list(rows) and args.notices == [] and benchmark.check(cases) == []
    for case in cases:  # the Zoo's values, SBX's class
        assert case.zoo.peer == case.peer["lib"] == "sbx" and case.zoo.hp == zoo.ZOO[case.id].hp, case.id
        assert case.peer["kwargs"] == zoo.sb3_spec(zoo.ZOO[case.id], "Pendulum-v1", 20_000)["kwargs"], case.id
        assert case.peer["curve"] == {"every": 2000, "episodes": 10}, case.id
    crossq, tqc, td3 = (zoo.expected_config(zoo.SBX[name]) for name in rows)
    assert any("after every critic update" in note for note in td3[1])  # what no keyword of SBX's sets
    assert any("min of its two critics" in note for note in td3[1])
    assert tqc[1] == zoo.SBX_NOTES  # one loss and Adam per critic, the temperature after the actor: as ours
    assert crossq[0]["network.critic.momentum"] == 0.01  # flax's 0.99
    assert (crossq[0]["network.critic.hidden_sizes"], crossq[0]["algo.policy_delay"]) == ([256, 256], 2)
    assert crossq[0]["algo.critic_optimizer.lr"] == 1e-3  # CrossQ's default, not another class's
    # SBX's policy defaults where the Zoo leaves a key out: TD3's 2x256 networks (SB3's: 400x300)
    without_arch = {key: v for key, v in zoo.ZOO["td3_pendulum"].hp.items() if key != "net_arch"}
    widths = [
        zoo.expected_config(replace(table["td3_pendulum"], hp=without_arch))[0]["network.actor.hidden_sizes"]
        for table in (zoo.SBX, zoo.ZOO)
    ]
    assert widths == [[256, 256], [400, 300]]
    found = zoo.mismatches(
        compose_config(*SB3_ROWS["crossq_pendulum"].train_overrides(), "network.critic.momentum=0.99"),
        zoo.SBX["crossq_pendulum"],
    )
    assert found == ["network.critic.momentum is 0.99 in our config; SBX's run means 0.01"]
    found = zoo.mismatches(
        compose_config(*SB3_ROWS["tqc_pendulum"].train_overrides(), "algo.top_quantiles_to_drop_per_critic=3"),
        zoo.SBX["tqc_pendulum"],
    )
    assert found == ["algo.top_quantiles_to_drop_per_critic is 3 in our config; SBX's run means 2"]
    with pytest.raises(ValueError, match="no gSDE"):
        zoo.expected_config(replace(zoo.SBX["tqc_pendulum"], hp={**zoo.ZOO["tqc_pendulum"].hp, "use_sde": True}))
    with pytest.raises(ValueError, match="two critics"):
        zoo.expected_config(replace(zoo.SBX["tqc_pendulum"], hp={**zoo.ZOO["tqc_pendulum"].hp, "n_critics": 3}))


def test_the_droq_preset_is_sbxs_droq_key_by_key_and_a_changed_key_is_refused(tmp_path, capsys):
    expected, notes = zoo.expected_config(zoo.SBX["droq_pendulum"])
    assert {key: expected[key] for key in ("algo.ensemble_size", "algo.subset_size", "algo.actor_q")} == {
        "algo.ensemble_size": 2,
        "algo.subset_size": 2,
        "algo.actor_q": "min",
    }
    assert (expected["algo.gradient_steps"], expected["algo.policy_delay"], expected["algo.initial_alpha"]) == (
        20,
        20,
        0.1,
    )
    assert (expected["network.critic.dropout"], expected["network.critic.layer_norm"]) == (0.01, True)
    assert any("LayerNorm" in note for note in notes)  # what SBX cannot set as ours does is said
    row = SB3_ROWS["droq_pendulum"]
    found = zoo.mismatches(
        compose_config(*row.train_overrides(), "algo.actor_q=mean", "network.critic.dropout=0.1"),
        zoo.SBX["droq_pendulum"],
    )
    assert found == [
        "algo.actor_q is 'mean' in our config; SBX's run means 'min'",
        "network.critic.dropout is 0.1 in our config; SBX's run means 0.01",
    ]
    with pytest.raises(ValueError, match="only SBX's"):  # SB3 has no DroQ
        zoo.expected_config(zoo.Zoo("droq", {}, 3000, "none"))
    # the command refuses a preset that is not SBX's run, before anything runs
    args = benchmark.with_defaults(
        benchmark.build_parser().parse_args(
            ["suite", "continuous", "--peer", "sbx", "--rows", "droq_pendulum", "--out", str(tmp_path)]
        )
    )
    (case,) = benchmark.suite_cases(args)
    assert case.peer["lib"] == "sbx" and case.peer["policy_kwargs"] == {
        "net_arch": [64, 64],
        "dropout_rate": 0.01,
        "layer_norm": True,
    }
    case.ours = [*case.ours, "algo.gradient_steps=10"]
    assert benchmark.check([case]) == ["droq_pendulum: algo.gradient_steps is 10 in our config; SBX's run means 20"]


def test_rows_the_peer_lacks_run_ours_alone_when_named_and_sbx_is_suite_only(tmp_path, capsys):
    args = benchmark.with_defaults(
        benchmark.build_parser().parse_args(
            ["suite", "continuous", "--peer", "sbx", "--rows", "sac_pendulum", "redq_pendulum", "--out", str(tmp_path)]
        )
    )
    cases = benchmark.suite_cases(args)
    assert [(case.id, case.peer and case.peer["lib"]) for case in cases] == [
        ("sac_pendulum", "sbx"),
        ("redq_pendulum", None),
    ]
    assert args.notices == ["no SBX counterpart, ours alone: redq_pendulum"] and benchmark.check(cases) == []
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["minatar", "--peer", "sbx", "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "--peer sbx: only suite and cartpole rows" in capsys.readouterr().err


def test_presets_beyond_the_zoo_are_named_and_turned_back_in_the_zoo_suite():
    # dqn_mountain_car's preset learns from 3-step returns with a decaying learning rate (docs/suite.md)
    found = zoo.mismatches(preset("dqn_mountain_car"), zoo.ZOO["dqn_mountain_car"])
    assert [line.split(" ", 1)[0] for line in found] == ["algo.n_step", "algo.final_lr_fraction"]
    assert "algo.n_step is 3 in our config; SB3's run means 1" in found
    assert {"algo.n_step=1", "algo.final_lr_fraction=1.0"} <= set(SB3_ROWS["dqn_mountain_car"].overrides)
    for name in ("dqn_acrobot", "qr_dqn_acrobot"):  # both Acrobot presets add double Q and dueling
        found = zoo.mismatches(preset(name), zoo.ZOO[name])
        assert [line.split(" ", 1)[0] for line in found] == ["algo.double_q", "network.dueling"], name


def test_a_changed_key_is_named():
    found = zoo.mismatches(
        preset(
            "dqn_acrobot",
            *SB3_ROWS["dqn_acrobot"].overrides,
            "algo.gamma=0.98",
            "network.hidden_sizes=[64,64]",
            "algo.target_update_every=100",
        ),
        zoo.ZOO["dqn_acrobot"],
    )
    assert [line.split(" ", 1)[0] for line in found] == [
        "algo.gamma",
        "algo.target_update_every",
        "network.hidden_sizes",
    ]
    assert "algo.gamma is 0.98 in our config; SB3's run means 0.99" in found[0]
    found = zoo.mismatches(
        preset("qr_dqn_mountain_car", *SB3_ROWS["qr_dqn_mountain_car"].overrides, "algo.num_quantiles=50"),
        zoo.ZOO["qr_dqn_mountain_car"],
    )
    assert found == ["algo.num_quantiles is 50 in our config; SB3's run means 25"]
    found = zoo.mismatches(preset("sac_hopper", "algo.learn_alpha=false"), zoo.ZOO["sac_hopper"])
    assert found == ["algo.learn_alpha is False in our config; SB3's run means True"]
    found = zoo.mismatches(
        preset(
            "dqn_mountain_car",
            "algo.final_lr_fraction=1.0",
            "buffer=prioritized",
            "network.dueling=true",
            "network.noisy=true",
        ),
        zoo.ZOO["dqn_mountain_car"],
    )
    assert [line.split(" ", 1)[0] for line in found] == [
        "algo.n_step",
        "buffer._target_",
        "network.dueling",
        "network.noisy",
    ]


def test_translation_of_the_zoos_own_forms():
    expected, _ = zoo.expected_config(zoo.ZOO["qr_dqn_lunar_lander"])
    assert expected["algo.optimizer.lr"] == 1.5e-3 and expected["algo.final_lr_fraction"] == 0.0  # lin_1.5e-3
    assert expected["algo.gradient_steps"] == 256 and expected["algo.target_update_every"] == 256  # -1; every step
    expected, _ = zoo.expected_config(zoo.ZOO["sac_mountain_car_continuous"])
    assert (expected["algo.learn_alpha"], expected["algo.initial_alpha"]) == (False, 0.1)  # ent_coef: 0.1
    assert expected["network.actor.gsde"] and expected["network.actor.gsde_log_std_init"] == -3.67  # use_sde
    assert expected["algo.gsde_resample_every"] == -1  # sde_sample_freq
    expected, _ = zoo.expected_config(zoo.ZOO["sac_hopper"])  # SB3's defaults
    assert (expected["algo.batch_size"], expected["algo.tau"], expected["algo.learn_alpha"]) == (256, 0.005, True)


def test_target_sync_on_average_when_train_freq_does_not_divide_it():
    acrobot = {"target_update_interval": 250, "train_freq": 4, "gradient_steps": 4}
    mountain_car = {"target_update_interval": 600, "train_freq": 16, "gradient_steps": 8}
    for hp in (acrobot, mountain_car):
        with pytest.raises(ValueError, match="not a multiple"):
            zoo.target_update_every(hp)
    assert zoo.target_update_every(acrobot, exact=False) == 250
    assert zoo.target_update_every(mountain_car, exact=False) == 300
    with pytest.raises(ValueError, match="not a multiple"):  # a mean of 250 / 3 updates: no whole number
        zoo.target_update_every({**acrobot, "train_freq": 3, "gradient_steps": 1}, exact=False)


def test_overrides_give_exactly_the_expected_config_without_a_preset():
    for name in ("dqn_acrobot", "qr_dqn_lunar_lander"):
        cfg = compose_config(f"algo={zoo.ZOO[name].algo}", "env=cartpole", "~algo_env", *zoo.overrides(zoo.ZOO[name]))
        assert zoo.mismatches(cfg, zoo.ZOO[name]) == [], name


def test_sb3_defaults_are_the_installed_ones():
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import QRDQN
    from stable_baselines3 import DQN, SAC
    from stable_baselines3.sac.policies import SACPolicy

    for algo, cls in (("dqn", DQN), ("qr_dqn", QRDQN), ("sac", SAC)):
        signature = inspect.signature(cls.__init__).parameters
        assert {k: signature[k].default for k in zoo.SB3_DEFAULTS[algo]} == zoo.SB3_DEFAULTS[algo]
    assert inspect.signature(SACPolicy.__init__).parameters["log_std_init"].default == zoo.SB3_LOG_STD_INIT


SBX_SIGNATURES = """
import inspect, json, sbx
from sbx.sac.policies import SACPolicy
classes = {"sac": sbx.SAC, "tqc": sbx.TQC, "td3": sbx.TD3, "crossq": sbx.CrossQ, "dqn": sbx.DQN}
defaults = {
    algo: {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}
    for algo, cls in classes.items()
}
log_std_init = inspect.signature(SACPolicy.__init__).parameters["log_std_init"].default
print(json.dumps({"defaults": defaults, "log_std_init": log_std_init}, default=repr))
"""


def test_sbx_defaults_are_sb3s_but_where_named_and_are_the_installed_ones():
    # read in a child process: importing JAX leaves absl's log handler on this process's captured stderr
    if importlib.util.find_spec("sbx") is None:
        pytest.skip("sbx is not installed (the bench extra)")
    found = json.loads(subprocess.run([sys.executable, "-c", SBX_SIGNATURES], capture_output=True, text=True).stdout)
    for algo, signature in found["defaults"].items():
        defaults = {**zoo.SB3_DEFAULTS[algo], **zoo.SBX_DEFAULTS.get(algo, {})}
        # keys SBX has no keyword for: SAC's and TQC's target sync (every update), CrossQ's tau (no targets),
        # DQN's gradient clipping (none)
        absent = {k for k in defaults if k not in signature}
        assert absent <= {"target_update_interval", "tau", "max_grad_norm"}, algo
        assert {k: signature[k] for k in defaults if k in signature} == {
            k: v for k, v in defaults.items() if k not in absent
        }, algo
    assert "max_grad_norm" not in found["defaults"]["dqn"]
    assert found["log_std_init"] == zoo.SB3_LOG_STD_INIT
    assert "top_quantiles_to_drop_per_net" in found["defaults"]["tqc"]
    assert found["defaults"]["dqn"]["target_update_interval"] != zoo.SB3_DEFAULTS["dqn"]["target_update_interval"]


SBX_POLICIES = """
import inspect, json
import gymnasium as gym, jax, jax.numpy as jnp, numpy as np
from sbx.common.jax_layers import BatchRenorm
from sbx.crossq.policies import CrossQPolicy
from sbx.dqn.policies import DQNPolicy
from sbx.td3.policies import TD3Policy
from sbx.tqc.policies import TQCPolicy

obs, box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
found = {}
for algo, cls in (("td3", TD3Policy), ("tqc", TQCPolicy), ("crossq", CrossQPolicy)):
    policy = cls(obs, box, lambda _: 1e-3)  # net_arch None: the widths its __init__ picks
    found[algo] = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "net_arch"}
    found[algo]["net_arch"] = {"pi": policy.net_arch_pi, "qf": policy.net_arch_qf}
    found[algo]["optimizer_kwargs"] = policy.optimizer_kwargs
stats = BatchRenorm(use_running_average=False).init(jax.random.PRNGKey(0), jnp.ones((4, 2)))["batch_stats"]
found["batch_renorm"] = {"eps": BatchRenorm.epsilon, "r_max": stats["r_max"], "d_max": stats["d_max"]}
dqn = DQNPolicy(obs, gym.spaces.Discrete(2), lambda _: 1e-3, net_arch=[64, 32])
dqn.build(jax.random.PRNGKey(0), lambda _: 1e-3)
kernels = [layer["kernel"].shape for layer in dqn.qf_state.params["params"].values()]
found["dqn_widths"] = [shape[1] for shape in kernels[:-1]]
print(json.dumps(found, default=repr))
"""


def test_sbx_policy_defaults_are_the_installed_ones():
    # read in a child process: importing JAX leaves absl's log handler on this process's captured stderr
    if importlib.util.find_spec("sbx") is None:
        pytest.skip("sbx is not installed (the bench extra)")
    result = subprocess.run([sys.executable, "-c", SBX_POLICIES], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout)
    for algo, defaults in zoo.SBX_POLICY.items():
        arch = defaults["net_arch"]
        assert found[algo]["net_arch"] == (arch if isinstance(arch, dict) else {"pi": arch, "qf": arch}), algo
        keywords = {k: v for k, v in defaults.items() if k in found[algo] and k != "net_arch"}
        assert keywords == {k: found[algo][k] for k in keywords}, algo
    assert set(zoo.SBX_POLICY["crossq"]) - set(found["crossq"]) == {"batch_norm_eps"}  # its layer's, below
    assert found["batch_renorm"] == {
        "eps": zoo.SBX_POLICY["crossq"]["batch_norm_eps"],
        "r_max": zoo.CROSSQ_R_MAX,
        "d_max": zoo.CROSSQ_D_MAX,
    }
    assert zoo.sbx_crossq_policy()["batch_norm_momentum"] == zoo.CROSSQ_POLICY["batch_norm_momentum"]  # 1 - 0.99
    # the actor's and critics' Adam: beta1 0.5 (optax's b1), as sb3-contrib's
    assert found["crossq"]["optimizer_kwargs"] == {"b1": zoo.CROSSQ_BETAS[0]}
    assert found["td3"]["optimizer_kwargs"] == found["tqc"]["optimizer_kwargs"] == {}
    assert found["dqn_widths"] == [64, 64]  # net_arch=[64, 32]: two layers of net_arch[0] (zoo.py refuses it)


def test_tqc_and_td3_translate_sb3s_defaults_and_name_a_changed_key():
    pytest.importorskip("sb3_contrib")
    from sb3_contrib import TQC
    from sb3_contrib.tqc.policies import TQCPolicy
    from stable_baselines3 import TD3
    from stable_baselines3.td3.policies import TD3Policy

    for algo, cls in (("tqc", TQC), ("td3", TD3)):
        signature = inspect.signature(cls.__init__).parameters
        assert {k: signature[k].default for k in zoo.SB3_DEFAULTS[algo]} == zoo.SB3_DEFAULTS[algo]
    tqc_policy = inspect.signature(TQCPolicy.__init__).parameters
    assert {k: tqc_policy[k].default for k in ("n_quantiles", "n_critics", "log_std_init")} == {
        k: zoo.TQC_POLICY[k] for k in ("n_quantiles", "n_critics", "log_std_init")
    }
    assert inspect.signature(TD3Policy.__init__).parameters["n_critics"].default == zoo.TD3_POLICY["n_critics"]
    expected, _ = zoo.expected_config(zoo.ZOO["tqc_hopper"])
    assert (
        expected["algo.ensemble_size"],
        expected["algo.num_quantiles"],
        expected["algo.top_quantiles_to_drop_per_critic"],
    ) == (2, 25, 5)
    expected, notes = zoo.expected_config(zoo.ZOO["td3_pendulum"])
    assert (expected["algo.action_noise.kind"], expected["algo.action_noise.std"], expected["algo.gamma"]) == (
        "gaussian",
        0.1,
        0.98,
    )
    assert zoo.sb3_spec(zoo.ZOO["td3_pendulum"], "Pendulum-v1", 20_000)["action_noise"] == {
        "kind": "normal",
        "std": 0.1,
    }
    found = zoo.mismatches(
        compose_config("algo=tqc", "env=pendulum", "algo.top_quantiles_to_drop_per_critic=3"), zoo.ZOO["tqc_pendulum"]
    )
    assert found == ["algo.top_quantiles_to_drop_per_critic is 3 in our config; SB3's run means 2"]
    found = zoo.mismatches(
        compose_config("algo=td3", "env=pendulum", "algo.action_noise.kind=ornstein_uhlenbeck", "algo.policy_delay=3"),
        zoo.ZOO["td3_pendulum"],
    )
    assert [line.split(" ", 1)[0] for line in found] == ["algo.policy_delay", "algo.action_noise.kind"]


def test_a_suite_whose_presets_go_beyond_sb3_is_refused_before_anything_runs(tmp_path, capsys):
    # the discrete suite runs the tuned presets (dqn_acrobot: double Q and dueling); SB3 has neither
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(
            [
                "suite",
                "discrete",
                "--seeds",
                "1",
                "--steps",
                "300",
                "--rows",
                "dqn_acrobot",
                "iqn_acrobot",
                "--out",
                str(tmp_path),
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "no SB3 counterpart, ours alone: iqn_acrobot" in err  # named in --rows: ours alone
    assert "error: dqn_acrobot: algo.double_q is True in our config; SB3's run means False" in err
    assert err.strip().endswith("nothing was run") and not any(tmp_path.iterdir())


def test_unknown_rows_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["suite", "discrete_zoo", "--rows", "dqn_pong", "--out", str(tmp_path)])
    assert (
        exit_info.value.code == 2
        and "error: --rows dqn_pong: not rows of suite discrete_zoo" in capsys.readouterr().err
    )


def test_algos_pick_a_suites_rows_and_an_algo_without_rows_is_refused(tmp_path, capsys):
    args = benchmark.with_defaults(
        benchmark.build_parser().parse_args(["suite", "continuous", "--algos", "tqc", "td3", "--out", str(tmp_path)])
    )
    cases = benchmark.suite_cases(args)
    assert {case.id for case in cases} == {
        f"{a}_{e}" for a in ("tqc", "td3") for e in ("pendulum", "hopper", "half_cheetah")
    }
    assert {case.peer["algo"] for case in cases} == {"tqc", "td3"} and benchmark.check(cases) == []
    with pytest.raises(SystemExit) as exit_info:
        benchmark.main(["suite", "continuous", "--algos", "ddpg", "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and "error: --algos ddpg: no rows of suite continuous" in capsys.readouterr().err
