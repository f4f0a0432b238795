"""Names of a sweep's job directories: `${rl_hydra.job_dir:${hydra.sweep.dir},${hydra.job.override_dirname}}`
(hydra.sweep.subdir in conf/train.yaml).

A job directory is named from its overrides (Hydra's override_dirname, `algo=dqn,seed=0`), so that
the same command finds the same directories again. An Optuna trial's overrides, with their long
floats, run to about 190 characters: a name longer than MAX_NAME keeps the whole overrides that
fit (in order, skipping those too long), says how many it leaves out, and ends in a hash of them all, so
that it is still the same for the same overrides (`algo.batch_size=64,algo.gamma=0.99-and-2-more-1f2e3d4c`).
The full list is in the job's .hydra/overrides.yaml. A name is the launch's: a resume that changes
train.total_steps leaves it as it was.
"""

from __future__ import annotations

import hashlib
import os
import re

from omegaconf import OmegaConf

MAX_NAME = 80
HASH_CHARS = 8
# where one override of Hydra's override_dirname ends and the next begins: a comma before `key=`
# (a comma inside a value, as in `network.hidden_sizes=[64,64]`, is followed by no key)
NEXT_OVERRIDE = re.compile(r",(?=[+~]?[\w.@/-]+=)")


def job_dir_name(sweep_dir: str, override_dirname: str) -> str:
    """`override_dirname` while it has at most MAX_NAME characters, else a readable prefix, how
    many overrides it leaves out and a hash of the whole. A directory a sweep made under the
    full name before names were shortened keeps its name: a re-launched sweep finds it."""
    if len(override_dirname) <= MAX_NAME or os.path.isdir(os.path.join(sweep_dir, override_dirname)):
        return override_dirname
    digest = hashlib.sha1(override_dirname.encode()).hexdigest()[:HASH_CHARS]
    overrides = NEXT_OVERRIDE.split(override_dirname)
    kept: list[str] = []
    for override in overrides:
        name = short_name([*kept, override], len(overrides) - len(kept) - 1, digest)
        if len(name) <= MAX_NAME:  # a long one (a list of wrappers) is left out, the short ones after it kept
            kept.append(override)
    if not kept:  # the first override alone is too long: its key stands for it
        key = re.match(r"[+~]?[\w.@/-]+=?", overrides[0])
        kept = [f"{key.group(0) if key else ''}..."]
    return short_name(kept, len(overrides) - len(kept), digest)


def short_name(kept: list[str], left_out: int, digest: str) -> str:
    return f"{','.join(kept)}{f'-and-{left_out}-more' if left_out else ''}-{digest}"


def register_job_dir_resolver() -> None:
    """Called by rl_hydra.commands.cli, which every process that runs a job imports."""
    if not OmegaConf.has_resolver("rl_hydra.job_dir"):
        OmegaConf.register_new_resolver("rl_hydra.job_dir", job_dir_name)
