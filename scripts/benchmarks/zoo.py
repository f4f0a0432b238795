"""RL Baselines3 Zoo's hyperparameters in SB3's own names, and their translation to our config keys.

Two peers take them: Stable-Baselines3 / sb3-contrib (`ZOO`) and SBX, SB3's port to JAX (`SBX`), whose
classes take SB3's keywords (and defaults but where SBX_DEFAULTS and SBX_POLICY say, checked in
tests/cli/test_suite_sb3.py) plus DroQ's dropout_rate and layer_norm. SBX's DroQ is its SAC so configured
(algo "droq" below); its DQN, TD3, TQC and CrossQ rows are the Zoo's entries run by SBX's classes.

`expected_config(zoo)` says which value of our composed config gives SB3's run (a key not
named there is not compared); `mismatches(cfg, zoo)` names every key where a composed config
differs, before anything runs; `overrides(zoo)` are the train.py overrides that give exactly
that config when no preset applies (`~algo_env`).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field, replace

EVAL_EPISODES = 10  # the final evaluation of both sides
DQN_FAMILY = ("dqn", "qr_dqn")


@dataclass
class Zoo:
    """One SB3 run: `hp` are the keyword arguments SB3 gets (net_arch, n_quantiles and log_std_init go
    into policy_kwargs), `steps` the Zoo's budget (n_timesteps)."""

    algo: str
    hp: dict
    steps: int
    source: str
    notes: list[str] = field(default_factory=list)
    peer: str = "sb3"  # "sb3": SB3 / sb3-contrib; "sbx": SBX (scripts/benchmarks/sb3_peer.py runs either)


