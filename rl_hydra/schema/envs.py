"""The keys of an env node (conf/env/*.yaml): the base every group has, and each family's own."""

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from rl_hydra.schema.keys import key

VECTORIZATIONS = ("sync", "async", "envpool")
MINIGRID_ACTIONS = ("all", "navigation")
LARGEST_ENVS = 1024


@dataclass
class EnvKeys:
    targets: ClassVar[tuple[str, ...]] = ()
    id: str = key(help="a gymnasium id, e.g. CartPole-v1")
    num_envs: int = key(help="envs stepped side by side", integer=True, minimum=1, maximum=LARGEST_ENVS)
    max_episode_steps: Optional[int] = key(
        None, "a time limit (null keeps the env's own)", integer=True, minimum=1, nullable=True
    )
    kwargs: Any = key(help="passed to gymnasium.make")
    wrappers: Any = key(help="a list of _partial_ wrappers, each called with the env")
    extra: Optional[str] = key(help="the install extra it needs (rl_hydra/envs/make.py lists them)")
    vectorization: str = key("sync", "how the envs step (docs/pixels.md)", choices=VECTORIZATIONS)


@dataclass
class GymEnvKeys(EnvKeys):
    fallback_max_episode_steps: Optional[int] = key(
        help="the time limit of an env that has none", integer=True, minimum=1, nullable=True
    )
    keep_text: bool = key(help="keep text parts of Dict/Tuple observations as word indices", choices=(True, False))


@dataclass
class FamilyEnvKeys(EnvKeys):
    """A group made for a family of ids (its `ids` patterns)."""

    ids: Any = key(help="the id patterns this group is made for")


@dataclass
class LearningKeys:
    clip_rewards: bool = key(help="store the sign of each reward", choices=(True, False))
    terminal_on_life_loss: bool = key(help="store a lost life as terminal", choices=(True, False))


@dataclass
class MinAtarEnvKeys(FamilyEnvKeys):
    learning: LearningKeys = field(default_factory=LearningKeys)  # what the replay buffer stores


@dataclass
class AtariEnvKeys(MinAtarEnvKeys):
    preprocessing: Any = key(help="noop_max, frame_skip, screen_size, frame_stack")
    eval_epsilon: float = key(help="evaluation acts at random with this probability", minimum=0.0, maximum=1.0)


@dataclass
class MiniGridEnvKeys(FamilyEnvKeys):
    actions: str = key(help="all: MiniGrid's 7 | navigation: turn left, turn right, forward", choices=MINIGRID_ACTIONS)
    eval_epsilon: float = key(help="evaluation acts at random with this probability", minimum=0.0, maximum=1.0)
    keep_text: bool = key(help="keep the mission as word indices", choices=(True, False))


ENV_SCHEMAS = (EnvKeys, GymEnvKeys, FamilyEnvKeys, MinAtarEnvKeys, AtariEnvKeys, MiniGridEnvKeys)
