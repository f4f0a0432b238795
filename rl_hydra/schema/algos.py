"""The keys of each algorithm's node (conf/algo/*.yaml): one schema per algorithm class, the
family's shared keys in a base. `targets` names the classes a schema declares the keys of."""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rl_hydra.choices import TD_LOSSES
from rl_hydra.schema.keys import LARGEST_BATCH, LARGEST_COUNT, Rule, key


@dataclass
class OptimizerKeys:
    """An optimizer node (`_partial_`: the agent gives it its parameters). Only `lr` is declared:
    any optimizer's other keyword arguments may be added (`++algo.optimizer.eps=1e-5`)."""

    lr: float = key(help="learning rate", minimum=0.0, above=True)


def target_rate() -> Any:
    return key(help="target update rate: 1.0 a hard copy, < 1 polyak averaging", minimum=0.0, maximum=1.0, above=True)


def optimizer(help: str) -> Any:
    """An optimizer key of an algorithm: left untyped (any optimizer's keys), its lr checked."""
    return key(help=help, schema=OptimizerKeys)


@dataclass
class ExplorationKeys:
    start: float = key(help="epsilon at step 0", minimum=0.0, maximum=1.0)
    end: float = key(help="epsilon once the decay is over", minimum=0.0, maximum=1.0)
    fraction: float = key(help="of train.total_steps over which epsilon decays linearly", minimum=0.0, maximum=1.0)


@dataclass
class ScheduleKeys:
    """When an agent learns (rl_hydra/protocols.py's Agent reads these)."""

    _target_: str = key(help="the agent's class")
    batch_size: int = key(
        help="samples (sequences for DRQN) per update", integer=True, minimum=1, maximum=LARGEST_BATCH
    )
    learning_starts: int = key(help="env steps of random acting before the first update", integer=True, minimum=0)
    train_every: int = key(help="env steps between training phases", integer=True, minimum=1)
    gradient_steps: int = key(help="updates per training phase", integer=True, minimum=1)
    gamma: float = key(help="discount; the buffer builds the discounted returns", minimum=0.0, maximum=1.0)
    n_step: int = key(help="rewards summed before bootstrapping", integer=True, minimum=1)
    max_grad_norm: float | None = key(
        help="clip each gradient to this norm (null: never)", minimum=0.0, above=True, nullable=True
    )


@dataclass
class DQNFamilyKeys(ScheduleKeys):
    """conf/algo/base/dqn.yaml: what DQN, QR-DQN, IQN and C51 share."""

    targets: ClassVar[tuple[str, ...]] = ()
    tau: float = target_rate()
    target_update_every: int = key(help="updates between target syncs", integer=True, minimum=1)
    double_q: bool = key(
        help="pick the next action with the online net, value it with the target", choices=(True, False)
    )
    exploration: ExplorationKeys = field(default_factory=ExplorationKeys)
    final_lr_fraction: float = key(help="lr decays linearly to this fraction of optimizer.lr", minimum=0.0, maximum=1.0)
    optimizer: Any = optimizer("the Q network's optimizer")


@dataclass
class DQNKeys(DQNFamilyKeys):
    stored_as: ClassVar[str] = "algo/dqn"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.dqn.DQN",)
    loss: str = key(help="the TD loss", choices=TD_LOSSES)


@dataclass
class QRDQNKeys(DQNFamilyKeys):
    stored_as: ClassVar[str] = "algo/qr_dqn"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.qr_dqn.QRDQN",)
    num_quantiles: int = key(help="N quantiles per action", integer=True, minimum=1, maximum=LARGEST_COUNT)
    kappa: float = key(help="Huber threshold of the quantile loss", minimum=0.0, above=True)


@dataclass
class IQNKeys(DQNFamilyKeys):
    stored_as: ClassVar[str] = "algo/iqn"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.iqn.IQN",)
    num_tau_samples: int = key(
        help="N: fractions for the online quantiles of each update", integer=True, minimum=1, maximum=LARGEST_COUNT
    )
    num_tau_prime_samples: int = key(
        help="N': fractions for the target samples", integer=True, minimum=1, maximum=LARGEST_COUNT
    )
    num_quantile_samples: int = key(
        help="K: fractions averaged to pick an action", integer=True, minimum=1, maximum=LARGEST_COUNT
    )
    kappa: float = key(help="Huber threshold of the quantile loss", minimum=0.0, above=True)


@dataclass
class C51Keys(DQNFamilyKeys):
    stored_as: ClassVar[str] = "algo/c51"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.c51.C51",)
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(("v_max", "v_min"), lambda high, low: high > low, "v_max > v_min (the atoms span the returns between)"),
    )
    num_atoms: int = key(help="N atoms of the support", integer=True, minimum=2, maximum=LARGEST_COUNT)
    v_min: float = key(help="the support's lower end", number=True)
    v_max: float = key(help="the support's upper end (> v_min)", number=True)


