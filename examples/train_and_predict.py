"""Train from Python exactly as the CLI would, then use the run: predict and evaluate.

python examples/train_and_predict.py [total_steps]
"""

import sys

import gymnasium as gym

from rl_hydra import load_run, train

total_steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000

# the same overrides as: python train.py algo=dqn env=cartpole train.total_steps=...
run = train("algo=dqn", "env=cartpole", f"train.total_steps={total_steps}", "train.progress=false")
print(f"trained into {run.run_dir}: final eval return {run.summary['eval_return_mean']:.1f}")

# later, from the directory alone
run = load_run(run.run_dir, checkpoint="best")
env = gym.make(run.cfg.env.id)
obs, _ = env.reset(seed=0)
episode_return, done = 0.0, False
while not done:
    obs, reward, terminated, truncated, _ = env.step(int(run.predict(obs)))
    episode_return += reward
    done = terminated or truncated
print(f"one greedy episode: return {episode_return:.0f}")
print(f"10 evaluation episodes: mean return {run.evaluate(episodes=10, seed=1)['return_mean']:.1f}")
