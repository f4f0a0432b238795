"""Run a benchmark suite (conf/suite/<name>.yaml) over several seeds and write its table.

    python scripts/suite.py discrete [--seeds 5] [--jobs 2] [--out DIR] [--rows dqn_acrobot ...] [--only-seeds 3 4]

Installed, the same command is `rl-hydra-suite`. See rl_hydra/commands/suite.py and docs/suite.md.
"""

from rl_hydra.commands.suite import main

if __name__ == "__main__":
    main()
