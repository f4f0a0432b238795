"""A benchmark script that runs each measurement in a fresh process of itself, with one thread.

The script calls `run_worker(__file__, kind, job)`: that runs `python <script> --worker <kind>
--job <json>` with OMP and MKL at one thread, and returns the JSON object the worker printed as
its last line. In the worker process, the script's `main` hands its parsed arguments to
`serve_worker(args, workers)`, which runs `workers[kind](job)` and prints its result.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

Workers = dict[str, Callable[[dict], dict]]


def add_worker_arguments(parser: argparse.ArgumentParser, workers: Workers) -> None:
    """The hidden --worker/--job options a worker process is started with."""
    parser.add_argument("--worker", choices=tuple(workers), help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)


def serve_worker(args: argparse.Namespace, workers: Workers) -> bool:
    """In a worker process: run its job and print the result as one JSON line; False elsewhere."""
    if not args.worker:
        return False
    print(json.dumps(workers[args.worker](json.loads(args.job))))
    return True


def run_worker(script: str, kind: str, job: dict) -> dict:
    """`job` run by the `kind` worker of `script` in a fresh process; exits with its stderr if it fails."""
    out = subprocess.run([sys.executable, script, "--worker", kind, "--job", json.dumps(job)],
                         env={**os.environ, **ONE_THREAD}, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        sys.exit(f"{kind} worker failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])
