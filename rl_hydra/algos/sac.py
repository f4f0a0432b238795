"""SAC (Haarnoja et al. 2018): the REDQ update with two critics.

Two critics regress onto r + gamma * (min of both target critics - alpha * log pi), one
update per env step, and the actor ascends the min of both critics (clipped double Q).
That is REDQ with N = M = 2, G = 1 and `actor_q="min"`, so the code is REDQ's (algos/redq.py);
this class only changes the defaults and the name used in messages.
"""

from __future__ import annotations

from typing import ClassVar

from rl_hydra.algos.redq import REDQ


class SAC(REDQ):
    name: ClassVar[str] = "sac"

    def __init__(
        self,
        *args,
        ensemble_size: int = 2,
        subset_size: int = 2,
        gradient_steps: int = 1,
        policy_delay: int = 1,
        actor_q: str = "min",
        **kwargs,
    ):
        super().__init__(
            *args,
            ensemble_size=ensemble_size,
            subset_size=subset_size,
            gradient_steps=gradient_steps,
            policy_delay=policy_delay,
            actor_q=actor_q,
            **kwargs,
        )
