"""scripts/seeds_table.py reads its seeds and the overrides after them (as its docstring writes them)."""

import sys

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "scripts"))

import seeds_table  # noqa: E402


def test_overrides_after_the_seeds_are_not_taken_for_seeds():
    argv = ["--seeds", "0", "1", "2", "algo=iqn", "env=cartpole", "--out", "runs"]
    reordered = seeds_table.seeds_apart(argv)
    assert reordered == ["algo=iqn", "env=cartpole", "--out", "runs", "--seeds", "0", "1", "2"]
    assert seeds_table.seeds_apart(["algo=dqn", "--jobs", "2"]) == ["algo=dqn", "--jobs", "2"]