# rl-baselines3-zoo hyperparams/dqn.yml, qrdqn.yml and sac.yml (LunarLander: its -v2 entry)
_CARTPOLE = dict(
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_size=100_000,
    learning_starts=1000,
    gamma=0.99,
    target_update_interval=10,
    train_freq=256,
    gradient_steps=128,
    exploration_fraction=0.16,
    exploration_final_eps=0.04,
    net_arch=[256, 256],
)
PER_STEP = dict(train_freq=1, gradient_steps=1, batch_size=128)  # one update of batch 128 per env step
_ONE_UPDATE_PER_STEP = dict(
    learning_rate=6.3e-4,
    batch_size=128,
    buffer_size=50_000,
    learning_starts=0,
    gamma=0.99,
    target_update_interval=250,
    train_freq=4,
    gradient_steps=-1,
    exploration_fraction=0.12,
    exploration_final_eps=0.1,
    net_arch=[256, 256],
)
_MOUNTAIN_CAR = dict(
    learning_rate=4e-3,
    batch_size=128,
    buffer_size=10_000,
    learning_starts=1000,
    gamma=0.98,
    target_update_interval=600,
    train_freq=16,
    gradient_steps=8,
    exploration_fraction=0.2,
    exploration_final_eps=0.07,
    net_arch=[256, 256],
)
# 20k steps fill neither 100k (our default) nor the Zoo's 1M: both sides get 100k, the same run
_SAC_PENDULUM = dict(learning_rate=1e-3, buffer_size=100_000, net_arch=[256, 256])
_BUFFER_NOTE = "buffer 100k on both sides, not SB3's default 1M: 20k steps fill neither"
_TD3_MUJOCO = dict(
    learning_starts=10_000, noise_type="normal", noise_std=0.1, learning_rate=1e-3, batch_size=256, net_arch=[400, 300]
)
ZOO = {
    "dqn_cartpole": Zoo("dqn", dict(_CARTPOLE), 50_000, "dqn.yml CartPole-v1"),
    "qr_dqn_cartpole": Zoo("qr_dqn", dict(_CARTPOLE, n_quantiles=10), 50_000, "qrdqn.yml CartPole-v1"),
    "dqn_acrobot": Zoo("dqn", dict(_ONE_UPDATE_PER_STEP), 100_000, "dqn.yml Acrobot-v1"),
    "dqn_mountain_car": Zoo("dqn", dict(_MOUNTAIN_CAR), 120_000, "dqn.yml MountainCar-v0"),
    "dqn_lunar_lander": Zoo("dqn", dict(_ONE_UPDATE_PER_STEP), 100_000, "dqn.yml LunarLander-v2"),
    "qr_dqn_acrobot": Zoo("qr_dqn", dict(_ONE_UPDATE_PER_STEP, n_quantiles=25), 100_000, "qrdqn.yml Acrobot-v1"),
    "qr_dqn_mountain_car": Zoo("qr_dqn", dict(_MOUNTAIN_CAR, n_quantiles=25), 120_000, "qrdqn.yml MountainCar-v0"),
    "qr_dqn_lunar_lander": Zoo(
        "qr_dqn",
        dict(
            learning_rate="lin_1.5e-3",
            batch_size=128,
            buffer_size=100_000,
            learning_starts=10_000,
            gamma=0.995,
            target_update_interval=1,
            train_freq=256,
            gradient_steps=-1,
            exploration_fraction=0.24,
            exploration_final_eps=0.18,
            net_arch=[256, 256],
            n_quantiles=25,
        ),
        100_000,
        "qrdqn.yml LunarLander-v2",
        ["25 quantiles on both sides, not the Zoo's 170: our preset's choice for a CPU, given to SB3 too"],
    ),
    "sac_mountain_car_continuous": Zoo(
        "sac",
        dict(
            learning_rate=3e-4,
            buffer_size=50_000,
            batch_size=512,
            ent_coef=0.1,
            train_freq=32,
            gradient_steps=32,
            gamma=0.9999,
            tau=0.01,
            learning_starts=0,
            use_sde=True,
            log_std_init=-3.67,
            net_arch=[64, 64],
        ),
        50_000,
        "sac.yml MountainCarContinuous-v0",
    ),
    # the Zoo's MuJoCo entry: SB3's defaults with 10,000 random steps first
    "sac_hopper": Zoo("sac", dict(learning_starts=10_000, net_arch=[256, 256]), 1_000_000, "sac.yml Hopper"),
    # sb3-contrib's CrossQ, rl-baselines3-zoo hyperparams/crossq.yml (MuJoCo: its -v4 entries, the paper's values)
    "crossq_pendulum": Zoo("crossq", dict(policy_delay=2, net_arch=[256, 256]), 20_000, "crossq.yml Pendulum-v1"),
    "crossq_hopper": Zoo(
        "crossq",
        dict(learning_rate=1e-3, learning_starts=5000, policy_delay=3, net_arch=dict(pi=[256, 256], qf=[2048, 2048])),
        5_000_000,
        "crossq.yml Hopper",
    ),
    "crossq_half_cheetah": Zoo(
        "crossq",
        dict(learning_rate=1e-3, learning_starts=5000, policy_delay=3, net_arch=dict(pi=[256, 256], qf=[2048, 2048])),
        5_000_000,
        "crossq.yml HalfCheetah",
    ),
    # sb3-contrib's TQC and SB3's TD3, rl-baselines3-zoo hyperparams/tqc.yml and td3.yml (MuJoCo: their -v4 entries)
    "tqc_pendulum": Zoo("tqc", dict(learning_rate=1e-3, net_arch=[256, 256]), 20_000, "tqc.yml Pendulum-v1"),
    "tqc_hopper": Zoo(
        "tqc",
        dict(learning_starts=10_000, top_quantiles_to_drop_per_net=5, net_arch=[256, 256]),
        1_000_000,
        "tqc.yml Hopper",
    ),
    "tqc_half_cheetah": Zoo("tqc", dict(learning_starts=10_000, net_arch=[256, 256]), 1_000_000, "tqc.yml HalfCheetah"),
    "td3_pendulum": Zoo(
        "td3",
        dict(
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            noise_type="normal",
            noise_std=0.1,
            learning_rate=1e-3,
            net_arch=[400, 300],
        ),
        20_000,
        "td3.yml Pendulum-v1",
    ),
    "td3_hopper": Zoo("td3", dict(_TD3_MUJOCO), 1_000_000, "td3.yml Hopper"),
    "td3_half_cheetah": Zoo("td3", dict(_TD3_MUJOCO), 1_000_000, "td3.yml HalfCheetah"),
    # sac.yml Pendulum-v1: SB3's defaults with lr 1e-3 (our sac_pendulum preset)
    "sac_pendulum": Zoo("sac", dict(_SAC_PENDULUM), 20_000, "sac.yml Pendulum-v1", [_BUFFER_NOTE]),
}

