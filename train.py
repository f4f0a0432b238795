"""Train an off-policy agent: python train.py algo=iqn env=cartpole [key=value ...]

Hydra composes conf/train.yaml (see rl_hydra/commands/cli.py for the entry point and
rl_hydra/training.py for what a run builds).
"""

from rl_hydra.commands.cli import main

if __name__ == "__main__":
    main()
