"""The README's learning claims hold on today's code: each seeds' preset trained at its 5 seeds, as
`python train.py <overrides> seed=S` trains it, reaches a level a margin below its claim
(results/claims/algorithms.json counts the claim from its record; the record's fingerprint ties it to
the code, tests/runs/test_fingerprints.py). A change that breaks learning fails here, not in a
reader's hands. About a minute a seed: QR-DQN's preset (the one that once fell to 2 of 5) is in the slow
suite, every preset under `pytest -m claims` (about 17 minutes on one worker)."""

from __future__ import annotations

import json

import pytest

from rl_hydra.runs import results
from tests.conftest import ROOT, metric_rows, run_training

SEEDS = (0, 1, 2, 3, 4)
# record: how far below its claim's level a seed may end and still count (the claim's count, less one seed,
# must reach it): room for another CPU's rounding, not for a preset that stopped learning
MARGINS = {
    "dqn_cartpole": 25.0,
    "qr_dqn_cartpole": 25.0,
    "iqn_cartpole": 25.0,
    "drqn_cartpole_no_velocity": 75.0,
    "redq_pendulum": 50.0,
}


def claim_of(name: str) -> dict:
    tables = results.load_claims(ROOT / "results").values()
    return next(
        claim for table in tables for row in table["rows"] for claim in row["claims"] if claim["record"] == name
    )


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow if name == "qr_dqn_cartpole" else pytest.mark.claims)
        for name in sorted(MARGINS)
    ],
)
def test_the_preset_learns_what_its_claim_says_at_every_seed(tmp_path, name):
    record, claim = results.load_records(ROOT / "results")[name], claim_of(name)
    claimed = sum(1 for value in record["rows"][0]["per_seed"][claim["key"]] if value >= claim["at_least"])
    level = claim["at_least"] - MARGINS[name]
    finals = []
    for seed in SEEDS:
        run_dir = tmp_path / f"seed{seed}"
        run_training(run_dir, *record["overrides"], f"seed={seed}", "train.progress=false", "logger=[]")
        finals.append(metric_at(run_dir, claim["key"]))
    reached = sum(1 for value in finals if value is not None and value >= level)
    assert reached >= claimed - 1, (
        f"{name}: {reached} of {len(SEEDS)} seeds at {level:g} or more ({finals}); its record claims {claimed} at "
        f"{claim['at_least']:g}"
    )


def metric_at(run_dir, key: str) -> float | None:
    """The claim's per-seed figure of a run, as scripts/seeds_table.py reads it: `return` its final
    evaluation, `best` its best one, `return_<step>` the one at that step."""
    summary = json.loads((run_dir / "summary.json").read_text())
    if key in ("return", "best"):
        return summary["eval_return_mean" if key == "return" else "best_eval_return_mean"]
    step = key.removeprefix("return_")
    rows = [row for row in metric_rows(run_dir) if row["step"] == step and row.get("eval/return_mean")]
    return float(rows[0]["eval/return_mean"]) if rows else None
