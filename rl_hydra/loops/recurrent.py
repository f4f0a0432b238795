"""The recurrent loop (DRQN): the off-policy loop with a hidden state carried through acting.

The actor's state is threaded from step to step, reset per env when an episode
starts (here, and nowhere else), and handed to the sequence buffer with every
step, so each stored chunk begins from the state the actor really had. The
Runner evaluates (a greedy recurrent rollout), logs and checkpoints on schedule.
"""

from __future__ import annotations

from rl_hydra.config import ConfigError
from rl_hydra.envs.make import final_observations
from rl_hydra.loops.runner import Runner


def check_sequences(agent, buffer) -> None:
    """Burn-in must leave steps to learn from, and every step must be trained on in some chunk."""
    length, stride, burn_in = buffer.sequence_length, buffer.stride, agent.burn_in
    if burn_in >= length:
        raise ConfigError(f"algo.burn_in={burn_in} must be < buffer.sequence_length={length}; "
                          f"burn-in steps are excluded from the loss, so nothing would be learned")
    if burn_in > length - stride:
        raise ConfigError(f"algo.burn_in={burn_in} must be <= buffer.sequence_length - buffer.stride = "
                          f"{length - stride}; otherwise some steps only ever fall in a burn-in and are never learned")


def train(runner: Runner) -> None:
    agent, env, buffer = runner.agent, runner.env, runner.buffer
    check_sequences(agent, buffer)
    obs = runner.reset_env()
    if runner.actor_state is None:  # fresh episodes: no state, and no chunk, carries over
        state = agent.initial_state(env.num_envs)
        buffer.start_episodes()
    else:  # an exact resume continues the very episodes, with the actor's state
        state = tuple(s.to(agent.device) for s in runner.actor_state)
    while not runner.done:
        warming_up = runner.global_step < agent.learning_starts
        actions, next_state = agent.act(obs, state, explore=not warming_up)
        if warming_up:  # random actions, while the state still follows the observations
            actions = env.action_space.sample()
        next_obs, rewards, terminated, truncated, info = env.step(actions)
        done = terminated | truncated
        # a truncated episode bootstraps from its real last observation, not the reset one
        buffer.add(obs, actions, rewards, final_observations(next_obs, done, info), terminated, truncated, state)
        obs = runner.obs = next_obs
        state = runner.actor_state = agent.reset_state(next_state, done)
        runner.run_due_updates()
        runner.record_step(rewards, done)
