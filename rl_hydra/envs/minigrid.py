"""MiniGrid's observation (Chevalier-Boisvert et al. 2023) as the networks read it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rl_hydra.errors import EnvMismatch
from rl_hydra.schema.envs import MINIGRID_ACTIONS
from rl_hydra.spaces import shape_of


class MiniGridImage(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """MiniGrid's view, an (H, W, 3) grid of object, colour and state indices, channels first
    (3, H, W) as the CNN encoders read it, and declared as what it is: a MultiDiscrete of 11
    objects, 6 colours and 3 states per cell (MiniGrid declares a Box up to 255), so that the
    network one-hots each channel before its CNN (networks/encoders.py) and the buffer keeps uint8s.
    The other parts (direction, mission) pass as they are."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Dict) or "image" not in space.spaces or len(shape_of(space["image"])) != 3:
            raise EnvMismatch(
                f"MiniGridImage needs MiniGrid's Dict observation with an (H, W, 3) image; the env has {space}"
            )
        from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX, STATE_TO_IDX

        height, width, channels = shape_of(space["image"])
        values = np.array([len(OBJECT_TO_IDX), len(COLOR_TO_IDX), len(STATE_TO_IDX)])[:channels]  # 11, 6, 3
        image = gym.spaces.MultiDiscrete(
            np.broadcast_to(values[:, None, None], (channels, height, width)), dtype=np.uint8
        )
        self.observation_space = gym.spaces.Dict({**space.spaces, "image": image})

    def observation(self, observation: dict) -> dict:
        return {**observation, "image": np.ascontiguousarray(np.moveaxis(observation["image"], -1, 0))}


class MiniGridActions(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """`actions=navigation` keeps MiniGrid's first three actions (turn left, turn right, move
    forward). In tasks with nothing to carry or open (MiniGrid-Memory*, Empty, FourRooms) the other
    four change nothing, and a greedy policy that values one of them highest repeats it until the
    episode times out. `all` keeps the seven."""

    def __init__(self, env: gym.Env, actions: str = "all"):
        gym.utils.RecordConstructorArgs.__init__(self, actions=actions)
        gym.ActionWrapper.__init__(self, env)
        # MiniGrid's actions in order: left, right, forward, then pickup, drop, toggle, done
        self.action_space = gym.spaces.Discrete(MINIGRID_ACTIONS[actions])

    def action(self, action):
        return action  # the kept actions are MiniGrid's first ones, under their own numbers
