"""The run-level keys of conf/train.yaml: the seed, the device, process settings and the budget."""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rl_hydra.schema.keys import Rule, key

LARGEST_SEED = 2**32 - 1  # numpy's global seed
LARGEST_EPISODES = 1000  # an evaluation steps its episodes side by side, one env each
LARGEST_THREADS = 1024


@dataclass
class TrainKeys:
    total_steps: int = key(help="env steps of the run (summed over its envs)", integer=True, minimum=1)
    eval_every: int = key(help="env steps between greedy evaluations", integer=True, minimum=1)
    eval_episodes: int = key(
        help="episodes per evaluation, run side by side", integer=True, minimum=1, maximum=LARGEST_EPISODES
    )
    checkpoint_every: int = key(help="env steps between checkpoints/last.pt", integer=True, minimum=1)
    log_every: int = key(help="env steps between rows of metrics.csv", integer=True, minimum=1)
    progress: bool = key(help="a tqdm progress bar on stderr", choices=(True, False))
    stop_at_return: float | None = key(
        help="stop once an evaluation's mean return reaches this (null: never)", number=True, nullable=True
    )


@dataclass
class CheckpointKeys:
    save_buffer: bool = key(help="include the replay buffer in checkpoints/last.pt", choices=(True, False))


@dataclass
class RunKeys:
    """conf/train.yaml. The groups' nodes have schemas of their own (rl_hydra/schema/); the rules
    here span groups."""

    stored_as: ClassVar[str] = "run"

    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            ("algo.burn_in", "buffer.sequence_length", "buffer.stride"),
            lambda burn_in, length, stride: burn_in <= length - stride,
            "algo.burn_in <= buffer.sequence_length - buffer.stride (a step only ever burnt in is never learned)",
        ),
        Rule(
            ("distributed.min_replay_ratio", "distributed.max_replay_ratio", "algo.gradient_steps", "algo.train_every"),
            lambda floor, cap, gradient_steps, train_every: (
                floor in (None, "auto") or floor <= (cap or gradient_steps / train_every)
            ),
            "a number <= the cap on updates per env step (distributed.max_replay_ratio, "
            "else algo.gradient_steps / algo.train_every)",
        ),
    )

    algo: Any = None
    env: Any = None
    network: Any = None
    buffer: Any = None
    logger: Any = None
    distributed: Any = None  # the distributed group's node (schema/distributed.py)
    seed: int = key(
        help="seeds the run's generators, its envs and its agent", integer=True, minimum=0, maximum=LARGEST_SEED
    )
    preset: Any = key(None, "set by a tuned preset: {name, env_id it was tuned for}")
    device: str = key(help="auto | cpu | cuda[:N]")
    torch_threads: int = key(
        help="torch's CPU threads during the run", integer=True, minimum=1, maximum=LARGEST_THREADS
    )
    flush_denormal: bool = key(help="CPU math treats values below 1.2e-38 as 0", choices=(True, False))
    compile: bool = key(help="torch.compile each update's loss", choices=(True, False))
    fast_paths: bool = key(help="the speed layer (rl_hydra/speed); false: the plain torch path", choices=(True, False))
    train: TrainKeys = field(default_factory=TrainKeys)
    checkpoint: CheckpointKeys = field(default_factory=CheckpointKeys)
