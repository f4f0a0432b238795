"""`rl-hydra-export RUN_DIR [--format FORMAT] [--checkpoint best|last] [--out PATH]`: the run's greedy
policy as one file that acts as `Run.predict` does (rl_hydra/commands/policy_export.py; docs/export.md)."""

from __future__ import annotations

import argparse
import sys

from rl_hydra.commands.policy_export import FORMATS, check_format, export_run
from rl_hydra.commands.run import load_run
from rl_hydra.errors import BadArgument, ConfigError
from rl_hydra.runs.run_dir import RunError
from rl_hydra.schema.evaluate import CHECKPOINTS

DESCRIPTION = (
    "Write a run's greedy policy as one file: observation in (as the run's env gives it), action out "
    "(in the env's scale), with predict's preprocessing inside; checked against predict before it is "
    'written. ONNX needs the export extra (pip install -e ".[export]").'
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rl-hydra-export", description=DESCRIPTION, epilog="exit status: 0 written, 2 refused"
    )
    parser.add_argument("run_dir", help="a run directory (outputs/...)")
    parser.add_argument("--format", default="onnx", help=f"one of: {', '.join(FORMATS)} (default: onnx)")
    parser.add_argument("--checkpoint", default="best", help=f"one of: {', '.join(CHECKPOINTS)} (default: best)")
    parser.add_argument("--out", default=None, help="the file to write (default: RUN_DIR/export/policy_CHECKPOINT.EXT)")
    args = parser.parse_args(argv)
    try:
        check_format(args.format)  # before the run is loaded: an unknown format or checkpoint costs nothing
        if args.checkpoint not in CHECKPOINTS:
            raise BadArgument(f"--checkpoint={args.checkpoint} is not allowed; choose one of: {', '.join(CHECKPOINTS)}")
        run = load_run(args.run_dir, checkpoint=args.checkpoint)
        path = export_run(run, args.format, args.out)
    except (ConfigError, RunError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"rl-hydra: wrote {path} ({args.format}, {args.checkpoint}.pt at step {run.step}; acts as predict does)")
    return 0
