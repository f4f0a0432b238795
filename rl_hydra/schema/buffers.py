"""The keys of each buffer node (conf/buffer/*.yaml). The discount and n-step come from the algo
node (algo.gamma, algo.n_step): the run hands them to a transition buffer (rl_hydra/training.py)."""

from dataclasses import dataclass
from typing import Any, ClassVar

from rl_hydra.schema.keys import Rule, key

BUFFER_DEVICES = ("auto", "cpu", "cuda")
SUM_TREES = ("auto", "numba", "numpy")
SHARE_FRAMES = (True, False, "auto")


@dataclass
class BufferKeys:
    targets: ClassVar[tuple[str, ...]] = ()
    _target_: str = key(help="the buffer's class")
    capacity: int = key(help="rows kept (chunks for the sequence buffer)", integer=True, minimum=1)
    device: str = key(help="where it lives: auto (the run's device, if it fits there)", choices=BUFFER_DEVICES)
    share_frames: Any = key(help="frame stacks stored one frame per step", choices=SHARE_FRAMES)


@dataclass
class ReplayKeys(BufferKeys):
    stored_as: ClassVar[str] = "buffer/replay"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.buffers.replay.ReplayBuffer",)


@dataclass
class PrioritizedKeys(BufferKeys):
    stored_as: ClassVar[str] = "buffer/prioritized"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.buffers.prioritized.PrioritizedReplayBuffer",)
    alpha: float = key(help="how much priorities count (0: uniform)", minimum=0.0)
    beta: float = key(help="importance-weight exponent at the first update", minimum=0.0, maximum=1.0)
    beta_final: float = key(help="... reached after beta_steps updates", minimum=0.0, maximum=1.0)
    beta_steps: Any = key(
        help="updates over which beta anneals (auto: the run's updates; null: never)",
        integer=True,
        minimum=1,
        nullable=True,
        also=("auto",),
    )
    epsilon: float = key(help="added to |TD error|: no drawable row gets probability 0", minimum=0.0, above=True)
    sum_tree: str = key(help="numba (the compiled tree) | numpy | auto", choices=SUM_TREES)


@dataclass
class SequenceKeys(BufferKeys):
    stored_as: ClassVar[str] = "buffer/sequence"
    targets: ClassVar[tuple[str, ...]] = ("rl_hydra.buffers.sequence.SequenceBuffer",)
    rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            ("stride", "sequence_length"),
            lambda stride, length: stride <= length,
            "stride <= sequence_length (chunks may overlap, not leave gaps)",
        ),
    )
    sequence_length: int = key(help="steps per stored chunk", integer=True, minimum=1)
    stride: int = key(help="a new chunk every `stride` steps", integer=True, minimum=1)
