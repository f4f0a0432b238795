"""rl-hydra's Optuna sweeper: `hydra/sweeper=optuna` over Optuna's ask-and-tell interface (optuna >= 4).

`config.py` registers the configs (imported by Hydra's plugin scan, so it imports no Optuna),
`optuna_sweeper.py` the sweeper class, and `_study.py` (imported when a sweep starts) the search.
"""
