"""`hydra/launcher=packed`: a multirun's jobs that differ only in their seed (and scalar hyperparameters
that change no tensor's shape) trained as packs, one process each, each job still its own run directory.

`config.py` registers the launcher's config and `packed_launcher.py` its class (both imported by Hydra's
plugin scan, so they import neither torch nor rl_hydra); `_packs.py` groups and runs the packs.
"""
