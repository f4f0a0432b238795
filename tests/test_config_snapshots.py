"""The config every algo x env pair composes to is the one checked in under tests/data/composed/.

A change to conf/ that should not change what runs get (shared files, defaults lists, renamed
options) must leave these equal; the failure names each key that moved, vanished or changed.
After a deliberate config change, regenerate the fixtures and review their diff:

    python -m tests.test_config_snapshots --regenerate

Fixtures are compared parsed, so key order does not matter. Env options that only alias another
one (ENV_ALIASES) get no fixture of their own; test_drqn.py checks they compose to the same config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from tests.conftest import CONF_DIR, compose_config, run_cli

FIXTURES = Path(__file__).resolve().parent / "data" / "composed"
ENV_ALIASES = {"cartpole_novel": "cartpole_no_velocity"}   # old name -> the option it pulls in
ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))
ENVS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml") if p.stem not in ENV_ALIASES)
PAIRS = [(algo, env) for algo in ALGOS for env in ENVS]


def fixture_path(algo: str, env: str) -> Path:
    return FIXTURES / f"{algo}_{env}.yaml"


def composed(algo: str, env: str) -> dict:
    return OmegaConf.to_container(compose_config(f"algo={algo}", f"env={env}"))


def differing_keys(expected, actual, path: str = "") -> list[str]:
    """Dotted paths (list items as [i]) where actual differs from expected, with both values."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for key in sorted(set(expected) | set(actual), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{where}: missing (fixture: {expected[key]!r})")
            elif key not in expected:
                out.append(f"{where}: not in the fixture (composed: {actual[key]!r})")
            else:
                out += differing_keys(expected[key], actual[key], where)
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differing_keys(e, a, f"{path}[{i}]")]
    return [] if expected == actual else [f"{path}: fixture {expected!r}, composed {actual!r}"]


def regenerate() -> None:
    """Write the fixture of every pair as `python train.py --cfg job` prints it; drop stale ones."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    wanted = {fixture_path(algo, env) for algo, env in PAIRS}
    for stale in set(FIXTURES.glob("*.yaml")) - wanted:
        stale.unlink()
    for algo, env in PAIRS:
        header = (f"# python train.py --cfg job algo={algo} env={env}\n"
                  f"# written by: python -m tests.test_config_snapshots --regenerate (do not edit by hand)\n")
        text = OmegaConf.to_yaml(compose_config(f"algo={algo}", f"env={env}"))
        fixture_path(algo, env).write_text(header + text)


def test_every_pair_has_a_fixture_and_every_fixture_a_pair():
    have = {p.name for p in FIXTURES.glob("*.yaml")}
    want = {fixture_path(algo, env).name for algo, env in PAIRS}
    assert have == want, (f"missing fixtures: {sorted(want - have)}, stale fixtures: {sorted(have - want)}; "
                          f"run: python -m tests.test_config_snapshots --regenerate")


@pytest.mark.parametrize("algo, env", PAIRS)
def test_composed_config_equals_the_fixture(algo, env):
    path = fixture_path(algo, env)
    if not path.is_file():
        pytest.fail(f"no fixture {path}; run: python -m tests.test_config_snapshots --regenerate")
    differences = differing_keys(yaml.safe_load(path.read_text()), composed(algo, env))
    assert not differences, (f"algo={algo} env={env} composes differently from {path.name}:\n  "
                             + "\n  ".join(differences)
                             + "\n(a deliberate change? python -m tests.test_config_snapshots --regenerate)")


def test_train_py_cfg_job_prints_the_fixture():
    """The command line composes like the compose API (one pair: the DRQN preset, the sequence buffer
    picked by algo/drqn.yaml, the env renamed from cartpole_novel)."""
    result = run_cli("--cfg", "job", "algo=drqn", "env=cartpole_no_velocity", timeout=60)
    assert result.returncode == 0, result.stderr
    expected = yaml.safe_load(fixture_path("drqn", "cartpole_no_velocity").read_text())
    differences = differing_keys(expected, yaml.safe_load(result.stdout))
    assert not differences, "python train.py --cfg job differs from the fixture:\n  " + "\n  ".join(differences)


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: python -m tests.test_config_snapshots --regenerate\n\n{__doc__}")
    regenerate()
    print(f"wrote {len(PAIRS)} fixtures to {FIXTURES}")
