"""The one off-policy loop for every feed-forward agent (DQN, QR-DQN, IQN, REDQ).

Random actions until `learning_starts`, then the agent's own exploring actions; the Runner
runs `gradient_steps` updates every `train_every` env steps and evaluates, logs and
checkpoints on schedule.
"""

from __future__ import annotations

from rl_hydra.loops.runner import Runner


def loop(runner: Runner) -> None:
    agent, buffer, rollout = runner.agent, runner.buffer, runner.rollout
    action_space = rollout.env.action_space
    rollout.start()
    while not runner.done:
        if runner.global_step < agent.learning_starts:
            actions = action_space.sample()
        else:
            assert rollout.obs is not None  # start() set it
            actions, _ = agent.act(rollout.obs, explore=True)
        step = rollout.step(actions)
        buffer.add(step.obs, step.actions, step.rewards, step.next_obs, step.terminated, step.truncated)
        runner.run_due_updates()
        runner.record_step()
