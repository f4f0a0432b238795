"""The recurrent loop (DRQN): the off-policy loop with a hidden state carried through acting.

The actor's state is threaded from step to step, reset per env when an episode
starts (here, and nowhere else), and handed to the sequence buffer with every
step, so each stored chunk begins from the state the actor really had. The
Runner evaluates (a greedy recurrent rollout), logs and checkpoints on schedule.
"""

from __future__ import annotations

from typing import cast

from rl_hydra.loops.runner import Runner
from rl_hydra.loops.steps import Steps
from rl_hydra.protocols import RecurrentAgent, SequenceBuffer


def loop(runner: Runner) -> Steps[None]:
    # the run was built for a recurrent agent and a sequence buffer (fit.py checks capabilities.recurrent)
    agent, buffer = cast(RecurrentAgent, runner.agent), cast(SequenceBuffer, runner.local.buffer)
    rollout = runner.local.rollout
    action_space = rollout.env.action_space
    rollout.start()
    if rollout.actor_state is None:  # fresh episodes: no state, and no chunk, carries over
        rollout.actor_state = agent.initial_state(rollout.env.num_envs)
        buffer.start_episodes()
    else:  # an exact resume continues the very episodes, with the actor's state
        rollout.actor_state = tuple(s.to(agent.device) for s in rollout.actor_state)
    while not runner.done:
        warming_up = runner.global_step < agent.learning_starts
        state, obs = rollout.actor_state, rollout.obs
        assert obs is not None  # start() set it
        actions, next_state = agent.act(obs, state, explore=not warming_up)
        if warming_up:  # random actions, while the state still follows the observations
            actions = action_space.sample()
        step = rollout.step(actions)
        buffer.add(step.obs, step.actions, step.rewards, step.next_obs, step.terminated, step.truncated, state)
        rollout.actor_state = agent.reset_state(next_state, step.done)
        yield from runner.run_due_updates()
        runner.record_step()
        yield None  # a vector step's end (loops/steps.py)
