"""The keys of conf/evaluate.yaml (scripts/evaluate.py, rl-hydra-eval), checked like a run's."""

from dataclasses import dataclass

from rl_hydra.schema.keys import key
from rl_hydra.schema.run import LARGEST_EPISODES, LARGEST_SEED

CHECKPOINTS = ("best", "last")


@dataclass
class EvaluateKeys:
    run_dir: str = key(help="a run directory, or a folder of runs (a sweep, outputs/); tracker stores are skipped")
    episodes: int = key(help="greedy episodes per run", integer=True, minimum=1, maximum=LARGEST_EPISODES)
    checkpoint: str = key(
        help="last: the final policy; best: the best of training's evaluations (their maximum, optimistic)",
        choices=CHECKPOINTS,
    )
    seed: int = key(
        help="evaluation episodes use seeds seed, seed+1, ...", integer=True, minimum=0, maximum=LARGEST_SEED
    )
    device: str = key(help="auto | cpu | cuda[:N]")
    video: bool = key(
        help="also record one episode per run as eval/videos/<checkpoint>_seed<seed>.gif (needs pygame)",
        choices=(True, False),
    )
    provenance: bool = key(
        help="a sweep's tables also show each configuration's code version and torch version", choices=(True, False)
    )