# what SBX cannot set as ours does, said in every SBX record's notes
SBX_NOTES = [
    "SBX initialises its layers as flax does (lecun normal weights, zero biases), ours as torch (uniform)",
    "SBX samples all of a training phase's batches at once, before its first update; ours one batch an update",
]
# SBX 0.28's runs: the same keywords as SB3 (its defaults are SB3's: tests/cli/test_suite_sb3.py)
SBX = {
    "sac_pendulum": Zoo("sac", dict(_SAC_PENDULUM), 20_000, "SBX SAC, sac.yml Pendulum-v1", [_BUFFER_NOTE], "sbx"),
    # DroQ as SBX runs it (its SAC with dropout_rate, layer_norm, gradient_steps = policy_delay = 20) on
    # our droq_pendulum preset's budget (rl_hydra/conf/algo_env/droq_pendulum.yaml names each value's source)
    "droq_pendulum": Zoo(
        "droq",
        dict(
            learning_rate=1e-3,
            learning_starts=250,
            batch_size=128,
            gradient_steps=20,
            policy_delay=20,
            ent_coef="auto_0.1",
            buffer_size=100_000,
            dropout_rate=0.01,
            layer_norm=True,
            net_arch=[64, 64],
        ),
        3_000,
        "SBX SAC as DroQ, our droq_pendulum budget",
        peer="sbx",
    ),
}
SBX_NAMES = {"dqn": "DQN", "td3": "TD3", "tqc": "TQC", "crossq": "CrossQ"}


def sbx(name: str) -> Zoo:
    """ZOO[name]'s run (its values, budget and notes) by SBX's class of the same algorithm."""
    zoo = ZOO[name]
    return replace(zoo, hp=dict(zoo.hp), source=f"SBX {SBX_NAMES[zoo.algo]}, {zoo.source}", peer="sbx")


SBX.update({name: sbx(name) for name in ("dqn_cartpole", "td3_pendulum", "tqc_pendulum", "crossq_pendulum")})
PEERS = {"sb3": ZOO, "sbx": SBX}
PEER_LABELS = {"sb3": "SB3", "sbx": "SBX"}
# where SBX 0.28's defaults are not SB3's (tests/cli/test_suite_sb3.py checks both against the installed classes):
# its DQN has no gradient clipping (max_grad_norm is commented out of its signature) and syncs its target
# every 1,000 env steps (SB3: 10,000), its TD3's lr is 3e-4 (SB3: 1e-3)
SBX_DEFAULTS = {"dqn": dict(max_grad_norm=None, target_update_interval=1000), "td3": dict(learning_rate=3e-4)}
# what SBX's algorithm does otherwise than ours, and no keyword of its sets: said in its rows' notes
SBX_ALGO_NOTES = {
    "td3": [
        "SBX's TD3 moves its target actor and critics after every critic update; ours (as SB3 and the paper) "
        "at each delayed actor update",
        "SBX's TD3 actor ascends the min of its two critics; ours (as SB3 and the paper) the first critic",
        "SBX's TD3 halves its critics' summed squared error, ours (as SB3) does not: Adam's step is the same "
        "up to its eps",
    ],
    "droq": [
        "SBX's SAC updates the actor and temperature on the last of each env step's 20 critic updates; ours on the "
        "first: one actor update per env step either way",
        "SBX's LayerNorm's eps is 1e-6, ours 1e-5",
    ],
    "crossq": [
        "SBX's CrossQ halves its critics' summed squared error (as sb3-contrib), ours does not: Adam's step is "
        "the same up to its eps",
        "after the renormalization's warm-up (100,000 training passes; beyond a 20k-step run) SBX's "
        "BatchRenorm places eps otherwise than ours in the corrected normalization (the same as eps -> 0)",
    ],
}

