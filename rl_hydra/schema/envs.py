"""The keys of an env node (conf/env/*.yaml): the base every group has, and each family's own."""

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rl_hydra.choices import ENV_EXTRAS
from rl_hydra.schema.keys import key

VECTORIZATIONS = ("sync", "async", "envpool")
MINIGRID_ACTIONS = {"all": 7, "navigation": 3}  # how many of MiniGrid's actions each set keeps, in order
LARGEST_ENVS = 1024
# sizes that scale memory or time, at most what any published setting uses many times over
LARGEST_EPISODE_STEPS = 10**6  # Atari's longest is 27,000 agent steps; an evaluation runs each episode to its end
LARGEST_FRAME_STACK = 64  # frames per observation (Atari's 4)
LARGEST_SCREEN = 1024  # pixels a side (Atari's 84)


@dataclass
class EnvKeys:
    stored_as: ClassVar[str] = "env/base"
    targets: ClassVar[tuple[str, ...]] = ()
    id: str = key(help="a gymnasium id, e.g. CartPole-v1")
    num_envs: int = key(help="envs stepped side by side", integer=True, minimum=1, maximum=LARGEST_ENVS)
    max_episode_steps: int | None = key(
        None,
        "a time limit (null keeps the env's own)",
        integer=True,
        minimum=1,
        maximum=LARGEST_EPISODE_STEPS,
        nullable=True,
    )
    kwargs: Any = key(help="passed to gymnasium.make")
    wrappers: Any = key(help="a list of _partial_ wrappers, each called with the env")
    extra: str | None = key(help="which extra of pyproject.toml installs its packages", choices=(*ENV_EXTRAS, None))
    vectorization: str = key("sync", "how the envs step (docs/pixels.md)", choices=VECTORIZATIONS)


@dataclass
class GymEnvKeys(EnvKeys):
    stored_as: ClassVar[str] = "env/gym"
    fallback_max_episode_steps: int | None = key(
        help="the time limit of an env that has none",
        integer=True,
        minimum=1,
        maximum=LARGEST_EPISODE_STEPS,
        nullable=True,
    )
    keep_text: bool = key(help="keep text parts of Dict/Tuple observations as word indices", choices=(True, False))


@dataclass
class FamilyEnvKeys(EnvKeys):
    """A group made for a family of ids (its `ids` patterns)."""

    stored_as: ClassVar[str] = "env/family"

    ids: Any = key(help="the id patterns this group is made for")


@dataclass
class LearningKeys:
    clip_rewards: bool = key(help="store the sign of each reward", choices=(True, False))
    terminal_on_life_loss: bool = key(help="store a lost life as terminal", choices=(True, False))


@dataclass
class MinAtarEnvKeys(FamilyEnvKeys):
    stored_as: ClassVar[str] = "env/minatar"
    learning: LearningKeys = field(default_factory=LearningKeys)  # what the replay buffer stores


@dataclass
class PreprocessingKeys:
    noop_max: int = key(
        help="no-op actions (1 to noop_max) at each episode's start", integer=True, minimum=0, maximum=10_000
    )
    frame_skip: int = key(help="frames each action is repeated on", integer=True, minimum=1, maximum=64)
    screen_size: int = key(
        help="frames are resized to this many pixels a side", integer=True, minimum=1, maximum=LARGEST_SCREEN
    )
    frame_stack: int = key(help="frames an observation stacks", integer=True, minimum=1, maximum=LARGEST_FRAME_STACK)


@dataclass
class AtariEnvKeys(MinAtarEnvKeys):
    stored_as: ClassVar[str] = "env/atari"
    preprocessing: Any = key(help="noop_max, frame_skip, screen_size, frame_stack", schema=PreprocessingKeys)
    eval_epsilon: float = key(help="evaluation acts at random with this probability", minimum=0.0, maximum=1.0)


@dataclass
class MiniGridEnvKeys(FamilyEnvKeys):
    stored_as: ClassVar[str] = "env/minigrid"
    actions: str = key(
        help="all: MiniGrid's 7 | navigation: turn left, turn right, forward", choices=tuple(MINIGRID_ACTIONS)
    )
    eval_epsilon: float = key(help="evaluation acts at random with this probability", minimum=0.0, maximum=1.0)
    keep_text: bool = key(help="keep the mission as word indices", choices=(True, False))


ENV_SCHEMAS = (EnvKeys, GymEnvKeys, FamilyEnvKeys, MinAtarEnvKeys, AtariEnvKeys, MiniGridEnvKeys)


# The wrappers an env node's `wrappers` list may name, each with its keys (`_partial_`: the env is
# given when it is built). A run directory's config may name no other (rl_hydra/runs/trust.py).
@dataclass
class WrapperKeys:
    targets: ClassVar[tuple[str, ...]] = (
        "rl_hydra.envs.wrappers.ChannelsFirst",
        "rl_hydra.envs.minatar.MinAtarReset",
        "rl_hydra.envs.minigrid.MiniGridImage",
    )
    _target_: str = key(help="the wrapper's class")
    _partial_: bool = key(True, "built with the env later", choices=(True,))


@dataclass
class MaskObservationKeys(WrapperKeys):
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.envs.wrappers.MaskObservation",)
    indices: Any = key(help="the observation entries hidden (set to 0)", integer=True, minimum=0, each=True)


@dataclass
class ScaleObservationKeys(WrapperKeys):
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.envs.wrappers.ScaleObservation",)
    scale: Any = key(
        help="each observation entry is multiplied by its factor", minimum=0.0, above=True, number=True, each=True
    )


@dataclass
class MiniGridActionsKeys(WrapperKeys):
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.envs.minigrid.MiniGridActions",)
    actions: str = key(help="all | navigation", choices=tuple(MINIGRID_ACTIONS))


@dataclass
class AtariPreprocessingKeys(WrapperKeys):
    targets: ClassVar[tuple[str, ...]] = ("gymnasium.wrappers.AtariPreprocessing",)
    noop_max: int = key(help="no-op actions at each episode's start", integer=True, minimum=0, maximum=10_000)
    frame_skip: int = key(help="frames each action is repeated on", integer=True, minimum=1, maximum=64)
    screen_size: int = key(help="pixels a side", integer=True, minimum=1, maximum=LARGEST_SCREEN)
    grayscale_obs: bool = key(True, "grayscale frames", choices=(True, False))
    grayscale_newaxis: bool = key(False, "a channel axis on grayscale frames", choices=(True, False))
    terminal_on_life_loss: bool = key(False, "a lost life ends the episode", choices=(True, False))
    scale_obs: bool = key(False, "frames as floats in [0, 1]", choices=(True, False))


@dataclass
class FrameStackKeys(WrapperKeys):
    targets: ClassVar[tuple[str, ...]] = ("gymnasium.wrappers.FrameStackObservation",)
    stack_size: int = key(help="frames an observation stacks", integer=True, minimum=1, maximum=LARGEST_FRAME_STACK)
    padding_type: str = key("reset", "reset | zero", choices=("reset", "zero"))


WRAPPER_SCHEMAS = (
    WrapperKeys,
    MaskObservationKeys,
    ScaleObservationKeys,
    MiniGridActionsKeys,
    AtariPreprocessingKeys,
    FrameStackKeys,
)
