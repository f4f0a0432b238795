"""The keys of each network node (conf/network/*.yaml): `_partial_` factories the agent calls with
the observation and action spaces, so no size that the env decides is here."""

from dataclasses import dataclass
from typing import Any, ClassVar

from rl_hydra.choices import ACTIVATIONS, CELLS
from rl_hydra.schema.keys import LARGEST_WIDTH, Rule, key

ENCODERS = ("auto", "flat", "nature_cnn", "minatar_cnn", "grid_cnn")
BOOL = (True, False)


def sizes(help: str) -> Any:
    return key(help=help, integer=True, minimum=1, maximum=LARGEST_WIDTH, each=True)


@dataclass
class NetworkKeys:
    targets: ClassVar[tuple[str, ...]] = ()
    _target_: str = key(help="the network's class")
    _partial_: bool = key(help="built by the agent, which passes the spaces", choices=BOOL)
    activation: str = key(help="the hidden layers' activation", choices=tuple(ACTIVATIONS))
    encoder: str = key(help="what reads the observation (docs/pixels.md)", choices=ENCODERS)
    discrete_embedding: int | None = key(
        help="null: Discrete parts one-hot; d: a learned embedding of d each",
        integer=True,
        minimum=1,
        maximum=LARGEST_WIDTH,
        nullable=True,
    )


@dataclass
class HeadKeys(NetworkKeys):
    """An MLP over the encoder with a head per action: Q values, quantiles or atoms."""

    hidden_sizes: list[int] = sizes("the hidden layers' widths")
    layer_norm: bool = key(help="LayerNorm after each hidden Linear", choices=BOOL)
    dropout: float = key(help="dropout after each hidden Linear", minimum=0.0, maximum=1.0, below=True)
    dueling: bool = key(help="V and A streams; Q = V + A - mean A", choices=BOOL)
    noisy: bool = key(help="every Linear a NoisyLinear (Fortunato et al. 2018)", choices=BOOL)
    noisy_sigma0: float = key(help="initial noise scale: sigma = noisy_sigma0 / sqrt(fan_in)", minimum=0.0)


@dataclass
class QNetworkKeys(HeadKeys):
    stored_as: ClassVar[str] = "network/q"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.mlp.QNetwork",)
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(("bias", "noisy"), lambda bias, noisy: bias or not noisy, "bias=true with noisy=true (a noisy bias)"),
    )
    bias: bool = key(help="false: Linear layers without a bias", choices=BOOL)


@dataclass
class QuantileNetworkKeys(HeadKeys):
    stored_as: ClassVar[str] = "network/head"
    targets: ClassVar[tuple[str, ...]] = (
        "rl_hydra.networks.quantile.QuantileNetwork",
        "rl_hydra.networks.categorical.CategoricalNetwork",
    )


@dataclass
class ImplicitQuantileNetworkKeys(NetworkKeys):
    stored_as: ClassVar[str] = "network/implicit_quantile"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.quantile.ImplicitQuantileNetwork",)
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(("hidden_sizes",), lambda sizes: len(sizes) >= 1, "at least one width, for the state features psi(s)"),
    )
    embedding_dim: int = key(help="cosine basis size", integer=True, minimum=1, maximum=LARGEST_WIDTH)
    hidden_sizes: list[int] = sizes("psi(s)'s widths")
    head_hidden_sizes: list[int] = sizes("the head's widths, after the product")
    dueling: bool = key(help="V and A streams in the head", choices=BOOL)
    noisy: bool = key(help="every Linear of psi and the head a NoisyLinear", choices=BOOL)
    noisy_sigma0: float = key(help="initial noise scale", minimum=0.0)