# SB3 2.9.2's defaults for what the Zoo leaves out (tests/cli/test_suite_sb3.py checks them against the
# installed classes); SB3's Adam has torch's defaults, sb3-contrib's QR-DQN eps 0.01 / batch
SB3_DEFAULTS = {
    "dqn": dict(
        learning_rate=1e-4,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=32,
        tau=1.0,
        gamma=0.99,
        train_freq=4,
        gradient_steps=1,
        target_update_interval=10_000,
        exploration_fraction=0.1,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.05,
        max_grad_norm=10,
    ),
    "qr_dqn": dict(tau=1.0, exploration_initial_eps=1.0, max_grad_norm=None),
    "sac": dict(
        learning_rate=3e-4,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        target_update_interval=1,
        target_entropy="auto",
        use_sde=False,
        sde_sample_freq=-1,
    ),
    # tau: sb3-contrib's CrossQ hands 1.0 to its base class (no target networks; no key of ours)
    "crossq": dict(
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=256,
        tau=1.0,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        target_entropy="auto",
        policy_delay=3,
        use_sde=False,
        sde_sample_freq=-1,
    ),
    "tqc": dict(
        learning_rate=3e-4,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        target_update_interval=1,
        target_entropy="auto",
        top_quantiles_to_drop_per_net=2,
        use_sde=False,
        sde_sample_freq=-1,
    ),
    "td3": dict(
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=100,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        policy_delay=2,
        target_policy_noise=0.2,
        target_noise_clip=0.5,
    ),
}
# their policies' defaults (TQCPolicy, TD3Policy keywords; tests/cli/test_suite_sb3.py checks them against the
# installed classes)
TQC_POLICY = dict(net_arch=[256, 256], n_quantiles=25, n_critics=2, log_std_init=-3)
TD3_POLICY = dict(net_arch=[400, 300], n_critics=2)
# the Zoo's noise_type in our algo.action_noise.kind; SB3's Ornstein-Uhlenbeck noise's theta and dt
NOISE_KINDS = {"normal": "gaussian", "ornstein-uhlenbeck": "ornstein_uhlenbeck"}
OU_THETA, OU_DT = 0.15, 0.01
# sb3-contrib 2.9.2's CrossQ policy defaults (keywords of CrossQPolicy; Adam's betas are its optimizer_kwargs,
# r_max 3 and d_max 5 are fixed in its BatchRenorm); tests/algos/test_crossq.py checks them against the installed ones
CROSSQ_POLICY = dict(
    net_arch={"pi": [256, 256], "qf": [1024, 1024]},
    batch_norm_momentum=0.01,
    batch_norm_eps=0.001,
    renorm_warmup_steps=100_000,
    log_std_init=-3,
    use_expln=False,
    n_critics=2,
)
CROSSQ_BETAS, CROSSQ_R_MAX, CROSSQ_D_MAX = (0.5, 0.999), 3.0, 5.0
# SBX 0.28's policies' defaults where they are not SB3's (TD3_POLICY, TQC_POLICY, CROSSQ_POLICY above):
# TD3's networks are 2x256 (SB3: 400x300); TQC's log_std_init is 0 (only gSDE reads it, which SBX does not
# implement); CrossQ's batch_norm_momentum is in flax's sense, the old running statistics' weight: its 0.99
# is torch's (and our) 0.01; its eps (0.001) and r_max, d_max (3, 5) are fixed in its BatchRenorm, its Adam's
# beta1 0.5 (the actor's and critics'; the temperature's torch's 0.9). tests/cli/test_suite_sb3.py reads them
# off the installed policies. Its DQN's MLP is two layers of net_arch[0] units whatever net_arch says.
SBX_POLICY = {
    "td3": dict(net_arch=[256, 256], n_critics=2),
    "tqc": dict(net_arch=[256, 256], n_quantiles=25, n_critics=2, log_std_init=0.0),
    "crossq": {**CROSSQ_POLICY, "batch_norm_momentum": 0.99},
}
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)  # torch.optim.Adam's defaults
SB3_LOG_STD_INIT = -3.0  # SAC's policy's log_std_init (a policy keyword, so not in SB3_DEFAULTS)
POLICY_KEYS = ("net_arch", "n_quantiles", "log_std_init", "n_critics", "dropout_rate", "layer_norm")
NOISE_KEYS = ("noise_type", "noise_std")  # the Zoo's; SB3 takes an action_noise object (sb3_peer.py builds it)


def per_step(zoo: Zoo, steps: int = 20_000) -> Zoo:
    """The same run (the same peer) with one update of batch 128 after every env step."""
    return replace(
        zoo, hp={**zoo.hp, **PER_STEP}, steps=steps, source=zoo.source + ", one update of batch 128 per step"
    )


def target_update_every(hp: dict, exact: bool = True) -> int:
    """SB3 syncs the target every `target_update_interval` *env steps*, checked before each step's
    training phase; ours counts *updates*. With train_freq >= interval a sync falls between any two
    phases: ours is a sync every `gradient_steps` updates. With train_freq < interval SB3 syncs every
    interval / train_freq phases. exact=False also accepts an interval that train_freq does not
    divide: SB3 then syncs after alternately floor and ceil(interval / train_freq) phases, on average
    every interval / train_freq * gradient_steps updates, returned when that is a whole number."""
    interval, train_freq = hp["target_update_interval"], hp["train_freq"]
    if train_freq >= interval:
        return hp["gradient_steps"]
    mean = interval * hp["gradient_steps"] / train_freq
    if interval % train_freq and (exact or mean != int(mean)):
        raise ValueError(f"target_update_interval={interval} is not a multiple of train_freq={train_freq}")
    return int(mean)


