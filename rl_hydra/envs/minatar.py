"""MinAtar's gym env (`minatar.gym.BaseEnv`), reset as gymnasium's own envs are."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class MinAtarReset(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Each episode of a MinAtar game starts from its seed alone.

    MinAtar's `reset(seed=...)` seeds the game's generator but not gymnasium's `np_random` (which
    gymnasium's tools and env checker expect), and keeps the previous episode's last action as the
    one a sticky action repeats, so a seeded episode would depend on the episode before. This
    wrapper seeds `np_random` too and starts the sticky action as a no-op, as ALE does.
    """

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        minatar_env: Any = self.env.unwrapped  # MinAtar's own env class (untyped)
        gym.Env.reset(minatar_env, seed=seed)
        minatar_env.game.last_action = 0  # MinAtar's no-op, in the full action set that it stores
        return self.env.reset(seed=seed, options=options)
