"""The keys of the `distributed` group (conf/distributed/): none, one process; apex, Ray actors."""

from dataclasses import dataclass
from typing import Any, ClassVar

from rl_hydra.schema.keys import Rule, key

LARGEST_ACTORS = 4096  # more is a typo (Ape-X itself ran 360)


@dataclass
class OneProcessKeys:
    stored_as: ClassVar[str] = "distributed/none"
    targets: ClassVar[tuple[str, ...]] = ()
    name: str = key(help="none: the run acts, stores and learns in one process", choices=("none", "apex"))


@dataclass
class ApexKeys(OneProcessKeys):
    """Ape-X (and R2D2 with algo=drqn) on Ray: docs/distributed.md."""

    stored_as: ClassVar[str] = "distributed/apex"

    address: str | None = key(
        help="null: a local Ray instance; auto | ray://host:port | host:port joins a cluster",
        nullable=True,
        also=("auto",),
        # host: a name, an IPv4 address or a bracketed IPv6 one ([::1]:6379)
        pattern=(r"(ray://)?([^\s/:\[\]]+|\[[0-9A-Fa-f:.]+\]):\d+", "ray://host:port or host:port"),
    )
    actors: Any = key(
        help="acting processes; auto: the CPUs / cpus_per_actor, less one for the learner",
        integer=True,
        minimum=1,
        maximum=LARGEST_ACTORS,
        also=("auto",),
    )
    cpus_per_actor: float = key(help="Ray CPUs each actor reserves", minimum=0.0, above=True)
    shards: int = key(help="replay shards (Ray actors), at most one per actor", integer=True, minimum=1)
    epsilon_base: float = key(
        help="actor i of N explores with epsilon_base ** (1 + epsilon_alpha * i / (N - 1))", minimum=0.0, maximum=1.0
    )
    epsilon_alpha: float = key(help="see epsilon_base", minimum=0.0)
    weights_every: int = key(
        help="env steps an actor takes between pulls of the learner's weights", integer=True, minimum=1
    )
    publish_every: int = key(help="updates between the learner's publications of its weights", integer=True, minimum=1)
    send_every: int = key(
        help="transitions (sequences for algo=drqn) per batch an actor sends", integer=True, minimum=1
    )
    max_replay_ratio: float | None = key(
        help="updates per env step at most (null: the algo's own)", minimum=0.0, above=True, nullable=True
    )
    min_replay_ratio: Any = key(
        help="actors wait while the learner is below this; auto: the cap (max_replay_ratio, else the algo's own); "
        "null: never",
        minimum=0.0,
        above=True,
        nullable=True,
        also=("auto",),
    )
    priority_alpha: float = key(help="sequences are drawn with probability priority^alpha", minimum=0.0)

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            ("min_replay_ratio", "max_replay_ratio"),
            lambda floor, cap: cap is None or floor in (None, "auto") or floor <= cap,
            "min_replay_ratio <= max_replay_ratio",
        ),
    )
    priority_eta: float = key(
        help="a sequence's priority: eta * max + (1 - eta) * mean |TD error|", minimum=0.0, maximum=1.0
    )
    priority_beta: float = key(
        help="a drawn sequence's loss weight is (min p / p)^beta over its batch; 0: uncorrected",
        minimum=0.0,
        maximum=1.0,
    )
    max_restarts: int = key(help="times Ray restarts an actor process that died", integer=True, minimum=0, maximum=1000)
    prefetch: int = key(
        help="sample requests the learner keeps in flight per shard", integer=True, minimum=1, maximum=64
    )