def expected_updates(hp: dict, total_steps: int) -> int:
    """Updates of our loop: gradient_steps at each multiple of train_freq from learning_starts on."""
    train_freq = hp["train_freq"]
    phases = [s for s in range(train_freq, total_steps + 1, train_freq) if s >= hp["learning_starts"]]
    return len(phases) * hp["gradient_steps"]


def learning_rate(value) -> tuple[float, float]:
    """SB3's learning_rate (a number, or the Zoo's lin_<lr>) as (our lr, our final_lr_fraction)."""
    if isinstance(value, str):
        if not value.startswith("lin_"):
            raise ValueError(f"learning_rate={value!r}: only numbers and lin_<lr> are translated")
        return float(value.removeprefix("lin_")), 0.0
    return float(value), 1.0


def adam(prefix: str, lr, eps: float) -> tuple[dict, float]:
    our_lr, final = learning_rate(lr)
    return {
        f"{prefix}.lr": our_lr,
        f"{prefix}.eps": eps,
        f"{prefix}.betas": list(ADAM["betas"]),
        f"{prefix}.weight_decay": ADAM["weight_decay"],
    }, final


def expected_config(zoo: Zoo) -> tuple[dict, list[str]]:
    """Our config keys and the values that give SB3's run, and notes on what is not exact."""
    algo = "sac" if zoo.algo == "droq" else zoo.algo
    on_sbx = zoo.peer == "sbx"
    hp = {**SB3_DEFAULTS[algo], **(SBX_DEFAULTS.get(algo, {}) if on_sbx else {}), **zoo.hp}
    notes = list(zoo.notes) + (SBX_NOTES + SBX_ALGO_NOTES.get(zoo.algo, []) if on_sbx else [])
    if on_sbx and hp.get("use_sde"):
        raise ValueError(f"{algo}: SBX's actors have no gSDE (use_sde is accepted and ignored)")
    gradient_steps = hp["train_freq"] if hp["gradient_steps"] == -1 else hp["gradient_steps"]  # -1: one per step
    common = {
        "env.num_envs": 1,
        "algo.n_step": 1,
        "buffer._target_": "rl_hydra.buffers.replay.ReplayBuffer",
        "algo.batch_size": hp["batch_size"],
        "buffer.capacity": hp["buffer_size"],
        "algo.learning_starts": hp["learning_starts"],
        "algo.gamma": hp["gamma"],
        "algo.tau": hp["tau"],
        "algo.train_every": hp["train_freq"],
        "algo.gradient_steps": gradient_steps,
        "train.eval_episodes": EVAL_EPISODES,
    }
    if zoo.algo in DQN_FAMILY:
        sync = {**hp, "gradient_steps": gradient_steps}
        interval, train_freq = hp["target_update_interval"], hp["train_freq"]
        if train_freq < interval and interval % train_freq:
            notes.append(
                f"target sync: SB3 syncs every {interval} env steps, after alternately "
                f"{interval // train_freq} and {interval // train_freq + 1} phases of {gradient_steps} "
                f"updates; ours every {target_update_every(sync, exact=False)} updates, SB3's mean"
            )
        optimizer, final = adam(
            "algo.optimizer", hp["learning_rate"], 0.01 / hp["batch_size"] if zoo.algo == "qr_dqn" else ADAM["eps"]
        )
        if on_sbx and final != 1.0:
            raise ValueError("DQN: SBX's keeps its first learning rate throughout (no schedule reaches its optax Adam)")
        arch = hp["net_arch"]
        if on_sbx and (len(arch) != 2 or arch[0] != arch[1]):
            raise ValueError(f"DQN: SBX's MLP is two layers of net_arch[0] units, not net_arch={arch}")
        expected = {
            **common,
            **optimizer,
            "algo.final_lr_fraction": final,
            "algo.target_update_every": target_update_every(sync, exact=False),
            "algo.double_q": False,
            "algo.exploration.start": hp["exploration_initial_eps"],
            "algo.exploration.end": hp["exploration_final_eps"],
            "algo.exploration.fraction": hp["exploration_fraction"],
            "algo.max_grad_norm": hp["max_grad_norm"],
            "network.hidden_sizes": hp["net_arch"],
            "network.activation": "relu",
            "network.layer_norm": False,
            "network.dropout": 0.0,
            "network.dueling": False,
            "network.noisy": False,
        }
        if zoo.algo == "qr_dqn":
            expected.update({"algo.num_quantiles": hp["n_quantiles"], "algo.kappa": 1.0})
        else:
            expected["algo.loss"] = "huber"
        if final != 1.0:
            notes.append(
                f"learning rate {hp['learning_rate']}: SB3 sets it from its progress at each training "
                "phase, ours from the env step at each update"
            )
        return expected, notes
    if zoo.algo == "crossq":
        defaults = sbx_crossq_policy() if on_sbx else CROSSQ_POLICY
        return crossq_expected({key: v for key, v in common.items() if key != "algo.tau"}, hp, defaults), notes
    if zoo.algo == "tqc":
        if on_sbx:  # one loss and one Adam per critic, the temperature after the actor: as ours
            if hp.get("n_critics", SBX_POLICY["tqc"]["n_critics"]) != 2:
                raise ValueError("TQC: SBX's builds two critics whatever n_critics says")
            return tqc_expected(common, hp, SBX_POLICY["tqc"]), notes
        return tqc_expected(common, hp), notes + [
            "critic loss: sb3-contrib averages the critics' quantile losses, ours sums them (the paper's one "
            "loss per critic); Adam's step is the same up to its eps",
            "sb3-contrib updates the temperature before the critics, ours after the actor (as our SAC)",
        ]
    if zoo.algo == "td3":
        if hp.get("noise_type") == "ornstein-uhlenbeck":
            notes.append(
                f"{PEER_LABELS[zoo.peer]} restarts the Ornstein-Uhlenbeck noise at each episode's end; ours runs on"
            )
        return td3_expected(common, hp, SBX_POLICY["td3"] if on_sbx else TD3_POLICY), notes
    if hp["target_update_interval"] != 1:
        raise ValueError("SAC: only target_update_interval=1 has a counterpart here")
    ent = hp["ent_coef"]
    learned = isinstance(ent, str)
    alpha = float(ent.split("_", 1)[1]) if learned and "_" in ent else (1.0 if learned else float(ent))
    if zoo.algo == "droq" and zoo.peer != "sbx":
        raise ValueError("DroQ: only SBX's (its SAC with dropout and layer norm) has a counterpart here")
    if hp.get("policy_delay", 1) != 1 and zoo.peer != "sbx":
        raise ValueError("SAC: SB3's updates its actor at every critic update (no policy_delay)")
    n_critics = hp.get("n_critics", 2)
    expected = {
        **common,
        "algo.ensemble_size": n_critics,
        "algo.subset_size": n_critics,  # the target's min over all critics
        "algo.actor_q": "min",
        "algo.policy_delay": hp.get("policy_delay", 1),
        "algo.learn_alpha": learned,
        "algo.initial_alpha": alpha,
        "algo.target_entropy": hp["target_entropy"],
        "algo.max_grad_norm": None,
    }
    for name in ("actor", "critic", "alpha"):
        optimizer, final = adam(f"algo.{name}_optimizer", hp["learning_rate"], ADAM["eps"])
        if final != 1.0:
            raise ValueError("SAC: a decaying learning rate has no counterpart here")
        expected.update(optimizer)
    for net in ("actor", "critic"):
        expected.update({f"network.{net}.hidden_sizes": hp["net_arch"], f"network.{net}.activation": "relu"})
    expected["network.critic.dropout"] = float(hp.get("dropout_rate", 0.0))  # SBX's keywords (DroQ)
    expected["network.critic.layer_norm"] = hp.get("layer_norm", False)
    expected["network.actor.gsde"] = hp["use_sde"]
    if hp["use_sde"]:  # SB3's gSDE: full_std, use_expln=False, clip_mean=2.0, learn_features: ours throughout
        expected.update(
            {
                "network.actor.gsde_log_std_init": hp.get("log_std_init", SB3_LOG_STD_INIT),
                "network.actor.gsde_clip_mean": 2.0,
                "algo.gsde_resample_every": hp["sde_sample_freq"],
            }
        )
    return expected, notes


