"""The one off-policy loop for every feed-forward agent (DQN, QR-DQN, IQN, REDQ).

Random actions until `learning_starts`, then epsilon-greedy ones; the Runner runs
`gradient_steps` updates every `train_every` env steps and evaluates, logs and
checkpoints on schedule.
"""

from __future__ import annotations

from rl_hydra.envs.make import final_observations
from rl_hydra.loops.runner import Runner


def train(runner: Runner) -> None:
    agent, env, buffer = runner.agent, runner.env, runner.buffer
    obs = runner.reset_env()
    while not runner.done:
        warming_up = runner.global_step < agent.learning_starts
        if warming_up:
            actions = env.action_space.sample()
        else:
            actions, _ = agent.act(obs, explore=True)
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        done = terminated | truncated
        # a truncated episode bootstraps from its real last observation, not the reset one
        buffer.add(obs, actions, rewards, final_observations(next_obs, done, info), terminated, truncated)
        obs = runner.obs = next_obs
        runner.run_due_updates()
        runner.record_step(rewards, done)