@dataclass
class RecurrentQNetworkKeys(NetworkKeys):
    stored_as: ClassVar[str] = "network/recurrent"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.recurrent.RecurrentQNetwork",)
    encoder_sizes: list[int] = sizes("the MLP before the core")
    cell: str = key(help="the recurrent core (docs/drqn.md)", choices=tuple(CELLS))
    lstm_size: int = key(help="the core's hidden size (a GRU's too)", integer=True, minimum=1, maximum=LARGEST_WIDTH)
    head_sizes: list[int] = sizes("the MLP after the core")


@dataclass
class PartKeys:
    """What every actor and critic ensemble has: an MLP the algorithm builds with the spaces."""

    targets: ClassVar[tuple[str, ...]] = ()
    _target_: str = key(help="the actor's or the critics' class")
    _partial_: bool = key(help="built by the agent", choices=BOOL)
    hidden_sizes: list[int] = sizes("the hidden layers' widths")
    activation: str = key(help="the hidden layers' activation", choices=tuple(ACTIVATIONS))


@dataclass
class DeterministicActorKeys(PartKeys):
    """TD3's actor: tanh(mu(s)), scaled to the action box."""

    stored_as: ClassVar[str] = "network/deterministic_actor"

    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.actor_critic.DeterministicActor",)


@dataclass
class ActorKeys(DeterministicActorKeys):
    """SAC's squashed Gaussian actor (REDQ, DroQ, TQC)."""

    stored_as: ClassVar[str] = "network/squashed_actor"

    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.actor_critic.SquashedGaussianActor",)
    gsde: bool = key(help="generalized state-dependent exploration (SB3's use_sde)", choices=BOOL)
    gsde_log_std_init: float = key(help="initial log-std of the exploration matrix's entries", number=True)
    gsde_clip_mean: float = key(help="with gSDE, the mean before tanh is clipped to [-c, c]", minimum=0.0, above=True)


@dataclass
class CriticKeys(PartKeys):
    """An ensemble of Q(s, a) critics (TQC's quantile critics too); the algorithm gives their number."""

    stored_as: ClassVar[str] = "network/critic"

    targets: ClassVar[tuple[str, ...]] = (
        "rl_hydra.networks.actor_critic.CriticEnsemble",
        "rl_hydra.networks.actor_critic.QuantileCriticEnsemble",
    )
    dropout: float = key(help="after each hidden Linear (DroQ: 0.01)", minimum=0.0, maximum=1.0, below=True)
    layer_norm: bool = key(help="after the dropout, before the activation (DroQ: true)", choices=BOOL)


@dataclass
class BatchRenormKeys:
    """Batch renormalization (Ioffe 2017) after each hidden Linear: CrossQ's actor and critics."""

    momentum: float = key(help="the running statistics' update rate", minimum=0.0, maximum=1.0, above=True)
    eps: float = key(help="added to the variance", minimum=0.0, above=True)
    warmup_steps: int = key(help="updates of plain batch norm before r and d are clipped less", integer=True, minimum=0)
    r_max: float = key(help="r is clipped to [1 / r_max, r_max]", minimum=1.0)
    d_max: float = key(help="d is clipped to [-d_max, d_max]", minimum=0.0)


@dataclass
class BatchRenormActorKeys(ActorKeys, BatchRenormKeys):
    stored_as: ClassVar[str] = "network/batch_renorm_actor"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.crossq.BatchRenormActor",)


@dataclass
class BatchRenormCriticKeys(PartKeys, BatchRenormKeys):
    stored_as: ClassVar[str] = "network/batch_renorm_critic"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.networks.crossq.BatchRenormCriticEnsemble",)


@dataclass
class ActorCriticKeys:
    """An actor and a critic ensemble (network/redq.yaml, td3, tqc, crossq, droq). Each part is typed
    by its own schema, named in the file's defaults list (`/schema/network/critic@critic`), since the
    algorithms pair different actors and critics."""

    stored_as: ClassVar[str] = "network/actor_critic"

    targets: ClassVar[tuple[str, ...]] = ()
    actor: Any = key(help="the policy network")
    critic: Any = key(help="the critics")