def sbx_crossq_policy() -> dict:
    """SBX's CrossQ policy defaults as CROSSQ_POLICY says them: the running statistics' rate in torch's sense."""
    momentum = round(1.0 - SBX_POLICY["crossq"]["batch_norm_momentum"], 12)  # 0.01, not 0.010000000000000009
    return {**SBX_POLICY["crossq"], "batch_norm_momentum": momentum}


def crossq_expected(common: dict, hp: dict, defaults: dict = CROSSQ_POLICY) -> dict:
    """sb3-contrib's (or SBX's) CrossQ in our keys: no target networks, Adam with beta1 0.5 for the actor and
    the critics (the temperature's with torch's betas), batch renormalization as its policy's defaults."""
    policy = {**defaults, **{key: hp[key] for key in ("net_arch", "log_std_init", "use_expln") if key in hp}}
    if policy["use_expln"]:
        raise ValueError("CrossQ: use_expln=True has no counterpart here (our gSDE takes exp)")
    arch = policy["net_arch"]
    widths = {"actor": arch["pi"], "critic": arch["qf"]} if isinstance(arch, dict) else {"actor": arch, "critic": arch}
    ent = hp["ent_coef"]
    learned = isinstance(ent, str)
    alpha = float(ent.split("_", 1)[1]) if learned and "_" in ent else (1.0 if learned else float(ent))
    expected = {
        **common,
        "algo.ensemble_size": policy["n_critics"],
        "algo.policy_delay": hp["policy_delay"],
        "algo.learn_alpha": learned,
        "algo.initial_alpha": alpha,
        "algo.target_entropy": hp["target_entropy"],
        "algo.max_grad_norm": None,
    }
    for name in ("actor", "critic", "alpha"):
        optimizer, final = adam(f"algo.{name}_optimizer", hp["learning_rate"], ADAM["eps"])
        if final != 1.0:
            raise ValueError("CrossQ: a decaying learning rate has no counterpart here")
        expected.update(optimizer)
    for net in ("actor", "critic"):
        expected.update(
            {
                f"algo.{net}_optimizer.betas": list(CROSSQ_BETAS),
                f"network.{net}.hidden_sizes": widths[net],
                f"network.{net}.activation": "relu",
                f"network.{net}.momentum": policy["batch_norm_momentum"],
                f"network.{net}.eps": policy["batch_norm_eps"],
                f"network.{net}.warmup_steps": policy["renorm_warmup_steps"],
                f"network.{net}.r_max": CROSSQ_R_MAX,
                f"network.{net}.d_max": CROSSQ_D_MAX,
            }
        )
    expected["network.actor.gsde"] = hp["use_sde"]
    if hp["use_sde"]:
        expected.update(
            {
                "network.actor.gsde_log_std_init": policy["log_std_init"],
                "network.actor.gsde_clip_mean": 2.0,
                "algo.gsde_resample_every": hp["sde_sample_freq"],
            }
        )
    return expected


