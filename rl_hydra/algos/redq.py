"""REDQ (Chen et al. 2021): Randomized Ensembled Double Q-learning for continuous actions.

SAC with an ensemble of N critics and many updates per env step: each target is the min over a
fresh random subset of M target critics, and the actor ascends the mean over all N. The update
is SAC's over an ensemble (algos/sac.py); this class gives the name used in messages.
"""

from __future__ import annotations

from typing import ClassVar

from rl_hydra.algos.sac import SAC


class REDQ(SAC):
    name: ClassVar[str] = "redq"
