"""Make every learning claim again: each record a claims table names (results/claims/*.json: the
README's algorithm table) and each adopted record that carries a code fingerprint, by the command it names,
then render the pages.

    python scripts/remake_claims.py                   # all of them, one after another
    python scripts/remake_claims.py --stale           # only the stale ones and those made before fingerprints
    python scripts/remake_claims.py --list            # print each record's command, run nothing
    python scripts/remake_claims.py qr_dqn_cartpole iqn_cartpole   # these records

A record's command is its `rerun`, else its `command`, given `--record results/<name>.json` where it
lacks one (scripts/seeds_table.py then re-makes the record in place, fingerprint included). A record
whose command is not one command line (several steps, a placeholder such as <id>) is named with
what to run by hand, and skipped.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from rl_hydra.runs.results import fingerprints, load_claims, load_records, record_path, tried

ROOT = Path(__file__).resolve().parent.parent


def claimed(records: dict, claims: dict) -> list[str]:
    """The records behind learning claims: those a claims table names, then the rest of the adopted ones
    that carry a fingerprint."""
    named = [c["record"] for table in claims.values() for row in table["rows"] for c in row["claims"]]
    names = [*named, *(name for name, record in records.items() if fingerprints(record) and not tried(record))]
    return list(dict.fromkeys(names))


def command(record: dict) -> list[str] | None:
    """The command that makes `record` again, writing it in place; None where it is not one command line."""
    line = record.get("rerun") or record["command"]
    if not line or any(mark in line for mark in (";", "<", " then ")):
        return None
    argv = shlex.split(line)
    if "--record" not in argv:
        argv += ["--record", record_path(record)]
    if Path(argv[1]).name == "seeds_table.py" and "--topic" not in argv:
        argv += ["--topic", record["topic"]]
    return [sys.executable if argv[0] == "python" else argv[0], *argv[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="these records only (default: every claimed one)")
    parser.add_argument("--stale", action="store_true", help="only records marked stale or without a fingerprint")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    records = load_records(ROOT / "results")
    names = claimed(records, load_claims(ROOT / "results"))
    unknown = sorted(set(args.names) - set(records))
    if unknown:
        parser.error(f"no record named {', '.join(unknown)}; the claimed ones: {', '.join(names)}")
    if args.names:
        names = args.names
    if args.stale:
        names = [name for name in names if "stale" in records[name] or not fingerprints(records[name])]
    failed = []
    for name in names:
        argv_ = command(records[name])
        if argv_ is None:
            print(f"{name}: by hand (not one command line): {records[name].get('rerun') or records[name]['command']}")
            continue
        print(f"{name}: {shlex.join(argv_)}", flush=True)
        if not args.list and subprocess.run(argv_, cwd=ROOT).returncode != 0:
            failed.append(name)
    if not args.list:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "render_results.py")], cwd=ROOT, check=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