def tqc_expected(common: dict, hp: dict, defaults: dict = TQC_POLICY) -> dict:
    """sb3-contrib's (or SBX's) TQC in our keys: SAC's actor and temperature, its critics' quantiles and truncation."""
    policy = {**defaults, **{key: hp[key] for key in POLICY_KEYS if key in hp}}
    if hp["target_update_interval"] != 1:
        raise ValueError("TQC: only target_update_interval=1 has a counterpart here")
    ent = hp["ent_coef"]
    learned = isinstance(ent, str)
    alpha = float(ent.split("_", 1)[1]) if learned and "_" in ent else (1.0 if learned else float(ent))
    expected = {
        **common,
        "algo.ensemble_size": policy["n_critics"],
        "algo.num_quantiles": policy["n_quantiles"],
        "algo.top_quantiles_to_drop_per_critic": hp["top_quantiles_to_drop_per_net"],
        "algo.kappa": 1.0,
        "algo.policy_delay": 1,
        "algo.learn_alpha": learned,
        "algo.initial_alpha": alpha,
        "algo.target_entropy": hp["target_entropy"],
        "algo.max_grad_norm": None,
        "network.critic._target_": "rl_hydra.networks.actor_critic.QuantileCriticEnsemble",
        "network.critic.dropout": 0.0,
        "network.critic.layer_norm": False,
    }
    for name in ("actor", "critic", "alpha"):
        optimizer, final = adam(f"algo.{name}_optimizer", hp["learning_rate"], ADAM["eps"])
        if final != 1.0:
            raise ValueError("TQC: a decaying learning rate has no counterpart here")
        expected.update(optimizer)
    for net in ("actor", "critic"):
        expected.update({f"network.{net}.hidden_sizes": policy["net_arch"], f"network.{net}.activation": "relu"})
    expected["network.actor.gsde"] = hp["use_sde"]
    if hp["use_sde"]:
        expected.update(
            {
                "network.actor.gsde_log_std_init": policy["log_std_init"],
                "network.actor.gsde_clip_mean": 2.0,
                "algo.gsde_resample_every": hp["sde_sample_freq"],
            }
        )
    return expected


