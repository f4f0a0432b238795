"""A learning record knows the code it describes: its fingerprint (rl_hydra/verify/fingerprint.py) is
recomputed here, and a record whose fingerprint moved must be marked stale (and render so) until it
is made again."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from rl_hydra.runs import results
from rl_hydra.verify.fingerprint import RTOL, comparable, fingerprint, matches
from tests.conftest import ROOT

RECORDS = results.load_records(ROOT / "results")
FINGERPRINTED = sorted(name for name, record in RECORDS.items() if results.fingerprints(record))


@pytest.mark.parametrize("name", FINGERPRINTED)
def test_each_record_s_fingerprint_is_today_s_code_s_unless_the_record_says_it_is_stale(name):
    record = RECORDS[name]
    for each in results.fingerprints(record):
        if comparable(each) is not None:
            pytest.skip(f"results/{name}.json's fingerprint was made with {comparable(each)}")
    moved = [
        each["overrides"] for each in results.fingerprints(record) if not matches(each, fingerprint(each["overrides"]))
    ]
    if "stale" in record:
        assert moved, f"results/{name}.json is marked stale, but its fingerprint matches today's code: drop the mark"
        return
    assert not moved, (
        f"results/{name}.json: today's code trains {' '.join(moved[0])} differently from the code that made the "
        f"record (its fingerprint moved). Make it again ({record.get('rerun') or record['command']}), or mark it "
        "stale: python scripts/render_results.py --fingerprints"
    )


def test_the_claims_the_readme_names_have_fingerprints_where_their_records_were_made_again():
    named = {
        claim["record"]
        for table in results.load_claims(ROOT / "results").values()
        for row in table["rows"]
        for claim in row["claims"]
    }
    assert named <= set(RECORDS), f"claims name records that do not exist: {sorted(named - set(RECORDS))}"
    for name in ("dqn_cartpole", "qr_dqn_cartpole", "iqn_cartpole", "drqn_cartpole_no_velocity", "redq_pendulum"):
        assert name in named and results.fingerprints(RECORDS[name]), f"{name}: made again with its fingerprint"


def test_the_same_config_gives_the_same_fingerprint_and_the_fast_paths_only_round_differently():
    plain = fingerprint(["algo=qr_dqn", "env=cartpole", "fast_paths=false"])
    assert plain["losses"] and len(plain["weights"]) == 4
    assert fingerprint(["algo=qr_dqn", "env=cartpole", "fast_paths=false"]) == plain
    assert matches(plain, fingerprint(["algo=qr_dqn", "env=cartpole"]))  # numba's loss, lean Adam, numpy acting


def test_a_change_in_the_math_moves_the_fingerprint():
    base = fingerprint(["algo=dqn", "env=cartpole"])
    for change in ("algo.optimizer.lr=2.4e-3", "algo.gamma=0.98", "algo.target_update_every=64"):
        assert not matches(base, fingerprint(["algo=dqn", "env=cartpole", change])), change


def test_rounding_matches_and_a_real_difference_does_not():
    stored = {"steps": 100, "losses": [0.25, 1.5], "weights": [-1046.404, 12.5, 0.0, 3.0]}
    rounded = {
        **stored,
        "losses": [0.25 * (1 + RTOL / 10), 1.5],
        "weights": [-1046.404 * (1 - RTOL / 10), 12.5, 0.0, 3.0],
    }
    assert matches(stored, rounded)
    assert not matches(stored, {**stored, "losses": [0.25 * (1 + 10 * RTOL), 1.5]})
    assert not matches(stored, {**stored, "steps": 101})
    assert not matches(stored, {**stored, "losses": [0.25]})


def record_with(fingerprinted: dict, **fields) -> dict:
    return {
        **{key: None for key in results.REQUIRED},
        "name": "toy",
        "title": "toy",
        "topic": "dqn",
        "status": "adopted",
        "command": "python scripts/seeds_table.py algo=dqn",
        "overrides": ["algo=dqn"],
        "seeds": [0, 1],
        "date": "2026-12-01",
        "machine": {"cpu": "x", "cores": 2, "load": "0"},
        "columns": [{"header": "config", "format": "{label}", "align": "left"}],
        "rows": [{"id": "config", "label": "toy", "per_seed": {"return": [500.0, 120.0]}}],
        "fingerprint": fingerprinted,
        **fields,
    }


def test_a_stale_record_renders_as_stale_in_its_table_and_in_a_claims_cell():
    fresh = record_with({"overrides": ["algo=dqn"], "steps": 1, "losses": [], "weights": []})
    stale = {**fresh, "stale": "2026-12-02"}
    assert "its fingerprint matches" in results.rows_table(fresh) and "Stale" not in results.rows_table(fresh)
    assert "**Stale:** made on 2026-12-01" in results.rows_table(stale) and "found on 2026-12-02" in results.rows_table(
        stale
    )
    claim = {"record": "toy", "key": "return", "at_least": 475, "label": "CartPole", "text": "475+"}
    assert results.claim_cell(claim, {"toy": fresh}) == "[CartPole: 475+ on 1 of 2](results/toy.json)"
    assert results.claim_cell(claim, {"toy": stale}).endswith(" (stale)")
    unrecorded = {key: value for key, value in fresh.items() if key != "fingerprint"}
    assert results.claim_cell(claim, {"toy": unrecorded}).endswith(" (not yet re-checked)")


def test_render_results_marks_a_record_whose_code_moved_stale_and_unmarks_it_when_it_matches_again(
    tmp_path, monkeypatch
):
    now = fingerprint(["algo=dqn", "env=cartpole"])
    moved = {**now, "losses": [value * 2 for value in now["losses"]]}
    (tmp_path / "results").mkdir()
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    path = tmp_path / "results" / "toy.json"
    path.write_text(json.dumps(record_with(moved)))
    sys.path.insert(0, str(ROOT / "scripts"))
    import render_results

    monkeypatch.setattr(render_results, "ROOT", tmp_path)
    render_results.mark_stale(results.load_records(tmp_path / "results"))
    assert json.loads(path.read_text())["stale"]
    path.write_text(json.dumps({**json.loads(path.read_text()), "fingerprint": now}))
    render_results.mark_stale(results.load_records(tmp_path / "results"))
    assert "stale" not in json.loads(path.read_text())


def remake_claims(*args: str) -> subprocess.CompletedProcess:
    script = ROOT / "scripts" / "remake_claims.py"
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)


def test_remake_claims_lists_the_command_that_makes_each_claimed_record_again():
    listed = remake_claims("--list")
    assert listed.returncode == 0, listed.stderr
    lines = dict(line.split(": ", 1) for line in listed.stdout.splitlines())
    for name in (name for name in FINGERPRINTED if not results.tried(RECORDS[name])):  # tried ones claim nothing
        assert f"--record results/{name}.json" in lines[name] or "by hand" in lines[name], name
    assert not any(results.tried(RECORDS[name]) for name in lines if name in RECORDS)
    refused = remake_claims("--list", "no_such_record")
    assert refused.returncode == 2 and "no record named no_such_record" in refused.stderr
