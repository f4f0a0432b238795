"""SAC (Haarnoja et al. 2018): the REDQ update with two critics.

Two critics regress onto r + gamma * (min of both target critics - alpha * log pi), one
update per env step, and the actor ascends the min of both critics (clipped double Q).
That is REDQ with N = M = 2, G = 1 and `actor_q=min` (conf/algo/sac.yaml sets them), so the
code is REDQ's (algos/redq.py); this class only gives the name used in messages.
"""

from __future__ import annotations

from typing import ClassVar

from rl_hydra.algos.redq import REDQ


class SAC(REDQ):
    name: ClassVar[str] = "sac"