def td3_expected(common: dict, hp: dict, defaults: dict = TD3_POLICY) -> dict:
    """SB3's (or SBX's) TD3 in our keys: twin critics, target smoothing, the delay, and the Zoo's exploration noise."""
    policy = {**defaults, **{key: hp[key] for key in POLICY_KEYS if key in hp}}
    if policy["n_critics"] != 2:
        raise ValueError("TD3: only n_critics=2 (clipped double Q) has a counterpart here")
    kind = NOISE_KINDS[hp.get("noise_type", "normal")]
    expected = {
        **common,
        "algo.policy_delay": hp["policy_delay"],
        "algo.target_policy_noise": hp["target_policy_noise"],
        "algo.target_noise_clip": hp["target_noise_clip"],
        "algo.max_grad_norm": None,
        "algo.action_noise.kind": kind,
        "algo.action_noise.std": hp.get("noise_std", 0.1),
        "network.actor._target_": "rl_hydra.networks.actor_critic.DeterministicActor",
        "network.critic.dropout": 0.0,
        "network.critic.layer_norm": False,
    }
    if kind == "ornstein_uhlenbeck":
        expected.update({"algo.action_noise.theta": OU_THETA, "algo.action_noise.dt": OU_DT})
    for name in ("actor", "critic"):
        optimizer, final = adam(f"algo.{name}_optimizer", hp["learning_rate"], ADAM["eps"])
        if final != 1.0:
            raise ValueError("TD3: a decaying learning rate has no counterpart here")
        expected.update(
            {**optimizer, f"network.{name}.hidden_sizes": policy["net_arch"], f"network.{name}.activation": "relu"}
        )
    return expected


def overrides(zoo: Zoo) -> list[str]:
    """train.py overrides that set every expected key (`++`: added where the config lacks it)."""

    def value(v) -> str:
        if isinstance(v, bool) or v is None:
            return {True: "true", False: "false", None: "null"}[v]
        return f"[{','.join(map(str, v))}]" if isinstance(v, list) else str(v)

    expected = expected_config(zoo)[0]
    return ["buffer=replay", *(f"++{key}={value(v)}" for key, v in expected.items() if key != "buffer._target_")]


def our_value(cfg, key: str):
    """`key` of the composed config; an optimizer option it does not set has the class's default."""
    import hydra.utils
    from omegaconf import OmegaConf

    missing = object()
    value = OmegaConf.select(cfg, key, default=missing)
    if value is missing:
        prefix, option = key.rsplit(".", 1)
        target = OmegaConf.select(cfg, f"{prefix}._target_")
        if target is None:
            return None
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
    found = [
        f"{key} is {our_value(cfg, key)!r} in our config; {PEER_LABELS[zoo.peer]}'s run means {value!r}"
        for key, value in expected.items()
        if not same(our_value(cfg, key), value)
    ]
    names = (
        ("optimizer",)
        if zoo.algo in DQN_FAMILY
        else (
            ("actor_optimizer", "critic_optimizer")
            if zoo.algo == "td3"
            else ("actor_optimizer", "critic_optimizer", "alpha_optimizer")
        )
    )
    for name in names:
        node = cfg.algo[name]
        if not isinstance(hydra.utils.instantiate(node)([torch.nn.Parameter(torch.zeros(1))]), torch.optim.Adam):
            found.append(f"algo.{name}._target_ is {node._target_}, which makes no Adam (SB3's optimizer)")
    return found


def sb3_spec(zoo: Zoo, env_id: str, steps: int) -> dict:
    """The peer's job: SB3's (or SBX's) class, its keyword arguments and the env (scripts/benchmarks/sb3_peer.py)."""
    hp = dict(zoo.hp)
    policy_kwargs = {key: hp.pop(key) for key in POLICY_KEYS if key in hp}
    if zoo.algo in DQN_FAMILY:
        hp.update(tau=1.0, exploration_initial_eps=1.0)
    noise = {key: hp.pop(key) for key in NOISE_KEYS if key in hp}
    spec = {
        "algo": zoo.algo,
        "policy": "MlpPolicy",
        "env": {"gym": env_id},
        "kwargs": hp,
        "policy_kwargs": policy_kwargs,
        "steps": steps,
    }
    if zoo.peer != "sb3":
        spec["lib"] = zoo.peer
    if noise:  # the Zoo's action noise, which sb3_peer.py builds for the env's action size
        spec["action_noise"] = {"kind": noise.get("noise_type", "normal"), "std": noise.get("noise_std", 0.1)}
    return spec