@dataclass
class DRQNKeys(DQNFamilyKeys):
    stored_as: ClassVar[str] = "algo/drqn"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.drqn.DRQN",)
    loss: str = key(help="the TD loss", choices=TD_LOSSES)
    burn_in: int = key(
        help="leading steps of each sequence that only refresh the stored state", integer=True, minimum=0
    )
    value_rescaling: bool = key(help="learn h(Q), R2D2's squashed values, with targets h(R + gamma^n h^-1(Q'))")


@dataclass
class EntropyKeys(ScheduleKeys):
    """What SAC's family shares: a squashed Gaussian actor, a learned temperature, three optimizers."""

    targets: ClassVar[tuple[str, ...]] = ()
    ensemble_size: int = key(help="N critics", integer=True, minimum=1, maximum=LARGEST_COUNT)
    policy_delay: int = key(help="critic updates per actor (and alpha) update", integer=True, minimum=1)
    initial_alpha: float = key(help="the entropy temperature at step 0", minimum=0.0, above=True)
    learn_alpha: bool = key(help="learn alpha toward target_entropy (false: keep initial_alpha)", choices=(True, False))
    target_entropy: Any = key(
        help="the entropy alpha is tuned toward: auto (-action_dim) or a number", number=True, also=("auto",)
    )
    gsde_resample_every: int = key(
        help="env steps between new gSDE matrices; -1: after each training phase", integer=True, minimum=1, also=(-1,)
    )
    actor_optimizer: Any = optimizer("the actor's optimizer")
    critic_optimizer: Any = optimizer("the critics' optimizer")
    alpha_optimizer: Any = optimizer("the temperature's optimizer")


@dataclass
class REDQKeys(EntropyKeys):
    """conf/algo/base/redq.yaml: REDQ, SAC (N = M = 2, G = 1, the actor on the min) and DroQ."""

    stored_as: ClassVar[str] = "algo/redq"

    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.redq.REDQ", "rl_hydra.algos.sac.SAC")
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(("subset_size", "ensemble_size"), lambda m, n: m <= n, "subset_size <= ensemble_size"),
    )
    subset_size: int = key(
        help="M target critics the min is taken over (<= ensemble_size)", integer=True, minimum=1, maximum=LARGEST_COUNT
    )
    tau: float = target_rate()
    actor_q: str = key(
        help="what the actor ascends: the mean over the critics (REDQ) or their min (SAC)", choices=("mean", "min")
    )


@dataclass
class TQCKeys(EntropyKeys):
    stored_as: ClassVar[str] = "algo/tqc"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.tqc.TQC",)
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            ("top_quantiles_to_drop_per_critic", "num_quantiles"),
            lambda d, m: d < m,
            "top_quantiles_to_drop_per_critic < num_quantiles (each critic keeps an atom)",
        ),
    )
    num_quantiles: int = key(help="M quantiles per critic", integer=True, minimum=1, maximum=LARGEST_COUNT)
    top_quantiles_to_drop_per_critic: int = key(
        help="d: the target keeps the N * (M - d) smallest pooled atoms", integer=True, minimum=0
    )
    kappa: float = key(help="Huber threshold of the quantile loss", minimum=0.0, above=True)
    tau: float = target_rate()


@dataclass
class CrossQKeys(EntropyKeys):
    """No target networks, so no tau: the critics' batch renormalization (network/crossq.yaml) keeps them stable."""

    stored_as: ClassVar[str] = "algo/crossq"

    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.crossq.CrossQ",)
    batch_size: int = key(
        help="B: the critics see 2B rows; batch statistics need B >= 2", integer=True, minimum=2, maximum=LARGEST_BATCH
    )


@dataclass
class ActionNoiseKeys:
    kind: str = key(help="gaussian | ornstein_uhlenbeck", choices=("gaussian", "ornstein_uhlenbeck"))
    std: float = key(help="sigma of either kind (unit-box scale)", minimum=0.0)
    theta: float = key(help="ornstein_uhlenbeck: pull toward 0 per unit time", minimum=0.0, above=True)
    dt: float = key(help="ornstein_uhlenbeck: time per env step", minimum=0.0, above=True)


@dataclass
class TD3Keys(ScheduleKeys):
    stored_as: ClassVar[str] = "algo/td3"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.algos.td3.TD3",)
    tau: float = target_rate()
    policy_delay: int = key(help="critic updates per actor and target update", integer=True, minimum=1)
    target_policy_noise: float = key(help="std of the Gaussian added to the target action", minimum=0.0)
    target_noise_clip: float = key(help="that noise is clipped to [-c, c]", minimum=0.0)
    action_noise: ActionNoiseKeys = field(default_factory=ActionNoiseKeys)
    actor_optimizer: Any = optimizer("the actor's optimizer")
    critic_optimizer: Any = optimizer("the critics' optimizer")
