"""The composed configs of a covering selection of algo x env pairs are the ones checked in under
tests/data/composed/, one file per pair (`<algo>_<env>.yaml`).

The selection is not the whole product. A composed config is train.yaml plus the algo file's
part (algo, network, buffer) plus the env file's part (env) plus, for a tuned pair, the preset's
overrides; no other file reaches across groups. So these pairs show every value a run can get:

- every preset, conf/algo_env/<algo>_<env>.yaml, composed for its pair;
- every algorithm on env=gym (FIXED_ENV), which has no preset: the algorithm's own values;
- every env group with algo=dqn (FIXED_ALGO, the default algorithm): the env's own values.

Tests below check that the selection names every algo file, env file and preset, and that an algo
file sets only algo/network/buffer and an env file only env (were that to break, the selection
would miss pairs). A pair in two of the lists has one fixture.

A change to conf/ that should not change what runs get (shared files, defaults lists, renamed
options) must leave these equal; the failure names each key that moved, vanished or changed.
After a deliberate config change, regenerate the fixtures (stale ones are removed) and review
their diff:

    python -m tests.config.test_config_snapshots --regenerate

Fixtures are compared parsed, so key order does not matter. env=cartpole_novel (the old name of
cartpole_no_velocity) is covered through its presets; test_drqn.py checks it composes the same.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from tests.conftest import CONF_DIR, compose_config, run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "composed"
FIXED_ENV = "gym"  # no preset is ever tuned for it: each algorithm's own values
FIXED_ALGO = "dqn"  # the default algorithm: what `python train.py env=<env>` composes
ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))
ENVS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml"))
PRESET_FILES = sorted(p.stem for p in (CONF_DIR / "algo_env").glob("*.yaml"))  # not base/


def preset_pair(name: str) -> tuple[str, str] | None:
    """(algo, env) of the preset file algo_env/<name>.yaml, or None when no one pair fits its name."""
    pairs = [
        (algo, name[len(algo) + 1 :]) for algo in ALGOS if name.startswith(algo + "_") and name[len(algo) + 1 :] in ENVS
    ]
    return pairs[0] if len(pairs) == 1 else None


PRESETS = [pair for pair in map(preset_pair, PRESET_FILES) if pair is not None]
ALGO_PAIRS = [(algo, FIXED_ENV) for algo in ALGOS]
ENV_PAIRS = [(FIXED_ALGO, env) for env in ENVS]
PAIRS = sorted(set(PRESETS) | set(ALGO_PAIRS) | set(ENV_PAIRS))


def fixture_path(algo: str, env: str) -> Path:
    return FIXTURES / f"{algo}_{env}.yaml"


def why(algo: str, env: str) -> str:
    """Why the pair is in the selection, for the fixture's header."""
    reasons = [
        text
        for pairs, text in (
            (PRESETS, "its preset, algo_env/{a}_{e}.yaml"),
            (ALGO_PAIRS, "algo={a}'s own values"),
            (ENV_PAIRS, "env={e}'s own values"),
        )
        if (algo, env) in pairs
    ]
    return "; ".join(reasons).format(a=algo, e=env)


@functools.cache
def _composed(algo: str, env: str):
    return compose_config(f"algo={algo}", f"env={env}")


def composed(algo: str, env: str) -> dict:
    """The composed config of the pair, as plain containers (a fresh copy each call)."""
    return OmegaConf.to_container(_composed(algo, env))


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
    """Write the fixture of every selected pair as `python train.py --cfg job` prints it; drop stale ones."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    wanted = {fixture_path(algo, env) for algo, env in PAIRS}
    for stale in set(FIXTURES.glob("*.yaml")) - wanted:
        stale.unlink()
    for algo, env in PAIRS:
        header = (
            f"# python train.py --cfg job algo={algo} env={env}\n"
            f"# selected for: {why(algo, env)}\n"
            f"# written by: python -m tests.config.test_config_snapshots --regenerate (do not edit by hand)\n"
        )
        fixture_path(algo, env).write_text(header + OmegaConf.to_yaml(_composed(algo, env)))


def test_every_preset_file_names_one_algo_env_pair():
    unmatched = [name for name in PRESET_FILES if preset_pair(name) is None]
    assert not unmatched, (
        f"conf/algo_env/{{{','.join(unmatched)}}}.yaml: a preset's name must be "
        f"<algo>_<env> for exactly one algo option and one env option"
    )


def test_the_selection_covers_every_algo_env_and_preset():
    assert {algo for algo, _ in PAIRS} == set(ALGOS)
    assert {env for _, env in PAIRS} == set(ENVS)
    assert set(PRESETS) <= set(PAIRS) and len(PRESETS) == len(PRESET_FILES)
    assert not any(preset_pair(name) in ALGO_PAIRS for name in PRESET_FILES), (
        f"a preset for env={FIXED_ENV} hides an algorithm's own values: pick another FIXED_ENV"
    )


def test_an_algo_file_sets_only_algo_network_buffer_and_an_env_file_only_env():
    """What makes the selection cover the product: without a preset, swapping the algorithm changes
    only algo, network and buffer, and swapping the env changes only env."""
    base = composed(FIXED_ALGO, FIXED_ENV)
    for algo, env in ALGO_PAIRS:
        other = composed(algo, env)
        outside = [key for key in differing_keys(base, other) if key.split(".")[0] not in ("algo", "network", "buffer")]
        assert not outside, f"algo={algo} changes keys outside algo/network/buffer: {outside}"
    for algo, env in ENV_PAIRS:
        if (algo, env) in PRESETS:
            continue
        outside = [key for key in differing_keys(base, composed(algo, env)) if key.split(".")[0] != "env"]
        assert not outside, f"env={env} changes keys outside env: {outside}"


def test_every_selected_pair_has_a_fixture_and_every_fixture_a_pair():
    have = {p.name for p in FIXTURES.glob("*.yaml")}
    want = {fixture_path(algo, env).name for algo, env in PAIRS}
    assert have == want, (
        f"missing fixtures: {sorted(want - have)}, stale fixtures: {sorted(have - want)}; "
        f"run: python -m tests.config.test_config_snapshots --regenerate"
    )


@pytest.mark.parametrize("algo, env", PAIRS)
def test_composed_config_equals_the_fixture(algo, env):
    path = fixture_path(algo, env)
    if not path.is_file():
        pytest.fail(f"no fixture {path}; run: python -m tests.config.test_config_snapshots --regenerate")
    differences = differing_keys(yaml.safe_load(path.read_text()), composed(algo, env))
    assert not differences, (
        f"algo={algo} env={env} composes differently from {path.name}:\n  "
        + "\n  ".join(differences)
        + "\n(a deliberate change? python -m tests.config.test_config_snapshots --regenerate)"
    )


def test_train_py_cfg_job_prints_the_fixture():
    """The command line composes like the compose API (one pair: the DRQN preset, the sequence buffer
    picked by algo/drqn.yaml)."""
    result = run_cli("--cfg", "job", "algo=drqn", "env=cartpole_no_velocity", timeout=60)
    assert result.returncode == 0, result.stderr
    expected = yaml.safe_load(fixture_path("drqn", "cartpole_no_velocity").read_text())
    differences = differing_keys(expected, yaml.safe_load(result.stdout))
    assert not differences, "python train.py --cfg job differs from the fixture:\n  " + "\n  ".join(differences)


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit(f"usage: python -m tests.config.test_config_snapshots --regenerate\n\n{__doc__}")
    regenerate()
    print(f"wrote {len(PAIRS)} fixtures to {FIXTURES}")
