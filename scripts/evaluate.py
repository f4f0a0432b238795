"""Evaluate a run (or every run of a sweep) from its directory alone.

    python scripts/evaluate.py run_dir=outputs/2026-01-01/12-00-00-000000_dqn_cartpole episodes=20
    python scripts/evaluate.py run_dir=outputs/multirun/2026-01-01/12-00-00-000000 checkpoint=best

Options: conf/evaluate.yaml (--help lists them). Files are named by what they measured:
<run>/eval/<checkpoint>_<episodes>ep_seed<seed>.json (last_20ep_seed0.json: the final policy); for a sweep also
<sweep>/eval/results_last_20ep_seed0.csv and .md, and learning_curves.png.
"""

import sys

from rl_hydra.commands.report import main

if __name__ == "__main__":
    sys.exit(main())
