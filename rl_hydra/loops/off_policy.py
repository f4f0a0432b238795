"""The one off-policy loop for every feed-forward agent (DQN, QR-DQN, IQN, REDQ).

Random actions until `learning_starts`, then the agent's own exploring actions; the Runner
runs `gradient_steps` updates every `train_every` env steps and evaluates, logs and
checkpoints on schedule.
"""

from __future__ import annotations

from typing import cast

from rl_hydra.loops.runner import Runner
from rl_hydra.loops.steps import Steps
from rl_hydra.protocols import CarriesState


def loop(runner: Runner) -> Steps[None]:
    agent, buffer, rollout = runner.agent, runner.local.buffer, runner.local.rollout
    action_space = rollout.env.action_space
    rollout.start()
    while not runner.done:
        if runner.global_step < agent.learning_starts:
            actions = action_space.sample()
        else:
            assert rollout.obs is not None  # start() set it
            actions, rollout.actor_state = agent.act(rollout.obs, rollout.actor_state, explore=True)
        step = rollout.step(actions)
        if rollout.actor_state is not None:  # an exploration process per env starts anew with each episode
            rollout.actor_state = cast(CarriesState, agent).reset_state(rollout.actor_state, step.done)
        buffer.add(step.obs, step.actions, step.rewards, step.next_obs, step.terminated, step.truncated)
        yield from runner.run_due_updates()
        runner.record_step()
        yield None  # a vector step's end (loops/steps.py)
